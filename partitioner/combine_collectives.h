// Passes over the partitioned per-device program around its all-reduces: independent
// all-reduces of the same kind are combined into one, as XLA's AllReduceCombiner does before a
// backend runs the program (CombineAllReduces), and a transpose of an all-reduce's result moves
// before it (MoveTransposesBeforeAllReduces, at the end of this file).
//
//   TESSEL_ASSIGN_OR_RETURN(SpmdProgram p, Partition(g, 8));
//   AllReduceCombineStats stats;
//   TESSEL_ASSIGN_OR_RETURN(p.program, CombineAllReduces(*p.program, {}, &stats));
//
// Each all-reduce is a rendezvous of its group: a step of many small gradient reductions (a
// bias, a layer-norm scale, a gradient-norm partial sum) pays the transport's per-call latency
// and, with more device threads than cores, a sleep and wake-up of every member per call. XLA
// emits one variadic all-reduce `all-reduce(a, b, ...)` for such a set; Tessel's all-reduce
// takes one array, so the set is combined in one buffer: each operand flattened, the flat
// operands concatenated, one all-reduce, and each result sliced back out and reshaped to its
// shape (two copies of the combined bytes, hence a small threshold on CPU memory).
//
//   %ar1 = f32[64] all-reduce(%a), replica_groups={{0,1}}, to_apply=%add
//   %ar2 = f32[4,4] all-reduce(%b), replica_groups={{0,1}}, to_apply=%add
// becomes
//   %ar2.flat = f32[16] reshape(%b)
//   %ar1.operands = f32[80] concatenate(%a, %ar2.flat), dimensions={0}
//   %ar1.combined = f32[80] all-reduce(%ar1.operands), replica_groups={{0,1}}, to_apply=%add
//   %ar1 = f32[64] slice(%ar1.combined), slice={[0:64]}
//   %ar2.flat_result = f32[16] slice(%ar1.combined), slice={[64:80]}
//   %ar2 = f32[4,4] reshape(%ar2.flat_result)
//
// Source: XLA xla/service/all_reduce_combiner.{h,cc} (combine_threshold_in_bytes,
// combine_threshold_count; the key: same replica groups, reduction, element type, channel and
// use_global_device_ids).
#ifndef TESSEL_PARTITIONER_COMBINE_COLLECTIVES_H_
#define TESSEL_PARTITIONER_COMBINE_COLLECTIVES_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"

namespace tessel::partitioner {

struct AllReduceCombinerOptions {
  // A combined all-reduce moves at most this many bytes (its result, per device); an
  // all-reduce at or above it is left where it is, alone. XLA's GPU default,
  // xla_gpu_all_reduce_combine_threshold_bytes = 30 MiB. 0 turns the pass off. (The
  // concatenate/slice form copies the combined bytes twice, so a runtime on CPU memory
  // wants far less: mesh/runtime/host_runtime.h.)
  int64_t threshold_bytes = int64_t{30} << 20;
  // And combines at most this many all-reduces (XLA: combine_threshold_count). 0 turns the
  // pass off.
  int64_t threshold_count = 256;
};

struct AllReduceCombineStats {
  int64_t all_reduces_before = 0;  // in the entry computation
  int64_t all_reduces_after = 0;
  int64_t combined = 0;  // all-reduces emitted for groups of two or more
};

// Returns `program` with independent all-reduces combined (see above). Only the entry
// computation is changed; computations a while or conditional calls are shared unchanged.
//
// Which combine: all-reduces with one array operand, the same reduction, element type,
// replica groups, channel_id (zero or not) and use_global_device_ids, none of which depends on
// another. The program is rescheduled: nodes keep their order, except that an all-reduce runs
// as late as its users allow. When only all-reduces are ready, the ready ones of the earliest
// one's key are combined (in program order, up to the thresholds; one that does not fit waits
// for the next combination). All devices run the same program, so every device issues the same
// combined collectives in the same order. The results are the same up to the reduction order
// inside the transport (a larger buffer may take another algorithm).
// Shapes: local (per-device) shapes in and out; names, parameters and the root are kept (a
// combined all-reduce's old name is its result's reshape or slice).
// Memory: delaying an all-reduce keeps its operand live longer (at most the thresholds'
// bytes per pending combination, plus the nodes that waited for it).
// Errors: kInvalidArgument for negative thresholds.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Graph>> CombineAllReduces(
    const Graph& program, const AllReduceCombinerOptions& options = {},
    AllReduceCombineStats* stats = nullptr);

// Returns `program` with every `transpose(all-reduce(x))` whose all-reduce has no other user
// rewritten as `all-reduce(transpose(x))` (the all-reduce takes the transpose's shape; both keep
// their names), and sets `*moved` (if not null) to the number rewritten. An all-reduce is
// elementwise over the group, so the result is the same bit for bit; the executor folds a
// transpose into the dot that produces its operand, so the partitioner's weight gradient
// `transpose(all-reduce(dot(...)))` loses its transpose pass over the gradient.
// Only the entry computation is changed. Shapes: local.
// Source: the same move as XLA's CollectiveTransformationReorder
// (xla/hlo/transforms/collectives/collective_transformation_reorderer.h), which moves reshapes
// across all-gathers and all-reduces.
[[nodiscard]] std::unique_ptr<Graph> MoveTransposesBeforeAllReduces(const Graph& program,
                                                                    int64_t* moved = nullptr);

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_COMBINE_COLLECTIVES_H_
