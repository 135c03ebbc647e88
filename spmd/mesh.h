// The logical device mesh: `Mesh` (torch_xla `Mesh`, JAX `jax.sharding.Mesh`) and `HybridMesh`
// (torch_xla `HybridMesh`, JAX `mesh_utils.create_hybrid_device_mesh`).
//
//   // 8 devices as a 4x2 mesh, ids filled row-major ("C order").
//   TESSEL_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2},
//                                                   {"x", "y"}));
//   mesh.logical_mesh().ToString() == "[[0, 1], [2, 3], [4, 5], [6, 7]]";
//   mesh.shape() == {{"x", 4}, {"y", 2}};          // ordered, like torch_xla's OrderedDict
//   *mesh.AxisIndex("y") == 1;
//
//   // Two slices of 2x2 chips; 'data' across the slices (DCN), 'fsdp' inside each slice (ICI).
//   TESSEL_ASSIGN_OR_RETURN(mesh::Topology topology,
//                           mesh::MakeUniformTopology(2, {2, 2, 1}, 2));
//   TESSEL_ASSIGN_OR_RETURN(HybridMesh hybrid,
//                           HybridMesh::Create({1, 4, 1}, {2, 1, 1},
//                                              {"data", "fsdp", "tensor"}, topology));
//   hybrid.shape() == {{"data", 2}, {"fsdp", 4}, {"tensor", 1}};
//   hybrid.logical_mesh().ToString() == "[[[0], [2], [1], [3]], [[4], [6], [5], [7]]]";
//
// Vocabulary (STYLE.md): an *axis* is a mesh dimension, a *dim* a tensor dimension; a
// *coordinate* is a position in the mesh, a *device id* a global id of the topology.
#ifndef TESSEL_SPMD_MESH_H_
#define TESSEL_SPMD_MESH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/spmd/device_array.h"

namespace tessel::spmd {

class Mesh {
 public:
  // A one-device mesh: device 0, shape [1], unnamed.
  Mesh() : Mesh(DeviceArray({1}, {0}), {}) {}

  // `device_ids` (a raveled list in any order) reshaped row-major to `mesh_shape`, with one
  // name per axis (or none: axes are then referred to by index only).
  // Errors, as torch_xla's Mesh assertions:
  //   kInvalidArgument: `mesh_shape` empty, with an entry < 1 or more than 2^40 devices; the
  //     number of ids differs from the product of `mesh_shape`; a repeated id; names not one per
  //     axis; a repeated or empty name, or one holding a control byte (< 0x20, 0x7f).
  //   kOutOfRange: an id < 0 or >= the mesh size (ids must be a permutation of 0..size-1).
  [[nodiscard]] static absl::StatusOr<Mesh> Create(std::vector<int64_t> device_ids,
                                                   std::vector<int64_t> mesh_shape,
                                                   std::vector<std::string> axis_names = {});

  // The raveled device ids, as given.
  const std::vector<int64_t>& device_ids() const { return logical_mesh_.device_ids(); }
  const std::vector<int64_t>& mesh_shape() const { return logical_mesh_.dims(); }
  // One name per axis, or empty when the mesh is unnamed.
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  // torch_xla get_logical_mesh(): the ids as an array of mesh_shape().
  const DeviceArray& logical_mesh() const { return logical_mesh_; }

  int64_t rank() const { return logical_mesh_.rank(); }
  // Number of devices (product of mesh_shape()).
  int64_t size() const { return logical_mesh_.num_elements(); }
  int64_t axis_size(int64_t axis) const { return logical_mesh_.dim(axis); }
  // Ordered (axis name, size) pairs; an unnamed mesh names its axes "0", "1", ...
  std::vector<std::pair<std::string, int64_t>> shape() const;

  // The index of the axis called `name`.
  // Errors: kInvalidArgument `unknown mesh axis "z"; mesh has axes ["x"=4, "y"=2]`.
  [[nodiscard]] absl::StatusOr<int64_t> AxisIndex(std::string_view name) const;
  // The coordinate of `device_id`, or nullopt if it is not in the mesh.
  std::optional<std::vector<int64_t>> CoordinateOf(int64_t device_id) const;
  // The device at `coordinate`. Precondition: a valid coordinate.
  int64_t DeviceAt(absl::Span<const int64_t> coordinate) const {
    return logical_mesh_.at(coordinate);
  }

  // `["x"=4, "y"=2]`; unnamed axes print as their index: `[0=4, 1=2]`.
  std::string AxesToString() const;
  // `Mesh(["x"=4, "y"=2], [[0, 1], [2, 3], [4, 5], [6, 7]])`.
  std::string ToString() const;

  bool operator==(const Mesh& other) const {
    return logical_mesh_ == other.logical_mesh_ && axis_names_ == other.axis_names_;
  }
  bool operator!=(const Mesh& other) const { return !(*this == other); }

 private:
  Mesh(DeviceArray logical_mesh, std::vector<std::string> axis_names)
      : logical_mesh_(std::move(logical_mesh)), axis_names_(std::move(axis_names)) {}

  DeviceArray logical_mesh_;
  std::vector<std::string> axis_names_;
};

// A Mesh whose device order follows the network: one ICI-aware sub-mesh of `ici_mesh_shape`
// per slice, the slices placed as outer blocks along the DCN axes. The final mesh shape is the
// element-wise product ici_mesh_shape[i] * dcn_mesh_shape[i]. Axes should be ordered by
// increasing network intensity (e.g. data, fsdp, tensor).
//
// Device order, as torch_xla HybridMesh / JAX create_hybrid_device_mesh:
//   1. Slices are taken in index order; slice s's devices form a physical mesh of the slice
//      shape indexed by device coordinates (physical[c0][c1]...[cn] = device id).
//   2. CreateDeviceMesh (below) maps that physical mesh onto `ici_mesh_shape`.
//   3. The per-slice meshes are laid out like numpy.block over iota(num_slices) reshaped to
//      `dcn_mesh_shape`: slice s sits at block coordinate unravel(s, dcn_mesh_shape).
// With one slice (and dcn_mesh_shape all 1 or omitted) the mesh is CreateDeviceMesh over all
// devices.
class HybridMesh : public Mesh {
 public:
  // Errors (kInvalidArgument), as torch_xla raises them:
  //   - `ici_mesh_shape` empty or an entry < 1; `dcn_mesh_shape` (when given) of another length
  //     or with an entry < 1; either with more than 2^40 devices;
  //   - "provide dcn_mesh_shape to create a mesh for multislice" when the topology has several
  //     slices and the product of dcn_mesh_shape is 1;
  //   - "invalid dcn_mesh_shape [..] for a single slice mesh" when it has one slice and the
  //     product is > 1;
  //   - "number of slices N must equal the product of dcn_mesh_shape [..]";
  //   - "number of devices N in slice s must equal the product of ici_mesh_shape [..]";
  //   - the errors of Mesh::Create for `axis_names`;
  //   - an empty topology.
  [[nodiscard]] static absl::StatusOr<HybridMesh> Create(std::vector<int64_t> ici_mesh_shape,
                                                         std::vector<int64_t> dcn_mesh_shape,
                                                         std::vector<std::string> axis_names,
                                                         const mesh::Topology& topology);

  const std::vector<int64_t>& ici_mesh_shape() const { return ici_mesh_shape_; }
  const std::vector<int64_t>& dcn_mesh_shape() const { return dcn_mesh_shape_; }

 private:
  HybridMesh(Mesh mesh, std::vector<int64_t> ici, std::vector<int64_t> dcn)
      : Mesh(std::move(mesh)), ici_mesh_shape_(std::move(ici)), dcn_mesh_shape_(std::move(dcn)) {}

  std::vector<int64_t> ici_mesh_shape_;
  std::vector<int64_t> dcn_mesh_shape_;
};

// The physical mesh of slice `slice` of `topology`: an array of the slice shape whose element at
// a device's coordinates is that device's id. Precondition: a valid slice index.
DeviceArray PhysicalMesh(const mesh::Topology& topology, int64_t slice);

// Maps the logical axes of `mesh_shape` (ordered by increasing network intensity) onto the axes
// of `physical_mesh` (an n-d torus or grid of device ids) and returns the devices as an array of
// `mesh_shape`. Source: JAX mesh_utils._create_device_mesh_for_nd_torus.
//
// Without splitting, logical axes are taken from the last (most intensive) to the first; each
// takes the first combination (in itertools.combinations order) of not yet assigned physical
// axes whose sizes multiply to its size, trying combinations of as many axes as possible first
// (JAX tries at most 3, the rank of a TPU torus; here up to the physical rank, which is the same
// for rank <= 3). The physical mesh is then transposed so each logical axis's physical axes are
// adjacent, and reshaped.
// With `allow_split_physical_axes`, a logical axis that finds no such combination makes the whole
// mapping use JAX's _create_device_mesh_for_nd_torus_splitting_axes: each logical axis (last to
// first) takes a factor of several physical axes, chosen by JAX's preference order (whole
// physical axes first, then more of them, then ..., then the lexicographically largest split).
// Errors: kInvalidArgument when the element counts differ, or when no mapping exists (always
// without splitting when a logical size is not a product of whole physical axes).
[[nodiscard]] absl::StatusOr<DeviceArray> CreateDeviceMeshForNdTorus(
    const DeviceArray& physical_mesh, absl::Span<const int64_t> mesh_shape,
    bool allow_split_physical_axes);

// What HybridMesh uses for each slice (JAX create_device_mesh for a torus, generic devices):
// CreateDeviceMeshForNdTorus without splitting; if that fails, with splitting; if that fails too,
// the physical mesh's ids in ascending order reshaped to `mesh_shape` (the order JAX uses for
// devices without coordinates).
// Errors: kInvalidArgument when product(mesh_shape) differs from the number of devices:
//   "number of devices 4 must equal the product of mesh_shape [1,8,1]".
[[nodiscard]] absl::StatusOr<DeviceArray> CreateDeviceMesh(absl::Span<const int64_t> mesh_shape,
                                                           const DeviceArray& physical_mesh);

// The process-wide default mesh (torch_xla set_global_mesh / get_global_mesh). Thread-safe.
void set_global_mesh(Mesh mesh);
// The mesh last given to set_global_mesh, or nullopt if none was set.
std::optional<Mesh> get_global_mesh();
// Forgets the global mesh (for tests).
void clear_global_mesh();

}  // namespace tessel::spmd

#endif  // TESSEL_SPMD_MESH_H_
