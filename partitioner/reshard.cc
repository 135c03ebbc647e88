#include "partitioner/reshard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "partitioner/sharding_util.h"

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
bool SameDimMapping(const Sharding& a, const Sharding& b, int64_t d, int64_t num_devices) {
  if (a.num_tiles(d) != b.num_tiles(d)) return false;
  if (a.num_tiles(d) == 1) return true;
  for (int64_t device = 0; device < num_devices; ++device) {
    auto ia = a.TileIndexOf(device), ib = b.TileIndexOf(device);
    if (!ia || !ib || (*ia)[d] != (*ib)[d]) return false;
  }
  return true;
}

int64_t LocalBytes(const Shape& global, const Sharding& s) {
  return LocalShape(global, s).byte_size();
}

}  // namespace

absl::StatusOr<ReshardPlan> PlanReshard(const Sharding& from, const Sharding& to,
                                        const Shape& global_shape, int64_t num_devices) {
  ReshardPlan plan;
  if (from.IsTuple() || to.IsTuple() || from.IsManual() || to.IsManual()) {
    return absl::UnimplementedError(absl::StrCat("resharding ", from.ToString(), " to ",
                                                 to.ToString(), " is not supported"));
  }
  Sharding current = from.IsMaximal() ? Sharding::Replicate() : from;
  Sharding target = to.IsMaximal() ? Sharding::Replicate() : to;
  if (current == target) return plan;
  if (HasUnreduced(target)) {
    return absl::UnimplementedError(absl::StrCat("cannot reshard ", current.ToString(),
                                                 " to the unreduced ", target.ToString()));
  }
  const int64_t rank = global_shape.rank();
  if (HasUnreduced(current)) {
    ReshardStep step;
    step.kind = ReshardStep::Kind::kAllReduce;
    step.groups = current.UnreducedGroups(num_devices);
    step.after = Reduced(current);
    int64_t n = static_cast<int64_t>(step.groups[0].size());
    plan.bytes_per_device += 2 * (n - 1) * LocalBytes(global_shape, current) / std::max<int64_t>(n, 1);
    current = step.after;
    plan.steps.push_back(std::move(step));
    if (current == target) return plan;
  }
  // The same tiling on a permutation of the devices: one collective-permute.
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
  // Gather every dim whose mapping differs from the target's.
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
    // What is left is local: the target tiles dims the value holds whole.
    ReshardStep step;
    step.kind = ReshardStep::Kind::kLocalSlice;
    step.target = target;
    step.after = target;
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

}  // namespace tessel::partitioner
