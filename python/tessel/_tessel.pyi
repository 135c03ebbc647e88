"""Type stubs of the extension tessel._tessel (python/src/tessel_module.cc). Shapes are lists
of dims; times are seconds (float); sizes are bytes (int); shardings are XLA sharding text."""
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

PartitionSpecLike = Union[str, Sequence[Union[None, int, str, Sequence[Union[int, str]]]]]

class Topology:
    """A validated pod: devices, hosts, slices, ICI/DCN links and the device spec
    (mesh/topology/topology.h; JSON schema in docs/topology.md)."""
    @staticmethod
    def load(path: Union[str, os.PathLike]) -> Topology: ...
    @staticmethod
    def from_json(json_text: str) -> Topology: ...
    @staticmethod
    def preset(name: str) -> Topology:
        """A preset shipped in configs/ (tessel.preset_names()); ValueError if unknown."""
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def num_devices(self) -> int: ...
    @property
    def num_slices(self) -> int: ...
    @property
    def num_hosts(self) -> int: ...
    @property
    def device_name(self) -> str: ...
    @property
    def hbm_bytes(self) -> int:
        """HBM capacity of one device, bytes."""
    @property
    def hbm_bandwidth_bytes_per_s(self) -> float: ...
    @property
    def peak_tflops(self) -> Dict[str, float]:
        """Peak dense throughput per XLA dtype name, 10^12 op/s."""

class Mesh:
    """torch_xla's Mesh (spmd/mesh.h): device_ids laid out row-major over mesh_shape."""
    def __init__(self, device_ids: Sequence[int], mesh_shape: Sequence[int],
                 axis_names: Optional[Sequence[str]] = None) -> None: ...
    @property
    def device_ids(self) -> List[int]: ...
    @property
    def mesh_shape(self) -> List[int]: ...
    @property
    def axis_names(self) -> List[str]: ...
    def size(self) -> int: ...
    def rank(self) -> int: ...
    def shape(self) -> List[Tuple[str, int]]:
        """(axis name, size) per axis, in order."""
    def get_axis_name_idx(self, name: str) -> int: ...
    def get_logical_mesh(self) -> npt.NDArray[np.int64]:
        """Device ids as an int64 array of shape mesh_shape."""
    def coordinate_of(self, device_id: int) -> Optional[List[int]]: ...

class HybridMesh(Mesh):
    """torch_xla's HybridMesh: ICI axes inside a slice times DCN axes across slices; axis i has
    size ici_mesh_shape[i] * dcn_mesh_shape[i] and devices follow the topology's physical
    layout."""
    def __init__(self, ici_mesh_shape: Sequence[int], dcn_mesh_shape: Sequence[int],
                 axis_names: Sequence[str], topology: Topology) -> None: ...
    @property
    def ici_mesh_shape(self) -> List[int]: ...
    @property
    def dcn_mesh_shape(self) -> List[int]: ...

class Shard:
    """One device's piece of a sharded global array."""
    device_id: int
    index: List[Tuple[int, int]]
    """[start, limit) along each global dim; clipped to the global shape (padding excluded)."""
    tile_index: List[int]
    replica_id: int

class ShardResult:
    sharding: str
    global_shape: List[int]
    local_shape: List[int]
    """One device's buffer shape: ceil(dim / tiles) per tiled dim (padding included)."""
    shards: List[Shard]

class CollectiveCount:
    count: int
    result_bytes: int
    """Bytes of one device's results of this collective kind, summed."""

class PartitionResult:
    hlo_text: str
    num_partitions: int
    collectives: Dict[str, CollectiveCount]
    parameter_shardings: List[str]
    output_shardings: List[str]

class OutputCheck:
    index: int
    global_shape: str
    local_shape: str
    sharding: str
    rtol: float
    atol: float
    scale: float
    max_abs_error: float
    max_rel_error: float
    mismatched_elements: int
    first_mismatch_element: int
    ok: bool

class VerifyReport:
    num_devices: int
    outputs: List[OutputCheck]
    collectives: Dict[str, CollectiveCount]
    ok: bool
    first_mismatch: Optional[int]

class OpEntry:
    name: str
    opcode: str
    shape: str
    seconds: float
    flops: float
    bytes: int

class DeviceClass:
    representative_device: int
    num_devices: int
    in_order_seconds: float
    overlapped_seconds: float
    compute_seconds: float
    ici_seconds: float
    dcn_seconds: float
    ici_bytes: int
    dcn_bytes: int

class SimulationReport:
    """One simulated step (mesh/sim/simulator.h): seconds, bytes per device, tables."""
    device_name: str
    num_devices: int
    overlap: bool
    step_seconds: float
    in_order_seconds: float
    overlapped_seconds: float
    compute_seconds: float
    ici_seconds: float
    dcn_seconds: float
    exposed_comm_seconds: float
    flops_per_device: float
    ici_bytes_per_device: int
    dcn_bytes_per_device: int
    ici_bytes_total: int
    dcn_bytes_total: int
    peak_memory_bytes: int
    parameter_bytes: int
    hbm_bytes: int
    exceeds_hbm: bool
    classes: List[DeviceClass]
    top_ops: List[OpEntry]
    top_collectives: List[OpEntry]
    warnings: List[str]
    global_nodes: int
    local_nodes: int
    trace_path: Optional[str]
    @property
    def breakdown(self) -> Dict[str, float]: ...
    @property
    def memory(self) -> Dict[str, Any]: ...
    @property
    def collective_table(self) -> List[Dict[str, Any]]: ...

def shard(shape: Sequence[int], mesh: Mesh, partition_spec: PartitionSpecLike) -> ShardResult: ...
def partition(hlo_text: str, num_partitions: Optional[int] = None) -> PartitionResult: ...
def propagate(hlo_text: str, num_partitions: Optional[int] = None) -> str: ...
def verify(hlo_text: str, num_partitions: Optional[int] = None, seed: int = 0,
           rtol: Optional[float] = None, atol: Optional[float] = None,
           timeout_seconds: float = 60.0) -> VerifyReport: ...
def verify_inputs(hlo_text: str, seed: int = 0) -> List[npt.NDArray[Any]]: ...
def simulate_hlo(hlo_text: str, topology: Topology, overlap: bool = False,
                 trace_path: Optional[str] = None, top_k: int = 10,
                 matmul_dtype: Optional[str] = None,
                 assume_trip_count: Optional[int] = None) -> SimulationReport: ...
def simulate_model(model_json: str, source: str, topology: Topology,
                   ici_mesh_shape: Sequence[int], dcn_mesh_shape: Sequence[int],
                   axis_names: Sequence[str], recipe: str, batch: Optional[int],
                   overlap: bool = False, top_k: int = 10) -> SimulationReport:
    """One training step of a model config (nn/model_config.h) on ``topology``; see
    ``tessel.simulate_model``."""
    ...
