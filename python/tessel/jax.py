"""tessel.jax: lower a JAX function with its shardings and hand the HLO to Tessel.

JAX is optional: it is imported when one of these functions runs, and a missing JAX raises an
ImportError saying how to get it. The HLO is what ``jax.jit(fn).lower(*args).as_text(
dialect="hlo")`` prints, with the shardings of ``args`` (sharded ``jax.Array`` s or
``jax.ShapeDtypeStruct`` s with a ``sharding``) and of any ``with_sharding_constraint`` inside
``fn``; nothing is executed, so ``args`` may be abstract.

    mesh = jax.make_mesh((2, 4), ("data", "model"))
    x = jax.ShapeDtypeStruct((64, 512), jnp.float32,
                             sharding=NamedSharding(mesh, P("data", None)))
    report = tessel.jax.simulate(f, x, w, mesh=mesh, topology="dgx_h100")
    report.step_seconds    # float, seconds
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Optional, Union

import tessel


def _import_jax():
    try:
        import jax  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "tessel.jax needs JAX: `pip install jax` (CPU is enough; nothing runs on devices). "
            f"Import failed with: {e}") from e
    return jax


def _mesh_context(jax, mesh):
    if mesh is None:
        return contextlib.nullcontext()
    for name in ("set_mesh", "sharding.use_mesh"):
        obj = jax
        for part in name.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            return obj(mesh)
    return mesh  # older JAX: the Mesh itself is the context manager


def lower(fn, *args: Any, mesh: Optional[Any] = None, **kwargs: Any) -> str:
    """HLO text of ``jax.jit(fn)`` lowered for ``args`` (and keyword ``kwargs``) under ``mesh``
    (a ``jax.sharding.Mesh``; optional when every sharding is already a NamedSharding)."""
    jax = _import_jax()
    with _mesh_context(jax, mesh):
        lowered = jax.jit(fn).lower(*args, **kwargs)
    return lowered.as_text(dialect="hlo")


def _check_devices(mesh, topology: tessel.Topology) -> None:
    if mesh is not None and mesh.size != topology.num_devices:
        raise ValueError(f"the JAX mesh has {mesh.size} devices but topology "
                         f"'{topology.name}' has {topology.num_devices}; give a topology with "
                         f"{mesh.size} devices (tessel.preset_names())")


def partition(fn, *args: Any, mesh: Optional[Any] = None,
              num_partitions: Optional[int] = None) -> tessel.PartitionResult:
    """``tessel.partition`` of ``lower(fn, *args, mesh=mesh)``; num_partitions defaults to the
    mesh size (or the shardings' largest device id + 1 without a mesh)."""
    if num_partitions is None and mesh is not None:
        num_partitions = int(mesh.size)
    return tessel.partition(lower(fn, *args, mesh=mesh), num_partitions)


def simulate(fn, *args: Any, mesh: Optional[Any] = None,
             topology: Union[tessel.Topology, str, os.PathLike], **options: Any
             ) -> tessel.SimulationReport:
    """Lowers ``fn(*args)`` with its shardings and simulates one step on ``topology`` (a
    Topology, a JSON path or a preset name) whose device count must equal the mesh size.
    ``options`` go to ``tessel.simulate`` (overlap, trace_path, top_k, matmul_dtype).
    Returns the SimulationReport (``step_seconds`` in seconds, float)."""
    topo = tessel._topology(topology)
    _check_devices(mesh, topo)
    return tessel.simulate(lower(fn, *args, mesh=mesh), topo, **options)
