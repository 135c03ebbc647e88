"""tessel.torch_xla: the dump-file helpers (no torch needed)."""
import pytest

import tessel
import tessel.torch_xla

from conftest import JAX_FIXTURES


def test_dump_with_two_graphs_uses_the_last(tmp_path, dot_hlo, layernorm_hlo):
    dump = tmp_path / "save_tensors.hlo"
    dump.write_text("[ScheduleSyncTensorsGraph]\n" + layernorm_hlo + "\n" + dot_hlo)
    assert tessel.torch_xla.read_dump(dump) == dot_hlo
    direct = tessel.simulate(dot_hlo, "dgx_h100")
    via_dump = tessel.torch_xla.simulate(dump, "dgx_h100")
    assert via_dump.step_seconds == direct.step_seconds
    assert tessel.torch_xla.partition(dump).hlo_text == tessel.partition(dot_hlo).hlo_text


def test_not_a_dump(tmp_path):
    bad = tmp_path / "x.txt"
    bad.write_text("hello")
    with pytest.raises(ValueError, match="HloModule"):
        tessel.torch_xla.read_dump(bad)
