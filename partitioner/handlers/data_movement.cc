// slice, pad, concatenate, dynamic-slice, dynamic-update-slice. slice, pad and concatenate with
// the target tiled along a dim they change first try halo exchange (handlers/halo_ops.cc), taken
// when it moves fewer bytes. Otherwise (and always for dynamic-slice and dynamic-update-slice,
// whose windows depend on data) the dims whose extent the op changes are made whole on every
// device first (all-gather), the op runs locally with unchanged dims at their local size, and the
// driver cuts the result to the target: correct for any sizes, more bytes along tiled dims.
#include <algorithm>
#include <optional>

#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/internal/op_dims.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

absl::StatusOr<PValue> HandleDataMovement(Context& ctx, const Node& node,
                                          const std::vector<PValue>& operands,
                                          const Sharding& target) {
  TESSEL_ASSIGN_OR_RETURN(std::optional<PValue> halo,
                          PartitionWithHalo(ctx, node, operands, target));
  if (halo.has_value()) return *std::move(halo);
  const int64_t rank = node.shape().rank();
  const std::vector<int64_t> changed = ChangedDims(node);
  // The operands take the target's tiling on the untouched dims, so the result needs at most a
  // local slice on the changed dims afterwards (never a second collective).
  const Sharding layout = PartiallyReplicate(target, rank, changed);
  const Opcode op = node.opcode();
  std::vector<Node*> locals;
  for (size_t i = 0; i < operands.size(); ++i) {
    // Data operands share the result's layout; the pad value and start indices are scalars,
    // replicated so every device reads the global index. Every operand of a concatenate gets
    // the same layout, so their local shapes agree on every dim but the concatenated one.
    bool data =
        i == 0 || op == Opcode::kConcatenate || (op == Opcode::kDynamicUpdateSlice && i == 1);
    TESSEL_ASSIGN_OR_RETURN(Node * local,
                            ctx.Reshard(operands[i], data ? layout : Sharding::Replicate()));
    locals.push_back(local);
  }
  // Unchanged dims may be sharded, so their slice bounds and dynamic-slice sizes shrink to the
  // local size. The global start index of such a dim still works: its window is the full dim,
  // and dynamic-slice / dynamic-update-slice clamp the start to 0 (XLA semantics). pad (zero
  // padding on unchanged dims) and concatenate (its dim is the changed one) need no change.
  OpAttributes attrs = node.attrs();
  if (op == Opcode::kSlice) {
    for (int64_t d = 0; d < rank; ++d) {
      if (std::find(changed.begin(), changed.end(), d) == changed.end()) {
        attrs.slice[d] = SliceDim{0, locals[0]->shape().dim(d), 1};
      }
    }
  } else if (op == Opcode::kDynamicSlice) {
    for (int64_t d = 0; d < rank; ++d) {
      if (std::find(changed.begin(), changed.end(), d) == changed.end()) {
        attrs.dynamic_slice_sizes[d] = locals[0]->shape().dim(d);
      }
    }
  }
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(op, std::move(locals), attrs));
  return PValue{result, layout, node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
