// broadcast, transpose and reshape: the operand is resharded to the sharding that maps onto the
// target through the op, so the op runs locally with no communication of its own. A reshape
// whose tiling cannot survive (partitioner/internal/reshape_dims.h) goes through the replicated
// value (documented fallback).
#include "core/status_macros.h"
#include "partitioner/internal/context.h"
#include "partitioner/internal/reshape_dims.h"
#include "partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

absl::StatusOr<PValue> HandleBroadcast(Context& ctx, const Node& node,
                                       const std::vector<PValue>& operands,
                                       const Sharding& target) {
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
  TESSEL_ASSIGN_OR_RETURN(Node * whole, ctx.Reshard(operands[0], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kReshape, node.shape(), {whole}));
  return PValue{result, Sharding::Replicate(), node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
