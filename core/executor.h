// Runs a Graph on the host CPU: the single-device executor.
//
//   Executor executor;                      // all cores
//   ExecutionStats stats;
//   TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> outputs,
//                           executor.Run(graph, {x_literal, w_literal}, &stats));
//   // outputs.size() == 1 unless the root is a tuple (then one literal per element)
//
// Kernels: dot through a GEMM on row- or column-major views of the buffers (oneDNN's sgemm for
// f32, bf16 and f16, Eigen's for f64; general dot dimension numbers are handled by transposing
// to [batch, m, k] x [batch, k, n]); elementwise ops, reduce
// and data movement as loops parallelised with TBB over output elements. bf16 and f16 compute
// in f32 and round on store, as XLA's CPU backend does. Each intermediate buffer is freed
// after its last user runs; `ExecutionStats::peak_live_bytes` reports the high-water mark.
// `rng` uses the counter-based generator of core/rng.h, so its values depend only on
// (rng_seed, element index). `while` runs its condition and body graphs until the condition is
// false (the body owns the loop state: it is moved in, and a get-tuple-element whose tuple is
// read only by get-tuple-elements of other indices moves its element out, so an iteration
// copies none of the state); `conditional` runs the branch its pred / index selects (an index
// outside 0..N-1: the last), both with this executor's options, so collectives inside them go to
// the same backend. Loop fusion (core/internal/fusion.h, XLA's kLoop fusion): before running,
// chains of elementwise ops with the broadcasts and reshapes feeding them become one loop per
// output (one pass over memory; a fused value also read after the loop is written by it as a
// further output, XLA's multi-output fusion), the common f32 ops run through precompiled vectorised
// loops, and a fused output whose operand is an intermediate that dies there is written into
// that operand's buffer; so is one whose operand is a donated argument (ExecutionDonation below,
// XLA's input_output_alias: the lazy runtime donates the values a step replaces, so the
// optimizer's new parameters and moments go into the old buffers). Fusion is internal: the
// graph does not change, and results equal the unfused run's bitwise except Eigen's packet
// transcendental ops, which may differ by one ulp, and the SGD-style update w - s * dot(a, b) of a
// dot read only there, which runs as the dot's GEMM accumulating into w (one rounding fewer, and
// Eigen's k-blocks summed into w: a reassociation). With fusion, transposes fold into dots (XLA's
// TransposeFolding): a transpose read only by dots is read through their dimension numbers, and
// transpose(dot(a, b)) that swaps the free dims runs as dot(b, a); those dots agree with the
// unfolded ones to GEMM rounding (Eigen tiles the swapped product differently).
// ExecutorOptions::fusion = false (or TESSEL_EXECUTOR_FUSION=0 for the executors the runtime
// builds) runs every node as its own kernel. `Run` is const and may be called from several threads
// at once.
//
// Prepare once, run many times (XLA compiles an HloModule once into an executable and runs it
// every step; PJRT keeps the PjRtLoadedExecutable): everything that depends only on the graph
// and the options -- the node checks, reachability, the fusion plan with transpose folding and
// dot updates, the use counts that free buffers at their last use, and the same for the bodies
// of while and conditional -- is computed by `Prepare` into an immutable PreparedProgram:
//
//   TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedProgram> program,
//                           executor.Prepare(graph));
//   for (...) TESSEL_ASSIGN_OR_RETURN(outputs, executor.RunBorrowed(*program, args, &stats));
//
// A run of a prepared program gives bitwise the results, stats and errors of Run(graph, ...);
// Run(graph, ...) is Prepare followed by that run.
#ifndef TESSEL_CORE_EXECUTOR_H_
#define TESSEL_CORE_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tessel/core/collectives.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"

namespace tessel {

// A graph prepared for execution by Executor::Prepare (above). Opaque and immutable: one may be
// shared by any number of threads, and by the executors of several devices running the same
// program. It refers to the graph (and the computations it calls) by pointer: the graph must
// outlive it and must not change.
class PreparedProgram;

struct ExecutorOptions {
  // Threads the kernels may use; 0 means one per core. 1 runs everything on the calling thread
  // (what each device thread of a multi-device host uses, so devices do not oversubscribe).
  int num_threads = 0;
  // The global id of the device running the program: the value of `partition-id`.
  int64_t device_id = 0;
  // Carries the program's collectives (all-reduce, all-gather, ...) to the other devices; not
  // owned. Without one, a program containing a collective fails with kFailedPrecondition.
  CollectiveBackend* collectives = nullptr;
  // Loop fusion of elementwise ops (see above). Executor(options) turns it off when the
  // environment variable TESSEL_EXECUTOR_FUSION is set to a false value (0, false, no, off).
  bool fusion = true;
  // A run still going at this time fails with kDeadlineExceeded, naming the while loop it was
  // in: checked once per while-loop iteration, the only place a program can run without bound
  // (a loop whose condition never turns false). Default: no deadline.
  absl::Time deadline = absl::InfiniteFuture();
  // When set, a run stops with kCancelled once *cancel is true: checked before each node (the
  // nodes of while bodies and branches included), so the kernel running when it is set finishes
  // first. Not owned; for a caller's interrupt (Python's Ctrl-C in tessel.verify).
  const std::atomic<bool>* cancel = nullptr;
};

struct ExecutionStats {
  // Highest sum of live buffer bytes during the run: arguments plus intermediates still needed.
  int64_t peak_live_bytes = 0;
  // Nodes executed (parameters and constants included; a node computed inside a fusion counts).
  int64_t nodes_executed = 0;
  // Passes over memory: kernels that wrote a buffer. A fusion counts once however many ops it
  // holds; parameter, constant, tuple, get-tuple-element, while and conditional count none
  // (the kernels of a while body or a branch count each time they run).
  int64_t kernels = 0;
  // Of `kernels`: the loop fusions run, and the fused outputs written into a dead operand's
  // buffer instead of a new one.
  int64_t fusions = 0;
  int64_t in_place = 0;
  // Further outputs of multi-output fusions (core/internal/fusion.h): values a fused loop
  // wrote besides its root, which unfused would have been a pass of their own.
  int64_t fusion_extra_outputs = 0;
  // Arguments whose buffers the run took over (ExecutionDonation), and of `in_place` the
  // outputs written into one of those buffers.
  int64_t donated_arguments = 0;
  int64_t donated_in_place = 0;
};

// Arguments a caller gives up to one run (Executor::RunBorrowed), as XLA's input_output_alias
// and JAX's donate_argnums: the run takes each donated literal's buffer once the graph and the
// arguments are checked, and writes an output into it where the in-place rules above allow
// (the buffer's last use is an elementwise fusion or an SGD-style dot update with the output's
// shape); a donated buffer no output reuses is freed after its last use, not at the end.
// Results are bitwise equal to a run without donation.
struct ExecutionDonation {
  // Empty (nothing donated), or one entry per argument: non-null for a donated argument, the
  // caller's literal, which must be the literal the argument points to. Only arrays are taken
  // (a donated tuple is read as a borrowed argument).
  absl::Span<Literal* const> literals;
  // Set by the run: true once it took the donated literals (they are moved from from then on,
  // even when the run fails later); false when it failed before taking them (bad arguments, a
  // node it cannot run), and they are untouched.
  bool taken = false;
};

class Executor {
 public:
  explicit Executor(ExecutorOptions options = {});

  // Executes `graph` with `arguments[i]` bound to parameter i.
  // Errors: kInvalidArgument if TESSEL_EXECUTOR_FUSION has a value that is not a boolean, if
  // the argument count or any argument's shape differs from the
  // parameter's (naming the parameter), or a dynamic index is not a scalar integer.
  [[nodiscard]] absl::StatusOr<std::vector<Literal>> Run(const Graph& graph,
                                                         absl::Span<const Literal> arguments,
                                                         ExecutionStats* stats = nullptr) const;
  // The same with the arguments borrowed by pointer (no copies; the lazy Tensor runtime passes
  // its device data this way), and optionally some of them donated (see ExecutionDonation).
  // Precondition: no pointer is null. Errors: as Run, plus kInvalidArgument if `donation` has
  // neither zero nor one entry per argument, or a donated literal is not its argument's.
  [[nodiscard]] absl::StatusOr<std::vector<Literal>> RunBorrowed(
      const Graph& graph, absl::Span<const Literal* const> arguments,
      ExecutionStats* stats = nullptr, ExecutionDonation* donation = nullptr) const;

  // Does for `graph` what depends only on it and on options().fusion (see above), so that each
  // later run skips it. Errors: kInvalidArgument if the graph has no nodes, if
  // TESSEL_EXECUTOR_FUSION is not a boolean, or a node violates its shape rule (naming it);
  // kFailedPrecondition for a collective when options().collectives is null. An error inside
  // a while or conditional computation is reported by the run that calls it, as by Run.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const PreparedProgram>> Prepare(
      const Graph& graph) const;

  // Run and RunBorrowed on a prepared program: bitwise the results of the Graph overloads.
  // `program` must come from an executor with the same `fusion` option (the plan depends on
  // it); device_id, num_threads and collectives may differ. Errors: as the Graph overloads for
  // the arguments and donation, kInvalidArgument if the fusion option differs,
  // kFailedPrecondition for a collective when options().collectives is null.
  [[nodiscard]] absl::StatusOr<std::vector<Literal>> Run(const PreparedProgram& program,
                                                         absl::Span<const Literal> arguments,
                                                         ExecutionStats* stats = nullptr) const;
  [[nodiscard]] absl::StatusOr<std::vector<Literal>> RunBorrowed(
      const PreparedProgram& program, absl::Span<const Literal* const> arguments,
      ExecutionStats* stats = nullptr, ExecutionDonation* donation = nullptr) const;

  const ExecutorOptions& options() const { return options_; }

 private:
  ExecutorOptions options_;
  absl::Status env_status_;  // a malformed TESSEL_EXECUTOR_FUSION, reported by every run
};

// Whether the runtimes that run one graph many times (the local computation client, the host
// runtime's devices) keep its PreparedProgram: true unless the environment variable
// TESSEL_EXECUTOR_PREPARED is a false value (0, false, no, off), which prepares at every run
// (for A/B timing of the preparation). Errors: kInvalidArgument if it is not a boolean.
[[nodiscard]] absl::StatusOr<bool> ReusePreparedPrograms();

}  // namespace tessel

#endif  // TESSEL_CORE_EXECUTOR_H_
