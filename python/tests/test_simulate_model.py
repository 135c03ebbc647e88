"""tessel.simulate_model: a model description (configs/models/, nn/model_config.h) simulated as
`tessel simulate CONFIG --model-config FILE` does."""
import pytest

import tessel

SMALL = {"arch": "llama", "layers": 2, "d_model": 512, "heads": 8, "ffn": 2048, "vocab": 32000,
         "seq_len": 1024}


def test_small_llama_on_v4_8_fits_and_takes_time():
    report = tessel.simulate_model(SMALL, "v4-8", ici_mesh_shape=[1, 2, 2], recipe="fsdp_tp")
    assert isinstance(report.step_seconds, float)
    assert report.step_seconds > report.compute_seconds > 0
    assert report.num_devices == 4
    assert not report.exceeds_hbm
    assert report.ici_seconds > 0  # fsdp and tensor axes communicate


def test_more_layers_take_longer_and_more_memory():
    small = tessel.simulate_model(SMALL, "v4-8", ici_mesh_shape=[1, 2, 2])
    big = tessel.simulate_model(dict(SMALL, layers=4), "v4-8", ici_mesh_shape=[1, 2, 2])
    assert big.step_seconds > small.step_seconds
    assert big.peak_memory_bytes > small.peak_memory_bytes


def test_preset_that_does_not_fit_says_so():
    report = tessel.simulate_model("llama3-70b", "v4-8", ici_mesh_shape=[1, 2, 2], batch=4)
    assert report.exceeds_hbm


def test_bad_mesh_and_bad_model_raise_value_error():
    with pytest.raises(ValueError, match="ici_mesh_shape"):
        tessel.simulate_model(SMALL, "v4-8", ici_mesh_shape=[1, 4, 4])
    with pytest.raises(ValueError, match="heads"):
        tessel.simulate_model(dict(SMALL, heads=3), "v4-8", ici_mesh_shape=[1, 2, 2])
    with pytest.raises(FileNotFoundError):
        tessel.simulate_model("no-such-model", "v4-8")


def test_documented_defaults_run():
    # Without ici_mesh_shape the "data" axis takes each slice's devices and the default axis
    # names stay (fsdp_tp, the default recipe, needs "tensor"); before, only a "data" axis was
    # kept and the defaults raised "recipe fsdp_tp needs a tensor axis".
    report = tessel.simulate_model(SMALL, "v4-8")
    assert report.num_devices == 4
    assert report.step_seconds > 0
    two = tessel.simulate_model(SMALL, "two_v4-8_slices")
    assert two.num_devices == 8


def test_maxtext_custom_remat_from_a_model_dict():
    # MaxText's remat_policy custom: the names given to remat_offload leave HBM (host memory on
    # a preset with a host link), every name not given is recomputed: with no names, as full.
    base = dict(SMALL, attention="flash")
    full = tessel.simulate_model(dict(base, remat="full"), "v5p-128", ici_mesh_shape=[1, 64, 1])
    custom = tessel.simulate_model(dict(base, remat="custom"), "v5p-128", ici_mesh_shape=[1, 64, 1])
    assert custom.step_seconds == pytest.approx(full.step_seconds)
    kept = tessel.simulate_model(dict(base, remat="custom", remat_device="qkv_proj"), "v5p-128",
                                 ici_mesh_shape=[1, 64, 1])
    offloaded = tessel.simulate_model(dict(base, remat="custom", remat_offload="qkv_proj"),
                                      "v5p-128", ici_mesh_shape=[1, 64, 1])
    assert kept.peak_memory_bytes > offloaded.peak_memory_bytes
    with pytest.raises(ValueError, match="remat_offload applies to remat \"custom\""):
        tessel.simulate_model(dict(base, remat="full", remat_offload="qkv_proj"), "v5p-128",
                              ici_mesh_shape=[1, 64, 1])
    with pytest.raises(ValueError, match="unknown name \"bogus\""):
        tessel.simulate_model(dict(base, remat="custom", remat_device="bogus"), "v5p-128",
                              ici_mesh_shape=[1, 64, 1])
