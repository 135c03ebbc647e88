"""Topology, Mesh / HybridMesh and shard(): the torch_xla semantics of spmd/mesh.h and
spmd/partition_spec.h, seen from Python."""
import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tessel


def test_topology_presets_and_load():
    names = tessel.preset_names()
    assert "v5p-128" in names and "dgx_h100" in names
    topo = tessel.Topology.preset("v5p-128")
    assert topo.num_devices == 64  # 64 chips, 128 TensorCores
    assert topo.num_hosts == 16
    assert topo.hbm_bytes > 0
    assert topo.peak_tflops["bf16"] > 0
    assert "v5p-128" in repr(topo)


def test_topology_errors():
    with pytest.raises(ValueError, match="unknown topology preset 'v9-1'"):
        tessel.Topology.preset("v9-1")
    with pytest.raises(ValueError, match="unknown topology preset"):
        tessel.Topology.preset("../configs/v4-8")  # a name, not a path
    with pytest.raises(ValueError, match="not a regular file"):
        tessel.Topology.load("/dev/zero")  # grew to 4 GB before
    with pytest.raises(ValueError):
        tessel.Topology.from_json('{"name": "x"}')
    with pytest.raises((FileNotFoundError, ValueError), match="no_such.json"):
        tessel.Topology.load("/nonexistent/no_such.json")


def test_topology_load_takes_a_path_like():
    # Took str only: a pathlib.Path was a TypeError.
    path = Path(__file__).resolve().parents[2] / "configs" / "v4-8.json"
    assert tessel.Topology.load(path).num_devices == tessel.Topology.load(str(path)).num_devices


def test_mesh_like_torch_xla():
    mesh = tessel.Mesh(list(range(8)), [2, 4], ["x", "y"])
    assert mesh.size() == 8
    assert mesh.rank() == 2
    assert mesh.mesh_shape == [2, 4]
    assert mesh.shape() == [("x", 2), ("y", 4)]
    assert mesh.get_axis_name_idx("y") == 1
    logical = mesh.get_logical_mesh()
    assert isinstance(logical, np.ndarray)
    np.testing.assert_array_equal(logical, np.arange(8).reshape(2, 4))
    assert mesh.coordinate_of(6) == [1, 2]
    assert mesh == tessel.Mesh(list(range(8)), [2, 4], ["x", "y"])


def test_mesh_errors_are_value_errors():
    with pytest.raises(ValueError, match="8"):
        tessel.Mesh(list(range(8)), [3, 4], ["x", "y"])
    mesh = tessel.Mesh(list(range(4)), [4], ["x"])
    with pytest.raises(ValueError, match="z"):
        mesh.get_axis_name_idx("z")
    # True / False and numpy bools were read as 1 / 0: a boolean mask made a "valid" mesh.
    with pytest.raises(TypeError, match="device_ids: expected ints, got the bool True"):
        tessel.Mesh([True, False], [2])
    with pytest.raises(TypeError, match="device_ids: expected ints, got the bool"):
        tessel.Mesh(np.array([True, False]), [2])
    with pytest.raises(TypeError, match="mesh_shape: expected ints, got 2.0"):
        tessel.Mesh([0, 1], [2.0])
    with pytest.raises(ValueError, match="device_ids: 36893488147419103232 does not fit in int64"):
        tessel.Mesh([0, 2**65], [2])
    with pytest.raises(TypeError, match="mesh_shape: expected a sequence of ints"):
        tessel.Mesh([0, 1], "2")
    # numpy integers and arrays, as torch_xla users pass them, still work.
    assert tessel.Mesh(np.arange(4), np.array([2, 2])).mesh_shape == [2, 2]
    # A NUL or other control byte in an axis name could not be printed back.
    with pytest.raises(ValueError, match="control character"):
        tessel.Mesh([0, 1], [2], ["d\0ta"])


def test_instances_made_by_new_alone_are_refused():
    # Mesh.__new__(Mesh) made an instance whose C++ value was never built: reading it returned
    # garbage or crashed (pybind11 allocates it lazily, uninitialised).
    for cls in (tessel.Mesh, tessel.HybridMesh, tessel.Topology, tessel.ShardResult):
        with pytest.raises(TypeError, match="__new__ alone cannot make"):
            cls.__new__(cls)
    with pytest.raises(TypeError):  # "cannot pickle": no half-built copy
        copy.copy(tessel.Mesh([0, 1], [2], ["x"]))
    # In a child process: before the fix this read uninitialised memory or crashed.
    code = "import tessel\ntry:\n    tessel.Mesh.__new__(tessel.Mesh).device_ids\nexcept TypeError:\n    pass\n"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

    class Sub(tessel.Mesh):  # subclasses construct as before
        pass

    assert Sub([0, 1], [2], ["x"]).size() == 2
    with pytest.raises(TypeError, match="__new__ alone"):
        Sub.__new__(Sub)


def test_hybrid_mesh_over_two_slices():
    topo = tessel.Topology.preset("two_v4-8_slices")
    mesh = tessel.HybridMesh([1, 4], [2, 1], ["data", "model"], topo)
    assert mesh.mesh_shape == [2, 4]
    assert mesh.ici_mesh_shape == [1, 4]
    assert mesh.dcn_mesh_shape == [2, 1]
    assert sorted(mesh.device_ids) == list(range(8))
    # DCN axis outermost: each row of the logical mesh is one slice.
    rows = mesh.get_logical_mesh()
    assert sorted(rows[0].tolist()) == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        tessel.HybridMesh([1, 8], [2, 1], ["data", "model"], topo)


def test_shard_rows_over_x():
    mesh = tessel.Mesh(list(range(8)), [2, 4], ["x", "y"])
    result = tessel.shard((8, 4), mesh, ("x", None))
    assert result.sharding == "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"
    assert result.local_shape == [4, 4]
    assert len(result.shards) == 8
    by_device = {s.device_id: s for s in result.shards}
    assert by_device[0].index == [(0, 4), (0, 4)]
    assert by_device[5].index == [(4, 8), (0, 4)]
    assert by_device[5].replica_id == 1
    # The same spec as a string, and by axis index.
    assert tessel.shard([8, 4], mesh, "x,None").sharding == result.sharding
    assert tessel.shard([8, 4], mesh, [0, None]).sharding == result.sharding


def test_shard_tuple_axes_and_padding():
    mesh = tessel.Mesh(list(range(8)), [2, 4], ["x", "y"])
    result = tessel.shard([10, 3], mesh, (("x", "y"), None))
    assert result.sharding == "{devices=[8,1]0,1,2,3,4,5,6,7}"
    assert result.local_shape == [2, 3]  # ceil(10 / 8)
    last = {s.device_id: s for s in result.shards}[7]
    assert last.index == [(10, 10), (0, 3)]  # all padding


def test_shard_errors():
    mesh = tessel.Mesh(list(range(8)), [2, 4], ["x", "y"])
    with pytest.raises(ValueError, match="z"):
        tessel.shard([8, 4], mesh, ("z", None))
    with pytest.raises(ValueError):
        tessel.shard([8, 4], mesh, ("x",))  # rank mismatch
    with pytest.raises(ValueError, match="negative"):
        tessel.shard([-1, 4], mesh, ("x", None))
    with pytest.raises(ValueError, match="axis index or name"):
        tessel.shard([8, 4], mesh, (1.5, None))
    # Beyond int64: a ValueError naming the index (pybind11's cast error was a RuntimeError).
    with pytest.raises(ValueError, match="axis index 9223372036854775808"):
        tessel.shard([8, 4], mesh, (2**63, None))
    # A dim near 2^63: ceil(dim / tiles) wrapped and aborted the interpreter.
    result = tessel.shard([2**63 - 1], tessel.Mesh([0, 1, 2], [3], ["x"]), ("x",))
    assert result.local_shape == [2**63 // 3 + 1]
