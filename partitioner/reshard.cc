#include "tessel/partitioner/reshard.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner {

namespace {

using spmd::Sharding;
using spmd::SubgroupType;

// The same sharding with its unreduced subgroup turned into replication.
Sharding Reduced(const Sharding& s) {
  if (s.IsUnreduced()) return Sharding::Replicate();
  std::vector<SubgroupType> types = s.subgroup_types();
  for (SubgroupType& t : types) {
    if (t == SubgroupType::kUnreduced) t = SubgroupType::kReplicated;
  }
  return Sharding::Subgroup(s.tile_assignment(), types);
}

bool HasUnreduced(const Sharding& s) {
  return s.IsUnreduced() || (s.IsTiled() && s.SubgroupDim(SubgroupType::kUnreduced) >= 0);
}

// Whether dim d is tiled identically (same tile count, same tile index on every device).
// Comparing per dim, not whole shardings, is what lets the planner keep the dims that already
// agree and move only the others.
bool SameDimMapping(const Sharding& a, const Sharding& b, int64_t d, int64_t num_devices) {
  if (a.num_tiles(d) != b.num_tiles(d)) return false;
  if (a.num_tiles(d) == 1) return true;
  // Compact tile assignments: the dim's id digits decide the mapping (O(rank)).
  const spmd::DeviceArray& ta = a.tile_assignment();
  const spmd::DeviceArray& tb = b.tile_assignment();
  if (ta.is_compact() && tb.is_compact() && ta.num_elements() == num_devices &&
      tb.num_elements() == num_devices) {
    std::optional<std::vector<spmd::IdFactor>> fa = ta.DimFactors(d);
    std::optional<std::vector<spmd::IdFactor>> fb = tb.DimFactors(d);
    if (fa.has_value() && fb.has_value()) return *fa == *fb;
  }
  for (int64_t device = 0; device < num_devices; ++device) {
    auto ia = a.TileIndexOf(device), ib = b.TileIndexOf(device);
    if (!ia || !ib || (*ia)[d] != (*ib)[d]) return false;
  }
  return true;
}

// Padded bytes: what a device's buffer holds and a collective moves, padding included.
int64_t LocalBytes(const Shape& global, const Sharding& s) {
  return LocalShape(global, s).byte_size();
}

// The single dim that `target` tiles and `base` does not, when every other dim maps alike;
// -1 otherwise.
int64_t OnlyNewTiledDim(const Sharding& base, const Sharding& target, int64_t rank,
                        int64_t num_devices) {
  int64_t found = -1;
  for (int64_t d = 0; d < rank; ++d) {
    if (SameDimMapping(base, target, d, num_devices)) continue;
    if (found >= 0 || base.num_tiles(d) != 1) return -1;
    found = d;
  }
  return found;
}

// Unreduced -> tiled in one reduce-scatter: the target tiles one dim d more than the reduced
// source, and every unreduced group holds each tile along d exactly once.
std::optional<ReshardStep> TryReduceScatter(const Sharding& current, const Sharding& target,
                                            int64_t rank, int64_t num_devices) {
  Sharding reduced = Reduced(current);
  const int64_t d = OnlyNewTiledDim(reduced, target, rank, num_devices);
  if (d < 0) return std::nullopt;
  // reduce-scatter hands chunk k of `d` to position k of each group (XLA's semantics), so each
  // group is listed in the target's tile order along `d`, not in device order: a mesh laid on a
  // torus numbers its tiles in physical order (HybridMesh), and sorted groups would miss the
  // reduce-scatter there and all-reduce the whole buffer instead (twice the bytes).
  std::vector<std::vector<int64_t>> groups = current.UnreducedGroups(num_devices);
  const int64_t tiles = target.num_tiles(d);
  for (std::vector<int64_t>& group : groups) {
    if (static_cast<int64_t>(group.size()) != tiles) return std::nullopt;
    std::vector<int64_t> in_tile_order(tiles, -1);
    for (int64_t id : group) {
      auto index = target.TileIndexOf(id);
      if (!index || (*index)[d] < 0 || (*index)[d] >= tiles) return std::nullopt;
      if (in_tile_order[(*index)[d]] >= 0) return std::nullopt;
      in_tile_order[(*index)[d]] = id;
    }
    group = std::move(in_tile_order);
  }
  ReshardStep step;
  step.kind = ReshardStep::Kind::kReduceScatter;
  step.dim = d;
  step.groups = std::move(groups);
  step.after = target;
  return step;
}

// Unreduced -> partially replicated tiling in two steps: inside each unreduced group, a
// reduce-scatter over devices that will hold different tiles along the new dim d (each keeps
// the partial sum of its tile), then an all-reduce of that shard over the devices of the group
// that hold the same tile. Devices replicated in the target but outside the unreduced group
// (another tensor-parallel rank, say) already hold equal values and are not involved. A weight
// gradient reduced over data x fsdp (FSDP inside slices, data parallel across them) thus
// crosses DCN only as the shard, after the ICI reduce-scatter: the hierarchical reduction of
// ZeRO / MaxText multislice, and XLA's all-reduce, slice, all-reduce. Returns both steps, or
// nothing when every tile does not occur equally often in every unreduced group.
std::optional<std::vector<ReshardStep>> TryReduceScatterThenAllReduce(const Sharding& current,
                                                                      const Sharding& target,
                                                                      int64_t rank,
                                                                      int64_t num_devices) {
  if (!target.IsTiled() || !target.HasPartialReplication()) return std::nullopt;
  const int64_t d = OnlyNewTiledDim(Reduced(current), target, rank, num_devices);
  if (d < 0) return std::nullopt;
  const int64_t t = target.num_tiles(d);
  std::vector<std::vector<int64_t>> scatter_groups, reduce_groups;
  for (const std::vector<int64_t>& group : current.UnreducedGroups(num_devices)) {
    const int64_t n = static_cast<int64_t>(group.size());
    if (n % t != 0 || n == t) return std::nullopt;  // n == t: TryReduceScatter's case
    // by_tile[k]: the group's devices holding tile k along d, ascending (groups are sorted).
    std::vector<std::vector<int64_t>> by_tile(t);
    for (int64_t id : group) {
      std::optional<std::vector<int64_t>> index = target.TileIndexOf(id);
      if (!index.has_value() || (*index)[d] >= t) return std::nullopt;
      by_tile[(*index)[d]].push_back(id);
    }
    const int64_t a = n / t;
    for (const auto& holders : by_tile) {
      if (static_cast<int64_t>(holders.size()) != a) return std::nullopt;
      reduce_groups.push_back(holders);
    }
    // Scatter group j: the j-th holder of every tile, in tile order, so rank k keeps chunk k.
    for (int64_t j = 0; j < a; ++j) {
      std::vector<int64_t> members;
      for (const auto& holders : by_tile) members.push_back(holders[j]);
      scatter_groups.push_back(std::move(members));
    }
  }
  std::sort(reduce_groups.begin(), reduce_groups.end());
  ReshardStep scatter;
  scatter.kind = ReshardStep::Kind::kReduceScatter;
  scatter.dim = d;
  scatter.groups = std::move(scatter_groups);
  // Between the steps each device holds its tile of the target's local shape, still a partial
  // sum over its all-reduce group; only the next step of this plan reads it.
  scatter.after = target;
  ReshardStep reduce;
  reduce.kind = ReshardStep::Kind::kAllReduce;
  reduce.groups = std::move(reduce_groups);
  reduce.after = target;
  return std::vector<ReshardStep>{std::move(scatter), std::move(reduce)};
}

// Tiled on dim a -> tiled on dim b over the same device groups, both dims divisible: one
// all-to-all (each device sends chunk i of dim b to the i-th device of its group).
std::optional<ReshardStep> TryAllToAll(const Sharding& current, const Sharding& target,
                                       const Shape& global, int64_t num_devices) {
  if (!current.IsTiled() || !target.IsTiled() || !IsPlainTiling(current) ||
      !IsPlainTiling(target)) {
    return std::nullopt;
  }
  const int64_t rank = global.rank();
  int64_t a = -1, b = -1;
  for (int64_t d = 0; d < rank; ++d) {
    if (SameDimMapping(current, target, d, num_devices)) continue;
    if (current.num_tiles(d) > 1 && target.num_tiles(d) == 1 && a < 0) {
      a = d;
    } else if (current.num_tiles(d) == 1 && target.num_tiles(d) > 1 && b < 0) {
      b = d;
    } else {
      return std::nullopt;
    }
  }
  if (a < 0 || b < 0) return std::nullopt;
  // Uneven dims are fine: EmitStep pads the local (whole) dim b to t equal chunks first and
  // slices the padding of dim a off after (under the ceil rule it lies after the first
  // dim(a) elements of the received tiles), as XLA's all-to-all resharding does.
  const int64_t t = current.num_tiles(a);
  if (target.num_tiles(b) != t) return std::nullopt;
  std::vector<std::vector<int64_t>> groups = GroupsAlongDims(current, {a});
  // Device at position k of its group must hold tile k along b in the target (and tile k along
  // a in the source, which GroupsAlongDims guarantees).
  for (const auto& group : groups) {
    for (size_t k = 0; k < group.size(); ++k) {
      auto index = target.TileIndexOf(group[k]);
      if (!index || (*index)[b] != static_cast<int64_t>(k)) return std::nullopt;
    }
  }
  ReshardStep step;
  step.kind = ReshardStep::Kind::kAllToAll;
  step.dim = a;
  step.to_dim = b;
  step.groups = std::move(groups);
  step.after = target;
  return step;
}

// The one data dim whose mapping differs between `current` and `target` when the target's
// tiles of it are a whole-number coarsening (`coarsen`) or refinement (!coarsen) of the current
// ones with every device keeping its place: target tile = current tile / k (coarsen) or
// current tile = target tile / k (refine), k > 1, the dim divisible by the finer tile count.
// Returns (dim, k), or nullopt. Devices without a tile index (not covered) give nullopt.
std::optional<std::pair<int64_t, int64_t>> NestedTilingDim(const Sharding& current,
                                                           const Sharding& target,
                                                           const Shape& global, int64_t num_devices,
                                                           bool coarsen) {
  int64_t a = -1;
  for (int64_t d = 0; d < global.rank(); ++d) {
    if (SameDimMapping(current, target, d, num_devices)) continue;
    if (a >= 0) return std::nullopt;
    a = d;
  }
  if (a < 0) return std::nullopt;
  const int64_t fine = coarsen ? current.num_tiles(a) : target.num_tiles(a);
  const int64_t coarse = coarsen ? target.num_tiles(a) : current.num_tiles(a);
  if (coarse >= fine || fine % coarse != 0 || global.dim(a) % fine != 0) return std::nullopt;
  const int64_t k = fine / coarse;
  for (int64_t device = 0; device < num_devices; ++device) {
    auto ic = current.TileIndexOf(device), it = target.TileIndexOf(device);
    if (!ic || !it) return std::nullopt;
    const int64_t fine_index = coarsen ? (*ic)[a] : (*it)[a];
    const int64_t coarse_index = coarsen ? (*it)[a] : (*ic)[a];
    if (fine_index / k != coarse_index) return std::nullopt;
  }
  return std::make_pair(a, k);
}

// The replica groups of a partial collective in key order (deterministic on every host), or
// nullopt when a group has a hole (-1): some position of the group has no device, so the
// collective cannot be expressed with these groups.
template <typename Key>
std::optional<std::vector<std::vector<int64_t>>> CompleteGroups(
    std::map<Key, std::vector<int64_t>>& groups) {
  std::vector<std::vector<int64_t>> list;
  for (auto& [key, group] : groups) {
    if (std::find(group.begin(), group.end(), -1) != group.end()) return std::nullopt;
    list.push_back(std::move(group));
  }
  return list;
}

// Tiled k times finer on dim a -> coarser on a, every other dim alike (GSPMD's partial
// all-gather: an MoE's tokens sharded over data x expert regathered over expert only). One
// all-gather inside the groups of devices that share a target tile, ordered by their current
// tile along a, instead of gathering the whole dim and slicing it again. The source must hold
// each tile once (no replication), so each group is exactly the k holders of one target tile.
std::optional<ReshardStep> TryPartialAllGather(const Sharding& current, const Sharding& target,
                                               const Shape& global, int64_t num_devices) {
  if (!current.IsTiled() || !target.IsTiled() || !IsPlainTiling(current) ||
      !IsPlainTiling(target) || current.NumSubgroupDims() != 0 ||
      !CoversAllDevices(current, num_devices) || !CoversAllDevices(target, num_devices)) {
    return std::nullopt;
  }
  auto nested = NestedTilingDim(current, target, global, num_devices, /*coarsen=*/true);
  if (!nested) return std::nullopt;
  const auto [a, k] = *nested;
  // Group key: the device's target tile index and replica position; members by current tile.
  std::map<std::pair<std::vector<int64_t>, int64_t>, std::vector<int64_t>> groups;
  std::map<std::vector<int64_t>, int64_t> seen;  // holders of each target tile so far
  for (int64_t device = 0; device < num_devices; ++device) {
    std::vector<int64_t> tile = *target.TileIndexOf(device);
    const int64_t position = (*current.TileIndexOf(device))[a] % k;
    // The j-th holder of (tile, position) joins replica group j of that tile.
    const int64_t replica = seen[tile]++ / k;
    std::vector<int64_t>& group = groups[{tile, replica}];
    if (group.empty()) group.assign(k, -1);
    group[position] = device;
  }
  ReshardStep step;
  step.kind = ReshardStep::Kind::kAllGather;
  step.dim = a;
  std::optional<std::vector<std::vector<int64_t>>> list = CompleteGroups(groups);
  if (!list.has_value()) return std::nullopt;
  step.groups = *std::move(list);
  step.after = target;
  return step;
}

// Tiled on dim a -> k times coarser on a and k times finer on dim b, other dims alike: one
// all-to-all inside groups of k devices (XLA's all-to-all resharding between two tilings that
// share a mesh axis: an MoE's dispatched tokens moving from groups x experts sharding to experts
// sharded over the expert axis, groups over data). Position q of a group holds current tile
// c_a = t_a * k + q along a (t_a its target tile) and gets target tile c_b * k + q along b.
// Both dims divisible by their finer tile counts, no replication on either side.
std::optional<ReshardStep> TryPartialAllToAll(const Sharding& current, const Sharding& target,
                                              const Shape& global, int64_t num_devices) {
  if (!current.IsTiled() || !target.IsTiled() || current.NumSubgroupDims() != 0 ||
      target.NumSubgroupDims() != 0 || !CoversAllDevices(current, num_devices) ||
      !CoversAllDevices(target, num_devices)) {
    return std::nullopt;
  }
  int64_t a = -1, b = -1;
  for (int64_t d = 0; d < global.rank(); ++d) {
    if (SameDimMapping(current, target, d, num_devices)) continue;
    if (target.num_tiles(d) < current.num_tiles(d) && a < 0) {
      a = d;
    } else if (target.num_tiles(d) > current.num_tiles(d) && b < 0) {
      b = d;
    } else {
      return std::nullopt;
    }
  }
  if (a < 0 || b < 0 || current.num_tiles(a) % target.num_tiles(a) != 0) return std::nullopt;
  const int64_t k = current.num_tiles(a) / target.num_tiles(a);
  if (target.num_tiles(b) != current.num_tiles(b) * k || global.dim(a) % current.num_tiles(a) ||
      global.dim(b) % target.num_tiles(b)) {
    return std::nullopt;
  }
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;
  for (int64_t device = 0; device < num_devices; ++device) {
    std::vector<int64_t> from = *current.TileIndexOf(device);
    std::vector<int64_t> to = *target.TileIndexOf(device);
    const int64_t q = from[a] % k;
    if (to[a] != from[a] / k || to[b] != from[b] * k + q) return std::nullopt;
    std::vector<int64_t> key = to;
    key[b] = from[b];
    std::vector<int64_t>& group = groups[key];
    if (group.empty()) group.assign(k, -1);
    group[q] = device;
  }
  ReshardStep step;
  step.kind = ReshardStep::Kind::kAllToAll;
  step.dim = a;
  step.to_dim = b;
  std::optional<std::vector<std::vector<int64_t>>> list = CompleteGroups(groups);
  if (!list.has_value()) return std::nullopt;
  step.groups = *std::move(list);
  step.after = target;
  return step;
}

}  // namespace

absl::StatusOr<ReshardPlan> PlanReshard(const Sharding& from, const Sharding& to,
                                        const Shape& global_shape, int64_t num_devices) {
  ReshardPlan plan;
  if (from.IsTuple() || to.IsTuple() || from.IsManual() || to.IsManual()) {
    return absl::UnimplementedError(
        absl::StrCat("resharding ", from.ToString(), " to ", to.ToString(), " is not supported"));
  }
  // Maximal is honoured as replicated everywhere in the partitioner (docs/partitioner.md): every
  // device computes the value, so moving to or from it is moving to or from {replicated}.
  Sharding current = from.IsMaximal() ? Sharding::Replicate() : from;
  Sharding target = to.IsMaximal() ? Sharding::Replicate() : to;
  if (current == target) return plan;
  if (HasUnreduced(target)) {
    return absl::UnimplementedError(absl::StrCat("cannot reshard ", current.ToString(),
                                                 " to the unreduced ", target.ToString()));
  }
  const int64_t rank = global_shape.rank();
  // Partial sums first: every later step (permute, all-to-all, gather, slice) moves data that
  // must already be complete. reduce-scatter when it lands exactly on the target: half the
  // bytes of all-reduce + slice, and each device keeps only its chunk.
  if (HasUnreduced(current) && target.IsTiled()) {
    std::optional<ReshardStep> step = TryReduceScatter(current, target, rank, num_devices);
    if (step.has_value()) {
      int64_t n = static_cast<int64_t>(step->groups[0].size());
      plan.bytes_per_device += (n - 1) * LocalBytes(global_shape, current) / n;
      plan.steps.push_back(*std::move(step));
      return plan;
    }
  }
  if (HasUnreduced(current)) {
    if (auto steps = TryReduceScatterThenAllReduce(current, target, rank, num_devices)) {
      const int64_t t = static_cast<int64_t>((*steps)[0].groups[0].size());
      const int64_t r = static_cast<int64_t>((*steps)[1].groups[0].size());
      plan.bytes_per_device += (t - 1) * LocalBytes(global_shape, current) / t +
                               2 * (r - 1) * LocalBytes(global_shape, target) / r;
      plan.steps = *std::move(steps);
      return plan;
    }
  }
  if (HasUnreduced(current)) {
    ReshardStep step;
    step.kind = ReshardStep::Kind::kAllReduce;
    step.groups = current.UnreducedGroups(num_devices);
    step.after = Reduced(current);
    int64_t n = static_cast<int64_t>(step.groups[0].size());
    plan.bytes_per_device +=
        2 * (n - 1) * LocalBytes(global_shape, current) / std::max<int64_t>(n, 1);
    current = step.after;
    plan.steps.push_back(std::move(step));
    if (current == target) return plan;
  }
  // The same tiling on a permutation of the devices: one collective-permute. Only without
  // subgroups, where each tile has exactly one holder and so every device one possible source.
  // Devices whose tile does not move get a self pair (a local copy); bytes_per_device counts
  // the whole buffer anyway, an upper bound.
  if (current.IsTiled() && target.IsTiled() &&
      current.tile_assignment_dims() == target.tile_assignment_dims() &&
      current.NumSubgroupDims() == 0 && target.NumSubgroupDims() == 0) {
    ReshardStep step;
    step.kind = ReshardStep::Kind::kCollectivePermute;
    for (int64_t device = 0; device < num_devices; ++device) {
      std::vector<int64_t> tile = *target.TileIndexOf(device);
      int64_t source = current.DevicesForTile(tile)[0];
      step.pairs.emplace_back(source, device);
    }
    step.after = target;
    plan.bytes_per_device += LocalBytes(global_shape, current);
    plan.steps.push_back(std::move(step));
    return plan;
  }
  if (std::optional<ReshardStep> step = TryAllToAll(current, target, global_shape, num_devices)) {
    plan.bytes_per_device += LocalBytes(global_shape, current) *
                             (current.num_tiles(step->dim) - 1) / current.num_tiles(step->dim);
    plan.steps.push_back(*std::move(step));
    return plan;
  }
  if (std::optional<ReshardStep> step =
          TryPartialAllToAll(current, target, global_shape, num_devices)) {
    const int64_t k = static_cast<int64_t>(step->groups[0].size());
    plan.bytes_per_device += LocalBytes(global_shape, current) * (k - 1) / k;
    plan.steps.push_back(*std::move(step));
    return plan;
  }
  if (std::optional<ReshardStep> step =
          TryPartialAllGather(current, target, global_shape, num_devices)) {
    const int64_t k = static_cast<int64_t>(step->groups[0].size());
    plan.bytes_per_device += LocalBytes(global_shape, target) * (k - 1) / k;
    plan.steps.push_back(*std::move(step));
    return plan;
  }
  // A finer tiling of one dim that nests in the current one: each device already holds its
  // target tile inside its current one and cuts it out locally (no bytes).
  if (current.IsTiled() && target.IsTiled() &&
      NestedTilingDim(current, target, global_shape, num_devices, /*coarsen=*/false)) {
    ReshardStep step;
    step.kind = ReshardStep::Kind::kLocalSlice;
    step.target = target;
    step.after = target;
    plan.steps.push_back(std::move(step));
    return plan;
  }
  // Gather every dim whose mapping differs from the target's; dims that already agree stay
  // sharded. Gathering a padded dim is exact once EmitStep slices it: under the ceil rule only
  // trailing tiles are short or empty, so all padding lands after the first `dim` elements of
  // the concatenation.
  if (current.IsTiled()) {
    for (int64_t d = 0; d < rank; ++d) {
      if (current.num_tiles(d) == 1 || SameDimMapping(current, target, d, num_devices)) continue;
      ReshardStep step;
      step.kind = ReshardStep::Kind::kAllGather;
      step.dim = d;
      step.groups = GroupsAlongDims(current, {d});
      step.after = PartiallyReplicate(current, rank, {d});
      int64_t n = current.num_tiles(d);
      Shape gathered = LocalShape(global_shape, step.after);
      plan.bytes_per_device += gathered.byte_size() * (n - 1) / n;
      current = step.after;
      plan.steps.push_back(std::move(step));
    }
  }
  if (current != target) {
    // What is left is local: the target tiles dims the value holds whole. No bytes move, which
    // is also why the dot handler's cost model favours candidates that only slice.
    ReshardStep step;
    step.kind = ReshardStep::Kind::kLocalSlice;
    step.target = target;
    step.after = target;
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

}  // namespace tessel::partitioner
