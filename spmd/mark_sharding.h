// mark_sharding and friends: annotate a lazy Tensor with a Sharding, as torch_xla's
// torch_xla.distributed.spmd API does.
//
//   Mesh mesh = *Mesh::Create({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2}, {"x", "y"});
//   Tensor input = Tensor::FromLiteral(batch);               // f32[8,32]
//   TESSEL_RETURN_IF_ERROR(mark_sharding(input, mesh, {"x", kNone}));   // 4-way data parallel
//   input.sharding() == "{devices=[4,1,2]<=[8] last_tile_dim_replicate}";
//   GetSharding(input)->value().ToString() ==
//       "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}";   // the same, every id
//   clear_sharding(input);                                   // input.sharding() == ""
//
// The annotation is XLA sharding text on the tensor (Tensor::SetSharding), in XLA's iota
// spelling when the tile assignment is a transposed iota (Sharding::DeviceListFormat::kIota; as
// JAX lowers a NamedSharding), so it is O(rank) text on a mesh of any size; the explicit id list
// otherwise. The translation is ShardingFromPartitionSpec (spmd/partition_spec.h), which holds
// the rules and their tests.
#ifndef TESSEL_SPMD_MARK_SHARDING_H_
#define TESSEL_SPMD_MARK_SHARDING_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/core/tensor.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"
#include "tessel/spmd/sharding.h"

namespace tessel::spmd {

// Sets `tensor`'s sharding to ShardingFromPartitionSpec(mesh, tensor.rank(), partition_spec),
// replacing any previous annotation. Source: torch_xla xs.mark_sharding.
// Errors: the tensor's own error status; kInvalidArgument from ShardingFromPartitionSpec (spec
// size != rank, unknown axis, axis used twice, ...); kInvalidArgument for an undefined tensor.
// On error the tensor is unchanged.
[[nodiscard]] absl::Status mark_sharding(Tensor& tensor, const Mesh& mesh,
                                         const PartitionSpec& partition_spec);
// The same on the global mesh (set_global_mesh).
// Errors: kFailedPrecondition when no global mesh is set; otherwise as above.
[[nodiscard]] absl::Status mark_sharding(Tensor& tensor, const PartitionSpec& partition_spec);

// Removes `tensor`'s sharding annotation (torch_xla xs.clear_sharding).
void clear_sharding(Tensor& tensor);

// The tensor's sharding, or nullopt when it has none.
// Errors: kInvalidArgument when the annotation text does not parse (ParseSharding).
[[nodiscard]] absl::StatusOr<std::optional<Sharding>> GetSharding(const Tensor& tensor);

// Applies a deferred ShardingSpec (torch_xla ShardingSpec.apply): mark_sharding(tensor,
// spec.mesh(), spec.partition_spec()).
// Errors: kInvalidArgument when !spec.CanApply(tensor.shape()); otherwise as mark_sharding.
[[nodiscard]] absl::Status ApplyShardingSpec(const ShardingSpec& spec, Tensor& tensor);

// Enters a manual region (torch_xla.distributed.spmd.enable_manual_sharding): `tensor` (global
// shape) is annotated with ShardingFromPartitionSpec(mesh, rank, partition_spec) (on a copy, so
// the caller's tensor keeps its own annotation) and becomes custom-call "SPMDFullToShardShape":
// a per-device value of the local shape (ceil(dim / tiles) per tiled dim, padding included),
// annotated {manual}. What the caller computes on it runs once per device, unpartitioned, with
// its own collectives (AllReduce in core/tensor.h). Example (mesh ["x"=2, "y"=4], f32[16,32],
// {"x", "y"}) -> f32[8,8] {manual}.
// Shapes: `tensor` global, the result local. Source: torch_xla xs.enable_manual_sharding
// (mark_sharding, then _spmd_full_to_shard_shape); XLA SPMDFullToShardShape.
// Errors: as mark_sharding; kInvalidArgument when `mesh` has more devices than ids it lays out.
[[nodiscard]] absl::StatusOr<Tensor> enable_manual_sharding(const Tensor& tensor,
                                                            const PartitionSpec& partition_spec,
                                                            const Mesh& mesh);

// Leaves a manual region (torch_xla.distributed.spmd.disable_manual_sharding): `tensor` is each
// device's shard of a value of `full_shape` (its dtype is tensor's) laid out by
// ShardingFromPartitionSpec(mesh, full_shape rank, partition_spec); the result is that global
// value (custom-call "SPMDShardToFullShape", annotated with the sharding). Replicated dims take
// every device's value as the whole dim: the caller keeps them equal (as shard_map's out_specs).
// Shapes: `tensor` local, the result global. Source: torch_xla xs.disable_manual_sharding.
// Errors: as mark_sharding; kInvalidArgument when tensor's shape is not the local shape of
// full_shape under that sharding (naming both).
[[nodiscard]] absl::StatusOr<Tensor> disable_manual_sharding(const Tensor& tensor,
                                                             const PartitionSpec& partition_spec,
                                                             const std::vector<int64_t>& full_shape,
                                                             const Mesh& mesh);

}  // namespace tessel::spmd

#endif  // TESSEL_SPMD_MARK_SHARDING_H_
