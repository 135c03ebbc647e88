// The property that matters most (DESIGN.md "Tests"): for random graphs and random shardings on
// meshes of 1 to 8 devices, executing the partitioned program on in-process devices and
// assembling the outputs equals executing the unpartitioned graph.
//
// Each case: a random mesh (1, 2, 4, 6 or 8 devices; 1-3 axes; sometimes permuted device ids),
// a random graph (chains and DAGs of elementwise, broadcast, transpose, reshape, reduce, dot,
// slice, pad, concatenate, dynamic-slice, dynamic-update-slice, iota, rng, gather, scatter, and
// u32 / u64 bit chains (bitcast-convert, shifts, xor, converts) and reduce-precision, with odd
// and uneven sizes; a second test: convolution, reduce-window, select-and-scatter, reverse) and
// random mark_sharding-style annotations (partition specs over the mesh axes, so partial
// replication is common). On failure the global HLO text is printed.
// HaloExchangeSlicePadConcatenate builds chains of slices, pads and concatenates along a tiled dim,
// the cases the halo exchange (partitioner/internal/halo.h) serves. The partitioned program is run
// and its outputs assembled by partitioner::RunPartitioned (partitioner/verify.h), the same code as
// `tessel verify`. WhileLoopsPartitionedEqualUnpartitioned does the same for random while loops.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/testing/gather_scatter.h"
#include "tessel/core/window.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/verify.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"

namespace tessel {
namespace {

using spmd::Mesh;
using spmd::PartitionSpec;

class CaseBuilder {
 public:
  explicit CaseBuilder(uint64_t seed) : gen_(seed) {}

  int64_t Rand(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  bool Coin(double p = 0.5) { return std::bernoulli_distribution(p)(gen_); }

  // A random mesh over 1, 2, 4, 6 or 8 devices.
  Mesh RandomMesh() {
    static const int64_t kSizes[] = {1, 2, 4, 6, 8};
    int64_t n = kSizes[Rand(0, 4)];
    std::vector<int64_t> shape;
    int64_t rest = n;
    int64_t axes = Rand(1, 3);
    for (int64_t a = 0; a < axes - 1; ++a) {
      std::vector<int64_t> divisors;
      for (int64_t d = 1; d <= rest; ++d) {
        if (rest % d == 0) divisors.push_back(d);
      }
      int64_t d = divisors[Rand(0, divisors.size() - 1)];
      shape.push_back(d);
      rest /= d;
    }
    shape.push_back(rest);
    std::vector<int64_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = i;
    if (Coin(0.3)) std::shuffle(ids.begin(), ids.end(), gen_);
    std::vector<std::string> names;
    for (size_t a = 0; a < shape.size(); ++a) names.push_back("a" + std::to_string(a));
    return *Mesh::Create(ids, shape, names);
  }

  // A random sharding for a rank-`rank` value: each dim gets an unused axis or none.
  std::string RandomSharding(const Mesh& mesh, int64_t rank) {
    std::vector<PartitionSpec::Entry> entries;
    std::vector<int> axes(mesh.logical_mesh().rank());
    for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int>(i);
    std::shuffle(axes.begin(), axes.end(), gen_);
    size_t next = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (next < axes.size() && Coin(0.6)) {
        entries.emplace_back(axes[next++]);
      } else {
        entries.emplace_back(std::nullopt);
      }
    }
    auto s = spmd::ShardingFromPartitionSpec(mesh, rank, PartitionSpec(entries));
    return s.ok() ? s->ToString() : "";
  }

  // A rank-`rank` value tiled along `dim` over mesh axis `axis`, replicated over the others.
  std::string AxisSharding(int64_t rank, int64_t dim, int axis) {
    std::vector<PartitionSpec::Entry> entries(rank, std::nullopt);
    entries[dim] = axis;
    auto s = spmd::ShardingFromPartitionSpec(*mesh_, rank, PartitionSpec(entries));
    return s.ok() ? s->ToString() : "";
  }

  int64_t RandomDim() {
    static const int64_t kDims[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12};
    return kDims[Rand(0, 9)];
  }

  Shape RandomShape(int64_t rank) {
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < rank; ++i) dims.push_back(RandomDim());
    return Shape(DType::kF32, dims);
  }

  // The node, or nullptr when the random op does not fit its operand (then it is skipped).
  static Node* OrNull(absl::StatusOr<Node*> node) { return node.ok() ? *node : nullptr; }

  Node* NewParameter(Graph& g, const Shape& shape) {
    return g.AddParameter(static_cast<int64_t>(g.parameters().size()), shape).value();
  }

  Node* Scalar(Graph& g, double v) {
    return g.AddConstant(Literal::Scalar<float>(static_cast<float>(v)));
  }

  // Applies one random op to `x` (adding parameters as needed); nullptr if it does not apply.
  Node* RandomOp(Graph& g, Node* x, const std::vector<Node*>& pool) {
    const Shape& s = x->shape();
    const int64_t rank = s.rank();
    switch (Rand(0, 18)) {
      case 0: {  // binary elementwise with another value of the same shape
        Node* y = nullptr;
        for (Node* p : pool) {
          if (p != x && p->shape() == s && Coin()) y = p;
        }
        if (y == nullptr) y = NewParameter(g, s);
        static const Opcode kOps[] = {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply,
                                      Opcode::kMaximum, Opcode::kMinimum};
        return OrNull(g.AddNode(kOps[Rand(0, 4)], {x, y}));
      }
      case 1: {
        static const Opcode kOps[] = {Opcode::kTanh,  Opcode::kNegate,   Opcode::kExp,
                                      Opcode::kAbs,   Opcode::kLogistic, Opcode::kSine,
                                      Opcode::kCosine};
        return OrNull(g.AddNode(kOps[Rand(0, 6)], {x}));
      }
      case 2: {  // broadcast: insert a new dim
        if (rank >= 3) return nullptr;
        int64_t pos = Rand(0, rank);
        std::vector<int64_t> out = s.dims();
        out.insert(out.begin() + pos, RandomDim());
        OpAttributes a;
        for (int64_t d = 0; d <= rank; ++d) {
          if (d != pos) a.dimensions.push_back(d);
        }
        return OrNull(g.AddNode(Opcode::kBroadcast, Shape(DType::kF32, out), {x}, a));
      }
      case 3: {  // transpose
        if (rank < 2) return nullptr;
        OpAttributes a;
        for (int64_t d = 0; d < rank; ++d) a.dimensions.push_back(d);
        std::shuffle(a.dimensions.begin(), a.dimensions.end(), gen_);
        return OrNull(g.AddNode(Opcode::kTranspose, {x}, a));
      }
      case 4: {  // reshape: merge two dims or split one
        if (rank < 1) return nullptr;
        std::vector<int64_t> out = s.dims();
        if (rank >= 2 && Coin()) {
          int64_t i = Rand(0, rank - 2);
          out[i] *= out[i + 1];
          out.erase(out.begin() + i + 1);
        } else {
          int64_t i = Rand(0, rank - 1);
          if (out[i] % 2 != 0 || rank >= 3) return nullptr;
          out[i] /= 2;
          out.insert(out.begin() + i + 1, 2);
        }
        return OrNull(g.AddNode(Opcode::kReshape, Shape(DType::kF32, out), {x}));
      }
      case 5: {  // reduce
        if (rank < 1) return nullptr;
        OpAttributes a;
        for (int64_t d = 0; d < rank; ++d) {
          if (Coin()) a.dimensions.push_back(d);
        }
        if (a.dimensions.empty()) a.dimensions.push_back(Rand(0, rank - 1));
        bool max = Coin(0.3);
        a.reduce_kind = max ? ReduceKind::kMaximum : ReduceKind::kAdd;
        Node* init = Scalar(g, max ? -1e30 : 0.0);
        return OrNull(g.AddNode(Opcode::kReduce, {x, init}, a));
      }
      case 6:
      case 7: {  // dot: contract the last dim with a new [k, n] parameter, or batch dot
        if (rank < 1) return nullptr;
        int64_t k = s.dim(rank - 1);
        OpAttributes a;
        Node* w;
        if (rank == 3 && Coin()) {
          w = NewParameter(g, Shape(DType::kF32, {s.dim(0), k, RandomDim()}));
          a.dot.lhs_batch_dims = {0};
          a.dot.rhs_batch_dims = {0};
          a.dot.rhs_contracting_dims = {1};
        } else {
          w = NewParameter(g, Shape(DType::kF32, {k, RandomDim()}));
          a.dot.rhs_contracting_dims = {0};
        }
        a.dot.lhs_contracting_dims = {rank - 1};
        return OrNull(g.AddNode(Opcode::kDot, {x, w}, a));
      }
      case 8: {  // slice
        OpAttributes a;
        for (int64_t d = 0; d < rank; ++d) {
          int64_t start = Rand(0, s.dim(d) - 1);
          int64_t limit = Rand(start + 1, s.dim(d));
          a.slice.push_back(SliceDim{start, limit, Rand(1, 2)});
        }
        return OrNull(g.AddNode(Opcode::kSlice, {x}, a));
      }
      case 9: {  // pad
        OpAttributes a;
        for (int64_t d = 0; d < rank; ++d) {
          a.padding.push_back(PadDim{Rand(0, 2), Rand(-1, 2), Rand(0, 1)});
          if (s.dim(d) + a.padding.back().high < 1) a.padding.back().high = 0;
        }
        return OrNull(g.AddNode(Opcode::kPad, {x, Scalar(g, 0.5)}, a));
      }
      case 10: {  // concatenate with a new parameter
        if (rank < 1) return nullptr;
        int64_t d = Rand(0, rank - 1);
        std::vector<int64_t> other = s.dims();
        other[d] = RandomDim();
        Node* y = NewParameter(g, Shape(DType::kF32, other));
        OpAttributes a;
        a.dimensions = {d};
        return OrNull(g.AddNode(Opcode::kConcatenate, {x, y}, a));
      }
      case 11: {  // dynamic-slice with constant starts (clamped)
        std::vector<Node*> operands = {x};
        OpAttributes a;
        for (int64_t d = 0; d < rank; ++d) {
          operands.push_back(g.AddConstant(Literal::Scalar<int32_t>(Rand(-1, s.dim(d)))));
          a.dynamic_slice_sizes.push_back(Rand(1, s.dim(d)));
        }
        return OrNull(g.AddNode(Opcode::kDynamicSlice, operands, a));
      }
      case 12: {  // dynamic-update-slice with a new parameter
        std::vector<int64_t> update;
        for (int64_t d = 0; d < rank; ++d) update.push_back(Rand(1, s.dim(d)));
        std::vector<Node*> operands = {x, NewParameter(g, Shape(DType::kF32, update))};
        for (int64_t d = 0; d < rank; ++d) {
          operands.push_back(g.AddConstant(Literal::Scalar<int32_t>(Rand(0, s.dim(d)))));
        }
        return OrNull(g.AddNode(Opcode::kDynamicUpdateSlice, operands));
      }
      case 13: {  // + iota along a random dim
        if (rank < 1) return nullptr;
        OpAttributes a;
        a.iota_dimension = Rand(0, rank - 1);
        Node* iota = OrNull(g.AddNode(Opcode::kIota, s, {}, a));
        return iota == nullptr ? nullptr : OrNull(g.AddNode(Opcode::kAdd, {x, iota}));
      }
      case 14: {  // * rng
        OpAttributes a;
        a.rng_seed = static_cast<uint64_t>(Rand(0, 1000));
        a.rng_distribution = RngDistribution::kUniform;
        Node* r = OrNull(g.AddNode(Opcode::kRng, s, {Scalar(g, 0.5), Scalar(g, 1.5)}, a));
        return r == nullptr ? nullptr : OrNull(g.AddNode(Opcode::kMultiply, {x, r}));
      }
      case 15:
      case 16:  // gather from x, or scatter-add / scatter-overwrite into x
        return RandomGatherOrScatter(g, x, Rand(0, 2));
      case 17:  // + bits of a new parameter through u32 and u64 ops
        return RandomBits(g, x);
      case 18: {  // + reduce-precision of a new parameter (to bf16 or f16 precision)
        OpAttributes a;
        const bool bf16 = Coin();
        a.exponent_bits = bf16 ? 8 : 5;
        a.mantissa_bits = bf16 ? 7 : 10;
        Node* rounded = OrNull(g.AddNode(Opcode::kReducePrecision, {NewParameter(g, s)}, a));
        return rounded == nullptr ? nullptr : OrNull(g.AddNode(Opcode::kAdd, {x, rounded}));
      }
    }
    return nullptr;
  }

  // x + f(bits of a new parameter p): bitcast-convert p to u32, shift right logically (keeping
  // the sign, exponent and top mantissa bits), widen to u64, xor with a u64 iota counter along a
  // random dim, narrow to u32, convert to f32 and scale into [0, 2): the ops of jax.random's
  // threefry on unsigned values, each partitioned elementwise. The bits come from a parameter,
  // not from a computed value, so that both runs see the same bits (a computed value may differ
  // by an ulp between the partitioned and the unpartitioned run).
  Node* RandomBits(Graph& g, Node* x) {
    const Shape& s = x->shape();
    if (s.rank() < 1) return nullptr;
    const Shape u32(DType::kU32, s.dims()), u64(DType::kU64, s.dims());
    Node* bits = OrNull(g.AddNode(Opcode::kBitcastConvert, u32, {NewParameter(g, s)}));
    if (bits == nullptr) return nullptr;
    Node* shift = g.AddConstant(Literal::Scalar<uint32_t>(static_cast<uint32_t>(Rand(20, 24))));
    Node* shifts = OrNull(g.AddNode(Opcode::kBroadcast, u32, {shift}, OpAttributes()));
    Node* high = OrNull(g.AddNode(Opcode::kShiftRightLogical, {bits, shifts}));
    Node* wide = OrNull(g.AddNode(Opcode::kConvert, u64, {high}));
    OpAttributes along;
    along.iota_dimension = Rand(0, s.rank() - 1);
    Node* counter = OrNull(g.AddNode(Opcode::kIota, u64, {}, along));
    if (wide == nullptr || counter == nullptr) return nullptr;
    Node* mixed = OrNull(g.AddNode(Opcode::kXor, {wide, counter}));
    Node* narrow = OrNull(g.AddNode(Opcode::kConvert, u32, {mixed}));
    Node* value = OrNull(g.AddNode(Opcode::kConvert, s, {narrow}));
    if (value == nullptr) return nullptr;
    Node* scale = OrNull(g.AddNode(Opcode::kBroadcast, s, {Scalar(g, 1.0 / 2048)}, OpAttributes()));
    Node* scaled = OrNull(g.AddNode(Opcode::kMultiply, {value, scale}));
    return scaled == nullptr ? nullptr : OrNull(g.AddNode(Opcode::kAdd, {x, scaled}));
  }

  WindowDim RandomWindowDim(int64_t size_max, bool dilations) {
    WindowDim w;
    w.size = Rand(1, size_max);
    w.stride = Rand(1, 2);
    w.padding_low = Rand(0, 2);
    w.padding_high = Rand(0, 2);
    if (dilations && Coin(0.3)) w.base_dilation = 2;
    if (dilations && Coin(0.3)) w.window_dilation = 2;
    return w;
  }

  Node* RandomConvolution(Graph& g) {
    static const char* const kLabels[] = {"bf0_oi0->bf0",    "b0f_0io->b0f",    "0bf_i0o->f0b",
                                          "b01f_01io->b01f", "f01b_i01o->01bf", "bf01_oi01->bf01"};
    const ConvolutionDimensionNumbers d = ParseDimLabels(kLabels[Rand(0, 5)]).value();
    const int64_t ns = static_cast<int64_t>(d.input_spatial_dimensions.size());
    OpAttributes a;
    a.convolution = d;
    const int64_t groups = Coin(0.3) ? Rand(2, 3) : 1;
    if (groups > 1) (Coin() ? a.feature_group_count : a.batch_group_count) = groups;
    const int64_t batch = (a.batch_group_count > 1 ? groups : 1) * Rand(1, 5);
    const int64_t cg = Rand(1, 4);
    const int64_t out_features = groups * Rand(1, 3);
    std::vector<int64_t> ldims(ns + 2), rdims(ns + 2);
    ldims[d.input_batch_dimension] = batch;
    ldims[d.input_feature_dimension] = cg * a.feature_group_count;
    rdims[d.kernel_input_feature_dimension] = cg;
    rdims[d.kernel_output_feature_dimension] = out_features;
    for (int64_t k = 0; k < ns; ++k) {
      // Sometimes a trivial window dim (1x1 convolutions): its tiling is kept.
      a.window.push_back(Coin(0.25) ? WindowDim{} : RandomWindowDim(3, /*dilations=*/true));
      ldims[d.input_spatial_dimensions[k]] = Rand(3, 9);
      rdims[d.kernel_spatial_dimensions[k]] = a.window.back().size;
    }
    Node* lhs = NewParameter(g, Shape(DType::kF32, ldims));
    Node* rhs = NewParameter(g, Shape(DType::kF32, rdims));
    if (a.feature_group_count == 1 && Coin(0.35)) {
      // Both operands tiled along the contracting (input feature) dim over one axis, often
      // unevenly: partial sums whose padding must be masked.
      const int axis = static_cast<int>(Rand(0, mesh_->logical_mesh().rank() - 1));
      lhs->set_sharding(AxisSharding(ns + 2, d.input_feature_dimension, axis));
      rhs->set_sharding(AxisSharding(ns + 2, d.kernel_input_feature_dimension, axis));
      // cosine makes the padding of the local shards 1, not 0, on both sides.
      lhs = OrNull(g.AddNode(Opcode::kCosine, {lhs}));
      rhs = OrNull(g.AddNode(Opcode::kCosine, {rhs}));
    }
    return OrNull(g.AddNode(Opcode::kConvolution, {lhs, rhs}, a));
  }

  // A weight-gradient convolution: the activation (lhs, f0b or f01b: the real batch is the
  // contracted feature dim) and the output gradient (the "kernel", i0o / i01o) whose window
  // spans the image, both tiled along the same spatial dim (often unevenly), so the
  // kernel-tiled rule exchanges the activation's halo and all-reduces partial sums; a small
  // output (1-3 positions per spatial dim), sometimes with window dilation 2 (the weight
  // gradient of a stride-2 conv).
  Node* RandomWeightGradConvolution(Graph& g) {
    const bool two = Coin();
    const ConvolutionDimensionNumbers d =
        ParseDimLabels(two ? "f01b_i01o->01bf" : "f0b_i0o->0bf").value();
    const int64_t ns = two ? 2 : 1;
    const int64_t batch = Rand(1, 3), channels = Rand(1, 3), features = Rand(1, 3);
    OpAttributes a;
    a.convolution = d;
    std::vector<int64_t> ldims(ns + 2), rdims(ns + 2);
    ldims[d.input_feature_dimension] = batch;
    rdims[d.kernel_input_feature_dimension] = batch;
    ldims[d.input_batch_dimension] = channels;
    rdims[d.kernel_output_feature_dimension] = features;
    for (int64_t k = 0; k < ns; ++k) {
      WindowDim w;
      w.window_dilation = Coin(0.3) ? 2 : 1;
      w.padding_low = Rand(0, 2);
      w.padding_high = Rand(0, 2);
      const int64_t out = Rand(1, 3);
      const int64_t kernel = Rand(3, 12);
      // input + padding = (kernel - 1) * dilation + out: the lhs extent that gives `out`.
      const int64_t input = (kernel - 1) * w.window_dilation + out - w.padding_low - w.padding_high;
      if (input < 1) return nullptr;
      w.size = kernel;
      a.window.push_back(w);
      ldims[d.input_spatial_dimensions[k]] = input;
      rdims[d.kernel_spatial_dimensions[k]] = kernel;
    }
    Node* lhs = NewParameter(g, Shape(DType::kF32, ldims));
    Node* rhs = NewParameter(g, Shape(DType::kF32, rdims));
    const int64_t k = Rand(0, ns - 1);
    const int axis = static_cast<int>(Rand(0, mesh_->logical_mesh().rank() - 1));
    lhs->set_sharding(AxisSharding(ns + 2, d.input_spatial_dimensions[k], axis));
    rhs->set_sharding(AxisSharding(ns + 2, d.kernel_spatial_dimensions[k], axis));
    // cosine makes the padding of the local shards 1, not 0: the kernel tile's padding must be
    // zeroed and the activation's halo masked.
    lhs = OrNull(g.AddNode(Opcode::kCosine, {lhs}));
    rhs = OrNull(g.AddNode(Opcode::kCosine, {rhs}));
    return OrNull(g.AddNode(Opcode::kConvolution, {lhs, rhs}, a));
  }

  // The input gradient of a stride-2 convolution: lhs_dilate 2, the (output-gradient) lhs and
  // the result tiled along a spatial dim over the same axis, so the lhs-dilated halo exchange
  // serves it where every device's local padding agrees (else the fallback).
  Node* RandomInputGradConvolution(Graph& g) {
    const bool two = Coin();
    const ConvolutionDimensionNumbers d =
        ParseDimLabels(two ? "b01f_01io->b01f" : "b0f_0io->b0f").value();
    const int64_t ns = two ? 2 : 1;
    OpAttributes a;
    a.convolution = d;
    std::vector<int64_t> ldims(ns + 2), rdims(ns + 2);
    ldims[d.input_batch_dimension] = Rand(1, 2);
    ldims[d.input_feature_dimension] = rdims[d.kernel_input_feature_dimension] = Rand(1, 3);
    rdims[d.kernel_output_feature_dimension] = Rand(1, 3);
    for (int64_t k = 0; k < ns; ++k) {
      WindowDim w;
      w.size = Rand(1, 3);
      w.base_dilation = 2;
      w.padding_low = Rand(0, 2);
      w.padding_high = Rand(0, 2);
      a.window.push_back(w);
      ldims[d.input_spatial_dimensions[k]] = Rand(2, 13);
      rdims[d.kernel_spatial_dimensions[k]] = w.size;
    }
    Node* lhs = NewParameter(g, Shape(DType::kF32, ldims));
    Node* rhs = NewParameter(g, Shape(DType::kF32, rdims));
    rhs->set_sharding("{replicated}");
    const int64_t k = Rand(0, ns - 1);
    const int axis = static_cast<int>(Rand(0, mesh_->logical_mesh().rank() - 1));
    lhs->set_sharding(AxisSharding(ns + 2, d.input_spatial_dimensions[k], axis));
    lhs = OrNull(g.AddNode(Opcode::kCosine, {lhs}));
    Node* y = OrNull(g.AddNode(Opcode::kConvolution, {lhs, rhs}, a));
    if (y != nullptr) y->set_sharding(AxisSharding(ns + 2, d.output_spatial_dimensions[k], axis));
    return y;
  }

  Node* RandomReduceWindow(Graph& g) {
    Node* x = NewParameter(g, RandomShape(Rand(1, 3)));
    OpAttributes a;
    for (int64_t d = 0; d < x->shape().rank(); ++d) {
      a.window.push_back(Coin(0.4) ? WindowDim{} : RandomWindowDim(4, /*dilations=*/true));
    }
    const bool max = Coin();
    a.reduce_kind = max ? ReduceKind::kMaximum : ReduceKind::kAdd;
    Node* init = Scalar(g, max ? -1e30 : 0.0);
    return OrNull(g.AddNode(Opcode::kReduceWindow, {x, init}, a));
  }

  Node* RandomSelectAndScatter(Graph& g) {
    Node* x = NewParameter(g, RandomShape(Rand(1, 3)));
    OpAttributes a;
    for (int64_t d = 0; d < x->shape().rank(); ++d) {
      a.window.push_back(Coin(0.4) ? WindowDim{} : RandomWindowDim(3, /*dilations=*/false));
    }
    static const ComparisonDirection kDirections[] = {
        ComparisonDirection::kGe, ComparisonDirection::kGt, ComparisonDirection::kLe};
    a.comparison_direction = kDirections[Rand(0, 2)];
    a.reduce_kind = ReduceKind::kAdd;
    std::vector<int64_t> source_dims;
    for (int64_t d = 0; d < x->shape().rank(); ++d) {
      source_dims.push_back(WindowOutputSize(a.window[d], x->shape().dim(d)));
    }
    Node* source = NewParameter(g, Shape(DType::kF32, source_dims));
    return OrNull(g.AddNode(Opcode::kSelectAndScatter, {x, source, Scalar(g, 0)}, a));
  }

  // An embedding-style gather (`jnp.take(x, ids, axis=d)`), or with `scatter_add` its transpose
  // (`x.at[ids].add(updates)`, the embedding gradient): one start index per lookup into dim d
  // with a window of one row, the other dims whole. x often gets a sharding along d, so the
  // operand-parallel strategies are exercised; ids run a little past both ends of d to check
  // the clamping (gather) and the skipping (scatter).
  Node* RandomRowLookup(Graph& g, Node* x, bool scatter_add) {
    const Shape& shape = x->shape();
    const int64_t rank = shape.rank();
    const int64_t d = Rand(0, rank - 1);
    std::vector<int64_t> batch = {Rand(1, 7)};
    if (Coin()) batch.push_back(Rand(1, 4));
    const int64_t nb = static_cast<int64_t>(batch.size());
    Literal ids(Shape(DType::kS32, batch));
    for (int64_t i = 0; i < ids.num_elements(); ++i) {
      ids.data<int32_t>()[i] = static_cast<int32_t>(Rand(-2, shape.dim(d) + 1));
    }
    Node* indices = OrNull(g.AddNode(Opcode::kCopy, {g.AddConstant(std::move(ids))}));
    Node* table = OrNull(g.AddNode(Opcode::kCopy, {x}));
    if (indices == nullptr || table == nullptr) return nullptr;
    const int64_t mesh_axes = mesh_->logical_mesh().rank();
    if (mesh_axes >= 2 && Coin(0.5)) {
      // The layout of a vocab-sharded embedding: rows of the table over one mesh axis, the
      // ids' batch over another (the operand-parallel strategies' all-reduce case).
      const int rows_axis = static_cast<int>(Rand(0, mesh_axes - 1));
      const int ids_axis = static_cast<int>((rows_axis + Rand(1, mesh_axes - 1)) % mesh_axes);
      table->set_sharding(AxisSharding(rank, d, rows_axis));
      indices->set_sharding(AxisSharding(nb, 0, ids_axis));
    } else {
      if (Coin(0.6)) indices->set_sharding(RandomSharding(*mesh_, nb));
      if (Coin(0.8)) table->set_sharding(RandomSharding(*mesh_, rank));
    }
    OpAttributes a;
    for (int64_t i = 0; i < rank - 1; ++i) a.gather.offset_dims.push_back(nb + i);
    a.gather.collapsed_slice_dims = {d};
    a.gather.start_index_map = {d};
    a.gather.index_vector_dim = nb;
    a.gather.slice_sizes = shape.dims();
    a.gather.slice_sizes[d] = 1;
    Node* rows = OrNull(g.AddNode(Opcode::kGather, {table, indices}, a));
    if (!scatter_add || rows == nullptr) return rows;
    Node* updates = NewParameter(g, rows->shape());
    if (Coin(0.6)) updates->set_sharding(RandomSharding(*mesh_, rows->shape().rank()));
    OpAttributes sa;
    sa.scatter = GatherAsScatter(a.gather);
    return OrNull(g.AddNode(Opcode::kScatter, {table, indices, updates}, sa));
  }

  // Random valid dimension numbers over operand `x`; start indices are a constant (in range,
  // sometimes out of range) behind a copy that often gets a random sharding.
  Node* RandomGatherOrScatter(Graph& g, Node* x, int64_t kind) {
    if (x->shape().rank() < 1 || x->shape().num_elements() == 0) return nullptr;
    if (kind != 2 && Coin(0.4)) return RandomRowLookup(g, x, /*scatter_add=*/kind == 1);
    testing::RandomGather r = testing::MakeRandomGather(
        gen_, 4, DType::kF32, Coin() ? DType::kS32 : DType::kS64, x->shape().dims());
    if (r.output.num_elements() > 4096 || r.indices.num_elements() == 0) return nullptr;
    Node* constant = g.AddConstant(testing::RandomIndices(gen_, r.indices, r.operand));
    Node* indices = OrNull(g.AddNode(Opcode::kCopy, {constant}));
    if (indices == nullptr) return nullptr;
    if (Coin(0.7)) indices->set_sharding(RandomSharding(*mesh_, r.indices.rank()));
    OpAttributes a;
    if (kind == 0) {
      a.gather = r.dnums;
      return OrNull(g.AddNode(Opcode::kGather, {x, indices}, a));
    }
    Node* updates = NewParameter(g, r.output);
    a.scatter = GatherAsScatter(r.dnums);
    a.scatter_overwrite = kind == 2;
    return OrNull(g.AddNode(Opcode::kScatter, {x, indices, updates}, a));
  }

  std::unique_ptr<Graph> RandomGraph(const Mesh& mesh) {
    mesh_ = &mesh;
    auto g = std::make_unique<Graph>("random");
    std::vector<Node*> pool;
    int64_t inputs = Rand(1, 2);
    for (int64_t i = 0; i < inputs; ++i) pool.push_back(NewParameter(*g, RandomShape(Rand(1, 3))));
    int64_t ops = Rand(2, 8);
    for (int64_t i = 0; i < ops; ++i) {
      Node* x = pool[Rand(0, pool.size() - 1)];
      if (x->shape().num_elements() > 4096) continue;
      Node* y = RandomOp(*g, x, pool);
      if (y != nullptr && y->shape().num_elements() > 0) pool.push_back(y);
    }
    // Annotate: every parameter often, other nodes sometimes (never constants).
    for (Node* node : g->nodes()) {
      if (node->opcode() == Opcode::kConstant || node->shape().rank() == 0) continue;
      double p = node->opcode() == Opcode::kParameter ? 0.8 : 0.2;
      if (Coin(p)) node->set_sharding(RandomSharding(mesh, node->shape().rank()));
    }
    std::vector<Node*> outs = {pool.back()};
    if (pool.size() > 2 && Coin(0.4)) outs.push_back(pool[pool.size() - 2]);
    if (outs.size() == 1) {
      g->set_root(outs[0]);
    } else {
      g->set_root(OrNull(g->AddNode(Opcode::kTuple, outs)));
    }
    return g;
  }

  // A graph of windowed ops (convolution with random dim_labels, windows and feature / batch
  // groups; reduce-window add / max; select-and-scatter; reverse), each on new parameters with
  // random shardings (uneven dims, partial replication), its result sometimes annotated and fed
  // through tanh, all results returned in a tuple.
  std::unique_ptr<Graph> RandomWindowedGraph(const Mesh& mesh) {
    mesh_ = &mesh;
    auto g = std::make_unique<Graph>("windowed");
    std::vector<Node*> outs;
    const int64_t ops = Rand(1, 3);
    for (int64_t i = 0; i < ops; ++i) {
      Node* y = nullptr;
      switch (Rand(0, 6)) {
        case 0:
        case 1:
        case 2:
          y = RandomConvolution(*g);
          break;
        case 6:
          y = Coin() ? RandomWeightGradConvolution(*g) : RandomInputGradConvolution(*g);
          break;
        case 3:
          y = RandomReduceWindow(*g);
          break;
        case 4:
          y = RandomSelectAndScatter(*g);
          break;
        default: {
          Node* x = NewParameter(*g, RandomShape(Rand(1, 3)));
          OpAttributes a;
          for (int64_t d = 0; d < x->shape().rank(); ++d) {
            if (Coin()) a.dimensions.push_back(d);
          }
          y = OrNull(g->AddNode(Opcode::kReverse, {x}, a));
        }
      }
      if (y == nullptr || y->shape().num_elements() == 0) continue;
      if (Coin(0.3)) y->set_sharding(RandomSharding(mesh, y->shape().rank()));
      if (Coin(0.3)) y = OrNull(g->AddNode(Opcode::kTanh, {y}));
      if (y != nullptr) outs.push_back(y);
    }
    for (Node* node : g->nodes()) {
      if (node->opcode() == Opcode::kParameter && node->sharding().empty() && Coin(0.85)) {
        node->set_sharding(RandomSharding(mesh, node->shape().rank()));
      }
    }
    if (outs.empty()) outs.push_back(NewParameter(*g, RandomShape(1)));
    g->set_root(OrNull(g->AddNode(Opcode::kTuple, outs)));
    return g;
  }

  // A value tiled along `dim` over a random mesh axis of more than one device (nullopt if the
  // mesh has none), the other dims over other axes or none: partial replication is common.
  std::string TiledAlong(const Mesh& mesh, int64_t rank, int64_t dim) {
    std::vector<int> axes;
    for (int a = 0; a < mesh.logical_mesh().rank(); ++a) {
      if (mesh.logical_mesh().dim(a) > 1) axes.push_back(a);
    }
    if (axes.empty()) return "";
    std::shuffle(axes.begin(), axes.end(), gen_);
    std::vector<PartitionSpec::Entry> entries(rank, std::nullopt);
    entries[dim] = axes[0];
    size_t next = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != dim && next < axes.size() && Coin(0.4)) entries[d] = axes[next++];
    }
    auto s = spmd::ShardingFromPartitionSpec(mesh, rank, PartitionSpec(entries));
    return s.ok() ? s->ToString() : "";
  }

  // A chain of 1-3 slices, pads and concatenates along a dim tiled over the mesh (odd and uneven
  // sizes, windows reaching past one neighbour, negative padding), each result annotated like
  // its operand or left to propagation, then an elementwise op; the halo-exchange path.
  std::unique_ptr<Graph> RandomHaloGraph(const Mesh& mesh) {
    mesh_ = &mesh;
    auto g = std::make_unique<Graph>("halo");
    const int64_t rank = Rand(1, 3);
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < rank; ++i) dims.push_back(Rand(1, 17));
    const int64_t d = Rand(0, rank - 1);
    dims[d] = Rand(3, 29);
    Node* x = NewParameter(*g, Shape(DType::kF32, dims));
    const std::string sharding = TiledAlong(mesh, rank, d);
    x->set_sharding(sharding);
    const int64_t ops = Rand(1, 3);
    for (int64_t i = 0; i < ops && x != nullptr; ++i) {
      const Shape& s = x->shape();
      const int64_t n = s.dim(d);
      Node* y = nullptr;
      switch (Rand(0, 2)) {
        case 0: {  // slice keeping at least half of d
          OpAttributes a;
          for (int64_t e = 0; e < rank; ++e) a.slice.push_back(SliceDim{0, s.dim(e), 1});
          const int64_t stride = Coin(0.25) ? 2 : 1;
          const int64_t keep = Rand((n + 1) / 2, n);
          const int64_t start = Rand(0, n - keep);
          a.slice[d] = SliceDim{start, start + keep, stride};
          y = OrNull(g->AddNode(Opcode::kSlice, {x}, a));
          break;
        }
        case 1: {  // pad, low and high from -2 to 9 (past a neighbour's shard)
          OpAttributes a;
          a.padding.assign(rank, PadDim{});
          a.padding[d] = PadDim{Rand(-2, 9), Rand(-2, 9), Coin(0.1) ? 1 : 0};
          if (n + a.padding[d].low + a.padding[d].high < 1) a.padding[d].high = 0;
          if (n + a.padding[d].low < 1) a.padding[d].low = 0;
          y = OrNull(g->AddNode(Opcode::kPad, {x, Scalar(*g, 0.25)}, a));
          break;
        }
        default: {  // concatenate with 1-2 new values, sharded like x or not
          std::vector<Node*> operands = {x};
          const int64_t more = Rand(1, 2);
          for (int64_t j = 0; j < more; ++j) {
            std::vector<int64_t> other = s.dims();
            other[d] = Rand(1, 13);
            Node* p = NewParameter(*g, Shape(DType::kF32, other));
            if (Coin(0.6)) p->set_sharding(TiledAlong(mesh, rank, d));
            operands.insert(operands.begin() + Rand(0, operands.size()), p);
          }
          OpAttributes a;
          a.dimensions = {d};
          y = OrNull(g->AddNode(Opcode::kConcatenate, operands, a));
          break;
        }
      }
      if (y != nullptr && Coin(0.5)) y->set_sharding(sharding);
      x = y;
    }
    if (x == nullptr) return nullptr;
    g->set_root(OrNull(g->AddNode(Opcode::kTanh, {x})));
    return g;
  }

  // A counted while loop over (s32 counter, x f32[m,k], w f32[k,k], acc f32[m,k]): the body
  // applies 1-4 random steps to x (tanh, negate, x + acc, x * x, dot(x, w)) and adds the result
  // to acc; the condition is counter < trips (0-3). The entry's x and w, the body's values and
  // the loop's outputs get random shardings, so the state's fixed point, the init reshards and
  // the body root's reshard back to the state are all exercised.
  std::unique_ptr<Graph> RandomLoop(const Mesh& mesh) {
    mesh_ = &mesh;
    const int64_t m = RandomDim(), k = RandomDim();
    const Shape xs(DType::kF32, {m, k}), ws(DType::kF32, {k, k});
    const Shape state = Shape::Tuple({Shape(DType::kS32, {}), xs, ws, xs});
    auto body = std::make_shared<Graph>("body");
    {
      Node* s = body->AddParameter(0, state, "s").value();
      std::vector<Node*> e;
      for (int64_t i = 0; i < 4; ++i) {
        OpAttributes gte;
        gte.tuple_index = i;
        e.push_back(body->AddNode(Opcode::kGetTupleElement, {s}, gte).value());
      }
      Node* one = body->AddConstant(Literal::Scalar<int32_t>(1));
      Node* next = body->AddNode(Opcode::kAdd, {e[0], one}).value();
      Node* x = e[1];
      for (int64_t step = Rand(1, 4); step > 0; --step) {
        switch (Rand(0, 4)) {
          case 0:
            x = body->AddNode(Opcode::kTanh, {x}).value();
            break;
          case 1:
            x = body->AddNode(Opcode::kNegate, {x}).value();
            break;
          case 2:
            x = body->AddNode(Opcode::kAdd, {x, e[3]}).value();
            break;
          case 3:
            x = body->AddNode(Opcode::kMultiply, {x, x}).value();
            break;
          default: {
            OpAttributes dot;
            dot.dot.lhs_contracting_dims = {1};
            dot.dot.rhs_contracting_dims = {0};
            x = body->AddNode(Opcode::kDot, {x, e[2]}, dot).value();
            break;
          }
        }
        if (Coin(0.3)) x->set_sharding(RandomSharding(mesh, 2));
      }
      Node* acc = body->AddNode(Opcode::kAdd, {e[3], x}).value();
      if (Coin(0.3)) acc->set_sharding(RandomSharding(mesh, 2));
      body->set_root(body->AddNode(Opcode::kTuple, {next, x, e[2], acc}).value());
    }
    auto cond = std::make_shared<Graph>("cond");
    {
      Node* s = cond->AddParameter(0, state, "s").value();
      OpAttributes gte;
      Node* i = cond->AddNode(Opcode::kGetTupleElement, {s}, gte).value();
      Node* n = cond->AddConstant(Literal::Scalar<int32_t>(static_cast<int32_t>(Rand(0, 3))));
      OpAttributes lt;
      lt.comparison_direction = ComparisonDirection::kLt;
      cond->set_root(cond->AddNode(Opcode::kCompare, {i, n}, lt).value());
    }
    auto g = std::make_unique<Graph>("loop");
    Node* x = NewParameter(*g, xs);
    Node* w = NewParameter(*g, ws);
    for (Node* p : {x, w}) {
      if (Coin(0.8)) p->set_sharding(RandomSharding(mesh, 2));
    }
    Node* zero = g->AddConstant(Literal::Scalar<int32_t>(0));
    Node* acc = g->AddConstant(Literal(xs));  // zeros
    Node* init = g->AddNode(Opcode::kTuple, {zero, x, w, acc}).value();
    OpAttributes loop;
    loop.called_computations = {cond, body};
    Node* out = g->AddNode(Opcode::kWhile, {init}, loop).value();
    std::vector<Node*> results;
    for (int64_t i : {1, 3}) {
      OpAttributes gte;
      gte.tuple_index = i;
      Node* r = g->AddNode(Opcode::kGetTupleElement, {out}, gte).value();
      if (Coin(0.3)) r->set_sharding(RandomSharding(mesh, 2));
      results.push_back(r);
    }
    g->set_root(g->AddNode(Opcode::kTuple, results).value());
    return g;
  }

  Literal RandomInput(const Shape& shape) {
    Literal lit(shape);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : lit.data<float>()) v = dist(gen_);
    return lit;
  }

 private:
  std::mt19937_64 gen_;
  const Mesh* mesh_ = nullptr;
};

// The partitioned program runs through the library function `tessel verify` uses
// (partitioner/verify.h): inputs split by the parameters' shardings, one thread per device with
// the reference collectives, outputs assembled from the devices' pieces.
absl::StatusOr<std::vector<Literal>> RunPartitioned(const partitioner::SpmdProgram& program,
                                                    const std::vector<Literal>& inputs) {
  return partitioner::RunPartitioned(program, inputs, std::chrono::seconds(20));
}

// Runs one random case: the unpartitioned graph on one device and the partitioned program on
// the mesh's devices; every output must agree within `tolerance` (absolute and relative). The
// partitioned program is left in `*program` for the caller's own checks. On failure the case
// number, the mesh and both modules are printed.
void ExpectPartitionedEqualsUnpartitioned(int c, CaseBuilder& builder, const Mesh& mesh,
                                          const Graph& graph, double tolerance,
                                          std::optional<partitioner::SpmdProgram>* program) {
  SCOPED_TRACE(::testing::Message() << "case " << c << " on " << mesh.size() << " devices, mesh "
                                    << mesh.logical_mesh().ToString() << "\n"
                                    << PrintHloModule(graph));
  std::vector<Literal> inputs;
  for (Node* p : graph.parameters()) inputs.push_back(builder.RandomInput(p->shape()));
  absl::StatusOr<std::vector<Literal>> expected = Executor().Run(graph, inputs);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<partitioner::SpmdProgram> partitioned = partitioner::Partition(graph, mesh.size());
  ASSERT_TRUE(partitioned.ok()) << partitioned.status();
  absl::StatusOr<std::vector<Literal>> got = RunPartitioned(*partitioned, inputs);
  ASSERT_TRUE(got.ok()) << got.status() << "\n" << PrintHloModule(*partitioned->program);
  ASSERT_EQ(got->size(), expected->size());
  for (size_t o = 0; o < got->size(); ++o) {
    ASSERT_TRUE(AllClose((*got)[o], (*expected)[o], tolerance, tolerance))
        << "output " << o << "\nexpected " << (*expected)[o].ToString() << "\ngot "
        << (*got)[o].ToString() << "\n"
        << PrintHloModule(*partitioned->program);
  }
  *program = *std::move(partitioned);
}

TEST(PartitionPropertyTest, PartitionedEqualsUnpartitioned) {
  constexpr int kCases = 300;
  int checked = 0, multi_device = 0;
  int64_t nodes = 0, gathers = 0, scatters = 0, bitcasts = 0, unsigned64 = 0, rounded = 0;
  std::map<std::string, int64_t> collectives;
  for (int c = 0; c < kCases; ++c) {
    CaseBuilder builder(1000 + c);
    Mesh mesh = builder.RandomMesh();
    std::unique_ptr<Graph> graph = builder.RandomGraph(mesh);
    std::optional<partitioner::SpmdProgram> program;
    ExpectPartitionedEqualsUnpartitioned(c, builder, mesh, *graph, 1e-4, &program);
    if (::testing::Test::HasFatalFailure()) return;
    ++checked;
    if (mesh.size() > 1) ++multi_device;
    for (const auto& [kind, count] : partitioner::CountCollectives(*program->program)) {
      collectives[kind] += count.count;
    }
    nodes += graph->num_nodes();
    for (const Node* n : graph->nodes()) {
      gathers += n->opcode() == Opcode::kGather;
      scatters += n->opcode() == Opcode::kScatter;
      bitcasts += n->opcode() == Opcode::kBitcastConvert;
      unsigned64 += n->shape().dtype() == DType::kU64;
      rounded += n->opcode() == Opcode::kReducePrecision;
    }
  }
  EXPECT_EQ(checked, kCases);
  // The cases must exercise the partitioner: most run on several devices and need collectives.
  std::string summary;
  for (const auto& [kind, count] : collectives) summary += kind + "=" + std::to_string(count) + " ";
  std::printf(
      "%d cases (%d multi-device, %lld nodes, %lld gathers, %lld scatters, %lld bitcast-converts, "
      "%lld u64 values, %lld reduce-precisions), collectives: %s\n",
      checked, multi_device, static_cast<long long>(nodes), static_cast<long long>(gathers),
      static_cast<long long>(scatters), static_cast<long long>(bitcasts),
      static_cast<long long>(unsigned64), static_cast<long long>(rounded), summary.c_str());
  EXPECT_GT(multi_device, kCases / 2);
  EXPECT_GT(collectives["all-reduce"], kCases / 10);
  EXPECT_GT(collectives["all-gather"], kCases / 10);
  EXPECT_GT(gathers, kCases / 10);
  EXPECT_GT(scatters, kCases / 10);
  EXPECT_GT(bitcasts, kCases / 20);
  EXPECT_GT(unsigned64, kCases / 10);
  EXPECT_GT(rounded, kCases / 20);
}

// Loop fusion in the executor (core/internal/fusion.h) on the same random graphs (elementwise
// chains, broadcasts, reshapes between reduces, dots, transposes and data movement): fused and
// unfused runs agree within one f32 ulp per fused transcendental op (Eigen's packet exp, tanh,
// logistic, sin, cos may round differently at a block boundary; everything else is bitwise),
// relative to the output's magnitude, and the random graphs must actually fuse.
TEST(PartitionPropertyTest, FusedExecutorEqualsUnfused) {
  constexpr int kCases = 300;
  int64_t fusions = 0, bitwise = 0, extra_outputs = 0, donated_in_place = 0;
  for (int c = 0; c < kCases; ++c) {
    CaseBuilder builder(1000 + c);
    Mesh mesh = builder.RandomMesh();
    std::unique_ptr<Graph> graph = builder.RandomGraph(mesh);
    SCOPED_TRACE(::testing::Message() << "case " << c << "\n" << PrintHloModule(*graph));
    std::vector<Literal> inputs;
    for (Node* p : graph->parameters()) inputs.push_back(builder.RandomInput(p->shape()));
    ExecutionStats fused_stats;
    absl::StatusOr<std::vector<Literal>> unfused = Executor({.fusion = false}).Run(*graph, inputs);
    absl::StatusOr<std::vector<Literal>> fused =
        Executor({.fusion = true}).Run(*graph, inputs, &fused_stats);
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    ASSERT_TRUE(fused.ok()) << fused.status();
    // The fused run again with every argument donated (ExecutionDonation): outputs written into
    // dead arguments' buffers, further outputs of multi-output fusions included, change no bit.
    std::vector<Literal> donated_inputs = inputs;
    std::vector<const Literal*> arguments;
    std::vector<Literal*> donated;
    for (Literal& input : donated_inputs) {
      arguments.push_back(&input);
      donated.push_back(&input);
    }
    ExecutionDonation donation{.literals = donated};
    ExecutionStats donated_stats;
    absl::StatusOr<std::vector<Literal>> fused_donated =
        Executor({.fusion = true}).RunBorrowed(*graph, arguments, &donated_stats, &donation);
    ASSERT_TRUE(fused_donated.ok()) << fused_donated.status();
    EXPECT_EQ(*fused_donated, *fused);
    donated_in_place += donated_stats.donated_in_place;
    fusions += fused_stats.fusions;
    extra_outputs += fused_stats.fusion_extra_outputs;
    int64_t transcendental = 0;
    for (const Node* n : graph->nodes()) {
      const Opcode op = n->opcode();
      transcendental += op == Opcode::kExp || op == Opcode::kTanh || op == Opcode::kLogistic ||
                        op == Opcode::kSine || op == Opcode::kCosine;
    }
    ASSERT_EQ(fused->size(), unfused->size());
    bool same = true;
    for (size_t o = 0; o < fused->size(); ++o) {
      same = same && (*fused)[o] == (*unfused)[o];
      const double ulps = static_cast<double>(transcendental) * 0x1p-23;
      ASSERT_TRUE(AllClose((*fused)[o], (*unfused)[o], ulps, ulps))
          << "output " << o << "\nfused " << (*fused)[o].ToString() << "\nunfused "
          << (*unfused)[o].ToString();
    }
    bitwise += same;
  }
  std::printf(
      "%d cases: %lld fusions run (%lld further outputs), %lld bitwise equal, %lld outputs "
      "written into donated arguments\n",
      kCases, static_cast<long long>(fusions), static_cast<long long>(extra_outputs),
      static_cast<long long>(bitwise), static_cast<long long>(donated_in_place));
  EXPECT_GT(fusions, kCases / 10);  // 75 with these seeds: the graphs are small DAGs
  EXPECT_GT(extra_outputs, 0);      // 3 with these seeds: multi-output fusion is covered
  EXPECT_GT(donated_in_place, 0);   // donation is covered
}

// Slices, pads and concatenates along dims tiled over the mesh (uneven, partially replicated,
// permuted device ids): the halo exchange must give exactly the unpartitioned result, and most
// cases must take it (collective-permute) rather than the all-gather fallback.
TEST(PartitionPropertyTest, HaloExchangeSlicePadConcatenate) {
  constexpr int kCases = 300;
  int checked = 0, with_permute = 0, without_gather = 0;
  for (int c = 0; c < kCases; ++c) {
    CaseBuilder builder(50000 + c);
    Mesh mesh = builder.RandomMesh();
    while (mesh.size() == 1) mesh = builder.RandomMesh();
    std::unique_ptr<Graph> graph = builder.RandomHaloGraph(mesh);
    if (graph == nullptr) continue;
    std::optional<partitioner::SpmdProgram> program;
    ExpectPartitionedEqualsUnpartitioned(c, builder, mesh, *graph, 1e-5, &program);
    if (::testing::Test::HasFatalFailure()) return;
    // XLA's rule for collective-permute: each device sends at most once and receives at most
    // once. Replicated copies exchanging within their own copy is what keeps it.
    for (const Node* node : program->program->nodes()) {
      if (node->opcode() != Opcode::kCollectivePermute) continue;
      std::set<int64_t> sources, targets;
      for (const auto& [source, target] : node->attrs().source_target_pairs) {
        EXPECT_TRUE(sources.insert(source).second && targets.insert(target).second)
            << "%" << node->name() << " repeats device " << source << " or " << target << "\n"
            << PrintHloModule(*program->program);
      }
    }
    ++checked;
    auto counts = partitioner::CountCollectives(*program->program);
    with_permute += counts.count("collective-permute") > 0;
    without_gather += counts.count("all-gather") == 0;
  }
  std::printf("%d halo cases: %d with collective-permute, %d without all-gather\n", checked,
              with_permute, without_gather);
  EXPECT_GT(checked, kCases * 9 / 10);
  EXPECT_GT(with_permute, kCases / 2);
  EXPECT_GT(without_gather, kCases / 3);
}

// The same property for while loops (CaseBuilder::RandomLoop): the partitioned loop, run on
// every device with its collectives inside the body, equals the unpartitioned loop.
TEST(PartitionPropertyTest, WhileLoopsPartitionedEqualUnpartitioned) {
  constexpr int kCases = 120;
  int multi_device = 0, with_body_collectives = 0;
  for (int c = 0; c < kCases; ++c) {
    CaseBuilder builder(5000 + c);
    Mesh mesh = builder.RandomMesh();
    std::unique_ptr<Graph> graph = builder.RandomLoop(mesh);
    std::optional<partitioner::SpmdProgram> program;
    ExpectPartitionedEqualsUnpartitioned(c, builder, mesh, *graph, 1e-4, &program);
    if (::testing::Test::HasFatalFailure()) return;
    if (mesh.size() > 1) ++multi_device;
    for (const partitioner::LoopCollectives& loop :
         partitioner::ListLoopCollectives(*program->program)) {
      if (!loop.per_iteration.empty()) ++with_body_collectives;
    }
  }
  std::printf("%d loop cases (%d multi-device, %d with collectives in the body)\n", kCases,
              multi_device, with_body_collectives);
  EXPECT_GT(multi_device, kCases / 2);
  EXPECT_GT(with_body_collectives, kCases / 10);
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

// The windowed ops: convolutions (batch / feature / contracting / grouped and spatial dims
// sharded), reduce-window, select-and-scatter and reverse under random shardings.
TEST(PartitionPropertyTest, WindowedOpsPartitionedEqualsUnpartitioned) {
  constexpr int kCases = 400;
  int multi_device = 0;
  int64_t convolutions = 0, windows = 0, weight_gradients = 0;
  std::map<std::string, int64_t> collectives;
  for (int c = 0; c < kCases; ++c) {
    CaseBuilder builder(5000 + c);
    Mesh mesh = builder.RandomMesh();
    std::unique_ptr<Graph> graph = builder.RandomWindowedGraph(mesh);
    std::optional<partitioner::SpmdProgram> program;
    ExpectPartitionedEqualsUnpartitioned(c, builder, mesh, *graph, 1e-4, &program);
    if (::testing::Test::HasFatalFailure()) return;
    if (mesh.size() > 1) ++multi_device;
    for (const auto& [kind, count] : partitioner::CountCollectives(*program->program)) {
      collectives[kind] += count.count;
    }
    for (const Node* n : graph->nodes()) {
      convolutions += n->opcode() == Opcode::kConvolution;
      weight_gradients += n->opcode() == Opcode::kConvolution &&
                          n->attrs().convolution.input_feature_dimension == 0 &&
                          n->attrs().convolution.output_spatial_dimensions[0] == 0;
      windows += n->opcode() == Opcode::kReduceWindow || n->opcode() == Opcode::kSelectAndScatter;
    }
  }
  std::string summary;
  for (const auto& [kind, count] : collectives) summary += kind + "=" + std::to_string(count) + " ";
  std::printf(
      "%d windowed cases (%d multi-device, %lld convolutions of which %lld weight gradients, "
      "%lld reduce-window / select-and-scatter), collectives: %s\n",
      kCases, multi_device, static_cast<long long>(convolutions),
      static_cast<long long>(weight_gradients), static_cast<long long>(windows), summary.c_str());
  EXPECT_GT(multi_device, kCases / 2);
  EXPECT_GT(convolutions, kCases / 2);
  EXPECT_GT(windows, kCases / 4);
  EXPECT_GT(weight_gradients, kCases / 20);
  EXPECT_GT(collectives["all-reduce"], kCases / 20);
  EXPECT_GT(collectives["all-gather"], kCases / 10);
}

// Hand-picked reshards that take the reduce-scatter and all-to-all paths, checked numerically.
struct Directed {
  std::string name;
  std::string hlo;
  int64_t num_devices;
  std::string expected_collective;
};

TEST(PartitionDirectedTest, ReduceScatterAndAllToAllAreExact) {
  const std::vector<Directed> cases = {
      {"dot partial sums -> rows", R"(HloModule rs
ENTRY %main (a: f32[8,16], b: f32[16,6]) -> f32[8,6] {
  %a = f32[8,16] parameter(0), sharding={devices=[1,2]0,1}
  %b = f32[16,6] parameter(1), sharding={devices=[2,1]0,1}
  ROOT %c = f32[8,6] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,1]0,1}
})",
       2, "reduce-scatter"},
      {"dot partial sums -> uneven rows", R"(HloModule rs_uneven
ENTRY %main (a: f32[9,12], b: f32[12,5]) -> f32[9,5] {
  %a = f32[9,12] parameter(0), sharding={devices=[1,4]0,1,2,3}
  %b = f32[12,5] parameter(1), sharding={devices=[4,1]0,1,2,3}
  ROOT %c = f32[9,5] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]0,1,2,3}
})",
       4, "reduce-scatter"},
      {"rows -> columns", R"(HloModule a2a
ENTRY %main (a: f32[8,12]) -> f32[8,12] {
  %a = f32[8,12] parameter(0), sharding={devices=[4,1]0,1,2,3}
  ROOT %b = f32[8,12] copy(%a), sharding={devices=[1,4]0,1,2,3}
})",
       4, "all-to-all"},
      {"rank 3, partial replication", R"(HloModule a2a3
ENTRY %main (a: f32[4,6,8]) -> f32[4,6,8] {
  %a = f32[4,6,8] parameter(0), sharding={devices=[1,2,1,2]0,1,2,3 last_tile_dim_replicate}
  %t = f32[4,6,8] tanh(%a), sharding={devices=[1,2,1,2]0,1,2,3 last_tile_dim_replicate}
  ROOT %b = f32[4,6,8] copy(%t), sharding={devices=[1,1,2,2]0,1,2,3 last_tile_dim_replicate}
})",
       4, "all-to-all"},
  };
  for (const Directed& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloModule(c.hlo);
    ASSERT_TRUE(graph.ok()) << graph.status();
    CaseBuilder builder(7);
    std::vector<Literal> inputs;
    for (Node* p : (*graph)->parameters()) inputs.push_back(builder.RandomInput(p->shape()));
    absl::StatusOr<std::vector<Literal>> expected = Executor().Run(**graph, inputs);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<partitioner::SpmdProgram> program =
        partitioner::Partition(**graph, c.num_devices);
    ASSERT_TRUE(program.ok()) << program.status();
    auto counts = partitioner::CountCollectives(*program->program);
    EXPECT_EQ(counts[c.expected_collective].count, 1) << PrintHloModule(*program->program);
    EXPECT_EQ(counts.count("all-gather"), 0u) << PrintHloModule(*program->program);
    absl::StatusOr<std::vector<Literal>> got = RunPartitioned(*program, inputs);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(AllClose((*got)[0], (*expected)[0], 1e-5, 1e-5))
        << PrintHloModule(*program->program) << "\nexpected " << (*expected)[0].ToString()
        << "\ngot " << (*got)[0].ToString();
  }
}

}  // namespace
}  // namespace tessel
