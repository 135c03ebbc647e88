// Sharding: how one value is laid out over devices. Equal in meaning to XLA's `HloSharding`, and
// printed and parsed in XLA's text form.
//
//   absl::StatusOr<Sharding> s =
//       ParseSharding("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
//   s->IsTiled() && s->ReplicateOnLastTileDim();
//   s->TiledDataRank() == 2;  s->num_tiles(0) == 2;  s->num_tiles(1) == 1;
//   s->DevicesForTile({1, 0}) == {4, 5, 6, 7};          // the devices holding rows [4:8)
//   s->ToString() == "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}";
//   *ParseSharding("{devices=[4,2]<=[2,4]T(1,0)}") ==
//       *ParseSharding("{devices=[4,2]0,4,1,5,2,6,3,7}");   // iota form, same meaning
//
// The kinds, as in XLA:
//   {replicated}          every device holds the whole value.
//   {maximal device=3}    only device 3 holds it.
//   {manual}              the value is already per-device (the program manages the split).
//   {unreduced}           every device holds a partial value; the value is their sum.
//   {devices=[a,b,...]ids ...}   tiled: dim i of the value is split into a, b, ... tiles;
//                         the tile assignment array (row-major ids) says which device holds
//                         which tile. Trailing extra dims are subgroups, named by
//                         `last_tile_dim_replicate` (one replicated dim) or
//                         `last_tile_dims={manual, unreduced, replicated}` (one per type).
//   {{...}, {...}}        a tuple: one sharding per leaf of a tuple-shaped value.
//
// `unreduced` is a pending partial sum produced by the partitioner (e.g. a dot whose contracting
// dim is sharded before its all-reduce). XLA spells it `{unreduced}` and
// `last_tile_dims={unreduced}`; Tessel uses the same spelling. See docs/sharding.md.
//
// Canonical form and equality. Factories and the parser normalize as XLA's
// `HloSharding::PartialTile` / `Subgroup` do, so `operator==` compares meaning:
//   - a replicated subgroup that holds every device is `{replicated}`; one of size 1 is dropped
//     (`{devices=[2,1]0,1 last_tile_dim_replicate}` == `{devices=[2]0,1}`);
//   - device ids inside each trailing replicated group are sorted;
//   - subgroup dims of size 1 are dropped, dims of one type merged, types ordered manual,
//     unreduced, replicated; a single subgroup type with no data tiling is `{manual}`,
//     `{unreduced}` or `{replicated}`;
//   - the iota form is expanded, so it equals the explicit list.
// `ToString()` always prints the explicit device list, as torch_xla's shardings print.
// Source: XLA hlo_sharding.h / hlo_sharding.cc, hlo_parser.cc (ParseSharding).
#ifndef TESSEL_SPMD_SHARDING_H_
#define TESSEL_SPMD_SHARDING_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/shape.h"
#include "tessel/spmd/device_array.h"

namespace tessel::spmd {

// The meaning of a trailing subgroup dim of a tiled sharding. Enumerators are in XLA's canonical
// order (a normalized sharding lists its subgroup dims in this order).
enum class SubgroupType : uint8_t { kManual, kUnreduced, kReplicated };

// "manual", "unreduced", "replicated".
std::string_view SubgroupTypeName(SubgroupType type);

class Sharding {
 public:
  enum class Kind : uint8_t { kReplicated, kMaximal, kManual, kUnreduced, kTiled, kTuple };

  // {replicated}.
  Sharding() = default;

  static Sharding Replicate() { return Sharding(); }
  static Sharding Manual();
  static Sharding Unreduced();
  // {maximal device=<device_id>}. Precondition: device_id >= 0.
  static Sharding AssignDevice(int64_t device_id);

  // Tiled with no subgroups: dim i of the value is split into tile_assignment.dim(i) tiles.
  // Precondition (TESSEL_CHECK): see ValidateTileAssignment. Kept as given (XLA's `Tile`).
  static Sharding Tile(DeviceArray tile_assignment);
  // Tiled, the last tile dim holds replicas (XLA's `PartialTile`), normalized: rank 1 or a
  // last dim holding every device gives {replicated}; a last dim of 1 is dropped; ids within
  // each replicated group are sorted. Precondition as for Tile.
  static Sharding PartialTile(const DeviceArray& tile_assignment_last_dim_replicate);
  // Tiled with `subgroup_types.size()` trailing subgroup dims (XLA's `Subgroup`), normalized as
  // described at the top of this file. Precondition as for Tile, and subgroup_types.size() <=
  // tile_assignment.rank().
  static Sharding Subgroup(DeviceArray tile_assignment, std::vector<SubgroupType> subgroup_types);
  // A tuple sharding, one element per leaf. Elements must not be tuples (TESSEL_CHECK).
  static Sharding Tuple(std::vector<Sharding> elements);

  // The checks behind the tiled factories, for callers holding user input: rank >= 1, every dim
  // >= 1, product(dims) == number of ids, ids >= 0 and unique.
  // Errors: kInvalidArgument naming the problem ("3 device ids for 4 tiles").
  [[nodiscard]] static absl::Status ValidateTileAssignment(const DeviceArray& tile_assignment);

  Kind kind() const { return kind_; }
  // Replicated: a {replicated} leaf, or a tuple whose elements all are.
  bool IsReplicated() const;
  // XLA's IsTileMaximal: {replicated} or {maximal ...} (one "tile" holding the whole value).
  bool IsTileMaximal() const { return kind_ == Kind::kReplicated || kind_ == Kind::kMaximal; }
  bool IsMaximal() const { return kind_ == Kind::kMaximal; }
  bool IsManual() const { return kind_ == Kind::kManual; }
  bool IsUnreduced() const { return kind_ == Kind::kUnreduced; }
  bool IsTiled() const { return kind_ == Kind::kTiled; }
  bool IsTuple() const { return kind_ == Kind::kTuple; }

  // Tiled only (false otherwise).
  bool ReplicateOnLastTileDim() const { return replicate_on_last_tile_dim_; }
  // Tiled with a replicated subgroup dim (either spelling).
  bool HasPartialReplication() const { return SubgroupDim(SubgroupType::kReplicated) >= 0; }
  // The subgroup types of `last_tile_dims={...}`; empty for last_tile_dim_replicate.
  const std::vector<SubgroupType>& subgroup_types() const { return subgroup_types_; }
  // The index in tile_assignment_dims() of the subgroup dim of `type`, or -1.
  int64_t SubgroupDim(SubgroupType type) const;
  // Number of trailing subgroup dims (0 for non-tiled).
  int64_t NumSubgroupDims() const;

  // Tiled: the whole tile assignment (data dims then subgroup dims). Maximal: [1] holding the
  // device. Otherwise empty.
  const DeviceArray& tile_assignment() const { return tile_assignment_; }
  const std::vector<int64_t>& tile_assignment_dims() const { return tile_assignment_.dims(); }
  // Row-major device ids of the tile assignment.
  const std::vector<int64_t>& device_list() const { return tile_assignment_.device_ids(); }
  // The rank of the value this sharding tiles (tile dims minus subgroup dims); 0 if not tiled.
  int64_t TiledDataRank() const;
  // Number of tiles along value dim `dim`: tile_assignment_dims()[dim] when tiled, else 1.
  int64_t num_tiles(int64_t dim) const;
  // Product of num_tiles over the data dims (1 if not tiled).
  int64_t NumTiles() const;
  // Maximal: its device.
  std::optional<int64_t> unique_device() const;
  // Tuple: the element shardings.
  const std::vector<Sharding>& tuple_elements() const { return tuple_elements_; }

  // Whether `device_id` holds data: always for replicated, manual and unreduced; for maximal and
  // tiled when it appears in the tile assignment; for a tuple, in any element.
  bool UsesDevice(int64_t device_id) const;
  // Tiled: the data-tile index (TiledDataRank() entries) that `device_id` holds; nullopt when
  // not tiled or the device is not in the tile assignment. Source: XLA TileIndexForDevice.
  std::optional<std::vector<int64_t>> TileIndexOf(int64_t device_id) const;
  // Tiled: the full tile-assignment index of `device_id` (data dims then subgroup dims).
  std::optional<std::vector<int64_t>> TileAssignmentIndexOf(int64_t device_id) const;
  // Tiled: the devices holding data tile `tile_index` (one per subgroup position, row-major
  // over the subgroup dims). Precondition: IsTiled() and tile_index is a valid data index.
  std::vector<int64_t> DevicesForTile(absl::Span<const int64_t> tile_index) const;

  // Groups of devices holding identical data, over devices 0..num_devices-1:
  //   {replicated}: one group of all; maximal d: {{d}}; manual, unreduced: one group per device;
  //   tiled: one group per position of the non-replicated dims (row-major), the devices along
  //   the replicated subgroup dim (sorted); without one, one group per device in tile order.
  // Precondition: not a tuple.
  std::vector<std::vector<int64_t>> ReplicationGroups(int64_t num_devices) const;
  // Groups of devices whose partial values sum to the value: {unreduced}: one group of all;
  // tiled with an unreduced subgroup: the devices along that dim, one group per position of the
  // other dims; otherwise one group per device. Precondition: not a tuple.
  std::vector<std::vector<int64_t>> UnreducedGroups(int64_t num_devices) const;

  // Checks that this sharding fits a value of `shape` on devices 0..num_devices-1: tiled data
  // rank equals the shape's rank, device ids < num_devices, tuple arity equals the shape's.
  // Errors: kInvalidArgument (rank, arity), kOutOfRange (a device id >= num_devices).
  [[nodiscard]] absl::Status Validate(const Shape& shape, int64_t num_devices) const;

  // How ToString spells the device list of a tiled sharding.
  enum class DeviceListFormat : uint8_t {
    // Every id, as torch_xla prints shardings: "{devices=[4,2]0,4,1,5,2,6,3,7}".
    kExplicit,
    // XLA's iota spelling when the tile assignment is compact (DeviceArray::is_compact), the
    // explicit list otherwise: "{devices=[4,2]<=[2,4]T(1,0)}", "{devices=[2,4]<=[8]}". O(rank)
    // text for any device count; ParseSharding reads it back to the same sharding.
    kIota,
  };

  // XLA's text: "{replicated}", "{maximal device=3}", "{manual}", "{unreduced}",
  // "{devices=[2,2]0,1,2,3}", "{devices=[2,1,4]0,...,7 last_tile_dim_replicate}",
  // "{devices=[2,2,2]... last_tile_dims={manual, replicated}}", "{{replicated}, {manual}}"
  // (tuple elements at index 5, 10, ... are preceded by "/*index=5*/", as XLA prints).
  std::string ToString(DeviceListFormat format = DeviceListFormat::kExplicit) const;

  // Equality of the normalized form (see the top of this file).
  bool operator==(const Sharding& other) const;
  bool operator!=(const Sharding& other) const { return !(*this == other); }

  template <typename H>
  friend H AbslHashValue(H h, const Sharding& s) {
    h = H::combine(std::move(h), s.kind_, s.tile_assignment_, s.replicate_on_last_tile_dim_,
                   s.subgroup_types_);
    for (const Sharding& e : s.tuple_elements_) h = H::combine(std::move(h), e);
    return h;
  }

 private:
  // Groups along `dim` of the tile assignment, one per position of the other dims.
  std::vector<std::vector<int64_t>> GroupsAlong(int64_t dim) const;
  // The text for an error message: the iota form where there is one, at most 200 characters.
  std::string ForMessage() const;

  Kind kind_ = Kind::kReplicated;
  DeviceArray tile_assignment_{{0}, {}};
  bool replicate_on_last_tile_dim_ = false;
  std::vector<SubgroupType> subgroup_types_;
  std::vector<Sharding> tuple_elements_;
};

std::ostream& operator<<(std::ostream& os, const Sharding& sharding);

// Parses XLA sharding text: every form ToString() prints, plus the iota tile assignment
// `devices=[4,2]<=[2,4]T(1,0)` (also without `T(...)`), `last_tile_dims={replicated}`,
// unsorted replicated groups and `/*...*/` comments; whitespace is free. The result is
// normalized (see above).
// Errors: kInvalidArgument quoting the text and the problem, e.g.
//   bad sharding "{devices=[2,2]0,1,2}": 3 device ids for 4 tiles
// (also for more than 2^24 tiles, a guard on memory).
[[nodiscard]] absl::StatusOr<Sharding> ParseSharding(std::string_view text);

}  // namespace tessel::spmd

#endif  // TESSEL_SPMD_SHARDING_H_
