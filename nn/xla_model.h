// The training-loop helpers of torch_xla's `torch_xla.core.xla_model` (imported as `xm`), for
// users who write their own loops on the lazy tensor API (core/tensor.h):
//
//   optimizer_step     gradient reduction (optional), clipping and the optimizer update, all
//                      recorded into the step's one graph (xm.optimizer_step)
//   add_step_closure   a callback after the step's values are materialized (xm.add_step_closure)
//   save / load        a state dict of named tensors to one file and back (xm.save, torch.load)
//   all_reduce, all_gather, reduce_scatter, all_to_all
//                      collectives on per-device tensors (xm.all_reduce, ...)
//
// The collectives act on per-device values, i.e. inside a manual region
// (spmd::enable_manual_sharding ... spmd::disable_manual_sharding, torch_xla's manual sharding,
// JAX's shard_map): each device runs the region's code on its own piece, and these functions
// lower to XLA's collective ops with `replica_groups` in global device ids, executed by the
// runtime's transport under `tessel run` and mesh::LocalMesh. A data-parallel loop written by
// hand (the tutorial's example, docs/tutorial.md):
//
//   Tensor x = enable_manual_sharding(batch, {"data", kNone}, mesh);     // local rows
//   Tensor w = enable_manual_sharding(weights, {kNone, kNone}, mesh);    // a copy per device
//   Tensor loss = ...(x, w)...;                                          // this device's loss
//   std::vector<Tensor> g = Grad(loss, {w});
//   g = all_reduce(ReduceKind::kAdd, g, 1.0 / n, replica_groups(mesh, {"data"}));  // mean
//   ... disable_manual_sharding(w - lr * g[0], {kNone, kNone}, {d, k}, mesh) ...
//
// In the SPMD style (mark_sharding on global tensors, as examples/gpt does) the partitioner
// inserts the gradient reductions itself, and optimizer_step is called without groups.
//
// Source: PyTorch/XLA torch_xla/core/xla_model.py (optimizer_step, add_step_closure, save,
// all_reduce, all_gather, reduce_scatter, all_to_all) and XLA's collective semantics
// (operation_semantics: AllReduce, AllGather, ReduceScatter, AllToAll).
#ifndef TESSEL_NN_XLA_MODEL_H_
#define TESSEL_NN_XLA_MODEL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/collective_device_list.h"
#include "tessel/core/graph.h"
#include "tessel/core/tensor.h"
#include "tessel/nn/optim.h"
#include "tessel/spmd/mesh.h"

namespace tessel::nn {

// ---------------------------------------------------------------------------------------------
// Replica groups.

// The replica groups of a collective over the mesh axes `axes` (by name): devices that differ
// only in their coordinates along those axes form one group, ordered row-major over `axes` in
// the order given (JAX's axis_name groups in shard_map; torch_xla's groups). Example: mesh
// ["data"=2, "model"=4] with ids 0..7, {"data"} -> {{0,4},{1,5},{2,6},{3,7}}; {"model"} ->
// {{0,1,2,3},{4,5,6,7}}; every axis -> one group of all 8 devices.
// Errors: kInvalidArgument naming an unknown or repeated axis and the mesh's axes.
[[nodiscard]] absl::StatusOr<CollectiveDeviceList> replica_groups(
    const spmd::Mesh& mesh, const std::vector<std::string>& axes);

// ---------------------------------------------------------------------------------------------
// Collectives on per-device tensors (inside a manual region). `groups` are global device ids;
// empty groups mean one group of every device of the global mesh (spmd::set_global_mesh), as
// torch_xla's groups=None. Errors are returned in the result tensors' status (the lazy API's
// way): kFailedPrecondition for empty groups without a global mesh; kInvalidArgument for groups
// of unequal size, a repeated device, a dim out of range or not divisible as the op needs.

// The elementwise reduction (`reduce_type`: kAdd, kMultiply, kMaximum, kMinimum, kAnd, kOr) of
// each tensor over its group, times `scale` (applied after the reduction, and skipped when it is
// 1; a float scale on an integer tensor is kInvalidArgument). One all-reduce per tensor. Shapes:
// unchanged. Example: groups {{0,1}}, device 0 holds [1,2], device 1 [3,4], scale 0.5 -> both
// get [2,3].
// Source: torch_xla xm.all_reduce(reduce_type, inputs, scale, groups).
std::vector<Tensor> all_reduce(ReduceKind reduce_type, absl::Span<const Tensor> tensors,
                               double scale = 1.0, CollectiveDeviceList groups = {});

// The group's values concatenated along `dim` in group order. Shapes: local [4,8], groups of 2,
// dim 0 -> [8,8]. Source: torch_xla xm.all_gather(value, dim, groups).
Tensor all_gather(const Tensor& value, int64_t dim, CollectiveDeviceList groups = {});

// The group's values reduced with `reduce_type` and times `scale`, then split along
// `scatter_dim` into `shard_count` pieces, piece i to the group's i-th device. `shard_count`
// must equal the group size (kInvalidArgument otherwise). Shapes: local [8,8], groups of 2,
// scatter_dim 0 -> [4,8]. Source: torch_xla xm.reduce_scatter(reduce_type, input, scale,
// scatter_dim, shard_count, groups).
Tensor reduce_scatter(ReduceKind reduce_type, const Tensor& input, double scale,
                      int64_t scatter_dim, int64_t shard_count, CollectiveDeviceList groups = {});

// `split_dimension` is cut into `split_count` pieces, piece i goes to the group's i-th device,
// and the pieces received are concatenated along `concat_dimension` in group order.
// `split_count` must equal the group size and divide the split dimension (kInvalidArgument
// otherwise). Shapes: local [4,6], split_dimension 0, concat_dimension 1, groups of 2 -> [2,12].
// Lowering: XLA's array all-to-all on a leading dim of size split_count (reshape, transpose,
// all-to-all, transpose, reshape), as XLA's all-to-all decomposition does for split != concat.
// Source: torch_xla xm.all_to_all(value, split_dimension, concat_dimension, split_count,
// groups).
Tensor all_to_all(const Tensor& value, int64_t split_dimension, int64_t concat_dimension,
                  int64_t split_count, CollectiveDeviceList groups = {});

// ---------------------------------------------------------------------------------------------
// The optimizer step.

struct OptimizerStepOptions {
  // Average the gradients over these replica groups first (all_reduce kAdd, scale 1 / group
  // size): a data-parallel loop in a manual region. Empty: no reduction (SPMD, where the
  // partitioner reduces the gradients of global tensors itself).
  CollectiveDeviceList groups;
  // Clip by global norm (ClipGradNorm) after the reduction when > 0.
  double max_grad_norm = 0;
};

// Records one optimizer update into the pending step graph: the gradient reduction (when
// `options.groups` is set), clipping (when max_grad_norm > 0) and `optimizer.Step(params,
// grads)`, so that the next Sync() runs forward, backward, reduction and update as one graph
// (no extra execution). Returns the global gradient norm before clipping (a lazy scalar), or an
// undefined tensor when max_grad_norm is 0.
// Errors: those of Optimizer::Step; a reduction's or clipping's error (kInvalidArgument, e.g.
// groups of unequal size); nothing is assigned then.
// Source: torch_xla xm.optimizer_step(optimizer, optimizer_args, groups), which all-reduces the
// gradients (reduce_gradients) and calls optimizer.step().
[[nodiscard]] absl::StatusOr<Tensor> optimizer_step(Optimizer& optimizer,
                                                    absl::Span<Tensor* const> params,
                                                    absl::Span<const Tensor> grads,
                                                    const OptimizerStepOptions& options = {});

// Runs `closure` after the next Sync() (torch_xla mark_step) on this thread, when the step's
// values are data: reading a captured tensor there costs no execution (AddStepClosure in
// core/tensor.h). Source: torch_xla xm.add_step_closure(closure, run_async=False).
void add_step_closure(std::function<absl::Status()> closure);

// ---------------------------------------------------------------------------------------------
// Saving and loading tensors.

// Named tensors in a fixed order (torch's state_dict).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// Writes `state_dict` to `path` as one safetensors file (the Hugging Face format: an 8-byte
// little-endian header length, a JSON header mapping each name to {"dtype", "shape",
// "data_offsets"}, then the raw little-endian row-major bytes), readable by Python's
// `safetensors` and torch. Every tensor is read back whole first (ToLiteral: a sharded value is
// assembled from its shards), so on a mesh every host must call save at the same point; only
// hosts with `write` true write the file (torch_xla's master_only: pass host index == 0). The
// file is written to a temporary name, fsynced and renamed (WriteFileAtomically).
// Errors: a tensor's own status or its read-back error; kInvalidArgument for an empty or
// repeated name, or when the file cannot be written (naming the path).
// Source: torch_xla xm.save(data, file, master_only) (moves the tensors to the CPU, then
// torch.save); the safetensors format (github.com/huggingface/safetensors).
[[nodiscard]] absl::Status save(const StateDict& state_dict, const std::string& path,
                                bool write = true);

// Reads a file written by save (or any safetensors file of the dtypes Tessel has: BOOL, U8, I32,
// I64, BF16, F16, F32, F64, U32, U64) as host tensors (Tensor::FromLiteral) in the file's
// order; place them on a mesh with mark_sharding. Shapes: global, as saved.
// Errors: kNotFound (no such file); kDataLoss naming the path and what is wrong (a header that
// is not JSON or is longer than the file, a tensor whose bytes fall outside the data or do not
// match its shape, an unknown dtype).
[[nodiscard]] absl::StatusOr<StateDict> load(const std::string& path);

}  // namespace tessel::nn

#endif  // TESSEL_NN_XLA_MODEL_H_
