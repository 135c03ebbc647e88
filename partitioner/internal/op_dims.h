// How ops relate dims (internal to the partitioner; shared by propagation and the handlers).
#ifndef TESSEL_PARTITIONER_INTERNAL_OP_DIMS_H_
#define TESSEL_PARTITIONER_INTERNAL_OP_DIMS_H_

#include <cstdint>
#include <vector>

#include "tessel/core/graph.h"

namespace tessel::partitioner::internal {

// A dot's iteration space, ordered [batch..., lhs free..., rhs free..., contracting...]: the
// space dim of every lhs and rhs dim. The first `output_rank` space dims are the output's.
struct DotSpace {
  std::vector<int64_t> lhs_to_space;
  std::vector<int64_t> rhs_to_space;
  int64_t output_rank = 0;
  int64_t rank = 0;
};
DotSpace MakeDotSpace(const Node& dot);

// A convolution's iteration space, as a DotSpace: the first output_rank space dims are the
// output's dims (in the output's order), space dim output_rank is the input feature
// (contracting) dim, and output_rank + 1 + k is kernel spatial dim k.
//   feature_group_count == 1: lhs feature and rhs input feature map to the contracting dim
//   (sharded: partial sums); feature_group_count > 1: the lhs feature dim maps to the output
//   feature dim (the groups), the rhs input feature dim to the contracting one.
//   batch_group_count > 1: the lhs batch dim maps to the output feature dim (the groups).
// `windowed` are the space dims of the spatial dims whose window is not trivial (lhs and output
// spatial; a 1x1 convolution has none); `whole` the dims
// the partitioner keeps unsharded: kernel spatial, the contracting dim when feature groups own
// the lhs feature dim, the output batch dim under batch groups. `group_dim` (-1 if none) may be
// tiled only by a divisor of `group_count`. Source: XLA convolution_handler.cc (batch, output
// feature, input feature and grouped cases).
struct ConvSpace : DotSpace {
  std::vector<int64_t> windowed;
  std::vector<int64_t> whole;
  int64_t group_dim = -1;
  int64_t group_count = 1;
};
ConvSpace MakeConvSpace(const Node& convolution);

// True when the convolution's kernel is smaller than its output along its spatial dims, as in
// a forward convolution; false for a backward one whose window spans the image (the weight
// gradient, kernel = output gradient): there an output spatial dim indexes kernel positions, so
// it does not follow the lhs's spatial tiling. Per spatial dim k (kernel extent K_k, output
// extent O_k, products over dims 0..k): not small as soon as K_k >= O_k and (k < 2 or K_k > 3
// or prod K >= prod O). Source: XLA sharding_propagation.cc IsConvolutionKernelSmall.
bool IsConvolutionKernelSmall(const Node& convolution);

// The dims along which a gather passes a tiling between its operand, its indices and its
// output with no communication (a scatter through ScatterAsGather: its updates are that
// gather's output, its result the operand). Each list pairs a dim of one side with the dim at
// the same position of the other list.
//   operand passthrough: operand dims whose window is the whole dim and that no start index
//     moves, and the output (offset) dims of their windows;
//   index batch: the indices dims other than index_vector_dim, and their output (batch) dims;
//   batching: operand_batching_dims, start_indices_batching_dims (same order) and the output
//     dims of the latter.
// Source: XLA hlo_sharding_util GatherOutputShardingFromOperandOperandPassthroughDimensions,
// GatherOutputShardingFromIndexIndexPassthroughDimensions, GatherOperandShardingFromOutput and
// the explicit batch (parallel) dims of GetGatherParallelBatchDims.
struct GatherPassDims {
  std::vector<int64_t> operand_pass, operand_pass_out;
  std::vector<int64_t> index_batch, index_batch_out;
  std::vector<int64_t> operand_batching, indices_batching, batching_out;
};
GatherPassDims MakeGatherPassDims(const Shape& operand, const Shape& indices,
                                  const GatherDimensionNumbers& dnums);

// Dims of operand 0 whose extent a slice, pad, concatenate, dynamic-slice or
// dynamic-update-slice changes (the others pass through element for element); empty for other
// ops.
std::vector<int64_t> ChangedDims(const Node& node);

// The changed dims along which slice, pad and concatenate keep their operand's tiling, since
// halo exchange (partitioner/internal/halo.h) can produce the result tiled the same way: a
// slice's or pad's dim that keeps at least half its extent (interior padding excluded) and a
// concatenate's dim. Empty for other ops. Source: XLA ShardingPropagation passes a slice's, pad's
// and concatenate's sharding through (GSPMD section 3.3).
std::vector<int64_t> TilingKeptDims(const Node& node);

// ChangedDims(node) without TilingKeptDims(node): the dims whose tiling propagation drops.
std::vector<int64_t> ReplicatedChangedDims(const Node& node);

// True for the ops ChangedDims describes.
bool IsDimPreserving(Opcode opcode);

// 0, 1, ..., n - 1.
std::vector<int64_t> Iota(int64_t n);

}  // namespace tessel::partitioner::internal

#endif  // TESSEL_PARTITIONER_INTERNAL_OP_DIMS_H_
