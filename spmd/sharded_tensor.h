// ShardedTensor: where the pieces of a sharded value live. For a global shape and a Sharding it
// lists, per device, the global index ranges it holds, its (padded) local shape and its replica
// id, and it splits a host Literal into per-device shards and assembles them back.
// torch_xla's XLAShardedTensor.local_shards / ShardingUtil::ShardTensor, in C++.
//
//   // f32[5] over 4 devices, {devices=[4]0,1,2,3}: uneven, torch_xla's rule.
//   TESSEL_ASSIGN_OR_RETURN(ShardedTensor t,
//       ShardedTensor::Create(Shape(DType::kF32, {5}), *ParseSharding("{devices=[4]0,1,2,3}"), 4));
//   t.local_shape().ToString() == "f32[2]";            // ceil(5 / 4), every device
//   t.shards()[2].index == {{4, 5}};                    // device 2 holds [4:5) + 1 padding
//   t.shards()[3].index == {{5, 5}};                    // device 3 holds nothing, all padding
//   std::vector<Literal> locals = *t.Split(x);          // zero-padded pieces, in shards() order
//   *t.Assemble(locals) == x;
//
// The uneven rule (torch_xla, XLA): along dim d with n tiles, every shard has
// ceil(dim / n) elements; tile k covers [min(k*s, dim), min((k+1)*s, dim)), so trailing shards
// are short or empty and the rest of the buffer is padding (zeros from Split).
#ifndef TESSEL_SPMD_SHARDED_TENSOR_H_
#define TESSEL_SPMD_SHARDED_TENSOR_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"
#include "tessel/spmd/sharding.h"

namespace tessel::spmd {

// One device's piece.
struct Shard {
  int64_t device_id = 0;
  // Per dim, the global range [start, limit) of real data held (limit - start <= the local
  // dim; the rest is padding). Replicated: [0, dim) for every dim.
  std::vector<std::pair<int64_t, int64_t>> index;
  // The data-tile index (one per dim; all 0 when not tiled).
  std::vector<int64_t> tile_index;
  // Which copy of its tile this device holds: its position among the devices holding the
  // same data (ascending ids). {replicated} on devices 0..n-1: the device id (as torch_xla);
  // partial replication: the index along the replicated subgroup dim; otherwise 0.
  int64_t replica_id = 0;
  // Position along the unreduced subgroup dim (0 when there is none). {unreduced}: the device id.
  int64_t unreduced_id = 0;

  // limit - start per dim: the unpadded extent of the data held.
  std::vector<int64_t> data_dims() const;
};

class ShardedTensor {
 public:
  // Lays out a value of `global_shape` (an array shape) under `sharding` on devices
  // 0..num_devices-1.
  // Errors: kInvalidArgument for a tuple shape or sharding, a manual sharding (or a manual
  // subgroup: the program, not the layout, defines those pieces), or a tiled rank that differs
  // from the shape's rank; kOutOfRange for a device id >= num_devices (Sharding::Validate).
  [[nodiscard]] static absl::StatusOr<ShardedTensor> Create(const Shape& global_shape,
                                                            const Sharding& sharding,
                                                            int64_t num_devices);

  const Shape& global_shape() const { return global_shape_; }
  const Sharding& sharding() const { return sharding_; }
  // The padded per-device shape, the same on every device: ceil(dim / num_tiles(d)) per dim.
  const Shape& local_shape() const { return local_shape_; }
  // One entry per device that holds data, ascending device id (tiled: the devices of the tile
  // assignment; maximal: its device; replicated and unreduced: every device).
  const std::vector<Shard>& shards() const { return shards_; }
  // The shard of `device_id`, or nullptr if that device holds nothing.
  const Shard* shard_for(int64_t device_id) const;

  // Cuts `global` (shape global_shape()) into one local_shape() literal per shard, in shards()
  // order, zero-padded. With an unreduced subgroup, unreduced_id 0 gets the data and the other
  // partial values are zero (their sum is the value).
  // Errors: kInvalidArgument when `global` has another shape.
  [[nodiscard]] absl::StatusOr<std::vector<Literal>> Split(const Literal& global) const;
  // The inverse: `locals` in shards() order, each of local_shape(). Each tile is read from its
  // replica_id 0 copy, padding ignored; unreduced partial values are summed (logical or for
  // pred).
  // Errors: kInvalidArgument when the count or a shape differs.
  [[nodiscard]] absl::StatusOr<Literal> Assemble(absl::Span<const Literal> locals) const;

 private:
  ShardedTensor() = default;

  Shape global_shape_;
  Sharding sharding_;
  Shape local_shape_;
  std::vector<Shard> shards_;
};

}  // namespace tessel::spmd

#endif  // TESSEL_SPMD_SHARDED_TENSOR_H_
