#include "tessel/partitioner/sharding_util.h"

#include <algorithm>
#include <map>

#include "tessel/core/status_macros.h"

namespace tessel::partitioner {

namespace {

// The tile assignment of a plain tiling with an explicit trailing replication dim (size 1 when
// there is none).
DeviceArray WithReplicationDim(const Sharding& s) {
  const DeviceArray& ta = s.tile_assignment();
  std::vector<int64_t> dims = ta.dims();
  if (s.NumSubgroupDims() == 0) dims.push_back(1);
  return ta.Reshape(dims);
}

}  // namespace

bool IsPlainTiling(const Sharding& s) {
  // IsReplicated() is also true for a tuple of {replicated}, which is not a leaf sharding.
  if (s.IsReplicated() && !s.IsTuple()) return true;
  if (!s.IsTiled()) return false;
  if (s.ReplicateOnLastTileDim()) return true;
  for (spmd::SubgroupType t : s.subgroup_types()) {
    if (t != spmd::SubgroupType::kReplicated) return false;
  }
  return true;
}

Sharding Project(const Sharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return s;
  TESSEL_CHECK(IsPlainTiling(s));
  const int64_t rank = s.TiledDataRank();
  DeviceArray ta = WithReplicationDim(s);
  // Transpose to [kept dims in `dims` order, dropped dims, replication dim] and fold everything
  // after the kept dims into one replication dim: the devices that differed only in a dropped
  // dim's tile index now sit in one replication group. PartialTile sorts each group, so the
  // result is canonical whatever order the dropped dims had.
  std::vector<int64_t> perm = dims;
  int64_t moved = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
      perm.push_back(d);
      moved *= ta.dim(d);
    }
  }
  perm.push_back(rank);
  DeviceArray transposed = ta.Transpose(perm);
  std::vector<int64_t> new_dims;
  for (int64_t d : dims) new_dims.push_back(ta.dim(d));
  new_dims.push_back(moved * ta.dim(rank));
  return Sharding::PartialTile(transposed.Reshape(new_dims));
}

Sharding Embed(const Sharding& s, int64_t rank, const std::vector<int64_t>& positions) {
  if (!s.IsTiled()) return s;
  TESSEL_CHECK(IsPlainTiling(s));
  DeviceArray ta = WithReplicationDim(s);
  const int64_t r = static_cast<int64_t>(positions.size());
  // Order s's dims by their target position, then insert the dims of size 1.
  std::vector<int64_t> order(r);
  for (int64_t i = 0; i < r; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return positions[a] < positions[b]; });
  std::vector<int64_t> perm = order;
  perm.push_back(r);
  DeviceArray transposed = ta.Transpose(perm);
  std::vector<int64_t> new_dims(rank, 1);
  for (int64_t i = 0; i < r; ++i) new_dims[positions[i]] = ta.dim(i);
  new_dims.push_back(ta.dim(r));
  return Sharding::PartialTile(transposed.Reshape(new_dims));
}

Sharding PartiallyReplicate(const Sharding& s, int64_t rank, const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(d);
  }
  // Project then Embed at the same positions: the kept dims keep their tiles and positions,
  // the replicated dims get one tile each.
  return Embed(Project(s, kept), rank, kept);
}

Sharding TransposeSharding(const Sharding& s, const std::vector<int64_t>& perm) {
  if (!s.IsTiled()) return s;
  std::vector<int64_t> full = perm;
  for (int64_t d = s.TiledDataRank(); d < s.tile_assignment().rank(); ++d) full.push_back(d);
  DeviceArray ta = s.tile_assignment().Transpose(full);
  // Rebuild with the same kind of subgroups; the subgroup dims stay last and untouched.
  if (s.NumSubgroupDims() == 0) return Sharding::Tile(ta);
  if (s.ReplicateOnLastTileDim()) return Sharding::PartialTile(ta);
  return Sharding::Subgroup(ta, s.subgroup_types());
}

namespace {

// The outcome of MergeCompact: `decided` false when the shortcut does not apply (the caller
// then merges device by device); otherwise `merged` is what the device-by-device merge gives.
struct CompactMerge {
  bool decided = false;
  std::optional<Sharding> merged;
};
// Functions rather than constants: Sharding is not a literal type (clang rejects a constexpr
// CompactMerge) and a global of it would need a static destructor.
CompactMerge Undecided() { return {}; }
CompactMerge Conflict() { return {true, std::nullopt}; }

// Whether two id digits p and f (p.stride <= f.stride) whose ranges overlap can take every pair
// of values: both are functions of q = (id / p.stride) mod span, which has `span` values, so
// when span < p.size * f.size some pair of tile indices never occurs and the merge fails.
// Returns false only when that is proven; true when the divisibility the proof needs is missing.
bool OverlapMayHoldEveryPair(const spmd::IdFactor& p, const spmd::IdFactor& f) {
  const int64_t p_end = p.stride * p.size, f_end = f.stride * f.size;
  const int64_t end = std::max(p_end, f_end);
  if (f.stride % p.stride != 0 || end % std::min(p_end, f_end) != 0) return true;
  return end / p.stride >= p.size * f.size;
}

// MergeShardings on compact tile assignments in O(rank): each merged data dim takes the id
// digits of whichever sharding tiles it, and the replicated dim the digits no data dim uses.
CompactMerge MergeCompact(const Sharding& a, const Sharding& b, int64_t rank, int64_t num_devices) {
  const DeviceArray& ta = a.tile_assignment();
  const DeviceArray& tb = b.tile_assignment();
  if (!ta.is_compact() || !tb.is_compact() || ta.num_elements() != num_devices ||
      tb.num_elements() != num_devices || a.TiledDataRank() != rank || b.TiledDataRank() != rank) {
    return Undecided();
  }
  std::vector<std::vector<spmd::IdFactor>> dim_factors(rank);
  std::vector<spmd::IdFactor> used;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    const bool in_a = a.num_tiles(d) > 1, in_b = b.num_tiles(d) > 1;
    dims.push_back(std::max(a.num_tiles(d), b.num_tiles(d)));
    if (!in_a && !in_b) continue;
    std::optional<std::vector<spmd::IdFactor>> fa, fb;
    if (in_a && !(fa = ta.DimFactors(d))) return Undecided();
    if (in_b && !(fb = tb.DimFactors(d))) return Undecided();
    // Different digits for one dim: some device has another tile index in each (see
    // DeviceArray::DimFactors), which the device-by-device merge rejects.
    if (in_a && in_b && *fa != *fb) return Conflict();
    dim_factors[d] = in_a ? *fa : *fb;
    used.insert(used.end(), dim_factors[d].begin(), dim_factors[d].end());
  }
  // The used digits must be disjoint ranges of the id's mixed radix; the gaps between them
  // (and below the first, above the last) are the replicated digits.
  std::sort(used.begin(), used.end(),
            [](const spmd::IdFactor& x, const spmd::IdFactor& y) { return x.stride < y.stride; });
  std::vector<spmd::IdFactor> replicated;  // ascending stride
  int64_t covered = 1;                     // ids below `covered` are spanned so far
  for (size_t i = 0; i < used.size(); ++i) {
    const spmd::IdFactor& f = used[i];
    if (f.stride < covered) {  // overlaps the previous digit
      return OverlapMayHoldEveryPair(used[i - 1], f) ? Undecided() : Conflict();
    }
    if (f.stride % covered != 0) return Undecided();
    if (f.stride > covered) replicated.push_back({f.stride / covered, covered});
    covered = f.stride * f.size;
  }
  if (covered > num_devices || num_devices % covered != 0) return Undecided();
  if (num_devices > covered) replicated.push_back({num_devices / covered, covered});
  std::vector<spmd::IdFactor> factors;
  for (const auto& f : dim_factors) factors.insert(factors.end(), f.begin(), f.end());
  factors.insert(factors.end(), replicated.rbegin(), replicated.rend());  // ascending ids
  int64_t replicas = 1;
  for (const spmd::IdFactor& f : replicated) replicas *= f.size;
  dims.push_back(replicas);
  absl::StatusOr<DeviceArray> merged = DeviceArray::FromIdFactors(dims, factors);
  if (!merged.ok()) return Undecided();
  return CompactMerge{true, Sharding::PartialTile(*merged)};
}

}  // namespace

std::optional<Sharding> MergeShardings(const Sharding& a, const Sharding& b, int64_t rank,
                                       int64_t num_devices) {
  // Unreduced and manual subgroups are not layouts that combine dim by dim.
  if (!IsPlainTiling(a) || !IsPlainTiling(b)) return std::nullopt;
  if (!a.IsTiled()) return b;
  if (!b.IsTiled()) return a;
  if (a == b) return a;
  // A dim tiled by both must be tiled the same number of ways; whether the devices agree is
  // checked below (compactly or device by device).
  std::vector<int64_t> tiles(rank, 1);
  for (int64_t d = 0; d < rank; ++d) {
    int64_t ta = a.num_tiles(d), tb = b.num_tiles(d);
    if (ta > 1 && tb > 1 && ta != tb) return std::nullopt;
    tiles[d] = std::max(ta, tb);
  }
  if (CompactMerge compact = MergeCompact(a, b, rank, num_devices); compact.decided) {
    return compact.merged;
  }
  // Device by device (O(devices), for explicit tile assignments): each device's merged tile
  // index takes each dim from whichever sharding tiles it. Devices are visited in ascending
  // order, so each tile's replica list comes out sorted, as PartialTile wants.
  std::map<std::vector<int64_t>, std::vector<int64_t>> by_index;
  for (int64_t device = 0; device < num_devices; ++device) {
    auto ia = a.TileIndexOf(device), ib = b.TileIndexOf(device);
    if (!ia || !ib) return std::nullopt;
    std::vector<int64_t> index(rank);
    for (int64_t d = 0; d < rank; ++d) {
      bool in_a = a.num_tiles(d) > 1, in_b = b.num_tiles(d) > 1;
      if (in_a && in_b && (*ia)[d] != (*ib)[d]) return std::nullopt;
      index[d] = in_a ? (*ia)[d] : (in_b ? (*ib)[d] : 0);
    }
    by_index[index].push_back(device);
  }
  // Every merged tile must be held, and by equally many devices, for the result to be a dense
  // tile assignment; both fail when a's and b's tile indices are correlated across devices.
  int64_t num_tiles = 1;
  for (int64_t t : tiles) num_tiles *= t;
  if (static_cast<int64_t>(by_index.size()) != num_tiles) return std::nullopt;
  size_t replicas = by_index.begin()->second.size();
  std::vector<int64_t> ids;
  for (const auto& [index, devices] : by_index) {  // std::map iterates in row-major order
    if (devices.size() != replicas) return std::nullopt;
    ids.insert(ids.end(), devices.begin(), devices.end());
  }
  std::vector<int64_t> dims = tiles;
  dims.push_back(static_cast<int64_t>(replicas));
  return Sharding::PartialTile(DeviceArray(dims, ids));
}

std::vector<std::vector<int64_t>> GroupsAlongDims(const Sharding& s,
                                                  const std::vector<int64_t>& dims) {
  // Moving `dims` to the end makes each group a contiguous run of the row-major ids. Position k
  // of a group is the device with tile index k along `dims`, the order all-gather concatenates
  // and reduce-scatter splits in; so, unlike ReplicationGroups, the groups are not sorted.
  const DeviceArray& ta = s.tile_assignment();
  std::vector<int64_t> perm;
  int64_t inner = 1;
  for (int64_t d = 0; d < ta.rank(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  }
  for (int64_t d : dims) {
    perm.push_back(d);
    inner *= ta.dim(d);
  }
  DeviceArray transposed = ta.Transpose(perm);
  const std::vector<int64_t>& ids = transposed.device_ids();
  std::vector<std::vector<int64_t>> groups;
  for (size_t start = 0; start < ids.size(); start += inner) {
    groups.emplace_back(ids.begin() + start, ids.begin() + start + inner);
  }
  return groups;
}

// ceil, not floor: every device holds a buffer of the same shape (SPMD), the trailing tiles of
// an uneven dim padded (torch_xla's and XLA's rule; spmd/sharded_tensor.h).
Shape LocalShape(const Shape& global, const Sharding& s) {
  if (!s.IsTiled()) return global;
  std::vector<int64_t> dims = global.dims();
  for (int64_t d = 0; d < global.rank(); ++d) {
    int64_t t = s.num_tiles(d);
    dims[d] = (dims[d] + t - 1) / t;
  }
  return Shape(global.dtype(), std::move(dims));
}

bool CoversAllDevices(const Sharding& s, int64_t num_devices) {
  if (s.IsReplicated() || s.IsMaximal() || s.IsUnreduced()) return true;
  if (!s.IsTiled()) return false;
  // A compact array holds each of 0..n-1 exactly once by construction.
  if (s.tile_assignment().is_compact()) return s.tile_assignment().num_elements() == num_devices;
  std::vector<int64_t> ids = s.device_list();
  std::sort(ids.begin(), ids.end());
  if (static_cast<int64_t>(ids.size()) != num_devices) return false;
  for (int64_t i = 0; i < num_devices; ++i) {
    if (ids[i] != i) return false;
  }
  return true;
}

}  // namespace tessel::partitioner
