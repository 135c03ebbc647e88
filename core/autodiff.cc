// Reverse-mode autodiff over the lazy IR (Grad in core/tensor.h).
//
// Each rule below is the vector-Jacobian product of one op, written with Tensor ops so the
// gradient is itself a lazy graph. The rules follow the standard derivations (as JAX's lax
// transpose rules state them). Conventions at non-differentiable points: maximum/minimum send
// the gradient to the first operand on ties; abs uses sign(0) = +1; reduce-max/min split the
// gradient evenly between tied maxima; reduce-multiply divides by the operand (undefined where it
// is 0); the init operand of a reduce and the bounds of rng get no gradient.
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/internal/lazy.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/tensor.h"

namespace tessel {

using internal_lazy::LazyNode;

namespace {

Tensor Wrap(const std::shared_ptr<LazyNode>& node) { return Tensor(internal_lazy::MakeImpl(node)); }

Tensor ZerosLike(const Tensor& t) { return Zeros(t.shape()); }

// Dims of a rank-`rank` tensor that are not in `removed`, in increasing order.
std::vector<int64_t> RemainingDims(int64_t rank, const std::vector<int64_t>& removed) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(removed.begin(), removed.end(), d) == removed.end()) kept.push_back(d);
  }
  return kept;
}

std::vector<int64_t> Iota64(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// Gradient with respect to one dot operand. `self` is the operand whose gradient is wanted,
// `other` the other one; the dims are given from `self`'s point of view. `self_is_lhs` says
// whether the free dims of self come first in the dot output.
Tensor DotOperandGrad(const Tensor& g, const Tensor& other, int64_t self_rank,
                      const std::vector<int64_t>& self_batch,
                      const std::vector<int64_t>& self_contract,
                      const std::vector<int64_t>& other_batch,
                      const std::vector<int64_t>& other_contract, bool self_is_lhs) {
  const int64_t nb = static_cast<int64_t>(self_batch.size());
  std::vector<int64_t> self_free = RemainingDims(self_rank, [&] {
    std::vector<int64_t> used = self_batch;
    used.insert(used.end(), self_contract.begin(), self_contract.end());
    return used;
  }());
  std::vector<int64_t> other_free = RemainingDims(other.rank(), [&] {
    std::vector<int64_t> used = other_batch;
    used.insert(used.end(), other_contract.begin(), other_contract.end());
    return used;
  }());
  const int64_t n_self_free = static_cast<int64_t>(self_free.size());
  const int64_t n_other_free = static_cast<int64_t>(other_free.size());
  // Positions in g of the free dims of `other`.
  int64_t other_free_begin = self_is_lhs ? nb + n_self_free : nb;
  int64_t self_free_begin = self_is_lhs ? nb : nb + n_other_free;
  DotDimensionNumbers dn;
  dn.lhs_batch_dims = Iota64(0, nb);
  dn.rhs_batch_dims = other_batch;
  dn.lhs_contracting_dims = Iota64(other_free_begin, other_free_begin + n_other_free);
  dn.rhs_contracting_dims = other_free;
  // Result dims: batch, g's remaining dims (= self's free dims, in order), other's remaining
  // dims (= other's contracting dims, in increasing order).
  Tensor r = Dot(g, other, dn);
  (void)self_free_begin;
  std::vector<int64_t> other_contract_sorted = other_contract;
  std::sort(other_contract_sorted.begin(), other_contract_sorted.end());
  // perm[d] = position in r of self's dim d.
  std::vector<int64_t> perm(self_rank, 0);
  for (int64_t i = 0; i < nb; ++i) perm[self_batch[i]] = i;
  for (int64_t j = 0; j < n_self_free; ++j) perm[self_free[j]] = nb + j;
  for (size_t k = 0; k < self_contract.size(); ++k) {
    int64_t rank_in_sorted =
        std::find(other_contract_sorted.begin(), other_contract_sorted.end(), other_contract[k]) -
        other_contract_sorted.begin();
    perm[self_contract[k]] = nb + n_self_free + rank_in_sorted;
  }
  bool identity = true;
  for (int64_t d = 0; d < self_rank; ++d) identity = identity && perm[d] == d;
  return identity ? r : Transpose(r, perm);
}

// The start indices of `g` one component at a time (each of the indices' shape without
// index_vector_dim), and the way back.
std::vector<Tensor> StartComponents(const Tensor& indices, const GatherDimensionNumbers& g) {
  const Shape& shape = indices.shape();
  if (g.index_vector_dim == shape.rank()) return {indices};
  std::vector<int64_t> batch = shape.dims();
  batch.erase(batch.begin() + g.index_vector_dim);
  std::vector<Tensor> parts;
  for (size_t k = 0; k < g.start_index_map.size(); ++k) {
    std::vector<int64_t> from(shape.rank(), 0), to = shape.dims();
    from[g.index_vector_dim] = static_cast<int64_t>(k);
    to[g.index_vector_dim] = static_cast<int64_t>(k) + 1;
    parts.push_back(Reshape(Slice(indices, from, to), batch));
  }
  return parts;
}

Tensor JoinComponents(const std::vector<Tensor>& parts, const Shape& indices,
                      const GatherDimensionNumbers& g) {
  if (g.index_vector_dim == indices.rank()) return parts[0];
  std::vector<Tensor> columns;
  std::vector<int64_t> column = indices.dims();
  column[g.index_vector_dim] = 1;
  for (const Tensor& part : parts) columns.push_back(Reshape(part, column));
  return Concatenate(columns, g.index_vector_dim);
}

// The start indices a gather really uses: each clamped into [0, dim - slice size], as XLA does.
Tensor ClampedStarts(const Tensor& indices, const GatherDimensionNumbers& g, const Shape& operand) {
  std::vector<Tensor> parts = StartComponents(indices, g);
  for (size_t k = 0; k < parts.size(); ++k) {
    const int64_t dim = g.start_index_map[k];
    parts[k] = Clamp(Full(Shape(parts[k].dtype(), {}), 0), parts[k],
                     Full(Shape(parts[k].dtype(), {}), operand.dim(dim) - g.slice_sizes[dim]));
  }
  return JoinComponents(parts, indices.shape(), g);
}

// Per scatter index (the indices' shape without index_vector_dim): whether its update window
// lies inside `operand`, i.e. was applied (XLA skips the others). Shapes: global.
Tensor ScatterWindowInBounds(const Tensor& indices, const ScatterDimensionNumbers& dnums,
                             const Shape& operand, const Shape& updates) {
  const GatherDimensionNumbers g = ScatterAsGather(dnums, operand, updates);
  std::vector<Tensor> parts = StartComponents(indices, g);
  Tensor inside;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& start = parts[k];
    const int64_t dim = g.start_index_map[k];
    const Tensor lowest = Full(start.shape(), 0);
    const Tensor highest = Full(start.shape(), operand.dim(dim) - g.slice_sizes[dim]);
    const Tensor fits = And(Compare(start, lowest, ComparisonDirection::kGe),
                            Compare(start, highest, ComparisonDirection::kLe));
    inside = k == 0 ? fits : And(inside, fits);
  }
  return inside;
}

// What the VJP rules of one node write to: x(i) is operand i as a tensor; emit(i, make) adds
// make() as operand i's gradient contribution, building it only when operand i wants one.
class VjpOut {
 public:
  VjpOut(const LazyNode& node, const std::vector<bool>& wanted,
         std::vector<std::pair<int, Tensor>>& out)
      : node_(node), wanted_(wanted), out_(out) {}
  Tensor x(int i) const { return Wrap(node_.operands[i]); }
  template <typename F>
  void emit(int i, F&& make) {
    if (wanted_[i]) out_.emplace_back(i, make());
  }

 private:
  const LazyNode& node_;
  const std::vector<bool>& wanted_;
  std::vector<std::pair<int, Tensor>>& out_;
};

// Elementwise ops: arithmetic, unary math, convert, select and clamp. Returns false when `node` is
// not of this family.
bool VjpElementwise(const LazyNode& node, const Tensor& y, const Tensor& g, VjpOut& r) {
  switch (node.opcode) {
    case Opcode::kAdd:
      r.emit(0, [&] { return g; });
      r.emit(1, [&] { return g; });
      break;
    case Opcode::kSubtract:
      r.emit(0, [&] { return g; });
      r.emit(1, [&] { return -g; });
      break;
    case Opcode::kMultiply:
      r.emit(0, [&] { return g * r.x(1); });
      r.emit(1, [&] { return g * r.x(0); });
      break;
    case Opcode::kDivide:
      r.emit(0, [&] { return g / r.x(1); });
      r.emit(1, [&] { return -(g * y / r.x(1)); });
      break;
    case Opcode::kMaximum:
    case Opcode::kMinimum: {
      auto dir =
          node.opcode == Opcode::kMaximum ? ComparisonDirection::kGe : ComparisonDirection::kLe;
      Tensor first = Compare(r.x(0), r.x(1), dir);
      r.emit(0, [&] { return Select(first, g, ZerosLike(g)); });
      r.emit(1, [&] { return Select(first, ZerosLike(g), g); });
      break;
    }
    case Opcode::kPower:
      r.emit(0, [&] { return g * r.x(1) * Pow(r.x(0), r.x(1) - 1.0); });
      r.emit(1, [&] { return g * Log(r.x(0)) * y; });
      break;
    case Opcode::kNegate:
      r.emit(0, [&] { return -g; });
      break;
    case Opcode::kAbs:
      r.emit(0, [&] {
        return Select(Compare(r.x(0), ZerosLike(g), ComparisonDirection::kGe), g, -g);
      });
      break;
    case Opcode::kExp:
      r.emit(0, [&] { return g * y; });
      break;
    case Opcode::kLog:
      r.emit(0, [&] { return g / r.x(0); });
      break;
    case Opcode::kTanh:
      r.emit(0, [&] { return g * (1.0 - y * y); });
      break;
    case Opcode::kLogistic:
      r.emit(0, [&] { return g * y * (1.0 - y); });
      break;
    case Opcode::kSqrt:
      r.emit(0, [&] { return g * 0.5 / y; });
      break;
    case Opcode::kRsqrt:
      r.emit(0, [&] { return g * -0.5 * y / r.x(0); });
      break;
    case Opcode::kSine:
      r.emit(0, [&] { return g * Cos(r.x(0)); });
      break;
    case Opcode::kCosine:
      r.emit(0, [&] { return -(g * Sin(r.x(0))); });
      break;
    case Opcode::kCopy:
      r.emit(0, [&] { return g; });
      break;
    case Opcode::kRemainder:
      // a - b * trunc(a / b): trunc(a / b) = (a - y) / b, constant almost everywhere.
      r.emit(0, [&] { return g; });
      r.emit(1, [&] { return -(g * (r.x(0) - y) / r.x(1)); });
      break;
    case Opcode::kAtan2: {
      auto norm = [&] { return r.x(0) * r.x(0) + r.x(1) * r.x(1); };
      r.emit(0, [&] { return g * r.x(1) / norm(); });
      r.emit(1, [&] { return -(g * r.x(0) / norm()); });
      break;
    }
    case Opcode::kErf:
      // 2 / sqrt(pi) * exp(-x^2).
      r.emit(0, [&] { return g * 1.1283791670955126 * Exp(-(r.x(0) * r.x(0))); });
      break;
    case Opcode::kConvert:
      r.emit(0, [&] { return Convert(g, node.operands[0]->shape.dtype()); });
      break;
    case Opcode::kReducePrecision:
      // Linear, as JAX defines it (ad.deflinear): the cotangent is rounded the same way.
      r.emit(0, [&] {
        return ReducePrecision(g, node.attrs.exponent_bits, node.attrs.mantissa_bits);
      });
      break;
    case Opcode::kBitcastConvert: {
      // A floating operand reread as another floating type (f16 <-> bf16): no derivative, as
      // in JAX (bitcast_convert_type has no JVP rule).
      const Tensor unsupported =
          Tensor::Error(absl::UnimplementedError("grad: bitcast-convert is not differentiable"));
      r.emit(0, [&] { return unsupported; });
      break;
    }
    case Opcode::kSelect:
      r.emit(1, [&] { return Select(r.x(0), g, ZerosLike(g)); });
      r.emit(2, [&] { return Select(r.x(0), ZerosLike(g), g); });
      break;
    case Opcode::kClamp: {
      Tensor value = r.x(1);
      std::vector<int64_t> dims = value.shape().dims();
      Tensor low = BroadcastTo(r.x(0), dims);
      Tensor high = BroadcastTo(r.x(2), dims);
      Tensor below = Compare(value, low, ComparisonDirection::kLt);
      Tensor above = Compare(value, high, ComparisonDirection::kGt);
      Tensor zeros = ZerosLike(g);
      auto to_bound = [&](const Tensor& grad, int i) {
        return node.operands[i]->shape.rank() == 0 ? ReduceSum(grad, Iota64(0, g.rank())) : grad;
      };
      r.emit(0, [&] { return to_bound(Select(below, g, zeros), 0); });
      r.emit(1, [&] { return Select(Or(below, above), zeros, g); });
      r.emit(2, [&] { return to_bound(Select(above, g, zeros), 2); });
      break;
    }
    default:
      return false;
  }
  return true;
}

// Data movement: the gradient is moved back (broadcast sums, slice pads, pad slices, ...). Returns
// false when `node` is not of this family.
bool VjpDataMovement(const LazyNode& node, const Tensor& y, const Tensor& g, VjpOut& r) {
  const OpAttributes& attrs = node.attrs;
  switch (node.opcode) {
    case Opcode::kBroadcast:
      r.emit(0, [&] {
        std::vector<int64_t> summed = RemainingDims(g.rank(), attrs.dimensions);
        Tensor r = summed.empty() ? g : ReduceSum(g, summed);
        return Reshape(r, node.operands[0]->shape.dims());
      });
      break;
    case Opcode::kReshape:
      r.emit(0, [&] { return Reshape(g, node.operands[0]->shape.dims()); });
      break;
    case Opcode::kTranspose:
      r.emit(0, [&] {
        std::vector<int64_t> inverse(attrs.dimensions.size());
        for (size_t i = 0; i < attrs.dimensions.size(); ++i) inverse[attrs.dimensions[i]] = i;
        return Transpose(g, inverse);
      });
      break;
    case Opcode::kSlice:
      r.emit(0, [&] {
        const Shape& in = node.operands[0]->shape;
        std::vector<PadDim> padding;
        for (int64_t d = 0; d < in.rank(); ++d) {
          const SliceDim& s = attrs.slice[d];
          int64_t n = g.dim(d);
          if (n == 0) return Zeros(in);
          int64_t last = s.start + (n - 1) * s.stride;
          padding.push_back(PadDim{s.start, in.dim(d) - last - 1, s.stride - 1});
        }
        return Pad(g, Scalar(g.dtype(), 0), padding);
      });
      break;
    case Opcode::kPad: {
      const Shape& in = node.operands[0]->shape;
      auto operand_grad = [&] {
        std::vector<PadDim> uncrop;
        std::vector<int64_t> starts, limits, strides;
        for (int64_t d = 0; d < in.rank(); ++d) {
          const PadDim& p = attrs.padding[d];
          if (in.dim(d) == 0) return Zeros(in);
          uncrop.push_back(PadDim{std::max<int64_t>(-p.low, 0), std::max<int64_t>(-p.high, 0), 0});
          int64_t start = std::max<int64_t>(p.low, 0);
          starts.push_back(start);
          limits.push_back(start + (in.dim(d) - 1) * (p.interior + 1) + 1);
          strides.push_back(p.interior + 1);
        }
        return Slice(Pad(g, Scalar(g.dtype(), 0), uncrop), starts, limits, strides);
      };
      r.emit(0, operand_grad);
      r.emit(1, [&] {
        std::vector<int64_t> all = Iota64(0, g.rank());
        return ReduceSum(g, all) - ReduceSum(operand_grad(), all);
      });
      break;
    }
    case Opcode::kConcatenate: {
      int64_t dim = attrs.dimensions[0];
      int64_t offset = 0;
      for (size_t i = 0; i < node.operands.size(); ++i) {
        const Shape& part = node.operands[i]->shape;
        std::vector<int64_t> starts(g.rank(), 0), limits = g.shape().dims();
        starts[dim] = offset;
        limits[dim] = offset + part.dim(dim);
        r.emit(static_cast<int>(i), [&] { return Slice(g, starts, limits); });
        offset += part.dim(dim);
      }
      break;
    }
    case Opcode::kDynamicSlice: {
      std::vector<Tensor> starts;
      for (size_t i = 1; i < node.operands.size(); ++i) starts.push_back(r.x(i));
      r.emit(0, [&] { return DynamicUpdateSlice(Zeros(node.operands[0]->shape), g, starts); });
      break;
    }
    case Opcode::kDynamicUpdateSlice: {
      std::vector<Tensor> starts;
      for (size_t i = 2; i < node.operands.size(); ++i) starts.push_back(r.x(i));
      const Shape& update = node.operands[1]->shape;
      r.emit(0, [&] { return DynamicUpdateSlice(g, Zeros(update), starts); });
      r.emit(1, [&] { return DynamicSlice(g, starts, update.dims()); });
      break;
    }
    case Opcode::kGather:
      // Each output element read one operand element: its gradient is added back there, by the
      // scatter that writes where the gather read. The gather clamped its starts and a scatter
      // would skip them instead, so the starts are clamped first.
      r.emit(0, [&] {
        const Shape& operand = node.operands[0]->shape;
        return Scatter(Zeros(operand), ClampedStarts(r.x(1), attrs.gather, operand), g,
                       GatherAsScatter(attrs.gather), ReduceKind::kAdd);
      });
      break;
    case Opcode::kScatter: {
      if (attrs.scatter_overwrite || attrs.reduce_kind != ReduceKind::kAdd) {
        // Overwrite, multiply, max and min make the result depend on which update lands last
        // or wins; XLA's autodiff has no general rule either. Fail loudly, never a zero.
        const Tensor unsupported = Tensor::Error(absl::UnimplementedError(
            absl::StrCat("no gradient for a scatter that ",
                         attrs.scatter_overwrite
                             ? std::string("overwrites")
                             : absl::StrCat("combines with ", ReduceKindName(attrs.reduce_kind)),
                         "; only scatter-add is differentiable")));
        r.emit(0, [&] { return unsupported; });
        r.emit(2, [&] { return unsupported; });
        break;
      }
      // scatter-add is linear: the operand passes g through, each update gets the gradient of
      // the element it was added to. A window out of bounds was skipped (it added nothing), so
      // its update gets zero, where the gather alone would clamp and read a neighbour.
      r.emit(0, [&] { return g; });
      r.emit(2, [&] {
        const Shape& operand = node.operands[0]->shape;
        const Shape& updates = node.operands[2]->shape;
        const Tensor read = Gather(g, r.x(1), ScatterAsGather(attrs.scatter, operand, updates));
        std::vector<int64_t> batch_dims;  // the update dims that run over the indices
        for (int64_t d = 0; d < updates.rank(); ++d) {
          if (std::find(attrs.scatter.update_window_dims.begin(),
                        attrs.scatter.update_window_dims.end(),
                        d) == attrs.scatter.update_window_dims.end()) {
            batch_dims.push_back(d);
          }
        }
        const Tensor landed =
            Broadcast(ScatterWindowInBounds(r.x(1), attrs.scatter, operand, updates),
                      updates.dims(), batch_dims);
        return Select(landed, read, ZerosLike(read));
      });
      break;
    }
    default:
      return false;
  }
  return true;
}

// reduce: add broadcasts back; max/min split the gradient among the tied maxima; and/or have none.
// Returns false when `node` is not of this family.
bool VjpReduce(const LazyNode& node, const Tensor& y, const Tensor& g, VjpOut& r) {
  const OpAttributes& attrs = node.attrs;
  switch (node.opcode) {
    case Opcode::kReduce: {
      const Shape& in = node.operands[0]->shape;
      std::vector<int64_t> kept = RemainingDims(in.rank(), attrs.dimensions);
      auto expand = [&](const Tensor& t) { return Broadcast(t, in.dims(), kept); };
      switch (attrs.reduce_kind) {
        case ReduceKind::kAdd:
          r.emit(0, [&] { return expand(g); });
          break;
        case ReduceKind::kMaximum:
        case ReduceKind::kMinimum:
          r.emit(0, [&] {
            Tensor hit = Compare(r.x(0), expand(y), ComparisonDirection::kEq);
            Tensor count = ReduceSum(Convert(hit, in.dtype()), attrs.dimensions);
            return Select(hit, expand(g / count), Zeros(in));
          });
          break;
        case ReduceKind::kMultiply:
          r.emit(0, [&] { return expand(g * y) / r.x(0); });
          break;
        case ReduceKind::kAnd:
        case ReduceKind::kOr:
          break;
      }
      break;
    }
    default:
      return false;
  }
  return true;
}

// dot: each operand's gradient is a dot of the output gradient with the other operand. Returns
// false when `node` is not of this family.
bool VjpDot(const LazyNode& node, const Tensor& y, const Tensor& g, VjpOut& r) {
  const OpAttributes& attrs = node.attrs;
  switch (node.opcode) {
    case Opcode::kDot: {
      const DotDimensionNumbers& dn = attrs.dot;
      const Shape& lhs = node.operands[0]->shape;
      const Shape& rhs = node.operands[1]->shape;
      r.emit(0, [&] {
        return DotOperandGrad(g, r.x(1), lhs.rank(), dn.lhs_batch_dims, dn.lhs_contracting_dims,
                              dn.rhs_batch_dims, dn.rhs_contracting_dims, /*self_is_lhs=*/true);
      });
      r.emit(1, [&] {
        return DotOperandGrad(g, r.x(0), rhs.rank(), dn.rhs_batch_dims, dn.rhs_contracting_dims,
                              dn.lhs_batch_dims, dn.lhs_contracting_dims, /*self_is_lhs=*/false);
      });
      break;
    }
    default:
      return false;
  }
  return true;
}

// lax._dilate_shape: the extent of `size` elements with dilation `d`.
int64_t Dilate(int64_t size, int64_t d) { return size == 0 ? 0 : 1 + d * (size - 1); }

// One window dim of the convolution that maps the output gradient back to the lhs (JAX
// _conv_general_dilated_transpose_lhs with _conv_general_vjp_lhs_padding): stride and base
// dilation swap, the window keeps its size and dilation, the padding makes the sizes match.
WindowDim LhsGradWindow(const WindowDim& w, int64_t in, int64_t out) {
  WindowDim t;
  t.size = w.size;
  t.stride = w.base_dilation;
  t.base_dilation = w.stride;
  t.window_dilation = w.window_dilation;
  const int64_t lhs_d = Dilate(in, w.base_dilation), rhs_d = Dilate(w.size, w.window_dilation);
  t.padding_low = rhs_d - w.padding_low - 1;
  t.padding_high = lhs_d + rhs_d - 1 - Dilate(out, w.stride) - t.padding_low;
  return t;
}

// The window dim of the convolution giving the kernel gradient (JAX
// _conv_general_dilated_transpose_rhs with _conv_general_vjp_rhs_padding): the output gradient
// is the kernel, window dilation and stride swap.
WindowDim RhsGradWindow(const WindowDim& w, int64_t in, int64_t out) {
  WindowDim t;
  t.size = out;
  t.stride = w.window_dilation;
  t.base_dilation = w.base_dilation;
  t.window_dilation = w.stride;
  const int64_t lhs_d = Dilate(in, w.base_dilation), rhs_d = Dilate(w.size, w.window_dilation);
  t.padding_low = w.padding_low;
  t.padding_high = (Dilate(out, w.stride) - lhs_d) + (rhs_d - w.padding_low - 1);
  return t;
}

// JAX _reshape_axis_out_of: dim `src` of size n becomes dims [size1, n / size1].
Tensor ReshapeAxisOutOf(int64_t src, int64_t size1, const Tensor& x) {
  std::vector<int64_t> dims = x.shape().dims();
  dims[src] /= size1;
  dims.insert(dims.begin() + src, size1);
  return Reshape(x, dims);
}

// JAX _reshape_axis_into: dim `src` moves in front of dim `dst` (numbered without src) and
// merges into it, as its major part.
Tensor ReshapeAxisInto(int64_t src, int64_t dst, const Tensor& x) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != src) perm.push_back(i);
  }
  perm.insert(perm.begin() + dst, src);
  std::vector<int64_t> dims = x.shape().dims();
  dims.erase(dims.begin() + src);
  dims[dst] *= x.dim(src);
  return Reshape(Transpose(x, perm), dims);
}

Tensor ConvLhsGrad(const LazyNode& node, const Tensor& g, const Tensor& rhs) {
  const OpAttributes& a = node.attrs;
  const ConvolutionDimensionNumbers& d = a.convolution;
  const Shape& lhs = node.operands[0]->shape;
  const int64_t groups = std::max(a.feature_group_count, a.batch_group_count);
  Tensor kernel = rhs;
  if (groups > 1) {
    // The groups move from the kernel's output features into its input features.
    kernel = ReshapeAxisOutOf(d.kernel_output_feature_dimension, groups, kernel);
    kernel = ReshapeAxisInto(d.kernel_output_feature_dimension, d.kernel_input_feature_dimension,
                             kernel);
  }
  ConvolutionDimensionNumbers t;
  t.input_batch_dimension = d.output_batch_dimension;
  t.input_feature_dimension = d.output_feature_dimension;
  t.input_spatial_dimensions = d.output_spatial_dimensions;
  t.kernel_input_feature_dimension = d.kernel_output_feature_dimension;
  t.kernel_output_feature_dimension = d.kernel_input_feature_dimension;
  t.kernel_spatial_dimensions = d.kernel_spatial_dimensions;
  t.output_batch_dimension = d.input_batch_dimension;
  t.output_feature_dimension = d.input_feature_dimension;
  t.output_spatial_dimensions = d.input_spatial_dimensions;
  std::vector<WindowDim> window;
  for (size_t k = 0; k < a.window.size(); ++k) {
    window.push_back(LhsGradWindow(a.window[k], lhs.dim(d.input_spatial_dimensions[k]),
                                   g.dim(d.output_spatial_dimensions[k])));
  }
  Tensor out = Convolution(g, Reverse(kernel, d.kernel_spatial_dimensions), window, t, groups);
  if (a.batch_group_count > 1) {
    out = ReshapeAxisOutOf(d.input_feature_dimension, a.batch_group_count, out);
    out = ReshapeAxisInto(d.input_feature_dimension, d.input_batch_dimension, out);
  }
  return out;
}

Tensor ConvRhsGrad(const LazyNode& node, const Tensor& g, const Tensor& lhs) {
  const OpAttributes& a = node.attrs;
  const ConvolutionDimensionNumbers& d = a.convolution;
  ConvolutionDimensionNumbers t;
  t.input_batch_dimension = d.input_feature_dimension;
  t.input_feature_dimension = d.input_batch_dimension;
  t.input_spatial_dimensions = d.input_spatial_dimensions;
  t.kernel_input_feature_dimension = d.output_batch_dimension;
  t.kernel_output_feature_dimension = d.output_feature_dimension;
  t.kernel_spatial_dimensions = d.output_spatial_dimensions;
  t.output_batch_dimension = d.kernel_input_feature_dimension;
  t.output_feature_dimension = d.kernel_output_feature_dimension;
  t.output_spatial_dimensions = d.kernel_spatial_dimensions;
  std::vector<WindowDim> window;
  for (size_t k = 0; k < a.window.size(); ++k) {
    window.push_back(RhsGradWindow(a.window[k], lhs.dim(d.input_spatial_dimensions[k]),
                                   g.dim(d.output_spatial_dimensions[k])));
  }
  // Feature groups of the forward become batch groups here and the other way round.
  return Convolution(lhs, g, window, t, a.batch_group_count, a.feature_group_count);
}

// convolution (both operands by convolutions, as XLA / JAX build them), reduce-window (add: pad
// and reduce-window; max / min: select-and-scatter), reverse. Returns false when `node` is not
// of this family.
bool VjpWindowed(const LazyNode& node, const Tensor& y, const Tensor& g, VjpOut& r) {
  const OpAttributes& attrs = node.attrs;
  switch (node.opcode) {
    case Opcode::kReverse:
      r.emit(0, [&] { return Reverse(g, attrs.dimensions); });
      break;
    case Opcode::kConvolution: {
      for (const WindowDim& w : attrs.window) {
        if (w.window_reversal) {
          const Tensor unsupported = Tensor::Error(absl::UnimplementedError(
              "no gradient for a convolution with rhs_reversal (JAX never emits one)"));
          r.emit(0, [&] { return unsupported; });
          r.emit(1, [&] { return unsupported; });
          return true;
        }
      }
      r.emit(0, [&] { return ConvLhsGrad(node, g, r.x(1)); });
      r.emit(1, [&] { return ConvRhsGrad(node, g, r.x(0)); });
      break;
    }
    case Opcode::kReduceWindow: {
      const Shape& in = node.operands[0]->shape;
      if (attrs.reduce_kind == ReduceKind::kAdd) {
        // Each input element gets the sum of g over the windows that hold it (JAX
        // _reduce_window_sum_transpose_rule).
        r.emit(0, [&] {
          std::vector<PadDim> padding;
          std::vector<WindowDim> window;
          for (int64_t k = 0; k < in.rank(); ++k) {
            const WindowDim& w = attrs.window[k];
            const WindowDim t = LhsGradWindow(w, in.dim(k), g.dim(k));
            padding.push_back(PadDim{t.padding_low, t.padding_high, w.stride - 1});
            WindowDim sum;
            sum.size = w.size;
            sum.stride = w.base_dilation;
            sum.window_dilation = w.window_dilation;
            window.push_back(sum);
          }
          return ReduceWindow(Pad(g, Scalar(g.dtype(), 0), padding), Scalar(g.dtype(), 0), window,
                              ReduceKind::kAdd);
        });
        r.emit(1, [&] { return ReduceSum(g, Iota64(0, g.rank())); });
        break;
      }
      const bool dilated = std::any_of(attrs.window.begin(), attrs.window.end(), [](const auto& w) {
        return w.base_dilation != 1 || w.window_dilation != 1 || w.window_reversal;
      });
      if ((attrs.reduce_kind != ReduceKind::kMaximum &&
           attrs.reduce_kind != ReduceKind::kMinimum) ||
          dilated) {
        const Tensor unsupported = Tensor::Error(absl::UnimplementedError(absl::StrCat(
            "no gradient for reduce-window with to_apply=", ReduceKindName(attrs.reduce_kind),
            dilated ? " and a dilated window" : "", "; add, and undilated maximum/minimum, are")));
        r.emit(0, [&] { return unsupported; });
        break;
      }
      // The gradient goes to the element each window selected (the first maximum), as XLA's
      // max-pool gradient.
      r.emit(0, [&] {
        return SelectAndScatter(r.x(0), g, Scalar(g.dtype(), 0), attrs.window,
                                attrs.reduce_kind == ReduceKind::kMaximum
                                    ? ComparisonDirection::kGe
                                    : ComparisonDirection::kLe);
      });
      break;
    }
    case Opcode::kSelectAndScatter: {
      // The selection is piecewise constant in the operand (zero gradient); the source's would
      // need XLA's select-and-gather, which Tessel does not have.
      const Tensor unsupported = Tensor::Error(absl::UnimplementedError(
          "no gradient for select-and-scatter's source (needs select-and-gather)"));
      r.emit(1, [&] { return unsupported; });
      break;
    }
    default:
      return false;
  }
  return true;
}

// Appends (operand index, gradient contribution) pairs for `node` given its output gradient g;
// only operands marked in `wanted` get one. Ops through which no gradient flows (parameter,
// constant, iota, rng, compare, and, or, not, tuple ops) append nothing.
void Vjp(const LazyNode& node, const Tensor& y, const Tensor& g, const std::vector<bool>& wanted,
         std::vector<std::pair<int, Tensor>>& out) {
  VjpOut r(node, wanted, out);
  VjpElementwise(node, y, g, r) || VjpDataMovement(node, y, g, r) || VjpReduce(node, y, g, r) ||
      VjpDot(node, y, g, r) || VjpWindowed(node, y, g, r);
}

}  // namespace

std::vector<Tensor> Grad(const Tensor& loss, absl::Span<const Tensor> wrt) {
  auto fail = [&](absl::Status status) {
    return std::vector<Tensor>(wrt.size(), Tensor::Error(std::move(status)));
  };
  if (!loss.status().ok()) return fail(loss.status());
  for (const Tensor& w : wrt) {
    if (!w.status().ok()) return fail(w.status());
  }
  if (loss.rank() != 0 || !IsFloating(loss.dtype())) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("grad: loss must be a floating-point scalar, got ", loss.shape().ToString())));
  }
  // Post-order (operands first) over the DAG below `loss`.
  std::vector<std::shared_ptr<LazyNode>> order;
  absl::flat_hash_set<const LazyNode*> visited;
  std::vector<std::pair<std::shared_ptr<LazyNode>, size_t>> stack;
  stack.emplace_back(loss.impl()->node, 0);
  visited.insert(loss.impl()->node.get());
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->operands.size()) {
      std::shared_ptr<LazyNode> child = node->operands[next++];
      if (visited.insert(child.get()).second) stack.emplace_back(std::move(child), 0);
      continue;
    }
    order.push_back(node);
    stack.pop_back();
  }
  absl::flat_hash_set<const LazyNode*> targets;
  for (const Tensor& w : wrt) targets.insert(w.impl()->node.get());
  // Control flow has no gradient rule here (JAX hands over HLO it already differentiated);
  // a while or conditional between the loss and a target fails loudly, never with zeros.
  absl::flat_hash_set<const LazyNode*> reaches;
  for (const auto& node : order) {
    bool reach = targets.contains(node.get());
    for (const auto& operand : node->operands) reach = reach || reaches.contains(operand.get());
    if (!reach) continue;
    reaches.insert(node.get());
    if (node->opcode == Opcode::kWhile || node->opcode == Opcode::kConditional) {
      return fail(absl::UnimplementedError(absl::StrCat(
          "grad: no gradient through ", OpcodeName(node->opcode),
          " (control flow is not differentiable in Tessel; differentiate in the frontend, e.g. "
          "jax.grad, and import the differentiated HLO)")));
    }
  }
  // A node needs a gradient when it is floating point and a target lies at or below it.
  absl::flat_hash_set<const LazyNode*> needs;
  for (const auto& node : order) {
    if (!IsFloating(node->shape.dtype()) || node->shape.is_tuple()) continue;
    bool need = targets.contains(node.get());
    for (const auto& operand : node->operands) need = need || needs.contains(operand.get());
    if (need) needs.insert(node.get());
  }
  absl::flat_hash_map<const LazyNode*, Tensor> grads;
  grads[loss.impl()->node.get()] = Ones(loss.shape());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const LazyNode& node = **it;
    auto found = grads.find(&node);
    if (found == grads.end() || !needs.contains(&node)) continue;
    std::vector<bool> wanted;
    bool any = false;
    for (const auto& operand : node.operands) {
      bool w = needs.contains(operand.get());
      wanted.push_back(w);
      any = any || w;
    }
    if (!any) continue;
    Tensor g = found->second;
    std::vector<std::pair<int, Tensor>> contributions;
    Vjp(node, Wrap(*it), g, wanted, contributions);
    for (auto& [i, contribution] : contributions) {
      const LazyNode* operand = node.operands[i].get();
      auto slot = grads.find(operand);
      if (slot == grads.end()) {
        grads.emplace(operand, std::move(contribution));
      } else {
        slot->second = slot->second + contribution;
      }
    }
  }
  std::vector<Tensor> result;
  for (const Tensor& w : wrt) {
    auto found = grads.find(w.impl()->node.get());
    result.push_back(found != grads.end() ? found->second : Zeros(w.shape()));
  }
  return result;
}

}  // namespace tessel
