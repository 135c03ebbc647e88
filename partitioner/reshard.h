// Resharding: the collectives that move a value from one sharding to another on the same
// devices.
//
//   // f32[8,32] on 4 devices: rows over 4 -> replicated
//   ReshardPlan plan = PlanReshard(*ParseSharding("{devices=[4,1]0,1,2,3}"),
//                                  Sharding::Replicate(), Shape(DType::kF32, {8, 32}), 4).value();
//   plan.steps[0].kind == ReshardStep::Kind::kAllGather;   // dim 0, group {0,1,2,3}
//   plan.bytes_per_device == 768;                            // (n-1)/n of the gathered 1 KiB
//
// The planner, in order (after XLA SpmdPartitioner's ReshardNoCache):
//   1. an unreduced (partial-sum) source is reduce-scattered when the target tiles one more dim
//      exactly along the unreduced groups (each device keeps its own chunk), otherwise
//      all-reduced over its unreduced groups;
//   2. equal shardings need nothing;
//   3. the same tiling with devices in another order is a collective-permute; a tiling that
//      moves from dim a to dim b over the same device groups (both dims divisible) is one
//      all-to-all; nested tilings of divisible dims move inside the groups sharing the coarse
//      tile: k times finer on a and coarser on b is an all-to-all over groups of k, k times
//      coarser on one dim an all-gather over groups of k, k times finer (each new tile inside
//      the device's old one) a local dynamic-slice;
//   4. otherwise every data dim whose tile mapping differs is all-gathered (padding sliced off
//      when the dim is uneven), and the dims the target tiles but the value no longer does are
//      cut locally with dynamic-slice at the device's offset (partition-id lookup), after padding
//      the dim to tiles * ceil(dim / tiles). This path is always correct: in the worst case it
//      goes through the replicated value.
// Bytes are per device and count what each device receives: all-reduce 2(n-1)/n of the buffer
// (ring), reduce-scatter and all-to-all (n-1)/n of the input, all-gather (n-1)/n of the result,
// collective-permute the buffer.
#ifndef TESSEL_PARTITIONER_RESHARD_H_
#define TESSEL_PARTITIONER_RESHARD_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/core/shape.h"
#include "tessel/spmd/sharding.h"

namespace tessel::partitioner {

struct ReshardStep {
  enum class Kind {
    kAllReduce,          // over `groups`, sum
    kReduceScatter,      // over `groups`, sum, each device keeping its chunk of `dim`
    kAllGather,          // along `dim` over `groups`, then slice the dim to `global_dim`
    kAllToAll,           // over `groups`: tiles move from dim `dim` to dim `to_dim`
    kCollectivePermute,  // `pairs`
    kLocalSlice,         // dynamic-slice of the dims with `tiles[d]` > 1 at the device's tile
  };
  Kind kind;
  // Shared storage: a memoized plan hands the same list to every collective it emits.
  CollectiveDeviceList groups;
  int64_t dim = 0;
  int64_t to_dim = 0;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  // kLocalSlice: the target sharding (its tiles and each device's tile index).
  spmd::Sharding target;
  // The value's sharding after this step.
  spmd::Sharding after;
};

struct ReshardPlan {
  std::vector<ReshardStep> steps;
  // Bytes each device receives, summed over the steps.
  int64_t bytes_per_device = 0;
};

// Plans the move of a value of `global_shape` from `from` to `to` on devices 0..num_devices-1.
// Errors: kUnimplemented for manual or tuple shardings or an unreduced target that differs from
// the source.
[[nodiscard]] absl::StatusOr<ReshardPlan> PlanReshard(const spmd::Sharding& from,
                                                      const spmd::Sharding& to,
                                                      const Shape& global_shape,
                                                      int64_t num_devices);

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_RESHARD_H_
