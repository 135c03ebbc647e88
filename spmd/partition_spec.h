// PartitionSpec: how each dim of a tensor maps onto the axes of a Mesh, and its translation to
// a Sharding exactly as torch_xla's mark_sharding computes it.
//
//   Mesh mesh = *Mesh::Create({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4}, {"x", "y"});
//   PartitionSpec spec{0, kNone};                      // dim 0 over axis 0, dim 1 replicated
//   ShardingFromPartitionSpec(mesh, 2, spec)->ToString() ==
//       "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}";
//   PartitionSpec{"y", "x"};                           // by name
//   PartitionSpec{kNone, Axes{"x", "y"}};              // dim 1 over x and y (x major)
//   *PartitionSpec::Parse("(x,y),None") == PartitionSpec{Axes{"x", "y"}, kNone};
//
// Each entry is one of: an axis index (int), an axis name (string), none (replicated), or a
// tuple of axes (indices or names), major to minor. Source: torch_xla
// torch_xla/distributed/spmd/xla_sharding.py (Mesh.get_op_sharding, _get_tile_assignment,
// _get_group_assignment) and xla_sharding_util.cpp (CreateOpSharding).
#ifndef TESSEL_SPMD_PARTITION_SPEC_H_
#define TESSEL_SPMD_PARTITION_SPEC_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/shape.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/sharding.h"

namespace tessel::spmd {

// A reference to one mesh axis: its index or its name.
class AxisRef {
 public:
  AxisRef(int index) : value_(int64_t{index}) {}  // NOLINT: implicit, as in a Python tuple
  AxisRef(int64_t index) : value_(index) {}       // NOLINT
  AxisRef(const char* name) : value_(std::string(name)) {}  // NOLINT
  AxisRef(std::string name) : value_(std::move(name)) {}    // NOLINT

  bool is_index() const { return std::holds_alternative<int64_t>(value_); }
  int64_t index() const { return std::get<int64_t>(value_); }
  const std::string& name() const { return std::get<std::string>(value_); }
  // "2" or "data".
  std::string ToString() const;
  bool operator==(const AxisRef& other) const { return value_ == other.value_; }

 private:
  std::variant<int64_t, std::string> value_;
};

// A tuple entry: the dim is split over several mesh axes, the first one major.
struct Axes {
  Axes(std::initializer_list<AxisRef> axes) : axes(axes) {}
  explicit Axes(std::vector<AxisRef> axes) : axes(std::move(axes)) {}
  std::vector<AxisRef> axes;
  bool operator==(const Axes& other) const { return axes == other.axes; }
};

// Marks a replicated dim (Python's None).
inline constexpr std::nullopt_t kNone = std::nullopt;

class PartitionSpec {
 public:
  // One entry of the spec.
  class Entry {
   public:
    Entry(std::nullopt_t) {}                                                     // NOLINT: None
    Entry(int index) : axes_{AxisRef(index)}, tuple_(false) {}                   // NOLINT
    Entry(int64_t index) : axes_{AxisRef(index)}, tuple_(false) {}               // NOLINT
    Entry(const char* name) : axes_{AxisRef(name)}, tuple_(false) {}             // NOLINT
    Entry(std::string name) : axes_{AxisRef(std::move(name))}, tuple_(false) {}  // NOLINT
    Entry(AxisRef axis) : axes_{std::move(axis)}, tuple_(false) {}               // NOLINT
    Entry(Axes axes) : axes_(std::move(axes.axes)), tuple_(true) {}              // NOLINT

    bool is_none() const { return !tuple_ && axes_.empty(); }
    bool is_tuple() const { return tuple_; }
    // The referenced axes: none for None, one for a single axis, the tuple's otherwise.
    const std::vector<AxisRef>& axes() const { return axes_; }
    // "None", "x", "0", "(x,y)".
    std::string ToString() const;
    bool operator==(const Entry& other) const {
      return axes_ == other.axes_ && tuple_ == other.tuple_;
    }

   private:
    std::vector<AxisRef> axes_;
    bool tuple_ = false;
  };

  PartitionSpec() = default;
  PartitionSpec(std::initializer_list<Entry> entries) : entries_(entries) {}
  explicit PartitionSpec(std::vector<Entry> entries) : entries_(std::move(entries)) {}

  // Parses the command-line form: entries separated by commas; each `None` (or `none`, `_`, or
  // empty), an integer axis index, an axis name (letters, digits, '_', '-', '.'; or quoted with
  // ' or "), or a parenthesized tuple of indices and names "(x,y)". Whitespace is ignored; one
  // trailing comma is allowed ("(x,y)," is a one-entry spec, like Python's 1-tuple). Python's
  // outer parentheses are not: "(0,None)" is an error, "(x,y)" a single tuple entry. An empty
  // text is the empty spec (0-d tensors).
  // Errors: kInvalidArgument quoting the text, e.g. `bad partition_spec "x,(y": missing ')'`.
  [[nodiscard]] static absl::StatusOr<PartitionSpec> Parse(std::string_view text);

  const std::vector<Entry>& entries() const { return entries_; }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  const Entry& operator[](int64_t i) const { return entries_[i]; }

  // The command-line form, which Parse reads back: "x,None,(r,m)".
  std::string ToString() const;
  bool operator==(const PartitionSpec& other) const { return entries_ == other.entries_; }

 private:
  std::vector<Entry> entries_;
};

// The Sharding that mark_sharding gives a rank-`rank` tensor on `mesh` (torch_xla
// Mesh.get_op_sharding + ShardingUtil::CreateOpSharding):
//   1. Names are resolved to axis indices. The tile assignment is the logical mesh transposed
//      so the axes named by the spec come first (in spec order, tuples flattened) and the unused
//      axes last (ascending); the axes of each tuple are merged into one tile dim.
//   2. rank 0, a 1-device mesh, or an all-None spec: {replicated}.
//   3. Every entry set and every mesh axis used: tiled, `{devices=[...]...}`.
//   4. Otherwise partial replication: dim d gets 1 tile if None, else its tile count; the
//      devices that differ only along the unused axes form one replication group, stored
//      sorted in the trailing `last_tile_dim_replicate` dim. A group of 1 collapses to plain
//      tiling, a group of every device to {replicated}.
// Examples: mesh (2,4) spec (0, None) -> {devices=[2,1,4]0,1,2,3,4,5,6,7
// last_tile_dim_replicate}; mesh (1,2,4) axes (r,b,m), spec (None, (r,m)) ->
// {devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}.
// Errors (kInvalidArgument): spec size != rank ("partition_spec has 1 entries for a rank-2
// tensor"), an unknown axis name (with the mesh's axes), an axis index outside the mesh, an axis
// used twice, an empty tuple, a negative rank.
[[nodiscard]] absl::StatusOr<Sharding> ShardingFromPartitionSpec(const Mesh& mesh, int64_t rank,
                                                                 const PartitionSpec& spec);

// A deferred sharding for input data (torch_xla ShardingSpec): a mesh and a partition spec,
// applied to tensors later (e.g. by a data loader) when their rank matches.
class ShardingSpec {
 public:
  // `minibatch`: the tensors are per-host pieces of a batch sharded along dim 0 (torch_xla's
  // minibatch flag); the loader then treats dim 0 as local_dim0 * (mesh devices / local
  // devices). Stored for the loader; it does not change the Sharding.
  ShardingSpec(Mesh mesh, PartitionSpec partition_spec, bool minibatch = false)
      : mesh_(std::move(mesh)), partition_spec_(std::move(partition_spec)), minibatch_(minibatch) {}

  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& partition_spec() const { return partition_spec_; }
  bool minibatch() const { return minibatch_; }

  // Whether the spec applies to a tensor of `shape`: its rank equals the spec size.
  bool CanApply(const Shape& shape) const { return shape.rank() == partition_spec_.size(); }
  // The sharding for a tensor of rank partition_spec().size().
  // Errors: those of ShardingFromPartitionSpec.
  [[nodiscard]] absl::StatusOr<Sharding> sharding() const {
    return ShardingFromPartitionSpec(mesh_, partition_spec_.size(), partition_spec_);
  }

 private:
  Mesh mesh_;
  PartitionSpec partition_spec_;
  bool minibatch_;
};

}  // namespace tessel::spmd

#endif  // TESSEL_SPMD_PARTITION_SPEC_H_
