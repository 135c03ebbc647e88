"""tessel.torch_xla: simulate or partition the HLO that PyTorch/XLA dumps.

torch_xla writes the HLO of each compiled graph when run with
``XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text`` (files such as
``module_0001.SyncTensorsGraph.123.before_optimizations.txt``) or with
``XLA_SAVE_TENSORS_FILE=FILE XLA_SAVE_TENSORS_FMT=hlo``. With SPMD (``xs.mark_sharding``)
the dumped module carries ``sharding={...}`` annotations, which is what Tessel reads. torch is
not needed here: these helpers take the dump file's path.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Union

import tessel


def read_dump(path: Union[str, os.PathLike]) -> str:
    """The HLO text of one dump file. A XLA_SAVE_TENSORS_FILE holds several graphs, each
    starting with ``HloModule``; the last one (the most recent step) is returned."""
    text = Path(path).read_text()
    start = text.rfind("HloModule ")
    if start < 0:
        raise ValueError(f"{path}: no 'HloModule' in the file; is it an HLO text dump?")
    return text[start:]


def partition(path: Union[str, os.PathLike], num_partitions: Optional[int] = None
              ) -> tessel.PartitionResult:
    """``tessel.partition`` of the dumped module at ``path``."""
    return tessel.partition(read_dump(path), num_partitions)


def simulate(path: Union[str, os.PathLike],
             topology: Union[tessel.Topology, str, os.PathLike], **options: Any
             ) -> tessel.SimulationReport:
    """``tessel.simulate`` of the dumped module at ``path`` on ``topology``; same result
    as ``tessel.jax.simulate`` for the same program."""
    return tessel.simulate(read_dump(path), topology, **options)
