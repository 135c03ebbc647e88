"""Shared fixtures: paths of the repository's committed JAX-lowered HLO modules (8 devices)."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JAX_FIXTURES = REPO / "tests" / "fixtures" / "jax"


@pytest.fixture
def dot_hlo() -> str:
    """Dot with a sharded contracting dim (8 devices): partitions into a local dot + all-reduce."""
    return (JAX_FIXTURES / "dot_contracting_sharded.hlo").read_text()


@pytest.fixture
def layernorm_hlo() -> str:
    return (JAX_FIXTURES / "layernorm_seq_sharded.hlo").read_text()
