"""Round trip from JAX: lower a sharded function, partition and simulate it in Tessel, and
verify the partitioning numerically. Skipped only when jax is not importable."""
import os

# 8 CPU devices for the mesh; must be set before jax is first imported.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import tessel  # noqa: E402
import tessel.jax  # noqa: E402


def _mlp(x, w1, w2):
    return jnp.tanh(x @ w1) @ w2


def _args(mesh):
    spec = lambda *p: NamedSharding(mesh, P(*p))  # noqa: E731
    return (jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=spec("data", None)),
            jax.ShapeDtypeStruct((128, 256), jnp.float32, sharding=spec(None, "model")),
            jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=spec("model", None)))


@pytest.fixture
def mesh():
    if len(jax.devices()) < 8:
        pytest.fail("needs 8 devices: run with XLA_FLAGS=--xla_force_host_platform_device_count=8")
    # Auto axes: GSPMD-style propagation decides the intermediate shardings, as in the fixtures.
    auto = jax.sharding.AxisType.Auto
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(auto, auto))


def test_jax_round_trip(mesh):
    args = _args(mesh)
    hlo = tessel.jax.lower(_mlp, *args, mesh=mesh)
    assert "sharding=" in hlo
    part = tessel.jax.partition(_mlp, *args, mesh=mesh)
    assert part.num_partitions == 8
    # Megatron MLP: the second dot's contracting dim is split over "model", so its partial
    # sums are all-reduced.
    assert part.collectives["all-reduce"].count >= 1
    assert "f32[32,64]" in part.hlo_text  # x's local [64/2, 128] @ w1's [128, 256/4]
    report = tessel.jax.simulate(_mlp, *args, mesh=mesh, topology="dgx_h100")
    assert isinstance(report.step_seconds, float) and report.step_seconds > 0
    assert report.num_devices == 8
    assert tessel.verify(hlo, 8, seed=1).ok


def test_jax_mesh_topology_mismatch(mesh):
    with pytest.raises(ValueError, match="8 devices"):
        tessel.jax.simulate(_mlp, *_args(mesh), mesh=mesh, topology="v4-8")
