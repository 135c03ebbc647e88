// Elementwise ops: every operand of the result's rank is resharded to the target, scalars
// (select predicates, clamp bounds) to replicated; the op then runs on the local shards.
#include <optional>

#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

namespace {

bool IsUnreduced(const Sharding& s) {
  return s.IsUnreduced() || (s.IsTiled() && s.SubgroupDim(spmd::SubgroupType::kUnreduced) >= 0);
}

// The sum of two partial sums with the same layout is itself a partial sum: add the local pieces
// and leave the one reduction to whoever completes the result (XLA's AllReduceReassociate; the
// gradient of a value read by the Q, K and V projections then costs one all-reduce, as
// Megatron's f operator, not three). Partition only leaves operands unreduced for such adds.
std::optional<absl::StatusOr<PValue>> AddPartialSums(Context& ctx, const Node& node,
                                                     const std::vector<PValue>& operands) {
  if (node.opcode() != Opcode::kAdd || operands.size() != 2) return std::nullopt;
  const PValue& a = operands[0];
  const PValue& b = operands[1];
  if (!IsUnreduced(a.sharding) || a.sharding != b.sharding || a.local == nullptr ||
      b.local == nullptr) {
    return std::nullopt;
  }
  absl::StatusOr<Node*> sum = ctx.Add(Opcode::kAdd, a.local->shape(), {a.local, b.local});
  if (!sum.ok()) return absl::StatusOr<PValue>(sum.status());
  return absl::StatusOr<PValue>(PValue{*sum, a.sharding, node.shape(), {}});
}

}  // namespace

absl::StatusOr<PValue> HandleElementwise(Context& ctx, const Node& node,
                                         const std::vector<PValue>& operands,
                                         const Sharding& target) {
  if (auto partial = AddPartialSums(ctx, node, operands)) return *std::move(partial);
  // Every full-rank operand in the target's layout makes the op purely local; the data moves
  // (if any) are the operands' reshards, planned and costed like any other.
  std::vector<Node*> locals;
  for (const PValue& operand : operands) {
    const Sharding& want =
        operand.global_shape.rank() == node.shape().rank() ? target : Sharding::Replicate();
    TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operand, want));
    locals.push_back(local);
  }
  // The shape is given, not inferred: convert takes its element type from the declared shape
  // (no operand carries it), and giving it also checks the local shapes of every op.
  Shape local_shape = LocalShape(node.shape(), target);
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(node.opcode(), local_shape, std::move(locals), node.attrs()));
  return PValue{result, target, node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
