// Numerical verification of a partitioning: runs a module unpartitioned on one device and
// partitioned on N in-process devices, with the same random inputs, and compares every output.
// This is the property of DESIGN.md "Tests" (partitioned == unpartitioned) as one function, used
// by `tessel verify` and by tests/integration/partition_property_test.cc.
//
//   TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ParseHloModule(text));
//   VerifyOptions options;
//   options.seed = 7;
//   TESSEL_ASSIGN_OR_RETURN(VerifyReport report, VerifyPartitioning(*graph, 4, options));
//   if (!report.ok()) std::cout << "mismatch in output " << *report.first_mismatch();
//   report.outputs[0].max_abs_error;                     // |partitioned - unpartitioned|
//   report.collectives["all-reduce"].count;              // from CountCollectives
//
// Steps (each also public, for tests that build their own cases):
//   1. MakeVerifyInputs: one random global literal per entry parameter, deterministic in the
//      seed (see its comment for the ranges, and for start-index parameters).
//   2. The unpartitioned graph runs on one device (core Executor); a module with manual regions
//      (shard_map) runs per device instead (RunManualReference).
//   3. Partition (partitioner.h), or a program the caller made, runs on devices 0..N-1, one
//      thread per device, with the reference collectives (core InProcessCollectives):
//      RunPartitioned splits each global input by its parameter's sharding and assembles each
//      output from the devices' pieces (spmd::ShardedTensor).
//   4. CompareOutput: per output, the largest absolute and relative error and whether every
//      element is within tolerance.
//
// Shapes: inputs and assembled outputs have global (unpartitioned) shapes; the per-device
// programs see local shapes (ceil(dim / tiles) per tiled dim, padding included).
//
// Tolerances: an element passes when |got - expected| <= atol * scale + rtol * |expected|, where
// scale = max(1, largest finite |expected| of that output). The absolute term is scaled because a
// partitioned reduction or dot sums the same terms in another order (partial sums per device,
// then an all-reduce), and the rounding error of a reordered sum grows with the magnitude of its
// terms, not with the (possibly cancelled, near-zero) result. NaN equals NaN and an infinity
// equals the same infinity; any other pair with a NaN or an infinity fails. Defaults
// (DefaultTolerance):
//   pred, u8, s32, s64: exact (rtol = atol = 0): integer ops do not round, so any difference is
//     a partitioning bug;
//   f64: rtol = atol = 1e-12 (about 4500 ulp: reordered sums of up to ~10^4 terms);
//   f32: rtol = atol = 1e-5 (about 80 ulp, eps = 2^-23): a reordered sum of k terms of similar
//     magnitude is typically off by ~sqrt(k) ulp of the scale, so this holds to k ~ 10^3 and
//     more, while a dropped collective or an unmasked pad is off by O(scale);
//   f16: rtol = atol = 5e-3 (about 5 ulp, eps = 2^-10); bf16: rtol = atol = 4e-2 (about 5 ulp,
//     eps = 2^-7): the executor computes them in f32 and rounds every stored result, and a
//     partitioned program rounds its partial results before the all-reduce adds them (rounding
//     again), so a few ulp per output are expected.
// Measured (largest |got - expected| / scale over the golden modules, in f32 and converted to the
// other float types, seeds 0-3, and over the property test's 300 random f32 cases): f32 1.3e-6,
// so 1e-6 would be too tight; f16 9.3e-4; bf16 7.4e-3 (one ulp); f64 4.3e-16.
// VerifyOptions::rtol / atol replace the defaults for every output, integer ones included.
//
// Source: XLA's `run_hlo_module` tool (run a module on a reference and a test backend, compare
// with an error spec) and the GSPMD property (Xu et al., 2021): the SPMD program computes the
// unpartitioned program's values.
#ifndef TESSEL_PARTITIONER_VERIFY_H_
#define TESSEL_PARTITIONER_VERIFY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/spmd/sharding.h"

namespace tessel::partitioner {

// How close a partitioned output must be to the unpartitioned one (see the file comment):
// |got - expected| <= atol * scale + rtol * |expected|. Both are unitless.
struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

// The default tolerance for outputs of `dtype` (table in the file comment). Never fails.
[[nodiscard]] Tolerance DefaultTolerance(DType dtype);

struct VerifyOptions {
  // Seeds MakeVerifyInputs: the same seed gives the same inputs on every machine.
  uint64_t seed = 0;
  // When set, replace DefaultTolerance's rtol / atol for every output. Precondition: >= 0.
  std::optional<double> rtol;
  std::optional<double> atol;
  // Bounds every wait of a device for its peers in a collective (a program whose devices
  // disagree on their collectives fails with kDeadlineExceeded instead of hanging).
  std::chrono::milliseconds collective_timeout = std::chrono::seconds(60);
  // Bounds the reference run and the partitioned run each (ExecutorOptions::deadline): a while
  // loop that never ends fails with kDeadlineExceeded instead of running forever.
  std::chrono::milliseconds run_timeout = std::chrono::minutes(10);
  // When set and true, both runs stop with kCancelled at their next node
  // (ExecutorOptions::cancel); not owned. Python's tessel.verify sets it on Ctrl-C.
  const std::atomic<bool>* cancel = nullptr;
};

// One random global literal per parameter of `graph` (by parameter number), a pure function of
// (seed, parameter number, element index): Philox (core/rng.h) keyed on a hash of the seed and
// the parameter number, so inputs do not depend on the platform or on the other parameters.
// Values: floats uniform in [-1, 1) (rounded to bf16 / f16); signed integers uniform in
// [-8, 8]; u8 in [0, 8]; pred true with probability 1/2.
// Start indices: a scalar integer parameter that is a start index of a dynamic-slice or a
// dynamic-update-slice (directly, not through other ops) is drawn uniformly from the starts
// that keep the window inside the operand, [0, dim - window size], intersected over all its
// uses. Out-of-range starts would be safe too (both ops clamp, as XLA does), but they would
// mostly test the clamp at the edges; in-range ones move the window across shard boundaries.
// (gather indices will take the same treatment when gather exists.)
// Errors: kUnimplemented naming the parameter for a tuple-shaped parameter.
[[nodiscard]] absl::StatusOr<std::vector<Literal>> MakeVerifyInputs(const Graph& graph,
                                                                    uint64_t seed);

// Runs `program` on devices 0..program.num_devices-1, one thread per device (each executor
// single-threaded), with an InProcessCollectives backend. `global_inputs[i]` (global shape of
// parameter i) is split by `program.parameters[i].sharding` (spmd::ShardedTensor::Split, padding
// zero-filled); each output is assembled from the devices' pieces by
// `program.outputs[o].sharding` (ShardedTensor::Assemble: replica 0 of each tile, padding
// dropped). Returns one global literal per entry of `program.outputs`.
// Errors: kInvalidArgument when the input count or a shape does not match the program's
// parameters, or a sharding does not fit its value; the first failing device's error prefixed
// with "device N: " (e.g. kDeadlineExceeded from a collective that its peers never reach); the
// first device to fail stops its peers' collectives at once (their kAborted reports are not
// the error returned).
// `deadline` bounds each device's run (ExecutorOptions::deadline); `cancel` stops it
// (ExecutorOptions::cancel).
[[nodiscard]] absl::StatusOr<std::vector<Literal>> RunPartitioned(
    const SpmdProgram& program, absl::Span<const Literal> global_inputs,
    std::chrono::milliseconds collective_timeout = std::chrono::seconds(60),
    absl::Time deadline = absl::InfiniteFuture(), const std::atomic<bool>* cancel = nullptr);

// The reference (expected) outputs of a module with manual regions (custom-calls
// SPMDFullToShardShape / SPMDShardToFullShape: JAX shard_map, torch_xla manual sharding), which
// one device alone cannot run. Each of devices 0..num_devices-1 runs the whole module on the
// global inputs, with everything outside the regions replicated; a region runs once per device
// (with the reference collectives, one thread per device), entered with this device's shard of
// its input (static pad + slice, under the input's propagated sharding) and left by gathering
// every device's result and placing replica 0 of each tile at its offset. This shares no code
// with the partitioner's region rule. Returns one global literal per output (device 0's).
// Errors: kInvalidArgument for num_devices < 1 or a region boundary whose shapes do not match
// its sharding on num_devices; ComputeShardings' errors; a device's run error prefixed
// "device N: ".
// `deadline` bounds each device's run (ExecutorOptions::deadline); `cancel` stops it
// (ExecutorOptions::cancel).
[[nodiscard]] absl::StatusOr<std::vector<Literal>> RunManualReference(
    const Graph& graph, int64_t num_devices, absl::Span<const Literal> global_inputs,
    std::chrono::milliseconds collective_timeout = std::chrono::seconds(60),
    absl::Time deadline = absl::InfiniteFuture(), const std::atomic<bool>* cancel = nullptr);

// The comparison of one output.
struct OutputCheck {
  int64_t index = 0;  // position in the root tuple (0 for a non-tuple root)
  Shape global_shape;
  Shape local_shape;  // one device's buffer (padded)
  spmd::Sharding sharding;
  Tolerance tolerance;
  // max(1, largest finite |expected|): the unit of tolerance.atol.
  double scale = 1;
  // Largest |got - expected| (+inf when a NaN or an infinity differs, or the shapes differ).
  double max_abs_error = 0;
  // Largest |got - expected| / |expected| over elements whose expected value is finite and
  // non-zero (0 when there is none); exact zeros are covered by max_abs_error.
  double max_rel_error = 0;
  // Elements outside the tolerance, and the row-major index of the first (-1 when none).
  int64_t mismatched_elements = 0;
  int64_t first_mismatch_element = -1;
  bool ok = true;
};

// Compares `got` with `expected` element by element under `tolerance` (the rule of the file
// comment; integers and pred compared exactly as integers). Fills the error fields and `ok`;
// index and sharding are left for the caller, local_shape is set to the global shape. A shape or
// dtype mismatch is a failed check with infinite errors, not an error. Never fails.
[[nodiscard]] OutputCheck CompareOutput(const Literal& got, const Literal& expected,
                                        const Tolerance& tolerance);

struct VerifyReport {
  int64_t num_devices = 1;
  std::vector<OutputCheck> outputs;
  // CountCollectives of the partitioned program: per kind, the number of collectives and the
  // bytes of their local results (what each device receives into, summed).
  std::map<std::string, CollectiveCount> collectives;

  // The index of the first output that failed its check, if any.
  [[nodiscard]] std::optional<int64_t> first_mismatch() const;
  [[nodiscard]] bool ok() const { return !first_mismatch().has_value(); }
};

// Runs `graph` unpartitioned and `program` (a partitioning of `graph`, e.g. from Partition or
// edited by hand) partitioned on the inputs of MakeVerifyInputs(graph, options.seed), and
// compares every output. A numerical mismatch is a report with ok() false, not an error.
// Errors: those of MakeVerifyInputs; the unpartitioned run's error prefixed "unpartitioned run: ";
// RunPartitioned's prefixed "partitioned run: "; kInvalidArgument when the program's output
// count differs from the graph's.
[[nodiscard]] absl::StatusOr<VerifyReport> VerifyProgram(const Graph& graph,
                                                         const SpmdProgram& program,
                                                         const VerifyOptions& options = {});

// Partition(graph, num_devices), then VerifyProgram.
// Errors: Partition's (kInvalidArgument for num_devices < 1 or a bad sharding, kUnimplemented
// naming an instruction without a partitioning rule), then those of VerifyProgram.
[[nodiscard]] absl::StatusOr<VerifyReport> VerifyPartitioning(const Graph& graph,
                                                              int64_t num_devices,
                                                              const VerifyOptions& options = {});

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_VERIFY_H_
