#include "tessel/spmd/mesh.h"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/status_macros.h"

namespace tessel::spmd {
namespace {

std::string Dims(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// Meshes larger than this are rejected before any product can overflow. It is a guard on
// arithmetic, not on memory (topologies stop at mesh::kMaxDevices = 2^18 long before).
constexpr int64_t kMaxMeshSize = int64_t{1} << 40;

// An error when `dims` (all >= 1) multiply to more than kMaxMeshSize.
absl::Status CheckSize(absl::Span<const int64_t> dims, const char* what) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d > kMaxMeshSize / product) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", Dims(dims), " has more than 2^40 devices"));
    }
    product *= d;
  }
  return absl::OkStatus();
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// Mesh.

absl::StatusOr<Mesh> Mesh::Create(std::vector<int64_t> device_ids, std::vector<int64_t> mesh_shape,
                                  std::vector<std::string> axis_names) {
  if (mesh_shape.empty()) {
    return absl::InvalidArgumentError("mesh_shape must have at least one axis");
  }
  for (int64_t size : mesh_shape) {
    if (size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh_shape ", Dims(mesh_shape), " has an axis of size ", size, " (< 1)"));
    }
  }
  // Bounded first: Product does not check for overflow, and a wrapped size could match the
  // number of ids by accident.
  TESSEL_RETURN_IF_ERROR(CheckSize(mesh_shape, "mesh_shape"));
  const int64_t size = Product(mesh_shape);
  if (static_cast<int64_t>(device_ids.size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat("mesh_shape ", Dims(mesh_shape), " holds ", size,
                                                   " devices but ", device_ids.size(),
                                                   " device ids were given"));
  }
  // torch_xla's Mesh asserts unique ids below the mesh size; with as many ids as the size they
  // are a permutation of 0..size-1. That is what lets a sharding built from this mesh cover
  // every device (the partitioner rejects one that does not).
  absl::flat_hash_set<int64_t> seen;
  for (int64_t id : device_ids) {
    if (id < 0 || id >= size) {
      return absl::OutOfRangeError(absl::StrCat("device id ", id, " is outside the mesh of ", size,
                                                " devices (ids must be 0..", size - 1, ")"));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("device id ", id, " appears twice in the mesh"));
    }
  }
  if (!axis_names.empty()) {
    if (axis_names.size() != mesh_shape.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(axis_names.size(), " axis names [", absl::StrJoin(axis_names, ", "),
                       "] for ", mesh_shape.size(), " mesh axes ", Dims(mesh_shape)));
    }
    // Names must be unique and non-empty: a partition_spec refers to axes by name, and ""
    // could not be written in the text form of one.
    absl::flat_hash_set<std::string> names;
    for (const std::string& name : axis_names) {
      if (name.empty()) return absl::InvalidArgumentError("an axis name is empty");
      // A NUL or other control byte cannot be printed in a sharding, an sdy mesh or an error
      // (a NUL ends C strings), so such a name would not read back as itself.
      if (std::any_of(name.begin(), name.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
        return absl::InvalidArgumentError(
            absl::StrCat("axis name \"", absl::CHexEscape(name),
                         "\" holds a control character (a byte below 0x20 or 0x7f)"));
      }
      if (!names.insert(name).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "axis name \"", name, "\" appears twice in [", absl::StrJoin(axis_names, ", "), "]"));
      }
    }
  }
  // DeviceArray detects a transposed iota here (O(n) once), so the shardings derived from a
  // mesh built on a torus are compact and every later operation on them is O(rank).
  return Mesh(DeviceArray(std::move(mesh_shape), std::move(device_ids)), std::move(axis_names));
}

std::vector<std::pair<std::string, int64_t>> Mesh::shape() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (int64_t i = 0; i < rank(); ++i) {
    // Unnamed axes are named by their index, the same token a partition_spec uses for them.
    out.emplace_back(axis_names_.empty() ? absl::StrCat(i) : axis_names_[i], axis_size(i));
  }
  return out;
}

// A linear scan: meshes have a handful of axes.
absl::StatusOr<int64_t> Mesh::AxisIndex(std::string_view name) const {
  for (size_t i = 0; i < axis_names_.size(); ++i) {
    if (axis_names_[i] == name) return static_cast<int64_t>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown mesh axis \"", std::string(name),
                                                 "\"; mesh has axes ", AxesToString()));
}

std::optional<std::vector<int64_t>> Mesh::CoordinateOf(int64_t device_id) const {
  return logical_mesh_.IndexOf(device_id);
}

// Names are quoted and indices are not, so an error message tells the axis called "0" from
// axis index 0.
std::string Mesh::AxesToString() const {
  std::vector<std::string> parts;
  for (const auto& [name, size] : shape()) {
    parts.push_back(axis_names_.empty() ? absl::StrCat(name, "=", size)
                                        : absl::StrCat("\"", name, "\"=", size));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::string Mesh::ToString() const {
  return absl::StrCat("Mesh(", AxesToString(), ", ", logical_mesh_.ToString(), ")");
}

// ----------------------------------------------------------------------------------------------
// create_device_mesh for an n-d torus.

namespace {

// Enumerates index combinations of `n` items taken `k` at a time in itertools.combinations
// order, calling `fn(combination)` until it returns true. Returns whether it did.
// The order matters: JAX takes the first combination that fits, so a different enumeration
// order would pick other physical axes and build another device order.
template <typename Fn>
bool ForEachCombination(int64_t n, int64_t k, Fn&& fn) {
  if (k > n) return false;
  std::vector<int64_t> c(k);
  std::iota(c.begin(), c.end(), int64_t{0});
  while (true) {
    if (fn(c)) return true;
    int64_t i = k - 1;
    while (i >= 0 && c[i] == n - k + i) --i;
    if (i < 0) return false;
    ++c[i];
    for (int64_t j = i + 1; j < k; ++j) c[j] = c[j - 1] + 1;
  }
}

// JAX _create_device_mesh_for_nd_torus without splitting: the physical axes of each logical
// axis, or nullopt when some logical axis of size > 1 finds none.
std::optional<std::vector<std::vector<int64_t>>> AssignWholeAxes(
    absl::Span<const int64_t> physical_shape, absl::Span<const int64_t> mesh_shape) {
  const int64_t num_physical = static_cast<int64_t>(physical_shape.size());
  // assignable[p] is the size of physical axis p while it is free and 0 once taken, as in JAX:
  // a product that includes a taken axis is 0 and never matches a logical size (all >= 1).
  std::vector<int64_t> assignable(physical_shape.begin(), physical_shape.end());
  std::vector<std::vector<int64_t>> assignment(mesh_shape.size());
  // The last logical axis (the most network-intensive, by the axis-order convention) gets the
  // first choice of physical axes, as in JAX.
  for (int64_t l = static_cast<int64_t>(mesh_shape.size()) - 1; l >= 0; --l) {
    bool found = false;
    for (int64_t num_axes = num_physical; num_axes >= 1 && !found; --num_axes) {
      found = ForEachCombination(num_physical, num_axes, [&](const std::vector<int64_t>& c) {
        int64_t product = 1;
        for (int64_t p : c) product *= assignable[p];
        if (product != mesh_shape[l]) return false;
        assignment[l] = c;
        for (int64_t p : c) assignable[p] = 0;
        return true;
      });
    }
    // A logical axis of size 1 needs no physical axis (JAX raises only for sizes > 1).
    if (!found && mesh_shape[l] > 1) return std::nullopt;
  }
  return assignment;
}

// All z with z[i] dividing available[i] and product(z) == size, each passed to `fn`.
// Exhaustive: one divisor per physical axis, so the count is the product of the axes' divisor
// counts (125 for a 16x16x16 torus), small for any real slice.
void EnumerateSplits(absl::Span<const int64_t> available, int64_t size, size_t axis,
                     std::vector<int64_t>& z,
                     const std::function<void(const std::vector<int64_t>&)>& fn) {
  if (axis == available.size()) {
    if (size == 1) fn(z);
    return;
  }
  for (int64_t d = 1; d <= available[axis]; ++d) {
    if (available[axis] % d != 0 || size % d != 0) continue;
    z[axis] = d;
    EnumerateSplits(available, size / d, axis + 1, z, fn);
  }
  z[axis] = 1;
}

// JAX _prefer_first_logical_axis_assignment(x, y), literally (including its third rule, which
// prefers the candidate with the larger product on already used physical axes).
bool PreferFirst(const std::vector<int64_t>& x, const std::vector<int64_t>& y,
                 absl::Span<const int64_t> physical_shape, absl::Span<const int64_t> assigned) {
  auto whole_size = [&](const std::vector<int64_t>& a) {
    int64_t p = 1;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == physical_shape[i]) p *= a[i];
    }
    return p;
  };
  auto whole_count = [&](const std::vector<int64_t>& a) {
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == physical_shape[i] && a[i] > 1) ++n;
    }
    return n;
  };
  auto overlap_size = [&](const std::vector<int64_t>& a) {
    int64_t p = 1;
    for (size_t i = 0; i < a.size(); ++i) {
      if (assigned[i] > 1) p *= a[i];
    }
    return p;
  };
  // Followed literally (including the final lexicographic tie-break) so that Tessel builds the
  // logical mesh JAX builds for the same torus: the device order decides which links each
  // collective crosses, so the simulator must cost the layout a JAX program would really get.
  if (whole_size(x) != whole_size(y)) return whole_size(x) > whole_size(y);
  if (whole_count(x) != whole_count(y)) return whole_count(x) > whole_count(y);
  if (overlap_size(x) != overlap_size(y)) return overlap_size(x) > overlap_size(y);
  return x > y;
}

// JAX _create_device_mesh_for_nd_torus_splitting_axes: assignment[p][l] is the factor of
// physical axis p given to logical axis l; nullopt when some logical axis finds no split.
std::optional<std::vector<std::vector<int64_t>>> AssignSplitAxes(
    absl::Span<const int64_t> physical_shape, absl::Span<const int64_t> mesh_shape) {
  const size_t num_physical = physical_shape.size();
  std::vector<std::vector<int64_t>> assignment(num_physical,
                                               std::vector<int64_t>(mesh_shape.size(), 1));
  // Last logical axis first again; each takes a divisor of what is left of every physical
  // axis, so later (less intensive) axes get the remainders.
  for (int64_t l = static_cast<int64_t>(mesh_shape.size()) - 1; l >= 0; --l) {
    std::vector<int64_t> assigned(num_physical, 1), available(num_physical);
    for (size_t p = 0; p < num_physical; ++p) {
      for (int64_t f : assignment[p]) assigned[p] *= f;
      available[p] = physical_shape[p] / assigned[p];
    }
    std::optional<std::vector<int64_t>> best;
    std::vector<int64_t> z(num_physical, 1);
    EnumerateSplits(available, mesh_shape[l], 0, z, [&](const std::vector<int64_t>& candidate) {
      if (!best || PreferFirst(candidate, *best, physical_shape, assigned)) best = candidate;
    });
    if (!best) return std::nullopt;
    for (size_t p = 0; p < num_physical; ++p) assignment[p][l] = (*best)[p];
  }
  return assignment;
}

// JAX _generate_logical_mesh: split each physical axis p into factors assignment[p][0..L-1]
// (logical axis 0 most major), group the factors by logical axis (physical axes ascending) and
// reshape to `mesh_shape`.
DeviceArray GenerateLogicalMesh(const DeviceArray& physical_mesh,
                                absl::Span<const int64_t> mesh_shape,
                                const std::vector<std::vector<int64_t>>& assignment) {
  const int64_t num_physical = physical_mesh.rank();
  const int64_t num_logical = static_cast<int64_t>(mesh_shape.size());
  std::vector<int64_t> split_dims;
  for (const auto& row : assignment) split_dims.insert(split_dims.end(), row.begin(), row.end());
  std::vector<int64_t> perm;
  for (int64_t l = 0; l < num_logical; ++l) {
    for (int64_t p = 0; p < num_physical; ++p) perm.push_back(p * num_logical + l);
  }
  return physical_mesh.Reshape(split_dims)
      .Transpose(perm)
      .Reshape(std::vector<int64_t>(mesh_shape.begin(), mesh_shape.end()));
}

}  // namespace

absl::StatusOr<DeviceArray> CreateDeviceMeshForNdTorus(const DeviceArray& physical_mesh,
                                                       absl::Span<const int64_t> mesh_shape,
                                                       bool allow_split_physical_axes) {
  if (Product(mesh_shape) != physical_mesh.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of devices ", physical_mesh.num_elements(),
                     " must equal the product of mesh_shape ", Dims(mesh_shape)));
  }
  std::vector<int64_t> logical(mesh_shape.begin(), mesh_shape.end());
  // Whole axes first, as JAX: a logical axis made of whole torus dims keeps their wraparound
  // rings, while a factor of a dim is a line segment or a strided subset of its ring.
  if (auto whole = AssignWholeAxes(physical_mesh.dims(), mesh_shape)) {
    std::vector<int64_t> perm;
    std::vector<bool> used(physical_mesh.rank(), false);
    for (const auto& axes : *whole) {
      for (int64_t p : axes) {
        perm.push_back(p);
        used[p] = true;
      }
    }
    // Physical axes left over all have size 1 (the products match); they go last. Each logical
    // axis's physical axes are adjacent after the transpose, so the reshape to mesh_shape
    // merges exactly them.
    for (int64_t p = 0; p < physical_mesh.rank(); ++p) {
      if (!used[p]) perm.push_back(p);
    }
    return physical_mesh.Transpose(perm).Reshape(std::move(logical));
  }
  if (!allow_split_physical_axes) {
    return absl::InvalidArgumentError(
        absl::StrCat("no assignment of mesh_shape ", Dims(mesh_shape),
                     " to whole axes of the physical mesh ", Dims(physical_mesh.dims()),
                     ": each logical axis size must be the product of some physical axis sizes"));
  }
  if (auto split = AssignSplitAxes(physical_mesh.dims(), mesh_shape)) {
    return GenerateLogicalMesh(physical_mesh, mesh_shape, *split);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no assignment of mesh_shape ", Dims(mesh_shape), " to the physical mesh ",
                   Dims(physical_mesh.dims()), ", even splitting axes"));
}

absl::StatusOr<DeviceArray> CreateDeviceMesh(absl::Span<const int64_t> mesh_shape,
                                             const DeviceArray& physical_mesh) {
  if (Product(mesh_shape) != physical_mesh.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of devices ", physical_mesh.num_elements(),
                     " must equal the product of mesh_shape ", Dims(mesh_shape)));
  }
  // Any mesh_shape whose product matches gets some mesh: the torus mapping when one exists,
  // else ascending ids (JAX's order for devices without coordinates), never an error.
  absl::StatusOr<DeviceArray> mesh = CreateDeviceMeshForNdTorus(physical_mesh, mesh_shape, true);
  if (mesh.ok()) return mesh;
  std::vector<int64_t> ids = physical_mesh.device_ids();
  std::sort(ids.begin(), ids.end());
  return DeviceArray(std::vector<int64_t>(mesh_shape.begin(), mesh_shape.end()), std::move(ids));
}

DeviceArray PhysicalMesh(const mesh::Topology& topology, int64_t slice) {
  const mesh::Slice& s = topology.slice(slice);
  // Row-major over the coordinates (coords[0] most major), like numpy indexing of JAX's
  // physical mesh; topology ids number x fastest, so this is usually not the identity. The -1
  // fill is never left: a validated topology has one device at every coordinate of a slice.
  DeviceArray layout = DeviceArray::Iota(s.shape);
  std::vector<int64_t> ids(layout.num_elements(), -1);
  std::vector<int64_t> strides = layout.strides();
  for (int64_t id : s.device_ids) {
    const mesh::Device& device = topology.device(id);
    int64_t linear = 0;
    for (size_t d = 0; d < device.coords.size(); ++d) linear += device.coords[d] * strides[d];
    ids[linear] = id;
  }
  return DeviceArray(s.shape, std::move(ids));
}

// ----------------------------------------------------------------------------------------------
// HybridMesh.

absl::StatusOr<HybridMesh> HybridMesh::Create(std::vector<int64_t> ici_mesh_shape,
                                              std::vector<int64_t> dcn_mesh_shape,
                                              std::vector<std::string> axis_names,
                                              const mesh::Topology& topology) {
  if (ici_mesh_shape.empty()) {
    return absl::InvalidArgumentError("ici_mesh_shape must have at least one axis");
  }
  for (int64_t size : ici_mesh_shape) {
    if (size < 1) {
      return absl::InvalidArgumentError(absl::StrCat("ici_mesh_shape ", Dims(ici_mesh_shape),
                                                     " has an axis of size ", size, " (< 1)"));
    }
  }
  // torch_xla's HybridMesh defaults dcn_mesh_shape to all ones (a single slice).
  if (dcn_mesh_shape.empty()) dcn_mesh_shape.assign(ici_mesh_shape.size(), 1);
  if (dcn_mesh_shape.size() != ici_mesh_shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dcn_mesh_shape ", Dims(dcn_mesh_shape), " has ", dcn_mesh_shape.size(),
        " axes but ici_mesh_shape ", Dims(ici_mesh_shape), " has ", ici_mesh_shape.size()));
  }
  for (int64_t size : dcn_mesh_shape) {
    if (size < 1) {
      return absl::InvalidArgumentError(absl::StrCat("dcn_mesh_shape ", Dims(dcn_mesh_shape),
                                                     " has an axis of size ", size, " (< 1)"));
    }
  }
  // Both bounded before any product below is taken (Product does not check for overflow).
  TESSEL_RETURN_IF_ERROR(CheckSize(ici_mesh_shape, "ici_mesh_shape"));
  TESSEL_RETURN_IF_ERROR(CheckSize(dcn_mesh_shape, "dcn_mesh_shape"));
  if (topology.num_devices() == 0) {
    return absl::InvalidArgumentError("the topology has no devices");
  }
  const int64_t num_slices = topology.num_slices();
  const int64_t dcn_size = Product(dcn_mesh_shape);
  // The three slice-count checks below mirror torch_xla's HybridMesh checks and messages, so a
  // user porting a script sees the error they know.
  if (num_slices > 1 && dcn_size == 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("provide dcn_mesh_shape to create a mesh for multislice (the topology has ",
                     num_slices, " slices)"));
  }
  if (num_slices == 1 && dcn_size > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dcn_mesh_shape ", Dims(dcn_mesh_shape), " for a single slice mesh"));
  }
  if (dcn_size != num_slices) {
    return absl::InvalidArgumentError(absl::StrCat("number of slices ", num_slices,
                                                   " must equal the product of dcn_mesh_shape ",
                                                   Dims(dcn_mesh_shape), " = ", dcn_size));
  }

  // One logical sub-mesh per slice, each mapped onto its own torus: collectives over the ICI
  // axes then stay inside a slice, and only the DCN axes cross slices.
  std::vector<DeviceArray> per_slice;
  for (int64_t s = 0; s < num_slices; ++s) {
    // Checked per slice: a topology may hold slices of different sizes, and every slice must
    // fit the one ici_mesh_shape.
    DeviceArray physical = PhysicalMesh(topology, s);
    if (physical.num_elements() != Product(ici_mesh_shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "number of devices ", physical.num_elements(), num_slices > 1 ? " in slice " : "",
          num_slices > 1 ? absl::StrCat(s) : "", " must equal the product of ici_mesh_shape ",
          Dims(ici_mesh_shape), " = ", Product(ici_mesh_shape)));
    }
    TESSEL_ASSIGN_OR_RETURN(DeviceArray sub, CreateDeviceMesh(ici_mesh_shape, physical));
    per_slice.push_back(std::move(sub));
  }

  // numpy.block: element at mesh coordinate c comes from slice unravel(c / ici, dcn) at c % ici.
  // Slices are whole blocks: each aligned run of ici_mesh_shape[i] coordinates along axis i is one
  // slice, and only crossing a block boundary (the dcn_mesh_shape part) changes slice (torch_xla
  // HybridMesh, JAX create_hybrid_device_mesh).
  const int64_t rank = static_cast<int64_t>(ici_mesh_shape.size());
  std::vector<int64_t> mesh_shape(rank);
  for (int64_t i = 0; i < rank; ++i) mesh_shape[i] = ici_mesh_shape[i] * dcn_mesh_shape[i];
  std::vector<int64_t> ids;
  ids.reserve(topology.num_devices());
  std::vector<int64_t> block(rank), inner(rank);
  ForEachIndex(mesh_shape, [&](absl::Span<const int64_t> c) {
    int64_t slice = 0;
    for (int64_t i = 0; i < rank; ++i) {
      block[i] = c[i] / ici_mesh_shape[i];
      inner[i] = c[i] % ici_mesh_shape[i];
      slice = slice * dcn_mesh_shape[i] + block[i];
    }
    ids.push_back(per_slice[slice].at(inner));
  });
  // Through Mesh::Create, so axis names and ids get the same checks as a hand-built mesh.
  TESSEL_ASSIGN_OR_RETURN(Mesh mesh,
                          Mesh::Create(std::move(ids), mesh_shape, std::move(axis_names)));
  return HybridMesh(std::move(mesh), std::move(ici_mesh_shape), std::move(dcn_mesh_shape));
}

// ----------------------------------------------------------------------------------------------
// Global mesh.

namespace {
// Heap objects never destroyed (Google style for globals): no destructor runs at exit, so a
// thread still calling get_global_mesh() during shutdown cannot see a destroyed mutex.
std::mutex& GlobalMeshMutex() {
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}
std::optional<Mesh>& GlobalMesh() {
  static std::optional<Mesh>* mesh = new std::optional<Mesh>;
  return *mesh;
}
}  // namespace

void set_global_mesh(Mesh mesh) {
  std::lock_guard<std::mutex> lock(GlobalMeshMutex());
  GlobalMesh() = std::move(mesh);
}

std::optional<Mesh> get_global_mesh() {
  std::lock_guard<std::mutex> lock(GlobalMeshMutex());
  return GlobalMesh();
}

void clear_global_mesh() {
  std::lock_guard<std::mutex> lock(GlobalMeshMutex());
  GlobalMesh().reset();
}

}  // namespace tessel::spmd
