// Windowed kernels: convolution (im2col + GEMM), reduce-window, select-and-scatter, reverse.
//
// Every windowed kernel first tabulates, per window dim, which operand index each (output
// position, window position) pair reads, or -1 where it lands in padding or in a base-dilation
// hole (WindowTable); the inner loops are then plain gathers. Such positions are skipped, as in
// XLA's HloEvaluator (which is also what makes an identity init value the only one for which
// padding "contributes init").
//
// convolution: per group (feature or batch group), rows = (output batch, output spatial
// position), columns = (kernel spatial position, input feature of the group). Rows are cut into
// blocks of kRowBlock; each block builds its im2col patch matrix in the compute type and
// multiplies it by the group's kernel matrix with a single-threaded GEMM (Sgemm for f32, Eigen
// for f64), one block per task, so threads never share a buffer and the result does not depend on
// the thread count. Integer convolutions use the same patches with a wrapping loop.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/internal/kernels_util.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/window.h"

namespace tessel::internal {
namespace {

constexpr int64_t kRowBlock = 256;

// For one window dim: table[o * size + w] = operand index read by output index o at window
// position w, or -1 (padding or a base-dilation hole).
std::vector<int64_t> WindowTable(const WindowDim& w, int64_t operand_size, int64_t output_size) {
  std::vector<int64_t> table(output_size * w.size, -1);
  for (int64_t o = 0; o < output_size; ++o) {
    for (int64_t k = 0; k < w.size; ++k) {
      const int64_t kk = w.window_reversal ? w.size - 1 - k : k;
      const int64_t pos = o * w.stride - w.padding_low + kk * w.window_dilation;
      if (pos < 0 || pos % w.base_dilation != 0) continue;
      const int64_t index = pos / w.base_dilation;
      if (index < operand_size) table[o * w.size + k] = index;
    }
  }
  return table;
}

// Row-major multi-index of `linear` over `dims`.
void Unravel(int64_t linear, absl::Span<const int64_t> dims, std::vector<int64_t>& index) {
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    index[d] = linear % dims[d];
    linear /= dims[d];
  }
}

template <typename A>
A Combine(ReduceKind kind, A a, A b) {
  switch (kind) {
    case ReduceKind::kAdd:
      if constexpr (std::is_integral_v<A> && !std::is_same_v<A, bool>) {
        return WrapAdd(a, b);
      } else {
        return static_cast<A>(a + b);
      }
    case ReduceKind::kMultiply:
      if constexpr (std::is_integral_v<A> && !std::is_same_v<A, bool>) {
        return WrapMul(a, b);
      } else {
        return static_cast<A>(a * b);
      }
    case ReduceKind::kMaximum:
      if constexpr (std::is_floating_point_v<A>) return FloatMax(a, b);
      return a > b ? a : b;
    case ReduceKind::kMinimum:
      if constexpr (std::is_floating_point_v<A>) return FloatMin(a, b);
      return a < b ? a : b;
    case ReduceKind::kAnd:
      if constexpr (std::is_same_v<A, bool>) {
        return a && b;
      } else if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(a & b);
      } else {
        return a;
      }
    case ReduceKind::kOr:
      if constexpr (std::is_same_v<A, bool>) {
        return a || b;
      } else if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(a | b);
      } else {
        return a;
      }
  }
  return a;
}

// The geometry of a convolution, from its shapes and attributes.
struct ConvPlan {
  int64_t num_spatial = 0;
  int64_t groups = 1;  // feature_group_count or batch_group_count
  bool batch_groups = false;
  int64_t out_batch = 0, in_features_per_group = 0, out_features_per_group = 0;
  std::vector<int64_t> out_spatial, kernel_spatial;  // per spatial dim
  int64_t positions = 1, kernel_positions = 1;       // products of the two
  std::vector<std::vector<int64_t>> tables;          // WindowTable per spatial dim
  std::vector<int64_t> lhs_strides, rhs_strides, out_strides;
};

ConvPlan MakeConvPlan(const Shape& lhs, const Shape& rhs, const Shape& out,
                      const OpAttributes& attrs) {
  const ConvolutionDimensionNumbers& d = attrs.convolution;
  ConvPlan p;
  p.num_spatial = static_cast<int64_t>(d.input_spatial_dimensions.size());
  p.batch_groups = attrs.batch_group_count > 1;
  p.groups = std::max(attrs.feature_group_count, attrs.batch_group_count);
  p.out_batch = out.dim(d.output_batch_dimension);
  p.in_features_per_group = rhs.dim(d.kernel_input_feature_dimension);
  p.out_features_per_group = rhs.dim(d.kernel_output_feature_dimension) / p.groups;
  for (int64_t k = 0; k < p.num_spatial; ++k) {
    p.out_spatial.push_back(out.dim(d.output_spatial_dimensions[k]));
    p.kernel_spatial.push_back(rhs.dim(d.kernel_spatial_dimensions[k]));
    p.positions *= p.out_spatial.back();
    p.kernel_positions *= p.kernel_spatial.back();
    p.tables.push_back(
        WindowTable(attrs.window[k], lhs.dim(d.input_spatial_dimensions[k]), p.out_spatial.back()));
  }
  p.lhs_strides = lhs.strides();
  p.rhs_strides = rhs.strides();
  p.out_strides = out.strides();
  return p;
}

template <typename T>
void ConvolutionTyped(const KernelContext& ctx, const ConvPlan& p,
                      const ConvolutionDimensionNumbers& d, const T* lhs, const T* rhs, T* out) {
  using A = ComputeT<T>;
  const int64_t cg = p.in_features_per_group, og = p.out_features_per_group;
  const int64_t cols = p.kernel_positions * cg;
  const int64_t rows = p.out_batch * p.positions;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  for (int64_t g = 0; g < p.groups; ++g) {
    // The group's kernel as a [cols, og] row-major matrix.
    std::vector<A> kernel(cols * og);
    std::vector<int64_t> kidx(p.num_spatial);
    for (int64_t kp = 0; kp < p.kernel_positions; ++kp) {
      Unravel(kp, p.kernel_spatial, kidx);
      int64_t base = 0;
      for (int64_t s = 0; s < p.num_spatial; ++s) {
        base += kidx[s] * p.rhs_strides[d.kernel_spatial_dimensions[s]];
      }
      for (int64_t c = 0; c < cg; ++c) {
        for (int64_t o = 0; o < og; ++o) {
          kernel[(kp * cg + c) * og + o] =
              Load(rhs[base + c * p.rhs_strides[d.kernel_input_feature_dimension] +
                       (g * og + o) * p.rhs_strides[d.kernel_output_feature_dimension]]);
        }
      }
    }
    const int64_t batch_offset = p.batch_groups ? g * p.out_batch : 0;
    const int64_t feature_offset = p.batch_groups ? 0 : g * cg;
    ParallelFor(ctx, blocks, 1, [&](int64_t begin, int64_t end) {
      std::vector<A> patch(kRowBlock * cols);
      std::vector<A> result(kRowBlock * og);
      std::vector<int64_t> oidx(p.num_spatial), widx(p.num_spatial);
      for (int64_t block = begin; block < end; ++block) {
        const int64_t r0 = block * kRowBlock;
        const int64_t n = std::min(kRowBlock, rows - r0);
        for (int64_t r = 0; r < n; ++r) {
          const int64_t b = (r0 + r) / p.positions;
          Unravel((r0 + r) % p.positions, p.out_spatial, oidx);
          const int64_t lhs_base = (b + batch_offset) * p.lhs_strides[d.input_batch_dimension] +
                                   feature_offset * p.lhs_strides[d.input_feature_dimension];
          A* row = patch.data() + r * cols;
          for (int64_t kp = 0; kp < p.kernel_positions; ++kp) {
            Unravel(kp, p.kernel_spatial, widx);
            int64_t offset = lhs_base;
            bool inside = true;
            for (int64_t s = 0; s < p.num_spatial && inside; ++s) {
              const int64_t i = p.tables[s][oidx[s] * p.kernel_spatial[s] + widx[s]];
              inside = i >= 0;
              offset += i * p.lhs_strides[d.input_spatial_dimensions[s]];
            }
            A* cell = row + kp * cg;
            const int64_t fs = p.lhs_strides[d.input_feature_dimension];
            for (int64_t c = 0; c < cg; ++c) cell[c] = inside ? Load(lhs[offset + c * fs]) : A(0);
          }
        }
        if constexpr (std::is_same_v<A, float>) {
          Sgemm(false, false, n, og, cols, 1.f, patch.data(), cols, kernel.data(), og, 0.f,
                result.data(), og);
        } else if constexpr (std::is_floating_point_v<A>) {
          using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
          Eigen::Map<const Mat> pm(patch.data(), n, cols);
          Eigen::Map<const Mat> km(kernel.data(), cols, og);
          Eigen::Map<Mat> rm(result.data(), n, og);
          rm.noalias() = pm * km;
        } else {
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t o = 0; o < og; ++o) {
              A acc = 0;
              for (int64_t c = 0; c < cols; ++c) {
                acc = WrapAdd(acc, WrapMul(patch[r * cols + c], kernel[c * og + o]));
              }
              result[r * og + o] = acc;
            }
          }
        }
        for (int64_t r = 0; r < n; ++r) {
          const int64_t b = (r0 + r) / p.positions;
          Unravel((r0 + r) % p.positions, p.out_spatial, oidx);
          int64_t base = b * p.out_strides[d.output_batch_dimension];
          for (int64_t s = 0; s < p.num_spatial; ++s) {
            base += oidx[s] * p.out_strides[d.output_spatial_dimensions[s]];
          }
          for (int64_t o = 0; o < og; ++o) {
            out[base + (g * og + o) * p.out_strides[d.output_feature_dimension]] =
                StoreAs<T>(result[r * og + o]);
          }
        }
      }
    });
  }
}

// Per window dim tables and the output dims of a reduce-window-shaped iteration.
struct WindowPlan {
  std::vector<int64_t> out_dims, sizes, strides;
  std::vector<std::vector<int64_t>> tables;
  int64_t window_elements = 1;
};

WindowPlan MakeWindowPlan(const Shape& operand, absl::Span<const WindowDim> window) {
  WindowPlan p;
  p.strides = operand.strides();
  for (int64_t d = 0; d < operand.rank(); ++d) {
    p.out_dims.push_back(WindowOutputSize(window[d], operand.dim(d)));
    p.sizes.push_back(window[d].size);
    p.window_elements *= window[d].size;
    p.tables.push_back(WindowTable(window[d], operand.dim(d), p.out_dims.back()));
  }
  return p;
}

// Calls fn(operand offset) for every in-bounds element of the window of output `oidx`, in
// row-major window order.
template <typename Fn>
void ForEachInWindow(const WindowPlan& p, const std::vector<int64_t>& oidx,
                     std::vector<int64_t>& widx, Fn&& fn) {
  const int64_t rank = static_cast<int64_t>(p.sizes.size());
  for (int64_t w = 0; w < p.window_elements; ++w) {
    Unravel(w, p.sizes, widx);
    int64_t offset = 0;
    bool inside = true;
    for (int64_t d = 0; d < rank && inside; ++d) {
      const int64_t i = p.tables[d][oidx[d] * p.sizes[d] + widx[d]];
      inside = i >= 0;
      offset += i * p.strides[d];
    }
    if (inside) fn(offset);
  }
}

bool Selects(ComparisonDirection direction, double a, double b) {
  switch (direction) {
    case ComparisonDirection::kGe:
      return a >= b;
    case ComparisonDirection::kGt:
      return a > b;
    case ComparisonDirection::kLe:
      return a <= b;
    case ComparisonDirection::kLt:
      return a < b;
    default:
      return true;
  }
}

absl::Status CheckKind(const char* op, ReduceKind kind, const Shape& shape) {
  const bool logical = kind == ReduceKind::kAnd || kind == ReduceKind::kOr;
  if (logical && IsFloating(shape.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", ReduceKindName(kind), " needs pred or integer operands, got ", shape.ToString()));
  }
  if (!logical && shape.dtype() == DType::kPred) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", ReduceKindName(kind), " does not apply to pred"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Literal> Convolution(const KernelContext& ctx, const Literal& lhs,
                                    const Literal& rhs, const OpAttributes& attrs,
                                    const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  if (shape.dtype() == DType::kPred) {
    return absl::InvalidArgumentError(
        absl::StrCat("convolution: pred operands are not supported, got ", lhs.shape().ToString()));
  }
  if (shape.num_elements() == 0) return out;
  const ConvPlan plan = MakeConvPlan(lhs.shape(), rhs.shape(), shape, attrs);
  VisitDType(shape.dtype(), [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      ConvolutionTyped<T>(ctx, plan, attrs.convolution, lhs.data<T>().data(), rhs.data<T>().data(),
                          out.data<T>().data());
    }
  });
  return out;
}

absl::StatusOr<Literal> ReduceWindow(const KernelContext& ctx, const Literal& x,
                                     const Literal& init, absl::Span<const WindowDim> window,
                                     ReduceKind kind, const Shape& shape) {
  TESSEL_RETURN_IF_ERROR(CheckKind("reduce-window", kind, x.shape()));
  Literal out = Literal::Uninitialized(shape);
  const WindowPlan plan = MakeWindowPlan(x.shape(), window);
  const int64_t rank = x.shape().rank();
  const int64_t grain =
      std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, plan.window_elements));
  VisitDType(x.shape().dtype(), [&]<typename T>() {
    using A = ComputeT<T>;
    const T* src = x.data<T>().data();
    T* dst = out.data<T>().data();
    const A init_value = Load(init.data<T>()[0]);
    ParallelFor(ctx, shape.num_elements(), grain, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> oidx(rank), widx(rank);
      for (int64_t i = begin; i < end; ++i) {
        Unravel(i, plan.out_dims, oidx);
        A acc = init_value;
        ForEachInWindow(plan, oidx, widx,
                        [&](int64_t offset) { acc = Combine<A>(kind, acc, Load(src[offset])); });
        dst[i] = StoreAs<T>(acc);
      }
    });
  });
  return out;
}

absl::StatusOr<Literal> SelectAndScatter(const KernelContext& ctx, const Literal& x,
                                         const Literal& source, const Literal& init,
                                         absl::Span<const WindowDim> window,
                                         ComparisonDirection select, ReduceKind scatter) {
  TESSEL_RETURN_IF_ERROR(CheckKind("select-and-scatter", scatter, x.shape()));
  const Shape& shape = x.shape();
  Literal out = Literal::Uninitialized(shape);
  const WindowPlan plan = MakeWindowPlan(shape, window);
  const int64_t rank = shape.rank();
  VisitDType(shape.dtype(), [&]<typename T>() {
    using A = ComputeT<T>;
    const T* src = x.data<T>().data();
    const T* values = source.data<T>().data();
    T* dst = out.data<T>().data();
    std::vector<A> acc(shape.num_elements(), Load(init.data<T>()[0]));
    std::vector<int64_t> oidx(rank), widx(rank);
    // Sequential: windows overlap, and the scatter order must not depend on threads.
    for (int64_t i = 0; i < source.shape().num_elements(); ++i) {
      Unravel(i, plan.out_dims, oidx);
      int64_t selected = -1;
      ForEachInWindow(plan, oidx, widx, [&](int64_t offset) {
        if (selected < 0 || !Selects(select, static_cast<double>(Load(src[selected])),
                                     static_cast<double>(Load(src[offset])))) {
          selected = offset;
        }
      });
      if (selected >= 0) acc[selected] = Combine<A>(scatter, acc[selected], Load(values[i]));
    }
    for (int64_t i = 0; i < shape.num_elements(); ++i) dst[i] = StoreAs<T>(acc[i]);
  });
  (void)ctx;
  return out;
}

Literal Reverse(const KernelContext& ctx, const Literal& x, absl::Span<const int64_t> dimensions) {
  const Shape& shape = x.shape();
  Literal out = Literal::Uninitialized(shape);
  const int64_t rank = shape.rank();
  const std::vector<int64_t> strides = shape.strides();
  std::vector<bool> reversed(rank, false);
  for (int64_t d : dimensions) reversed[d] = true;
  VisitDType(shape.dtype(), [&]<typename T>() {
    const T* src = x.data<T>().data();
    T* dst = out.data<T>().data();
    ParallelFor(ctx, shape.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> index(rank);
      for (int64_t i = begin; i < end; ++i) {
        Unravel(i, shape.dims(), index);
        int64_t offset = 0;
        for (int64_t d = 0; d < rank; ++d) {
          offset += (reversed[d] ? shape.dim(d) - 1 - index[d] : index[d]) * strides[d];
        }
        dst[i] = src[offset];
      }
    });
  });
  return out;
}

}  // namespace tessel::internal
