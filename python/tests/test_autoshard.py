"""tessel.autoshard: the search's best plan, its coverage, and a model that fits nowhere."""
import tessel

SMALL = {"arch": "llama", "layers": 4, "d_model": 256, "heads": 8, "kv_heads": 4, "ffn": 768,
         "vocab": 1024, "seq_len": 128, "batch": 16}


def test_autoshard_finds_a_fitting_plan_no_slower_than_its_alternatives():
    result = tessel.autoshard(SMALL, "two_v4-8_slices", top_k=3)
    best = result["best"]
    assert best is not None and best["fits"]
    assert best["axis_names"][:3] == ["data", "stage", "fsdp"]
    devices = 1
    for ici, dcn in zip(best["ici_mesh_shape"], best["dcn_mesh_shape"]):
        devices *= ici * dcn
    assert devices == 8
    assert result["alternatives"], "a small model fits in more than one plan"
    for alt in result["alternatives"]:
        assert alt["step_seconds"] >= best["step_seconds"]
    search = result["search"]
    assert search["complete"]
    accounted = search["meshes_simulated"] + search["meshes_failed"] + sum(
        search["pruned"].values())
    assert search["meshes_enumerated"] == accounted


def test_autoshard_is_deterministic():
    a = tessel.autoshard(SMALL, "two_v4-8_slices")
    b = tessel.autoshard(SMALL, "two_v4-8_slices")
    a["search"].pop("seconds")
    b["search"].pop("seconds")
    assert a == b


def test_autoshard_reports_no_plan_when_nothing_fits():
    huge = dict(SMALL, layers=64, d_model=8192, heads=64, kv_heads=8, ffn=32768)
    result = tessel.autoshard(huge, "two_v4-8_slices")
    assert result["best"] is None


def test_autoshard_axes_and_memory_limit():
    result = tessel.autoshard(SMALL, "two_v4-8_slices", axes=("data", "fsdp", "tensor"))
    best = result["best"]
    for name, ici, dcn in zip(best["axis_names"], best["ici_mesh_shape"], best["dcn_mesh_shape"]):
        if name not in ("data", "fsdp", "tensor"):
            assert ici * dcn == 1, name
    assert result["search"]["pruned"]["axis outside the allowed axes (--axes)"] > 0
    free = tessel.autoshard(SMALL, "two_v4-8_slices")["best"]
    tight = tessel.autoshard(SMALL, "two_v4-8_slices", hbm_bytes=free["memory_bytes"] - 1)["best"]
    assert tight["memory_bytes"] < free["memory_bytes"]
    assert tight["step_seconds"] >= free["step_seconds"]
    try:
        tessel.autoshard(SMALL, "two_v4-8_slices", axes=("pipeline",))
    except ValueError as e:
        assert '"pipeline"' in str(e)
    else:
        raise AssertionError("an unknown axis must raise ValueError")


def test_autoshard_refuses_out_of_range_arguments_and_a_bare_axis_string():
    for kwargs, name in (({"top_k": -1}, "top_k"), ({"hbm_bytes": -1}, "hbm_bytes"),
                         ({"budget_seconds": -1.0}, "budget_seconds"),
                         ({"budget_seconds": float("nan")}, "budget_seconds")):
        try:
            tessel.autoshard(SMALL, "two_v4-8_slices", **kwargs)
        except ValueError as e:
            assert name in str(e), e
        else:
            raise AssertionError(f"{kwargs} must raise ValueError")
    # list("data") would be its letters: the string is refused, naming the fix.
    try:
        tessel.autoshard(SMALL, "two_v4-8_slices", axes="data")
    except ValueError as e:
        assert "['data']" in str(e), e
    else:
        raise AssertionError("a bare string for axes must raise ValueError")
