// broadcast, transpose and reshape: the operand is resharded to the sharding that maps onto the
// target through the op, so the op runs locally with no communication of its own. A reshape
// whose target tiling cannot survive (partitioner/internal/reshape_dims.h) runs locally in the
// operand's tiling when that one survives, resharded after; otherwise it goes through the
// replicated value (documented fallback).
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/internal/reshape_dims.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

absl::StatusOr<PValue> HandleBroadcast(Context& ctx, const Node& node,
                                       const std::vector<PValue>& operands,
                                       const Sharding& target) {
  // Operand dim i is output dim dims[i]: the operand takes the target's tiling of those dims,
  // and the tiles of the new dims become replication, so each device already holds the whole
  // operand along them and the local broadcast fills its own tile.
  const std::vector<int64_t>& dims = node.attrs().dimensions;
  TESSEL_ASSIGN_OR_RETURN(Node * operand, ctx.Reshard(operands[0], Project(target, dims)));
  OpAttributes attrs = node.attrs();
  TESSEL_ASSIGN_OR_RETURN(
      Node * result,
      ctx.Add(Opcode::kBroadcast, LocalShape(node.shape(), target), {operand}, attrs));
  return PValue{result, target, node.shape(), {}};
}

absl::StatusOr<PValue> HandleTranspose(Context& ctx, const Node& node,
                                       const std::vector<PValue>& operands,
                                       const Sharding& target) {
  const std::vector<int64_t>& perm = node.attrs().dimensions;
  // Output dim i is operand dim perm[i], so the operand wants the target permuted back by the
  // inverse; then the local transpose yields the target's tiles with no data moved.
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = i;
  TESSEL_ASSIGN_OR_RETURN(Node * operand,
                          ctx.Reshard(operands[0], TransposeSharding(target, inverse)));
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kTranspose, {operand}, node.attrs()));
  return PValue{result, target, node.shape(), {}};
}

absl::StatusOr<PValue> HandleReshape(Context& ctx, const Node& node,
                                     const std::vector<PValue>& operands, const Sharding& target) {
  const Shape& in = node.operand(0)->shape();
  // The operand sharding is derived backwards from the target and then mapped forwards again:
  // only when that gives the target exactly does the local reshape produce the target's tiles,
  // so the round trip guards the local path.
  std::optional<Sharding> operand_sharding = ReshapeSharding(target, node.shape(), in);
  if (operand_sharding.has_value()) {
    std::optional<Sharding> back = ReshapeSharding(*operand_sharding, in, node.shape());
    if (back.has_value() && *back == target) {
      TESSEL_ASSIGN_OR_RETURN(Node * operand, ctx.Reshard(operands[0], *operand_sharding));
      TESSEL_ASSIGN_OR_RETURN(
          Node * result, ctx.Add(Opcode::kReshape, LocalShape(node.shape(), target), {operand}));
      return PValue{result, target, node.shape(), {}};
    }
  }
  // The operand's own tiling may survive the reshape although the target's cannot be reached
  // through it: reshape locally in that tiling and let the driver reshard the result (XLA's
  // ReshapeWithReshard2: a local reshape, then one all-to-all). Partial sums are left to the
  // fallback, which completes them first.
  const Sharding& current = operands[0].sharding;
  const bool unreduced =
      current.IsUnreduced() ||
      (current.IsTiled() && current.SubgroupDim(spmd::SubgroupType::kUnreduced) >= 0);
  if (current.IsTiled() && !unreduced) {
    std::optional<Sharding> forward = ReshapeSharding(current, in, node.shape());
    if (forward.has_value() && forward->IsTiled()) {
      std::optional<Sharding> back = ReshapeSharding(*forward, node.shape(), in);
      if (back.has_value() && *back == current) {
        TESSEL_ASSIGN_OR_RETURN(Node * operand, ctx.Reshard(operands[0], current));
        TESSEL_ASSIGN_OR_RETURN(
            Node * result,
            ctx.Add(Opcode::kReshape, LocalShape(node.shape(), *forward), {operand}));
        return PValue{result, *forward, node.shape(), {}};
      }
    }
  }
  // The tiling of the groups that survive (the batch, when heads are regrouped) is kept: the
  // failing groups are gathered, the reshape runs locally, and the driver reshards the result.
  if (current.IsTiled() && !unreduced) {
    if (auto partial = PartialReshapeSharding(current, in, node.shape())) {
      TESSEL_ASSIGN_OR_RETURN(Node * operand, ctx.Reshard(operands[0], partial->first));
      TESSEL_ASSIGN_OR_RETURN(
          Node * result,
          ctx.Add(Opcode::kReshape, LocalShape(node.shape(), partial->second), {operand}));
      return PValue{result, partial->second, node.shape(), {}};
    }
  }
  // Fallback: reshape the whole value on every device; the driver then cuts it to the target
  // locally. Correct for any reshape, at the price of an all-gather of the operand.
  TESSEL_ASSIGN_OR_RETURN(Node * whole, ctx.Reshard(operands[0], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kReshape, node.shape(), {whole}));
  return PValue{result, Sharding::Replicate(), node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
