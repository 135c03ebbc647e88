// dot: general DotDimensionNumbers reduced to batched matrix products.
//
// Each operand is viewed, without copying when its dims allow, as a batch of matrices:
//   lhs dims (batch..., free..., contracting...)  -> [batch, m, k] row-major
//   lhs dims (batch..., contracting..., free...)  -> [batch, k, m], i.e. m x k column-major
//   rhs dims (batch..., contracting..., free...)  -> [batch, k, n] row-major
//   rhs dims (batch..., free..., contracting...)  -> [batch, n, k], i.e. k x n column-major
// and otherwise transposed into the first form. The result [batch, m, n] is row-major, which
// is exactly the dot's output layout (batch dims, lhs free dims, rhs free dims).
//
// f32 calls oneDNN's dnnl_sgemm (Sgemm below), f64 Eigen's GEMM (`C.noalias() = A * B` on
// Eigen::Map views). With more than one thread the output of each batch is split into blocks of
// rows (or of columns when n > m), one single-threaded GEMM per block inside a
// tbb::parallel_for. A block's GEMM may sum an element's k products in another order than the
// whole GEMM would (the libraries pick kernels by size), so callers may only rely on agreement
// to rounding. bf16/f16 convert the operands to f32, multiply, and round the result once.
//
// Why oneDNN for f32: on the MLP training step's shapes (batch x 784 x 1024 and the weight
// gradients with k = batch) its GEMMs ran 1.27-1.37x Eigen's (executor_bench
// BM_ExecutorMlpGemms against BM_EigenMlpGemms, one thread); Eigen packs the weight matrix anew
// in every call and zeroes C before accumulating into it (docs/PERFORMANCE.md, "Executor dot:
// oneDNN against Eigen").
#include <algorithm>
#include <new>
#include <numeric>
#include <type_traits>

#include "Eigen/Core"
#include "oneapi/dnnl/dnnl.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/internal/kernels_util.h"
#include "tessel/core/status_macros.h"

// libgomp's, which Debian's oneDNN runs its threads on (DNNL_CPU_RUNTIME OMP, checked in
// CMakeLists.txt). Declared here rather than through <omp.h> so the library is not compiled with
// -fopenmp (which would also turn on Eigen's own OpenMP GEMM threads).
extern "C" void omp_set_num_threads(int num_threads);

namespace tessel::internal {
namespace {

// One operand viewed as [batch, rows, cols] of a matrix `rows x cols` (lhs: m x k, rhs: k x n),
// stored row-major ([batch, rows, cols]) or column-major ([batch, cols, rows]).
struct MatrixView {
  const Literal* literal = nullptr;
  bool column_major = false;
};

bool IsIdentity(const std::vector<int64_t>& permutation) {
  for (size_t i = 0; i < permutation.size(); ++i) {
    if (permutation[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

std::vector<int64_t> FreeDims(int64_t rank, const std::vector<int64_t>& batch,
                              const std::vector<int64_t>& contracting) {
  std::vector<int64_t> free;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
      free.push_back(d);
    }
  }
  return free;
}

std::vector<int64_t> Concat(std::initializer_list<const std::vector<int64_t>*> parts) {
  std::vector<int64_t> out;
  for (const std::vector<int64_t>* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// Views `x` with dims ordered (batch, `first`, `second`) as a row-major [batch, first, second]
// matrix, or (batch, second, first) as column-major; otherwise transposes into `scratch`.
MatrixView ViewOperand(const KernelContext& ctx, const Literal& x,
                       const std::vector<int64_t>& batch, const std::vector<int64_t>& first,
                       const std::vector<int64_t>& second, Literal& scratch) {
  std::vector<int64_t> row_major = Concat({&batch, &first, &second});
  if (IsIdentity(row_major)) return {&x, false};
  if (IsIdentity(Concat({&batch, &second, &first}))) return {&x, true};
  scratch = Transpose(ctx, x, row_major);
  return {&scratch, false};
}

}  // namespace

void Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      if (beta == 0) {
        std::fill(row, row + n, 0.f);
      } else {
        std::transform(row, row + n, row, [beta](float x) { return beta * x; });
      }
    }
    return;
  }
  // The calling thread is one of the executor's (TBB workers or a device thread): oneDNN must
  // not start an OpenMP team of its own beside them. The setting is per thread.
  thread_local const bool single_threaded = (omp_set_num_threads(1), true);
  (void)single_threaded;
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  if (status == dnnl_out_of_memory) throw std::bad_alloc();
  TESSEL_CHECK(status == dnnl_success);
}

namespace {

template <typename T, int kOrder>
using ConstMatrixMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, kOrder>>;
template <typename T>
using OutMatrixMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

struct GemmSizes {
  int64_t batch, m, n, k;
};

// The output blocks GEMM runs on: `count` blocks per batch along rows (or columns).
struct Blocking {
  bool split_columns = false;
  int64_t block = 0;  // rows or columns per block
  int64_t count = 1;  // blocks per batch
};

Blocking ChooseBlocking(const KernelContext& ctx, const GemmSizes& s) {
  Blocking b;
  b.split_columns = s.n > s.m;
  const int64_t extent = b.split_columns ? s.n : s.m;
  b.block = std::max<int64_t>(extent, 1);
  const double flops = 2.0 * s.batch * s.m * s.n * s.k;
  // Below ~4 MFLOP a GEMM takes well under a millisecond; splitting it does not pay.
  if (ctx.num_threads <= 1 || flops < 4e6 || extent == 0) return b;
  // One block per thread (the batch counts as parallel work), block edges on multiples of 48
  // columns or 8 rows so the GEMM kernels' register tiles are whole except at the end. Chosen
  // for Eigen (f64 here), which computes a row-major C as C^T = B^T A^T in column-major order:
  // C's rows are its nr-wide columns (nr = 4) and C's columns its mr-tall rows (mr = 3
  // packets: 24 floats with AVX, 48 with AVX-512); kept for oneDNN's f32 kernels.
  const int64_t wanted = (ctx.num_threads + s.batch - 1) / s.batch;
  const int64_t align = b.split_columns ? 48 : 8;
  int64_t block = (extent + wanted - 1) / wanted;
  block = std::max<int64_t>(align, (block + align - 1) / align * align);
  b.block = std::min(block, extent);
  b.count = (extent + b.block - 1) / b.block;
  return b;
}

// out = lhs * rhs, or with `accumulate` out = addend + alpha * lhs * rhs: out holds the addend
// already when `addend` is null, else each block copies its part of `addend` first (in
// parallel, and hot in cache for its GEMM).
// One block of a blocked f32 GEMM (GemmTyped): Sgemm on the block's corner of each matrix.
template <int kLhsOrder, int kRhsOrder>
void SgemmBlock(const GemmSizes& s, const Blocking& blocking, int64_t task, const float* lhs,
                const float* rhs, float* out, bool accumulate, float alpha, const float* addend) {
  const int64_t b = task / blocking.count;
  const int64_t start = (task % blocking.count) * blocking.block;
  constexpr bool kLhsColumnMajor = kLhsOrder == Eigen::ColMajor;
  constexpr bool kRhsColumnMajor = kRhsOrder == Eigen::ColMajor;
  const float* a = lhs + b * s.m * s.k;
  const float* w = rhs + b * s.k * s.n;
  float* c = out + b * s.m * s.n;
  int64_t rows = s.m, cols = s.n;
  if (blocking.count > 1 && blocking.split_columns) {
    cols = std::min(blocking.block, s.n - start);
    w += kRhsColumnMajor ? start * s.k : start;
    c += start;
  } else if (blocking.count > 1) {
    rows = std::min(blocking.block, s.m - start);
    a += kLhsColumnMajor ? start : start * s.k;
    c += start * s.n;
  }
  if (accumulate && addend != nullptr) {
    const float* from = addend + (c - out);
    for (int64_t i = 0; i < rows; ++i) {
      std::copy(from + i * s.n, from + i * s.n + cols, c + i * s.n);
    }
  }
  Sgemm(kLhsColumnMajor, kRhsColumnMajor, rows, cols, s.k, accumulate ? alpha : 1.f, a,
        kLhsColumnMajor ? s.m : s.k, w, kRhsColumnMajor ? s.k : s.n, accumulate ? 1.f : 0.f, c,
        s.n);
}

template <typename T, int kLhsOrder, int kRhsOrder>
void GemmTyped(const KernelContext& ctx, const GemmSizes& s, const T* lhs, const T* rhs, T* out,
               bool accumulate = false, T alpha = T(1), const T* addend = nullptr) {
  const Blocking blocking = ChooseBlocking(ctx, s);
  auto run = [&](int64_t task) {
    if constexpr (std::is_same_v<T, float>) {
      SgemmBlock<kLhsOrder, kRhsOrder>(s, blocking, task, lhs, rhs, out, accumulate, alpha, addend);
    } else {  // f64: Eigen's GEMM on maps of the block
      const int64_t b = task / blocking.count;
      const int64_t start = (task % blocking.count) * blocking.block;
      ConstMatrixMap<T, kLhsOrder> a(lhs + b * s.m * s.k, s.m, s.k);
      ConstMatrixMap<T, kRhsOrder> w(rhs + b * s.k * s.n, s.k, s.n);
      OutMatrixMap<T> c(out + b * s.m * s.n, s.m, s.n);
      ConstMatrixMap<T, Eigen::RowMajor> initial(addend != nullptr ? addend + b * s.m * s.n : out,
                                                 s.m, s.n);
      if (blocking.count == 1) {
        if (accumulate) {
          if (addend != nullptr) c = initial;
          c.noalias() += alpha * (a * w);
        } else {
          c.noalias() = a * w;
        }
      } else if (blocking.split_columns) {
        const int64_t cols = std::min(blocking.block, s.n - start);
        if (accumulate) {
          if (addend != nullptr) c.middleCols(start, cols) = initial.middleCols(start, cols);
          c.middleCols(start, cols).noalias() += alpha * (a * w.middleCols(start, cols));
        } else {
          c.middleCols(start, cols).noalias() = a * w.middleCols(start, cols);
        }
      } else {
        const int64_t rows = std::min(blocking.block, s.m - start);
        if (accumulate) {
          if (addend != nullptr) c.middleRows(start, rows) = initial.middleRows(start, rows);
          c.middleRows(start, rows).noalias() += alpha * (a.middleRows(start, rows) * w);
        } else {
          c.middleRows(start, rows).noalias() = a.middleRows(start, rows) * w;
        }
      }
    }
  };
  const int64_t tasks = s.batch * blocking.count;
  if (ctx.num_threads <= 1 || tasks == 1 || 2.0 * s.batch * s.m * s.n * s.k < 4e6) {
    for (int64_t t = 0; t < tasks; ++t) run(t);
    return;
  }
  tbb::parallel_for(int64_t{0}, tasks, [&](int64_t t) { run(t); });
}

template <typename T>
void Gemm(const KernelContext& ctx, const GemmSizes& s, const MatrixView& lhs,
          const MatrixView& rhs, T* out, bool accumulate = false, T alpha = T(1),
          const T* addend = nullptr) {
  const T* a = lhs.literal->data<T>().data();
  const T* b = rhs.literal->data<T>().data();
  if (!lhs.column_major && !rhs.column_major) {
    GemmTyped<T, Eigen::RowMajor, Eigen::RowMajor>(ctx, s, a, b, out, accumulate, alpha, addend);
  } else if (!lhs.column_major) {
    GemmTyped<T, Eigen::RowMajor, Eigen::ColMajor>(ctx, s, a, b, out, accumulate, alpha, addend);
  } else if (!rhs.column_major) {
    GemmTyped<T, Eigen::ColMajor, Eigen::RowMajor>(ctx, s, a, b, out, accumulate, alpha, addend);
  } else {
    GemmTyped<T, Eigen::ColMajor, Eigen::ColMajor>(ctx, s, a, b, out, accumulate, alpha, addend);
  }
}

// Integer and pred dots: out[b,i,j] = sum_k lhs[b,i,k] * rhs[b,k,j] (pred: or of ands),
// accumulated in k order with two's complement wraparound.
template <typename T>
void LoopDot(const KernelContext& ctx, const GemmSizes& s, const MatrixView& lhs,
             const MatrixView& rhs, T* out) {
  const T* a = lhs.literal->data<T>().data();
  const T* w = rhs.literal->data<T>().data();
  // Element (i, kk) of lhs matrix b, and (kk, j) of rhs matrix b, in either storage order.
  const int64_t a_row = lhs.column_major ? 1 : s.k, a_col = lhs.column_major ? s.m : 1;
  const int64_t w_row = rhs.column_major ? 1 : s.n, w_col = rhs.column_major ? s.k : 1;
  const int64_t rows = s.batch * s.m;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, s.n * s.k));
  ParallelFor(ctx, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / std::max<int64_t>(s.m, 1), i = row % std::max<int64_t>(s.m, 1);
      const T* ab = a + b * s.m * s.k;
      const T* wb = w + b * s.k * s.n;
      T* c = out + row * s.n;
      std::fill(c, c + s.n, T(0));
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const T av = ab[i * a_row + kk * a_col];
        for (int64_t j = 0; j < s.n; ++j) {
          const T wv = wb[kk * w_row + j * w_col];
          if constexpr (std::is_same_v<T, bool>) {
            c[j] = c[j] || (av && wv);
          } else {
            c[j] = WrapAdd(c[j], WrapMul(av, wv));
          }
        }
      }
    }
  });
}

int64_t Product(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= shape.dim(d);
  return p;
}

// The free dims of both operands and the GEMM sizes of a dot.
struct DotLayout {
  std::vector<int64_t> lhs_free, rhs_free;
  GemmSizes sizes;
};

DotLayout DotLayoutOf(const Shape& ls, const Shape& rs, const DotDimensionNumbers& dnums) {
  DotLayout layout;
  layout.lhs_free = FreeDims(ls.rank(), dnums.lhs_batch_dims, dnums.lhs_contracting_dims);
  layout.rhs_free = FreeDims(rs.rank(), dnums.rhs_batch_dims, dnums.rhs_contracting_dims);
  layout.sizes = GemmSizes{Product(ls, dnums.lhs_batch_dims), Product(ls, layout.lhs_free),
                           Product(rs, layout.rhs_free), Product(ls, dnums.lhs_contracting_dims)};
  return layout;
}

}  // namespace

Literal Dot(const KernelContext& ctx, const Literal& lhs, const Literal& rhs,
            const DotDimensionNumbers& dnums, const Shape& shape) {
  const Shape& ls = lhs.shape();
  const Shape& rs = rhs.shape();
  const DotLayout layout = DotLayoutOf(ls, rs, dnums);
  const std::vector<int64_t>& lhs_free = layout.lhs_free;
  const std::vector<int64_t>& rhs_free = layout.rhs_free;
  const GemmSizes& sizes = layout.sizes;

  if (shape.num_elements() == 0) return Literal::Uninitialized(shape);

  // bf16/f16: compute in f32 on converted operands, round once at the end.
  const DType dtype = ls.dtype();
  const bool half = dtype == DType::kBF16 || dtype == DType::kF16;
  Literal lhs_f32, rhs_f32;
  const Literal* l = &lhs;
  const Literal* r = &rhs;
  if (half) {
    lhs_f32 = Unary(ctx, Opcode::kConvert, lhs, ls.WithDType(DType::kF32)).value();
    rhs_f32 = Unary(ctx, Opcode::kConvert, rhs, rs.WithDType(DType::kF32)).value();
    l = &lhs_f32;
    r = &rhs_f32;
  }
  Literal lhs_scratch, rhs_scratch;
  const MatrixView lhs_view =
      ViewOperand(ctx, *l, dnums.lhs_batch_dims, lhs_free, dnums.lhs_contracting_dims, lhs_scratch);
  const MatrixView rhs_view =
      ViewOperand(ctx, *r, dnums.rhs_batch_dims, dnums.rhs_contracting_dims, rhs_free, rhs_scratch);
  if (half) {
    Literal result = Literal::Uninitialized(shape.WithDType(DType::kF32));
    Gemm<float>(ctx, sizes, lhs_view, rhs_view, result.data<float>().data());
    return Unary(ctx, Opcode::kConvert, result, shape).value();
  }
  Literal out = Literal::Uninitialized(shape);
  VisitDType(dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      Gemm<T>(ctx, sizes, lhs_view, rhs_view, out.data<T>().data());
    } else if constexpr (!kIsFloating<T>) {
      LoopDot<T>(ctx, sizes, lhs_view, rhs_view, out.data<T>().data());
    }
  });
  return out;
}

void DotAccumulate(const KernelContext& ctx, const Literal& lhs, const Literal& rhs,
                   const DotDimensionNumbers& dnums, float alpha, const Literal* addend,
                   Literal& out) {
  const Shape& ls = lhs.shape();
  const Shape& rs = rhs.shape();
  const DotLayout layout = DotLayoutOf(ls, rs, dnums);
  const std::vector<int64_t>& lhs_free = layout.lhs_free;
  const std::vector<int64_t>& rhs_free = layout.rhs_free;
  const GemmSizes& sizes = layout.sizes;
  if (out.num_elements() == 0) return;
  Literal lhs_scratch, rhs_scratch;
  const MatrixView lhs_view = ViewOperand(ctx, lhs, dnums.lhs_batch_dims, lhs_free,
                                          dnums.lhs_contracting_dims, lhs_scratch);
  const MatrixView rhs_view = ViewOperand(ctx, rhs, dnums.rhs_batch_dims,
                                          dnums.rhs_contracting_dims, rhs_free, rhs_scratch);
  Gemm<float>(ctx, sizes, lhs_view, rhs_view, out.data<float>().data(), /*accumulate=*/true, alpha,
              addend != nullptr ? addend->data<float>().data() : nullptr);
}

}  // namespace tessel::internal
