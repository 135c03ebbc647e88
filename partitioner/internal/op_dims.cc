#include "tessel/partitioner/internal/op_dims.h"

#include <algorithm>

#include "tessel/core/shape_inference.h"
#include "tessel/core/window.h"

namespace tessel::partitioner::internal {

namespace {
bool Contains(const std::vector<int64_t>& dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}
}  // namespace

// Batch dims first, then free dims, then contracting dims: the first output_rank space dims
// are then exactly the dot's output dims in XLA's output order (batch, lhs free, rhs free), so
// a sharding of the space projects onto the output with Iota(output_rank) and the contracting
// tiles are the trailing data dims (ResultSharding in handlers/dot.cc relies on that).
DotSpace MakeDotSpace(const Node& dot) {
  const DotDimensionNumbers& dn = dot.attrs().dot;
  const int64_t lr = dot.operand(0)->shape().rank(), rr = dot.operand(1)->shape().rank();
  DotSpace s;
  s.lhs_to_space.assign(lr, -1);
  s.rhs_to_space.assign(rr, -1);
  int64_t next = 0;
  for (size_t i = 0; i < dn.lhs_batch_dims.size(); ++i, ++next) {
    s.lhs_to_space[dn.lhs_batch_dims[i]] = next;
    s.rhs_to_space[dn.rhs_batch_dims[i]] = next;
  }
  for (int64_t d = 0; d < lr; ++d) {
    if (s.lhs_to_space[d] < 0 && !Contains(dn.lhs_contracting_dims, d)) s.lhs_to_space[d] = next++;
  }
  for (int64_t d = 0; d < rr; ++d) {
    if (s.rhs_to_space[d] < 0 && !Contains(dn.rhs_contracting_dims, d)) s.rhs_to_space[d] = next++;
  }
  s.output_rank = next;
  for (size_t i = 0; i < dn.lhs_contracting_dims.size(); ++i, ++next) {
    s.lhs_to_space[dn.lhs_contracting_dims[i]] = next;
    s.rhs_to_space[dn.rhs_contracting_dims[i]] = next;
  }
  s.rank = next;
  return s;
}

ConvSpace MakeConvSpace(const Node& convolution) {
  const ConvolutionDimensionNumbers& d = convolution.attrs().convolution;
  const OpAttributes& a = convolution.attrs();
  const int64_t num_spatial = static_cast<int64_t>(d.input_spatial_dimensions.size());
  const int64_t out_rank = num_spatial + 2;
  ConvSpace s;
  s.output_rank = out_rank;
  s.rank = out_rank + 1 + num_spatial;
  s.lhs_to_space.assign(out_rank, -1);
  s.rhs_to_space.assign(out_rank, -1);
  const int64_t contracting = out_rank;
  s.lhs_to_space[d.input_batch_dimension] =
      a.batch_group_count > 1 ? d.output_feature_dimension : d.output_batch_dimension;
  s.lhs_to_space[d.input_feature_dimension] =
      a.feature_group_count > 1 ? d.output_feature_dimension : contracting;
  s.rhs_to_space[d.kernel_input_feature_dimension] = contracting;
  s.rhs_to_space[d.kernel_output_feature_dimension] = d.output_feature_dimension;
  for (int64_t k = 0; k < num_spatial; ++k) {
    s.lhs_to_space[d.input_spatial_dimensions[k]] = d.output_spatial_dimensions[k];
    s.rhs_to_space[d.kernel_spatial_dimensions[k]] = out_rank + 1 + k;
    // A trivial window dim (size 1, stride 1, no padding or dilation) maps element to element,
    // like the batch dim: its tiling needs no halo.
    if (!IsTrivialWindowDim(a.window[k])) s.windowed.push_back(d.output_spatial_dimensions[k]);
    s.whole.push_back(out_rank + 1 + k);
  }
  if (a.feature_group_count > 1) {
    s.whole.push_back(contracting);
    s.group_dim = d.output_feature_dimension;
    s.group_count = a.feature_group_count;
  }
  if (a.batch_group_count > 1) {
    s.whole.push_back(d.output_batch_dimension);
    s.group_dim = d.output_feature_dimension;
    s.group_count = a.batch_group_count;
  }
  return s;
}

bool IsConvolutionKernelSmall(const Node& convolution) {
  const ConvolutionDimensionNumbers& d = convolution.attrs().convolution;
  const Shape& rhs = convolution.operand(1)->shape();
  int64_t kernel_product = 1;
  int64_t output_product = 1;
  for (size_t k = 0; k < d.input_spatial_dimensions.size(); ++k) {
    const int64_t kernel = rhs.dim(d.kernel_spatial_dimensions[k]);
    const int64_t output = convolution.shape().dim(d.output_spatial_dimensions[k]);
    kernel_product *= kernel;
    output_product *= output;
    if (kernel >= output && (k < 2 || kernel > 3 || kernel_product >= output_product)) {
      return false;
    }
  }
  return true;
}

GatherPassDims MakeGatherPassDims(const Shape& operand, const Shape& indices,
                                  const GatherDimensionNumbers& g) {
  const GatherDimMap map = MapGatherDims(operand.rank(), indices.rank(), g);
  GatherPassDims p;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (map.operand_to_output[d] >= 0 && g.slice_sizes[d] == operand.dim(d) &&
        !Contains(g.start_index_map, d)) {
      p.operand_pass.push_back(d);
      p.operand_pass_out.push_back(map.operand_to_output[d]);
    }
  }
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (map.indices_to_output[d] < 0) continue;
    p.index_batch.push_back(d);
    p.index_batch_out.push_back(map.indices_to_output[d]);
  }
  for (size_t i = 0; i < g.operand_batching_dims.size(); ++i) {
    p.operand_batching.push_back(g.operand_batching_dims[i]);
    p.indices_batching.push_back(g.start_indices_batching_dims[i]);
    p.batching_out.push_back(map.indices_to_output[g.start_indices_batching_dims[i]]);
  }
  return p;
}

bool IsDimPreserving(Opcode op) {
  return op == Opcode::kSlice || op == Opcode::kPad || op == Opcode::kConcatenate ||
         op == Opcode::kDynamicSlice || op == Opcode::kDynamicUpdateSlice;
}

// A dim counts as changed as soon as any element moves or the extent differs (a strided slice,
// interior padding); only dims that pass through element for element keep their tiling, since
// the local op runs on each device's shard with those dims at local size.
std::vector<int64_t> ChangedDims(const Node& node) {
  const OpAttributes& a = node.attrs();
  const Shape& in = node.operand(0)->shape();
  std::vector<int64_t> dims;
  if (!IsDimPreserving(node.opcode())) return dims;
  for (int64_t d = 0; d < in.rank(); ++d) {
    bool changed = false;
    switch (node.opcode()) {
      case Opcode::kSlice:
        changed = a.slice[d].start != 0 || a.slice[d].limit != in.dim(d) || a.slice[d].stride != 1;
        break;
      case Opcode::kPad:
        changed = a.padding[d].low != 0 || a.padding[d].high != 0 || a.padding[d].interior != 0;
        break;
      case Opcode::kConcatenate:
        changed = d == a.dimensions[0];
        break;
      // A full-size window has its start clamped to 0 (XLA semantics), so the dim passes through
      // whatever the start index is.
      case Opcode::kDynamicSlice:
        changed = a.dynamic_slice_sizes[d] != in.dim(d);
        break;
      case Opcode::kDynamicUpdateSlice:
        changed = node.operand(1)->shape().dim(d) != in.dim(d);
        break;
      default:
        break;
    }
    if (changed) dims.push_back(d);
  }
  return dims;
}

// Half the extent: below it most of a device's shard is dropped and its window lies mostly in
// other shards, so exchanging halos would move about as much as gathering the dim.
std::vector<int64_t> TilingKeptDims(const Node& node) {
  std::vector<int64_t> dims;
  const Opcode op = node.opcode();
  if (op != Opcode::kSlice && op != Opcode::kPad && op != Opcode::kConcatenate) return dims;
  const Shape& in = node.operand(0)->shape();
  for (int64_t d : ChangedDims(node)) {
    if (op == Opcode::kPad && node.attrs().padding[d].interior != 0) continue;
    if (op != Opcode::kConcatenate && 2 * node.shape().dim(d) < in.dim(d)) continue;
    dims.push_back(d);
  }
  return dims;
}

std::vector<int64_t> ReplicatedChangedDims(const Node& node) {
  const std::vector<int64_t> kept = TilingKeptDims(node);
  std::vector<int64_t> dims;
  for (int64_t d : ChangedDims(node)) {
    if (!Contains(kept, d)) dims.push_back(d);
  }
  return dims;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace tessel::partitioner::internal
