// dot: pick a sharding of the dot's iteration space [batch..., lhs free..., rhs free...,
// contracting...] and run the local dot on operands resharded to its projections.
//
// Candidates, as GSPMD's dot handler weighs them: the space implied by the target (no
// contracting dim sharded: no reduction needed), by the lhs's current sharding, by the rhs's,
// and by their merge. Each is costed as the bytes of resharding both operands plus the
// all-reduce of partial sums plus the move of the result to the target; the cheapest wins (ties:
// that order). When contracting dims are sharded the local results are partial sums
// (an `unreduced` subgroup) that the driver's reshard completes right after the dot
// (reduce-scatter when the target tiles one more dim along the groups, else all-reduce); the
// propagated targets are never unreduced, so no partial value outlives its dot. Padding along
// sharded contracting dims is zeroed in both operands.
// Example (Megatron, mesh data=2 x model=2): x [B:data, D] . w1 [D, F:model] -> h [B:data,
// F:model] with no collective; h . w2 [F:model, D] -> one all-reduce over the model groups.
#include <algorithm>

#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/internal/op_dims.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

namespace {

// The result sharding of the local dot under `space`: output dims tiled as in space, the tiles
// of contracting dims as an unreduced subgroup (partial sums), the rest replicated.
Sharding ResultSharding(const Sharding& space, const DotSpace& s) {
  if (!space.IsTiled()) return space;
  const spmd::DeviceArray& ta = space.tile_assignment();
  std::vector<int64_t> dims = ta.dims();
  if (space.NumSubgroupDims() == 0) dims.push_back(1);
  spmd::DeviceArray full = ta.Reshape(dims);
  // The contracting dims are the trailing data dims of the space (MakeDotSpace), so merging
  // them into one dim right before the replication dim is a reshape: no device moves.
  int64_t contracting_tiles = 1;
  for (int64_t d = s.output_rank; d < s.rank; ++d) contracting_tiles *= full.dim(d);
  std::vector<int64_t> new_dims(full.dims().begin(), full.dims().begin() + s.output_rank);
  new_dims.push_back(contracting_tiles);
  new_dims.push_back(full.dim(s.rank));
  return Sharding::Subgroup(full.Reshape(new_dims),
                            {spmd::SubgroupType::kUnreduced, spmd::SubgroupType::kReplicated});
}

// Seconds of one candidate iteration-space sharding: resharding both operands to its
// projections, the local dot (2 * |local result| * |local contracting dims| flops, as XLA's
// HloCostAnalysis counts), and moving the (possibly partial) result to the target.
absl::StatusOr<double> CandidateSeconds(Context& ctx, const Node& node, const DotSpace& s,
                                        const PValue& lhs, const PValue& rhs, const Sharding& space,
                                        const Sharding& target) {
  Sharding lhs_want = Project(space, s.lhs_to_space);
  Sharding rhs_want = Project(space, s.rhs_to_space);
  TESSEL_ASSIGN_OR_RETURN(double lhs_s, ctx.ReshardSeconds(lhs, lhs_want));
  TESSEL_ASSIGN_OR_RETURN(double rhs_s, ctx.ReshardSeconds(rhs, rhs_want));
  PValue out{nullptr, ResultSharding(space, s), node.shape(), {}};
  TESSEL_ASSIGN_OR_RETURN(double out_s, ctx.ReshardSeconds(out, target));
  const Shape lhs_local = LocalShape(lhs.global_shape, lhs_want);
  double flops = 2.0 * static_cast<double>(LocalShape(node.shape(), out.sharding).num_elements());
  for (int64_t d : node.attrs().dot.lhs_contracting_dims) {
    flops *= static_cast<double>(lhs_local.dim(d));
  }
  return lhs_s + rhs_s + out_s + ctx.DotSeconds(flops, node.shape().dtype());
}

// `tessel partition --explain`: the candidates in the order HandleDot builds them.
void NoteDotChoice(Context& ctx, const Node& node, const std::vector<Sharding>& candidates,
                   const std::vector<double>& costs) {
  PartitionExplanation::DotChoice choice;
  choice.computation = ctx.computation();
  choice.instruction = node.name();
  static constexpr const char* kNames[] = {"target", "lhs", "rhs", "merge"};
  for (size_t i = 0; i < candidates.size(); ++i) {
    choice.candidates.push_back(kNames[std::min<size_t>(i, 3)]);
    choice.spaces.push_back(candidates[i]);
    choice.seconds.push_back(costs[i]);
    if (costs[i] < costs[choice.chosen]) choice.chosen = static_cast<int64_t>(i);
  }
  ctx.explain()->dots.push_back(std::move(choice));
}

}  // namespace

absl::StatusOr<PValue> HandleDot(Context& ctx, const Node& node,
                                 const std::vector<PValue>& operands, const Sharding& target) {
  const DotSpace s = MakeDotSpace(node);
  const PValue& lhs = operands[0];
  const PValue& rhs = operands[1];
  // Candidates are built from plain tilings only; an operand that is still a partial sum
  // proposes nothing of its own (its all-reduce is priced by ReshardBytes either way).
  auto plain = [](const Sharding& sh) { return IsPlainTiling(sh) ? sh : Sharding::Replicate(); };
  std::vector<Sharding> candidates;
  candidates.push_back(Embed(plain(target), s.rank, Iota(s.output_rank)));
  Sharding from_lhs = Embed(plain(lhs.sharding), s.rank, s.lhs_to_space);
  Sharding from_rhs = Embed(plain(rhs.sharding), s.rank, s.rhs_to_space);
  candidates.push_back(from_lhs);
  candidates.push_back(from_rhs);
  if (auto merged = MergeShardings(from_lhs, from_rhs, s.rank, ctx.num_devices())) {
    candidates.push_back(*merged);
  }
  // Cost in seconds (Context's cost model): the three moves on the links they cross, plus the
  // local dot, so a candidate that gathers operands and repeats the whole product on devices
  // that hold the same data pays for that compute. The strict `<` keeps the earliest candidate
  // on ties, so the choice is deterministic and prefers the target's own layout (the one that
  // needs no move of the result).
  double best_cost = -1;
  Sharding best;
  std::vector<double> costs;
  for (const Sharding& space : candidates) {
    TESSEL_ASSIGN_OR_RETURN(double cost, CandidateSeconds(ctx, node, s, lhs, rhs, space, target));
    costs.push_back(cost);
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = space;
    }
  }
  if (ctx.explain() != nullptr) NoteDotChoice(ctx, node, candidates, costs);
  TESSEL_ASSIGN_OR_RETURN(Node * lhs_local, ctx.Reshard(lhs, Project(best, s.lhs_to_space)));
  TESSEL_ASSIGN_OR_RETURN(Node * rhs_local, ctx.Reshard(rhs, Project(best, s.rhs_to_space)));
  const DotDimensionNumbers& dn = node.attrs().dot;
  Sharding lhs_layout = Project(best, s.lhs_to_space);
  Sharding rhs_layout = Project(best, s.rhs_to_space);
  // Both operands: padding may hold inf or NaN (e.g. log of a zero pad), and 0 * inf is NaN, so
  // zeroing one side would not keep the padded products out of the sum.
  TESSEL_ASSIGN_OR_RETURN(lhs_local, ctx.MaskPadding(lhs_local, lhs_layout, lhs.global_shape,
                                                     dn.lhs_contracting_dims, 0));
  TESSEL_ASSIGN_OR_RETURN(rhs_local, ctx.MaskPadding(rhs_local, rhs_layout, rhs.global_shape,
                                                     dn.rhs_contracting_dims, 0));
  // The local dot keeps the global dimension numbers: resharding changes dim sizes, never
  // their order.
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(Opcode::kDot, {lhs_local, rhs_local}, node.attrs()));
  return PValue{result, ResultSharding(best, s), node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
