"""propagate / partition / verify / simulate on the committed JAX-lowered fixtures
(tests/fixtures/jax, 8 devices), and their errors."""
import _thread
import json
import os
import stat
import threading
import time

import numpy as np
import pytest

import tessel

from conftest import JAX_FIXTURES, REPO


def test_propagate_annotates_every_instruction(dot_hlo):
    text = tessel.propagate(dot_hlo)
    assert text.startswith("HloModule")
    for line in text.splitlines():
        if " = " in line and "parameter(" not in line:
            assert "sharding={" in line, line


def test_partition_dot_contracting(dot_hlo):
    result = tessel.partition(dot_hlo)
    assert result.num_partitions == 8  # inferred from the shardings
    # Each device holds a [16,8] x [8,32] piece and all-reduces the partial [16,32] sums.
    assert "f32[16,8]" in result.hlo_text and "f32[8,32]" in result.hlo_text
    assert result.collectives["all-reduce"].count == 1
    assert result.collectives["all-reduce"].result_bytes == 16 * 32 * 4
    assert result.parameter_shardings == ["{devices=[1,8]0,1,2,3,4,5,6,7}",
                                          "{devices=[8,1]0,1,2,3,4,5,6,7}"]
    assert result.output_shardings == ["{replicated}"]


def test_partition_accepts_a_path():
    result = tessel.partition(JAX_FIXTURES / "layernorm_seq_sharded.hlo", num_partitions=8)
    assert result.num_partitions == 8
    assert result.hlo_text.startswith("HloModule")


def test_verify_layernorm(layernorm_hlo):
    report = tessel.verify(layernorm_hlo, seed=3)
    assert report.ok
    assert report.first_mismatch is None
    assert report.num_devices == 8
    assert len(report.outputs) >= 1
    for out in report.outputs:
        assert out.ok
        assert out.max_abs_error <= out.atol * out.scale + 1e-12
        assert out.mismatched_elements == 0
        assert out.global_shape.startswith("f32[")


def test_verify_inputs_are_numpy_and_deterministic(dot_hlo):
    a, b = tessel.verify_inputs(dot_hlo, seed=5)
    assert a.shape == (16, 64) and a.dtype == np.float32
    assert b.shape == (64, 32) and b.dtype == np.float32
    a2, _ = tessel.verify_inputs(dot_hlo, seed=5)
    np.testing.assert_array_equal(a, a2)
    a3, _ = tessel.verify_inputs(dot_hlo, seed=6)
    assert not np.array_equal(a, a3)


def test_simulate_dgx_h100(dot_hlo, tmp_path):
    trace = tmp_path / "trace.json"
    report = tessel.simulate(dot_hlo, "dgx_h100", trace_path=trace)
    assert isinstance(report.step_seconds, float)
    assert report.step_seconds > 0
    assert report.num_devices == 8
    assert report.device_name.startswith("H100")
    assert report.compute_seconds > 0 and report.ici_seconds > 0
    assert report.step_seconds == pytest.approx(report.in_order_seconds)
    assert set(report.breakdown) == {"step", "compute", "ici", "dcn", "exposed_comm"}
    assert report.memory["fits"] and report.memory["hbm_bytes"] == report.hbm_bytes
    table = report.collective_table
    assert [row["opcode"] for row in table] == ["all-reduce"]
    assert table[0]["bytes"] > 0 and table[0]["seconds"] > 0
    assert report.trace_path == str(trace)
    events = json.loads(trace.read_text())
    assert events  # Chrome trace JSON


def test_simulate_overlap_is_not_slower(dot_hlo):
    topo = tessel.Topology.preset("v4-16")
    in_order = tessel.simulate(dot_hlo, topo)
    overlapped = tessel.simulate(dot_hlo, topo, overlap=True)
    assert overlapped.overlap and not in_order.overlap
    assert overlapped.step_seconds <= in_order.step_seconds


def test_errors_are_python_exceptions(dot_hlo):
    with pytest.raises(NotImplementedError, match="bogus-op"):  # unknown op: kUnimplemented
        tessel.partition("HloModule m\n\nENTRY e {\n  ROOT x = f32[2] bogus-op()\n}\n")
    with pytest.raises(ValueError, match="num_partitions"):
        tessel.partition(dot_hlo, num_partitions=0)
    with pytest.raises(ValueError):
        tessel.simulate(dot_hlo, "dgx_h100", matmul_dtype="f99")
    with pytest.raises(ValueError):  # 4 devices cannot hold an 8-way sharding
        tessel.simulate(dot_hlo, "v4-8")
    with pytest.raises(TypeError):
        tessel.partition(42)


def test_keyword_arguments_out_of_range_are_value_errors(dot_hlo):
    # timeout_seconds * 1000 cast to an integer was undefined for inf / NaN / 1e300 (a timeout of
    # zero); a negative or NaN tolerance failed every output; a negative top_k was taken.
    for bad in (float("inf"), float("nan"), 1e300, 0.0, -1.0):
        with pytest.raises(ValueError, match="timeout_seconds"):
            tessel.verify(dot_hlo, timeout_seconds=bad)
    for name in ("rtol", "atol"):
        for bad in (-1.0, float("nan")):
            with pytest.raises(ValueError, match=name):
                tessel.verify(dot_hlo, **{name: bad})
    with pytest.raises(ValueError, match="top_k"):
        tessel.simulate(dot_hlo, "dgx_h100", top_k=-1)
    with pytest.raises(ValueError, match="assume_trip_count"):
        tessel.simulate(dot_hlo, "dgx_h100", assume_trip_count=0)


def test_verify_is_interrupted_by_ctrl_c():
    # A loop that never ends: tessel.verify waited up to its 10-minute run bound with Ctrl-C
    # ignored. interrupt_main raises KeyboardInterrupt as a SIGINT would; the runs are cancelled
    # at their next node and the exception reaches the caller within a few seconds.
    hlo = (REPO / "tests" / "cli" / "Inputs" / "endless_while.hlo").read_text()
    timer = threading.Timer(0.5, _thread.interrupt_main)
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        tessel.verify(hlo, num_partitions=1)
    timer.join()
    assert time.monotonic() - start < 30
    # Nothing is left running: a second verify of a finite module works at once.
    dot = (JAX_FIXTURES / "dot_contracting_sharded.hlo").read_text()
    assert tessel.verify(dot).ok


def test_simulate_assume_trip_count():
    # The bound of this loop is a parameter: no static count. The error named only the CLI flag.
    hlo = (REPO / "tests" / "cli" / "Inputs" / "while_unknown_trip_count.hlo").read_text()
    with pytest.raises(ValueError, match=r"unknown trip count .*assume_trip_count=N"):
        tessel.simulate(hlo, "v4-8")
    once = tessel.simulate(hlo, "v4-8", assume_trip_count=1)
    ten = tessel.simulate(hlo, "v4-8", assume_trip_count=10)
    assert ten.compute_seconds == pytest.approx(10 * once.compute_seconds, rel=0.05)


def test_trace_path_that_is_not_a_regular_file_is_refused(dot_hlo, tmp_path):
    # The trace was written beside the name and renamed over it: a FIFO (or /dev/null, as root)
    # became a regular file.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        tessel.simulate(dot_hlo, "dgx_h100", trace_path=fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_error_messages_with_bytes_that_are_not_utf8_survive():
    # The parser quotes one byte of the two-byte "é"; decoding the message strictly lost it in a
    # UnicodeDecodeError. Now a ValueError whose text shows the byte escaped.
    with pytest.raises(ValueError, match="JSON") as e:
        tessel.Topology.from_json("é")
    assert not isinstance(e.value, UnicodeDecodeError)
