// gather and scatter (XLA operation semantics, "Gather" and "Scatter").
//
// gather visits the batch positions (the output dims taken from the indices) and copies one
// window per position with StridedCopy; start indices are clamped so the window stays inside
// the operand, as XLA does. scatter walks the scatter positions in row-major order on one
// thread and, within each window, the elements in row-major order, so the combiner is applied
// in index order and results are deterministic; a window that does not fit inside the operand
// is skipped whole (XLA's ScatterExpander and GPU/CPU emitters do the same).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/internal/kernels_util.h"
#include "tessel/core/shape_inference.h"

namespace tessel::internal {
namespace {

using DimVector = absl::InlinedVector<int64_t, 8>;

// Element `i` of an s32 or s64 literal.
int64_t IndexAt(const Literal& indices, int64_t i) {
  if (indices.shape().dtype() == DType::kS32) return indices.data<int32_t>()[i];
  return indices.data<int64_t>()[i];
}

// The windows of a gather (or of the equivalent gather of a scatter), one per batch position.
struct WindowPlan {
  GatherDimMap map;
  DimVector batch_dims;   // output dims taken from the indices, in order
  DimVector batch_sizes;  // their sizes
  int64_t num_positions = 1;
  std::vector<int64_t> operand_strides;
  std::vector<int64_t> indices_strides;
  std::vector<int64_t> output_strides;
};

WindowPlan MakeWindowPlan(const Shape& operand, const Shape& indices, const Shape& output,
                          const GatherDimensionNumbers& g) {
  WindowPlan plan;
  plan.map = MapGatherDims(operand.rank(), indices.rank(), g);
  for (int64_t o = 0; o < output.rank(); ++o) {
    if (plan.map.output_to_indices[o] < 0) continue;
    plan.batch_dims.push_back(o);
    plan.batch_sizes.push_back(output.dim(o));
    plan.num_positions *= output.dim(o);
  }
  plan.operand_strides = operand.strides();
  plan.indices_strides = indices.strides();
  plan.output_strides = output.strides();
  return plan;
}

// For batch position `position` (row-major over plan.batch_dims): the unclamped start of the
// window in every operand dim, and the position's offset in the output.
void WindowStart(const WindowPlan& plan, const Literal& indices, const GatherDimensionNumbers& g,
                 int64_t position, DimVector& starts, int64_t& output_offset) {
  const int64_t operand_rank = static_cast<int64_t>(plan.operand_strides.size());
  const int64_t indices_rank = indices.shape().rank();
  DimVector batch_index(plan.batch_dims.size());
  for (int64_t i = static_cast<int64_t>(plan.batch_dims.size()) - 1; i >= 0; --i) {
    batch_index[i] = position % plan.batch_sizes[i];
    position /= plan.batch_sizes[i];
  }
  // Position along each indices dim (index_vector_dim stays 0).
  DimVector indices_index(indices_rank, 0);
  output_offset = 0;
  for (size_t i = 0; i < plan.batch_dims.size(); ++i) {
    int64_t o = plan.batch_dims[i];
    indices_index[plan.map.output_to_indices[o]] = batch_index[i];
    output_offset += batch_index[i] * plan.output_strides[o];
  }
  int64_t base = 0;
  for (int64_t d = 0; d < indices_rank; ++d) base += indices_index[d] * plan.indices_strides[d];
  starts.assign(operand_rank, 0);
  const int64_t vector_stride =
      g.index_vector_dim < indices_rank ? plan.indices_strides[g.index_vector_dim] : 0;
  for (size_t k = 0; k < g.start_index_map.size(); ++k) {
    starts[g.start_index_map[k]] = IndexAt(indices, base + static_cast<int64_t>(k) * vector_stride);
  }
  for (size_t i = 0; i < g.operand_batching_dims.size(); ++i) {
    starts[g.operand_batching_dims[i]] = indices_index[g.start_indices_batching_dims[i]];
  }
}

// The window's dims in output order with their operand and output strides.
void WindowBox(const WindowPlan& plan, const GatherDimensionNumbers& g, DimVector& dims,
               DimVector& operand_strides, DimVector& output_strides) {
  for (size_t o = 0; o < plan.map.output_to_operand.size(); ++o) {
    int64_t d = plan.map.output_to_operand[o];
    if (d < 0) continue;
    dims.push_back(g.slice_sizes[d]);
    operand_strides.push_back(plan.operand_strides[d]);
    output_strides.push_back(plan.output_strides[o]);
  }
}

template <typename T>
T Combine(ReduceKind kind, bool overwrite, T a, T b) {
  if (overwrite) return b;
  if constexpr (std::is_same_v<T, bool>) {
    return kind == ReduceKind::kAnd ? (a && b) : (a || b);
  } else {
    using C = ComputeT<T>;
    C x = Load(a), y = Load(b);
    switch (kind) {
      case ReduceKind::kAdd:
        if constexpr (std::is_integral_v<C>) return StoreAs<T>(WrapAdd(x, y));
        return StoreAs<T>(x + y);
      case ReduceKind::kMultiply:
        if constexpr (std::is_integral_v<C>) return StoreAs<T>(WrapMul(x, y));
        return StoreAs<T>(x * y);
      case ReduceKind::kMaximum:
        if constexpr (std::is_floating_point_v<C>) return StoreAs<T>(FloatMax(x, y));
        return StoreAs<T>(x > y ? x : y);
      case ReduceKind::kMinimum:
        if constexpr (std::is_floating_point_v<C>) return StoreAs<T>(FloatMin(x, y));
        return StoreAs<T>(x < y ? x : y);
      case ReduceKind::kAnd:
        if constexpr (std::is_integral_v<C>) return StoreAs<T>(x & y);
        break;
      case ReduceKind::kOr:
        if constexpr (std::is_integral_v<C>) return StoreAs<T>(x | y);
        break;
    }
    return b;
  }
}

}  // namespace

Literal Gather(const KernelContext& ctx, const Literal& operand, const Literal& indices,
               const GatherDimensionNumbers& dnums, const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  if (shape.num_elements() == 0) return out;
  WindowPlan plan = MakeWindowPlan(operand.shape(), indices.shape(), shape, dnums);
  DimVector dims, src_strides, dst_strides;
  WindowBox(plan, dnums, dims, src_strides, dst_strides);
  int64_t window_elements = 1;
  for (int64_t d : dims) window_elements *= d;
  const KernelContext serial;
  const int64_t grain =
      std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, window_elements));
  ParallelFor(ctx, plan.num_positions, grain, [&](int64_t begin, int64_t end) {
    DimVector starts;
    int64_t dst_offset = 0;
    for (int64_t p = begin; p < end; ++p) {
      WindowStart(plan, indices, dnums, p, starts, dst_offset);
      int64_t src_offset = 0;
      for (int64_t d = 0; d < operand.shape().rank(); ++d) {
        int64_t start =
            std::clamp<int64_t>(starts[d], 0, operand.shape().dim(d) - dnums.slice_sizes[d]);
        src_offset += start * plan.operand_strides[d];
      }
      StridedCopy(serial, dims, operand, src_offset, src_strides, out, dst_offset, dst_strides);
    }
  });
  return out;
}

absl::StatusOr<Literal> Scatter(const KernelContext& ctx, const Literal& operand,
                                const Literal& indices, const Literal& updates,
                                const ScatterDimensionNumbers& dnums, ReduceKind kind,
                                bool overwrite) {
  Literal out = operand;
  const Shape& operand_shape = operand.shape();
  GatherDimensionNumbers g = ScatterAsGather(dnums, operand_shape, updates.shape());
  WindowPlan plan = MakeWindowPlan(operand_shape, indices.shape(), updates.shape(), g);
  DimVector dims, dst_strides, src_strides;
  WindowBox(plan, g, dims, dst_strides, src_strides);
  int64_t window_elements = 1;
  for (int64_t d : dims) window_elements *= d;
  if (window_elements == 0) return out;
  const bool logical = kind == ReduceKind::kAnd || kind == ReduceKind::kOr;
  const DType dtype = operand_shape.dtype();
  if (!overwrite && (logical ? IsFloating(dtype) : dtype == DType::kPred)) {
    return absl::InvalidArgumentError(absl::StrCat("scatter: to_apply=", ReduceKindName(kind),
                                                   " does not apply to ", DTypeName(dtype)));
  }
  VisitDType(dtype, [&]<typename T>() {
    const T* src = updates.data<T>().data();
    T* dst = out.data<T>().data();
    DimVector starts, counter(dims.size());
    int64_t update_offset = 0;
    for (int64_t p = 0; p < plan.num_positions; ++p) {
      WindowStart(plan, indices, g, p, starts, update_offset);
      int64_t operand_offset = 0;
      bool inside = true;
      for (int64_t d = 0; d < operand_shape.rank(); ++d) {
        inside = inside && starts[d] >= 0 && starts[d] <= operand_shape.dim(d) - g.slice_sizes[d];
        operand_offset += starts[d] * plan.operand_strides[d];
      }
      if (!inside) continue;
      std::fill(counter.begin(), counter.end(), 0);
      for (int64_t e = 0; e < window_elements; ++e) {
        int64_t to = operand_offset, from = update_offset;
        for (size_t i = 0; i < dims.size(); ++i) {
          to += counter[i] * dst_strides[i];
          from += counter[i] * src_strides[i];
        }
        dst[to] = Combine<T>(kind, overwrite, dst[to], src[from]);
        for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
          if (++counter[i] < dims[i]) break;
          counter[i] = 0;
        }
      }
    }
  });
  return out;
}

}  // namespace tessel::internal
