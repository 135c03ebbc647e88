// sort and topk kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "tessel/core/internal/kernels.h"
#include "tessel/core/internal/kernels_util.h"

namespace tessel::internal {
namespace {

// The total order JAX's comparators spell out (NaN canonicalized, -0 == +0, LT TOTALORDER):
// ascending, with NaN after every number. Integers and pred compare as numbers.
template <typename T>
bool TotalLess(T a, T b) {
  if constexpr (kIsFloating<T>) {
    const auto x = Load(a), y = Load(b);
    if (std::isnan(x)) return false;
    if (std::isnan(y)) return true;
    return x < y;
  } else {
    return a < b;
  }
}

// The permutation that sorts each row (all indices but `dim` fixed) of `keys` by TotalLess, or
// by its reverse when `descending`; stable: equal keys keep their order. perm[row * n + j] is the
// position along `dim` of the j-th element of that sorted row.
template <typename T>
std::vector<int64_t> SortPermutation(const Literal& keys, int64_t dim, bool descending) {
  const Shape& shape = keys.shape();
  const int64_t n = shape.dim(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  const int64_t rows = n == 0 ? 0 : shape.num_elements() / n;
  absl::Span<const T> data = keys.data<T>();
  std::vector<int64_t> perm(rows * n);
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t base = (row / inner) * n * inner + row % inner;
    int64_t* p = perm.data() + row * n;
    std::iota(p, p + n, 0);
    std::stable_sort(p, p + n, [&](int64_t i, int64_t j) {
      const T a = data[base + i * inner], b = data[base + j * inner];
      return descending ? TotalLess(b, a) : TotalLess(a, b);
    });
  }
  return perm;
}

// `x` with each row along `dim` reordered by `perm` and cut to its first `k` positions.
Literal Permute(const Literal& x, int64_t dim, const std::vector<int64_t>& perm, int64_t k) {
  const Shape& shape = x.shape();
  const int64_t n = shape.dim(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  std::vector<int64_t> dims = shape.dims();
  dims[dim] = k;
  Literal out = Literal::Uninitialized(Shape(shape.dtype(), dims));
  const int64_t rows = n == 0 ? 0 : shape.num_elements() / n;
  VisitDType(shape.dtype(), [&]<typename T>() {
    absl::Span<const T> in = x.data<T>();
    absl::Span<T> result = out.data<T>();
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t outer = row / inner, lane = row % inner;
      const int64_t src = outer * n * inner + lane, dst = outer * k * inner + lane;
      for (int64_t j = 0; j < k; ++j) {
        result[dst + j * inner] = in[src + perm[row * n + j] * inner];
      }
    }
  });
  return out;
}

}  // namespace

Literal Sort(absl::Span<const Literal* const> operands, int64_t dim, bool descending) {
  const Literal& keys = *operands[0];
  std::vector<int64_t> perm = VisitDType(keys.shape().dtype(), [&]<typename T>() {
    return SortPermutation<T>(keys, dim, descending);
  });
  std::vector<Literal> sorted;
  for (const Literal* operand : operands) {
    sorted.push_back(Permute(*operand, dim, perm, operand->shape().dim(dim)));
  }
  if (sorted.size() == 1) return std::move(sorted[0]);
  return Literal::Tuple(std::move(sorted));
}

Literal TopK(const Literal& x, int64_t k, bool largest) {
  const int64_t dim = x.shape().rank() - 1;
  std::vector<int64_t> perm = VisitDType(
      x.shape().dtype(), [&]<typename T>() { return SortPermutation<T>(x, dim, largest); });
  Literal values = Permute(x, dim, perm, k);
  std::vector<int64_t> dims = x.shape().dims();
  dims[dim] = k;
  Literal indices = Literal::Uninitialized(Shape(DType::kS32, dims));
  absl::Span<int32_t> out = indices.data<int32_t>();
  const int64_t n = x.shape().dim(dim);
  const int64_t rows = n == 0 ? 0 : x.shape().num_elements() / n;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t j = 0; j < k; ++j) out[row * k + j] = static_cast<int32_t>(perm[row * n + j]);
  }
  std::vector<Literal> parts;
  parts.push_back(std::move(values));
  parts.push_back(std::move(indices));
  return Literal::Tuple(std::move(parts));
}

}  // namespace tessel::internal
