// The lazy Tensor API: operations record graph nodes; nothing runs until a value is needed.
//
// In the style of PyTorch/XLA lazy tensors: every op on a `Tensor` appends a node to an IR DAG
// (shape checked at once). `Sync()` (torch_xla's `mark_step`) lowers every pending live tensor
// into one Graph, looks it up in the compilation cache by the DAG's fingerprint, runs it with the
// Executor and turns each of those tensors into device data, cutting the DAG so the next step
// starts from data. `ToLiteral()` reads a value back (syncing that tensor if needed).
//
//   Tensor x = Tensor::FromLiteral(Literal::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
//   Tensor w = Tensor::FromLiteral(weights);                     // f32[3,4]
//   Tensor y = Relu(MatMul(x, w) + 1.0f);                        // nothing computed yet
//   TESSEL_ASSIGN_OR_RETURN(Literal value, y.ToLiteral());       // runs one graph
//
// Errors: ops never abort on bad shapes. A failing op returns a tensor holding the error (its
// `status()`); ops on such a tensor propagate the first error; `ToLiteral`, `Sync` and
// `TraceGraph` return it (kInvalidArgument naming the op, e.g. "dot: lhs contracting dim 1 has
// size 16 but rhs contracting dim 0 has size 8").
//
// Threading: the lazy context is per thread (each device thread of a host traces on its own).
// Source: PyTorch/XLA lazy tensor design (LazyTensor paper, Suhan et al. 2021) and XLA ops.
#ifndef TESSEL_CORE_TENSOR_H_
#define TESSEL_CORE_TENSOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"

namespace tessel {

namespace internal_lazy {
struct LazyNode;
struct TensorImpl;
}  // namespace internal_lazy

class Tensor {
 public:
  // An undefined tensor (defined() == false).
  Tensor() = default;

  // Device data holding `value` (an array literal). Becomes a graph parameter when used.
  static Tensor FromLiteral(Literal value);
  // A tensor bound to a computation client's value (e.g. a sharded value whose pieces a
  // runtime loaded per device). Precondition: data != nullptr (TESSEL_CHECK).
  static Tensor FromDeviceData(std::shared_ptr<const DeviceData> data);
  // A graph input with a shape and no value (as JAX's jax.ShapeDtypeStruct): TraceGraph makes it
  // a parameter like device data, so graphs of any size can be traced for partitioning and
  // simulation without allocating their inputs. Reading it (ToLiteral, or Sync of a graph that
  // uses it) fails with kFailedPrecondition. is_data() is false; Sync() leaves it alone.
  static Tensor Placeholder(Shape shape);
  // A constant embedded in the graph (its value is part of the fingerprint). For small values.
  static Tensor Constant(Literal value);
  // A tensor holding `status` (which must not be OK); for ops reporting errors.
  static Tensor Error(absl::Status status);

  bool defined() const { return impl_ != nullptr; }
  // OK, or the first error recorded by the op that made this tensor or one of its inputs.
  const absl::Status& status() const;
  // Global shape. An errored tensor has shape f32[].
  const Shape& shape() const;
  DType dtype() const { return shape().dtype(); }
  int64_t rank() const { return shape().rank(); }
  int64_t dim(int64_t i) const { return shape().dim(i); }

  // True when the tensor holds data (after Sync or FromLiteral), false while it is pending.
  bool is_data() const;
  // The value when is_data(), else nullptr.
  std::shared_ptr<const DeviceData> device_data() const;
  // Reads the value; syncs this tensor (only) first if it is pending. Goes through the thread's
  // ComputationClient (core/computation_client.h) for data that is not a whole literal.
  // Errors: the tensor's status; executor / client errors.
  [[nodiscard]] absl::StatusOr<Literal> ToLiteral() const;

  // The XLA HloSharding text annotating this tensor ("" when none). spmd::mark_sharding sets it
  // from a Mesh and PartitionSpec; the annotation travels with the value through Sync.
  const std::string& sharding() const;
  void SetSharding(std::string xla_sharding_text);
  void ClearSharding() { SetSharding(""); }

  // Identity for autodiff and tests: tensors sharing one value compare equal.
  bool SameAs(const Tensor& other) const { return impl_ == other.impl_; }

  // For the implementation (ops, autodiff, tracing).
  const std::shared_ptr<internal_lazy::TensorImpl>& impl() const { return impl_; }
  explicit Tensor(std::shared_ptr<internal_lazy::TensorImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<internal_lazy::TensorImpl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Graph execution.

// Lowers and runs every pending live tensor of this thread in one graph (torch_xla mark_step),
// then makes each of them device data.
// Donation (torch_xla's parameter aliasing, XLA input_output_alias, JAX donate_argnums): a
// graph input that nothing can read after the Sync (the old value of a tensor the step
// replaced, `p = p - lr * g`, when no other tensor, pending tensor left out of the Sync, or
// caller of device_data() still holds it) is donated to the execution, and the client's
// executor (the local client's, or each device's in mesh::HostRuntime) writes an output into its
// buffer where it can (the optimizer's new parameters and moments into the old ones). Results
// are bitwise those without donation.
// TESSEL_DONATE_PARAMS=0 (or false, no, off) turns donation off for A/B runs.
// Errors: the first errored live tensor's status; kInvalidArgument for a TESSEL_DONATE_PARAMS
// that is not a boolean; or the executor's error: no tensor changes then, except when the
// execution failed after taking donated values: then every tensor of the Sync keeps that error.
[[nodiscard]] absl::Status Sync();
// The same for the given tensors only.
[[nodiscard]] absl::Status Sync(absl::Span<const Tensor> tensors);

// Lowers `outputs` into a Graph without running it: device data and inputs become parameters
// (in the order of `parameters`), constants stay constants, shardings are kept; the root is a
// tuple of the outputs (or the single output). Used by the partitioner, the simulator and the
// CLI. Errors: the first errored output's status.
struct TracedGraph {
  std::unique_ptr<Graph> graph;
  // The tensors bound to parameter 0, 1, ... (device data that the graph reads).
  std::vector<Tensor> parameters;
};
[[nodiscard]] absl::StatusOr<TracedGraph> TraceGraph(absl::Span<const Tensor> outputs,
                                                     std::string name = "traced");

// Counters of this thread's lazy context, like torch_xla's metrics report.
struct LazyMetrics {
  int64_t syncs = 0;            // Sync() calls that ran a graph
  int64_t compiles = 0;         // graphs lowered and verified (cache misses)
  int64_t cache_hits = 0;       // graphs found in the compilation cache
  double compile_seconds = 0;   // time spent keying the DAG, looking it up, lowering + verifying
  double execute_seconds = 0;   // time spent in the executor
  int64_t peak_live_bytes = 0;  // highest ExecutionStats::peak_live_bytes seen
  // Graph arguments donated to their execution (see Sync), and outputs the executor wrote
  // into a donated argument's buffer (ExecutionStats::donated_in_place).
  int64_t donated_arguments = 0;
  int64_t donated_in_place = 0;
};
const LazyMetrics& GetLazyMetrics();
void ResetLazyMetrics();
// Sets the executor options (threads) used by Sync on this thread's default local client.
void SetExecutorOptions(const ExecutorOptions& options);

// Registers `closure` to run after the next successful Sync() (the no-argument form, torch_xla's
// mark_step) on this thread, once the step's values are device data: tensors it captured and
// reads with ToLiteral are then read back without another execution (torch_xla
// xm.add_step_closure, run_async=False). Closures run in the order they were added; the first
// one that fails stops the rest and its status is Sync()'s result. A failed Sync() drops the
// closures (its step did not happen). Closures added while closures run wait for the next
// Sync().
void AddStepClosure(std::function<absl::Status()> closure);

// Seeds the counter used by Rng ops created on this thread: each Rng op takes the next seed.
void ManualSeed(uint64_t seed);

// 64-bit fingerprint of a graph: stable across processes and runs (FNV-1a over opcodes, shapes,
// attributes, operand positions, constant bytes and shardings; node names are ignored). Equal
// graphs give equal fingerprints; the key a ComputationClient caches what it compiles under.
// (Sync's own cache finds a step it has seen by an in-process key over the lazy DAG, computed
// from the same opcodes, shapes, attributes, operand positions and shardings, without lowering
// the DAG into a Graph; a new DAG is lowered, fingerprinted and verified once.)
[[nodiscard]] uint64_t GraphFingerprint(const Graph& graph);

// ---------------------------------------------------------------------------------------------
// Creation. Shapes are global.

// A tensor of `shape` filled with `value` (broadcast of a scalar constant).
Tensor Full(const Shape& shape, double value);
inline Tensor Zeros(const Shape& shape) { return Full(shape, 0); }
inline Tensor Ones(const Shape& shape) { return Full(shape, 1); }
// A scalar constant of `dtype`.
Tensor Scalar(DType dtype, double value);
// iota: element value = its index along `iota_dimension`.
Tensor Iota(const Shape& shape, int64_t iota_dimension);
// rng with a fresh seed from ManualSeed's counter: uniform in [low, high) or normal(mean,
// stddev); floating dtypes only.
Tensor RngUniform(const Shape& shape, double low, double high);
Tensor RngNormal(const Shape& shape, double mean, double stddev);

// ---------------------------------------------------------------------------------------------
// Elementwise (XLA semantics; operands must have identical shapes; see Broadcast for
// numpy-style expansion). Scalar overloads broadcast the C++ value to the tensor's shape/dtype.
Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);
Tensor Max(const Tensor& a, const Tensor& b);
Tensor Min(const Tensor& a, const Tensor& b);
Tensor Pow(const Tensor& a, const Tensor& b);
Tensor And(const Tensor& a, const Tensor& b);
Tensor Or(const Tensor& a, const Tensor& b);
Tensor Not(const Tensor& a);
Tensor Compare(const Tensor& a, const Tensor& b, ComparisonDirection direction);
Tensor Neg(const Tensor& a);
Tensor Abs(const Tensor& a);
Tensor Exp(const Tensor& a);
Tensor Log(const Tensor& a);
Tensor Tanh(const Tensor& a);
Tensor Logistic(const Tensor& a);  // 1 / (1 + exp(-a))
Tensor Sqrt(const Tensor& a);
Tensor Rsqrt(const Tensor& a);
Tensor Sin(const Tensor& a);  // XLA sine, radians
Tensor Cos(const Tensor& a);  // XLA cosine, radians
Tensor Copy(const Tensor& a);
Tensor Remainder(const Tensor& a, const Tensor& b);  // fmod: the sign of a
Tensor Atan2(const Tensor& a, const Tensor& b);      // atan2(a, b), radians
Tensor Erf(const Tensor& a);
Tensor Convert(const Tensor& a, DType dtype);
// XLA reduce-precision: a (floating) rounded to `exponent_bits` exponent and `mantissa_bits`
// mantissa bits, kept in a's type. Needs exponent_bits >= 1, mantissa_bits >= 0 (an error
// Tensor otherwise).
Tensor ReducePrecision(const Tensor& a, int64_t exponent_bits, int64_t mantissa_bits);
// pred ? on_true : on_false; `pred` is pred with a's shape (or a scalar).
Tensor Select(const Tensor& pred, const Tensor& on_true, const Tensor& on_false);
// min(max(x, low), high); bounds are scalars or x's shape.
Tensor Clamp(const Tensor& low, const Tensor& x, const Tensor& high);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// ---------------------------------------------------------------------------------------------
// Shape ops.

// XLA broadcast: operand dim i becomes dim `broadcast_dimensions[i]` of `dims`.
Tensor Broadcast(const Tensor& a, std::vector<int64_t> dims,
                 std::vector<int64_t> broadcast_dimensions);
// numpy-style: align trailing dims; size-1 dims expand (lowered to reshape + broadcast).
Tensor BroadcastTo(const Tensor& a, std::vector<int64_t> dims);
Tensor Reshape(const Tensor& a, std::vector<int64_t> dims);
// Output dim i is operand dim permutation[i].
Tensor Transpose(const Tensor& a, std::vector<int64_t> permutation);
Tensor Slice(const Tensor& a, std::vector<int64_t> starts, std::vector<int64_t> limits,
             std::vector<int64_t> strides = {});
Tensor Pad(const Tensor& a, const Tensor& value, std::vector<PadDim> padding);
Tensor Concatenate(absl::Span<const Tensor> parts, int64_t dim);
// Start indices are scalar s32/s64 tensors, clamped as XLA does.
Tensor DynamicSlice(const Tensor& a, absl::Span<const Tensor> starts, std::vector<int64_t> sizes);
Tensor DynamicUpdateSlice(const Tensor& a, const Tensor& update, absl::Span<const Tensor> starts);
// XLA gather (see GatherDimensionNumbers in core/graph.h): slices of `operand` at the start
// indices in `indices` (s32 or s64), clamped into bounds.
// Example: table f32[128,16], ids s32[8,1], offset_dims={1}, collapsed_slice_dims={0},
// start_index_map={0}, index_vector_dim=1, slice_sizes={1,16} -> f32[8,16].
// Errors (in the returned tensor's status): kInvalidArgument from the gather shape rule.
Tensor Gather(const Tensor& operand, const Tensor& indices, const GatherDimensionNumbers& dnums);
// XLA scatter (see ScatterDimensionNumbers in core/graph.h): `operand` with each window of
// `updates` combined into it with `kind` (to_apply), in index order; windows that do not fit
// inside the operand are skipped. Result: operand's shape.
// Errors (in the returned tensor's status): kInvalidArgument from the scatter shape rule.
Tensor Scatter(const Tensor& operand, const Tensor& indices, const Tensor& updates,
               const ScatterDimensionNumbers& dnums, ReduceKind kind = ReduceKind::kAdd);

// ---------------------------------------------------------------------------------------------
// Reductions and contractions.

// reduce over `dims` with the given computation, starting from `init` (scalar, same dtype).
Tensor Reduce(const Tensor& a, const Tensor& init, std::vector<int64_t> dims, ReduceKind kind);
Tensor ReduceSum(const Tensor& a, std::vector<int64_t> dims);
Tensor ReduceMax(const Tensor& a, std::vector<int64_t> dims);  // init -inf (floats)
Tensor ReduceMin(const Tensor& a, std::vector<int64_t> dims);  // init +inf (floats)
// Sum over `dims` divided by their element count.
Tensor ReduceMean(const Tensor& a, std::vector<int64_t> dims);
// General XLA dot.
Tensor Dot(const Tensor& lhs, const Tensor& rhs, const DotDimensionNumbers& dnums);
// XLA convolution (core/graph.h WindowDim, ConvolutionDimensionNumbers), e.g. NHWC x HWIO ->
// NHWC: dnums from ParseDimLabels("b01f_01io->b01f"). Result dtype: the operands'.
// Errors (in the returned tensor's status): kInvalidArgument from the convolution shape rule.
Tensor Convolution(const Tensor& lhs, const Tensor& rhs, std::vector<WindowDim> window,
                   const ConvolutionDimensionNumbers& dnums, int64_t feature_group_count = 1,
                   int64_t batch_group_count = 1);
// reduce-window with `kind` from `init` (scalar of a's dtype); one window dim per dim of `a`.
Tensor ReduceWindow(const Tensor& a, const Tensor& init, std::vector<WindowDim> window,
                    ReduceKind kind);
// select-and-scatter: zeros-like `operand` (from `init`) plus, for each element of `source`,
// its value added (`scatter`) at the element its window selects (`select`: GE = first max).
Tensor SelectAndScatter(const Tensor& operand, const Tensor& source, const Tensor& init,
                        std::vector<WindowDim> window, ComparisonDirection select,
                        ReduceKind scatter = ReduceKind::kAdd);
// reverse along `dims`.
Tensor Reverse(const Tensor& a, std::vector<int64_t> dims);
// [..., m, k] x [k, n] -> [..., m, n] (lhs of rank >= 1, rhs rank 2), or batched
// [b..., m, k] x [b..., k, n] when both have the same rank > 2.
Tensor MatMul(const Tensor& lhs, const Tensor& rhs);

// ---------------------------------------------------------------------------------------------
// Manual regions (torch_xla's _spmd_full_to_shard_shape / _spmd_shard_to_full_shape; the user
// API is spmd::enable_manual_sharding / disable_manual_sharding, spmd/mark_sharding.h).

// custom-call "SPMDFullToShardShape": `local_shape` is one device's shard of `a` under a's
// sharding annotation (which must be set); the result is a per-device value, annotated
// {manual}. Errors (in the result's status): kInvalidArgument when local_shape does not fit a.
Tensor SpmdFullToShardShape(const Tensor& a, const Shape& local_shape);
// custom-call "SPMDShardToFullShape": `a` is one device's shard of a value of `global_shape`
// laid out by `sharding` (XLA sharding text, set on the result). Errors as above.
Tensor SpmdShardToFullShape(const Tensor& a, const Shape& global_shape, std::string sharding);
// all-reduce of a per-device value inside a manual region, over `replica_groups` (global device
// ids), as XLA emits it for a psum (channel_id=1, use_global_device_ids=true). Errors (in the
// result's status): kInvalidArgument for bad groups (InferShape).
Tensor AllReduce(const Tensor& a, CollectiveDeviceList replica_groups, ReduceKind kind);
// all-gather of a per-device value inside a manual region: the values of the devices of each
// group concatenated along `dim` in group order (XLA AllGather, dimensions={dim}, channel_id=1,
// use_global_device_ids=true). Shapes: local a f32[4,8], groups of 2, dim 0 -> f32[8,8].
// Errors (in the result's status): kInvalidArgument for bad groups or dim (InferShape).
Tensor AllGather(const Tensor& a, int64_t dim, CollectiveDeviceList replica_groups);
// reduce-scatter of a per-device value inside a manual region: the group's values reduced with
// `kind`, then split along `dim` into group-size pieces, piece i to the group's i-th device (XLA
// ReduceScatter). Shapes: local f32[8,8], groups of 2, dim 0 -> f32[4,8]. Errors (in the
// result's status): kInvalidArgument for bad groups, or dim not divisible by the group size.
Tensor ReduceScatter(const Tensor& a, int64_t dim, CollectiveDeviceList replica_groups,
                     ReduceKind kind);
// all-to-all of a per-device value inside a manual region, XLA's array form: `dim` is split into
// group-size pieces, piece i goes to the group's i-th device, and the pieces received are
// concatenated along `dim` in group order (XLA AllToAll, dimensions={dim}). Shapes: unchanged.
// Errors (in the result's status): kInvalidArgument for bad groups, or dim not divisible by the
// group size.
Tensor AllToAll(const Tensor& a, int64_t dim, CollectiveDeviceList replica_groups);

// ---------------------------------------------------------------------------------------------
// Autodiff.

// Reverse-mode gradients of the scalar `loss` with respect to each of `wrt` (same shapes), as
// new lazy tensors (graph nodes). A tensor that `loss` does not depend on gets zeros.
// Integer and pred paths carry no gradient. Errors (in the returned tensors' status): `loss`
// not a floating scalar, or an errored input.
// Source: standard VJP rules (as JAX's lax transpose rules).
std::vector<Tensor> Grad(const Tensor& loss, absl::Span<const Tensor> wrt);

}  // namespace tessel

#endif  // TESSEL_CORE_TENSOR_H_
