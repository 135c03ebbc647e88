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

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "spmd/mesh.h"
#include "spmd/partition_spec.h"
#include "spmd/sharding.h"

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

}  // namespace tessel::spmd

#endif  // TESSEL_SPMD_MARK_SHARDING_H_
