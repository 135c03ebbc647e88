#include "tessel/spmd/mark_sharding.h"

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/spmd/sharded_tensor.h"

namespace tessel::spmd {

absl::Status mark_sharding(Tensor& tensor, const Mesh& mesh, const PartitionSpec& partition_spec) {
  if (!tensor.defined()) return absl::InvalidArgumentError("mark_sharding: undefined tensor");
  // A tensor that already holds an error passes it on unchanged: the first error of a lazy
  // chain is the one worth reporting.
  TESSEL_RETURN_IF_ERROR(tensor.status());
  absl::StatusOr<Sharding> sharding =
      ShardingFromPartitionSpec(mesh, tensor.rank(), partition_spec);
  if (!sharding.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("mark_sharding on ", tensor.shape().ToString(),
                                                   ": ", std::string(sharding.status().message())));
  }
  // XLA's HLO spelling: the iota form for compact tile assignments (as JAX lowers a
  // NamedSharding), so an annotation is O(rank) text on any mesh size. The annotation is kept
  // as text on the tensor's node: the graph carries it into HLO text and the partitioner
  // parses it back (ParseSharding reads both forms to the same Sharding).
  tensor.SetSharding(sharding->ToString(Sharding::DeviceListFormat::kIota));
  return absl::OkStatus();
}

// torch_xla's form without a mesh argument, reading set_global_mesh(). The mesh is copied out
// under the lock, so a concurrent set_global_mesh cannot change it halfway.
absl::Status mark_sharding(Tensor& tensor, const PartitionSpec& partition_spec) {
  std::optional<Mesh> mesh = get_global_mesh();
  if (!mesh) {
    return absl::FailedPreconditionError(
        "mark_sharding without a mesh needs set_global_mesh() first");
  }
  return mark_sharding(tensor, *mesh, partition_spec);
}

void clear_sharding(Tensor& tensor) {
  if (tensor.defined()) tensor.ClearSharding();
}

absl::StatusOr<std::optional<Sharding>> GetSharding(const Tensor& tensor) {
  if (!tensor.defined() || tensor.sharding().empty()) return std::optional<Sharding>();
  TESSEL_ASSIGN_OR_RETURN(Sharding sharding, ParseSharding(tensor.sharding()));
  return std::optional<Sharding>(std::move(sharding));
}

absl::Status ApplyShardingSpec(const ShardingSpec& spec, Tensor& tensor) {
  // Checked here, not left to ShardingFromPartitionSpec, so the message names the
  // ShardingSpec the caller built rather than a bare partition_spec.
  if (tensor.defined() && !spec.CanApply(tensor.shape())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShardingSpec (", spec.partition_spec().ToString(), ") of ", spec.partition_spec().size(),
        " entries does not apply to ", tensor.shape().ToString()));
  }
  return mark_sharding(tensor, spec.mesh(), spec.partition_spec());
}

absl::StatusOr<Tensor> enable_manual_sharding(const Tensor& tensor,
                                              const PartitionSpec& partition_spec,
                                              const Mesh& mesh) {
  if (!tensor.defined())
    return absl::InvalidArgumentError("enable_manual_sharding: undefined tensor");
  Tensor annotated = Copy(tensor);
  TESSEL_RETURN_IF_ERROR(mark_sharding(annotated, mesh, partition_spec));
  TESSEL_ASSIGN_OR_RETURN(std::optional<Sharding> sharding, GetSharding(annotated));
  TESSEL_ASSIGN_OR_RETURN(ShardedTensor layout,
                          ShardedTensor::Create(tensor.shape(), *sharding, mesh.size()));
  Tensor local = SpmdFullToShardShape(annotated, layout.local_shape());
  TESSEL_RETURN_IF_ERROR(local.status());
  return local;
}

absl::StatusOr<Tensor> disable_manual_sharding(const Tensor& tensor,
                                               const PartitionSpec& partition_spec,
                                               const std::vector<int64_t>& full_shape,
                                               const Mesh& mesh) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError("disable_manual_sharding: undefined tensor");
  }
  TESSEL_RETURN_IF_ERROR(tensor.status());
  const Shape global(tensor.dtype(), full_shape);
  absl::StatusOr<Sharding> sharding =
      ShardingFromPartitionSpec(mesh, global.rank(), partition_spec);
  if (!sharding.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("disable_manual_sharding to ", global.ToString(),
                                                   ": ", std::string(sharding.status().message())));
  }
  TESSEL_ASSIGN_OR_RETURN(ShardedTensor layout,
                          ShardedTensor::Create(global, *sharding, mesh.size()));
  if (layout.local_shape() != tensor.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("disable_manual_sharding: ", tensor.shape().ToString(), " is not a shard of ",
                     global.ToString(), " under ", sharding->ToString(), " (shards are ",
                     layout.local_shape().ToString(), ")"));
  }
  Tensor full =
      SpmdShardToFullShape(tensor, global, sharding->ToString(Sharding::DeviceListFormat::kIota));
  TESSEL_RETURN_IF_ERROR(full.status());
  return full;
}

}  // namespace tessel::spmd
