// Kernels of the single-device executor (core/executor.h). Internal to tessel::core.
//
// Each kernel computes one HLO op on host literals and returns a new literal of the node's
// shape. Preconditions: the shapes and attributes satisfy core/shape_inference.h (the executor
// checks every node with InferShape before running anything), so kernels TESSEL_CHECK their
// invariants; the only errors they return are for combinations the shape rules accept but a
// kernel cannot compute (an element type an op has no meaning for), as kInvalidArgument.
//
// Parallelism: kernels run on the calling thread when `ctx.num_threads == 1`; otherwise they
// may call tbb::parallel_for, which runs in the caller's task arena (the executor runs the
// whole graph inside a tbb::task_arena of ExecutorOptions::num_threads, capped at the number of
// cores). Results never depend on the thread count, except possibly the summation order inside
// the GEMMs of f32/f64/bf16/f16 dots (see Dot).
//
// Element types: bf16 and f16 compute in f32 and round to nearest even on store; integer
// arithmetic wraps (two's complement), as XLA defines it.
#ifndef TESSEL_CORE_INTERNAL_KERNELS_H_
#define TESSEL_CORE_INTERNAL_KERNELS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"

namespace tessel::internal {

// How the kernels of one run may use threads.
struct KernelContext {
  // 1: everything on the calling thread. > 1: the concurrency of the current TBB arena.
  int num_threads = 1;
};

// Elementwise kernels split work into chunks of this many elements and only go parallel above
// twice that (smaller tensors do not repay the scheduling cost).
inline constexpr int64_t kElementwiseGrain = 32 * 1024;

// Calls `fn(begin, end)` over disjoint ranges covering [0, n): one call on the calling thread
// when `ctx.num_threads == 1` or `n < 2 * grain`, otherwise a tbb::parallel_for with chunks of
// about `grain` indices.
template <typename Fn>
void ParallelFor(const KernelContext& ctx, int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (ctx.num_threads <= 1 || n < 2 * grain) {
    fn(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(r.begin(), r.end()); });
}

// Total bytes of the buffers of `literal`, tuple elements included.
int64_t TotalBytes(const Literal& literal);

// ---- Elementwise (kernels_elementwise.cc) ------------------------------------------------------

// abs, negate, exp, log, tanh, logistic, sqrt, rsqrt, not, copy, convert (to `shape`'s dtype),
// bitcast-convert (the bytes of x reread as `shape`'s dtype of the same width).
// Errors: kInvalidArgument for a transcendental op on a non-floating type, or `not` on floats.
[[nodiscard]] absl::StatusOr<Literal> Unary(const KernelContext& ctx, Opcode opcode,
                                            const Literal& x, const Shape& shape);

// reduce-precision: each element of the floating literal `x` rounded to nearest even at
// `mantissa_bits` explicit mantissa bits, then flushed to a signed zero below and to a signed
// infinity above the range of an `exponent_bits` exponent; NaN stays NaN. Works on x's own bit
// pattern, as XLA's elemental emitter (EmitReducePrecisionIR) does, so bf16/f16 subnormals round
// as in XLA. Requires exponent_bits >= 1, mantissa_bits >= 0 (shape inference checks).
[[nodiscard]] Literal ReducePrecision(const KernelContext& ctx, const Literal& x,
                                      int64_t exponent_bits, int64_t mantissa_bits);

// add, subtract, multiply, divide, maximum, minimum, power, and, or, compare (with
// `direction`). `a` and `b` have the same shape. Integer division follows XLA: x / 0 == -1 for
// signed types and all ones for unsigned, INT_MIN / -1 == INT_MIN. Integer power with a
// negative exponent is (base == 1 ? 1 : 0). Floating maximum/minimum propagate NaN.
// Errors: kInvalidArgument for and/or on floats.
[[nodiscard]] absl::StatusOr<Literal> Binary(const KernelContext& ctx, Opcode opcode,
                                             ComparisonDirection direction, const Literal& a,
                                             const Literal& b, const Shape& shape);

// One elementwise op on `n` contiguous elements of raw buffers, on the calling thread: the
// building block of fused loops (core/internal/fusion.h). Same arithmetic as Unary, Binary,
// Select and Clamp (bitwise, except Eigen's packet exp/log/tanh/logistic/sin/cos, which may
// differ by one ulp at a different chunk boundary). `operands` point at n elements each, in
// the op's operand order; `operand_dtype` is the element type of operand 0 (operand 1 for
// select, whose operand 0 is pred) and `result_dtype` that of `out`. Covers the unary ops of
// Unary (convert, copy and is-finite included), the binary ops of Binary (compare with
// `direction`), select and clamp (all operands full length). n == 0 only validates.
// Errors: kInvalidArgument as Unary / Binary for an element type the op has no meaning for.
[[nodiscard]] absl::Status ElementwiseOnBuffers(Opcode opcode, ComparisonDirection direction,
                                                DType operand_dtype, DType result_dtype,
                                                absl::Span<const void* const> operands, void* out,
                                                int64_t n);

// ---- Sorting (kernels_sort.cc) ------------------------------------------------------------------

// sort: each row of operands[0] along `dim` ordered ascending (or `descending`) in the total
// order NaN-last (-0 == +0), stably; every operand permuted the same way. Returns the operand's
// literal, or a tuple of all when there are several. Preconditions: InferShape(kSort) holds.
[[nodiscard]] Literal Sort(absl::Span<const Literal* const> operands, int64_t dim, bool descending);
// topk: the `k` largest (or smallest) of each row along the last dim, in that order, ties by
// lower index, and their s32 indices: tuple (values, indices). Preconditions: InferShape(kTopK).
[[nodiscard]] Literal TopK(const Literal& x, int64_t k, bool largest);

// select(pred, on_true, on_false); `pred` has the result's dims or is a scalar.
[[nodiscard]] Literal Select(const KernelContext& ctx, const Literal& pred, const Literal& on_true,
                             const Literal& on_false, const Shape& shape);

// clamp(min, x, max) == minimum(maximum(x, min), max); `min`/`max` are scalars or x's shape.
[[nodiscard]] Literal Clamp(const KernelContext& ctx, const Literal& min, const Literal& x,
                            const Literal& max, const Shape& shape);

// ---- Data movement (kernels_data_movement.cc) --------------------------------------------------

// Copies the box `dims` from `src` (element strides `src_strides`, starting at element
// `src_offset`) to `dst` (strides `dst_strides`, starting at `dst_offset`). Both literals have
// the same dtype; strides may be zero on the source (broadcast).
void StridedCopy(const KernelContext& ctx, absl::Span<const int64_t> dims, const Literal& src,
                 int64_t src_offset, absl::Span<const int64_t> src_strides, Literal& dst,
                 int64_t dst_offset, absl::Span<const int64_t> dst_strides);

[[nodiscard]] Literal Iota(const KernelContext& ctx, const Shape& shape, int64_t iota_dimension);
[[nodiscard]] Literal Broadcast(const KernelContext& ctx, const Literal& x,
                                absl::Span<const int64_t> dimensions, const Shape& shape);
[[nodiscard]] Literal Reshape(const Literal& x, const Shape& shape);
// Output dim i is operand dim permutation[i].
[[nodiscard]] Literal Transpose(const KernelContext& ctx, const Literal& x,
                                absl::Span<const int64_t> permutation);
[[nodiscard]] Literal Slice(const KernelContext& ctx, const Literal& x,
                            absl::Span<const SliceDim> slice, const Shape& shape);
[[nodiscard]] Literal Pad(const KernelContext& ctx, const Literal& x, const Literal& value,
                          absl::Span<const PadDim> padding, const Shape& shape);
[[nodiscard]] Literal Concatenate(const KernelContext& ctx,
                                  absl::Span<const Literal* const> operands, int64_t dimension,
                                  const Shape& shape);
// Start indices are clamped to [0, dim - size] (XLA). Errors: kInvalidArgument if an index
// operand is not a scalar s32/s64/u8.
[[nodiscard]] absl::StatusOr<Literal> DynamicSlice(const KernelContext& ctx, const Literal& x,
                                                   absl::Span<const Literal* const> start_indices,
                                                   absl::Span<const int64_t> sizes,
                                                   const Shape& shape);
[[nodiscard]] absl::StatusOr<Literal> DynamicUpdateSlice(
    const KernelContext& ctx, const Literal& x, const Literal& update,
    absl::Span<const Literal* const> start_indices);

// ---- Gather and scatter (kernels_gather.cc) ---------------------------------------------------
// XLA gather: one window per batch position, start indices (s32/s64) clamped to
// [0, dim - slice_size]. Parallel over batch positions; the result never depends on threads.
[[nodiscard]] Literal Gather(const KernelContext& ctx, const Literal& operand,
                             const Literal& indices, const GatherDimensionNumbers& dnums,
                             const Shape& shape);
// XLA scatter: `operand` with every window of `updates` combined in (`kind`, or replaced when
// `overwrite`), scatter positions in row-major order and window elements in row-major order, on
// one thread. A window that does not fit inside the operand is skipped whole.
// Errors: kInvalidArgument for and/or on floats or add/multiply/maximum/minimum on pred.
[[nodiscard]] absl::StatusOr<Literal> Scatter(const KernelContext& ctx, const Literal& operand,
                                              const Literal& indices, const Literal& updates,
                                              const ScatterDimensionNumbers& dnums, ReduceKind kind,
                                              bool overwrite);
// ---- Reduce and dot (kernels_reduce.cc, kernels_dot.cc) ---------------------------------------

// reduce(x, init) over `dimensions` with `kind`. Each output element is
// init op x[r0] op x[r1] ..., accumulated left to right over the reduced elements in row-major
// order (bf16/f16 accumulate in f32), so results do not depend on the thread count.
// Errors: kInvalidArgument for and/or on floats.
[[nodiscard]] absl::StatusOr<Literal> Reduce(const KernelContext& ctx, const Literal& x,
                                             const Literal& init,
                                             absl::Span<const int64_t> dimensions, ReduceKind kind,
                                             const Shape& shape);

// Row-major single-precision GEMM on the calling thread: C = alpha * op(A) * op(B) + beta * C
// with op(A) [m, k] (A stored [m, k] with row stride lda, or [k, m] when transpose_a), op(B)
// [k, n] (B stored [k, n] with row stride ldb, or [n, k] when transpose_b) and C [m, n] with row
// stride ldc; sizes in elements. oneDNN's dnnl_sgemm (its just-in-time x86 kernels, picked for
// the CPU at run time, AVX2 or AVX-512 alike) with one OpenMP thread: the caller splits work
// over threads (Dot's blocks, the convolution's row blocks). With k == 0, C = beta * C (oneDNN
// leaves C as it was). Every f32 GEMM of the executor goes through here; f64 stays on Eigen
// (oneDNN has no f64 GEMM). Throws std::bad_alloc when oneDNN runs out of memory (the executor
// reports kResourceExhausted); other oneDNN errors are internal (TESSEL_CHECK).
void Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

// General dot (XLA DotDimensionNumbers). f32 (and bf16/f16 through f32) run Sgemm, f64 Eigen's
// GEMM, on row- or column-major views of the buffers, copying an operand only when its dims
// cannot be viewed as [batch, m, k] / [batch, k, m] (resp. [batch, k, n] / [batch, n, k]); with
// more than one thread the output is split into row or column blocks, one GEMM per block.
// Integer and pred dots are loops (pred: or of ands).
[[nodiscard]] Literal Dot(const KernelContext& ctx, const Literal& lhs, const Literal& rhs,
                          const DotDimensionNumbers& dnums, const Shape& shape);

// out = addend + alpha * dot(lhs, rhs) for f32 operands, `out` having the dot's shape and, when
// `addend` is null, holding the addend on entry (else each thread's block of `out` is copied
// from `addend` first): Sgemm accumulating into `out` (beta = 1, no zeroing pass), blocked
// over threads as Dot. Source: XLA CPU's dot output fusion with an addend (DotOpEmitter's
// addend); here the SGD update p - lr * dot. Against round(out - round(lr * round(dot)))
// unfused: one rounding fewer, and the GEMM's k-block partial sums added into the addend
// instead of into a zeroed gradient (a reassociation; core/executor_test.cc,
// SgdUpdateOfADotGradientRunsInTheGemm, bounds the difference). Precondition: f32 throughout.
void DotAccumulate(const KernelContext& ctx, const Literal& lhs, const Literal& rhs,
                   const DotDimensionNumbers& dnums, float alpha, const Literal* addend,
                   Literal& out);

// ---- Windowed ops (kernels_window.cc) ----------------------------------------------------------
// Window positions in padding or in a base-dilation hole are skipped (XLA's HloEvaluator).

// XLA convolution (attrs: window, convolution dimension numbers, feature_group_count,
// batch_group_count): im2col patches per group times the group's kernel matrix, Sgemm for f32
// (bf16/f16 in f32, rounded once) and Eigen's GEMM for f64, a wrapping loop for integers. Output
// feature o belongs to group o / (O / groups); with batch groups, output batch b of group g reads
// input batch g * (N / batch_group_count) + b. Results do not depend on the thread count. Errors:
// kInvalidArgument for pred operands.
[[nodiscard]] absl::StatusOr<Literal> Convolution(const KernelContext& ctx, const Literal& lhs,
                                                  const Literal& rhs, const OpAttributes& attrs,
                                                  const Shape& shape);
// reduce-window(x, init): each output element is init op x[w0] op x[w1] ... over the window's
// in-bounds elements in row-major window order (bf16/f16 accumulate in f32).
// Errors: kInvalidArgument for and/or on floats or add/multiply/maximum/minimum on pred.
[[nodiscard]] absl::StatusOr<Literal> ReduceWindow(const KernelContext& ctx, const Literal& x,
                                                   const Literal& init,
                                                   absl::Span<const WindowDim> window,
                                                   ReduceKind kind, const Shape& shape);
// select-and-scatter(x, source, init): the result starts as init everywhere; for each source
// element (row-major) the window's selected element (the first in-bounds one, replaced by each
// later one e for which select(selected, e) is false) gets scatter(result, source) applied.
// Sequential. Errors: as ReduceWindow for `scatter`.
[[nodiscard]] absl::StatusOr<Literal> SelectAndScatter(const KernelContext& ctx, const Literal& x,
                                                       const Literal& source, const Literal& init,
                                                       absl::Span<const WindowDim> window,
                                                       ComparisonDirection select,
                                                       ReduceKind scatter);
// reverse(x) along `dimensions`.
[[nodiscard]] Literal Reverse(const KernelContext& ctx, const Literal& x,
                              absl::Span<const int64_t> dimensions);

// ---- Rng (rng.cc, kernels_rng.cc) -------------------------------------------------------------

// Philox-4x32-10 on a full 128-bit `counter` and 64-bit `key` (Random123's philox4x32_R with
// R = 10); Philox4x32(seed, index) is this with counter (index lo, index hi, 0, 0) and key
// (seed lo, seed hi). Exposed for the known-answer tests.
std::array<uint32_t, 4> Philox4x32Block(std::array<uint32_t, 4> counter,
                                        std::array<uint32_t, 2> key);

// Element i (row-major) is a + (b - a) * RngUniform01(seed, i) for kUniform (computed in f64,
// rounded to the element type, and kept below b), a + b * RngStandardNormal(seed, i) for
// kNormal. Errors: kInvalidArgument for a non-floating element type.
[[nodiscard]] absl::StatusOr<Literal> Rng(const KernelContext& ctx, const Literal& a,
                                          const Literal& b, RngDistribution distribution,
                                          uint64_t seed, const Shape& shape);

}  // namespace tessel::internal

#endif  // TESSEL_CORE_INTERNAL_KERNELS_H_
