// Dry-run simulation of one step of a partitioned SPMD program on a Topology: predicted step
// time, compute / ICI / DCN / exposed-communication breakdown, per-device peak memory, bytes per
// link class, the most expensive ops, and a Chrome-trace timeline. Shapes only; no data, no
// processes; any number of devices.
//
//   TESSEL_ASSIGN_OR_RETURN(mesh::Simulator sim, mesh::Simulator::Create(topology, {}));
//   TESSEL_ASSIGN_OR_RETURN(mesh::SimulationReport r, sim.Run(program));
//   r.step_seconds; r.peak_memory_bytes; r.ici_bytes_per_device;
//   TESSEL_RETURN_IF_ERROR(mesh::WriteChromeTrace(r, "step.json"));   // open in Perfetto
//
// Scale. Every device runs the same local program (SPMD); devices differ only in the links
// their collectives cross. Run groups devices into *device classes*: two devices are in one
// class when every collective of the program spans, for both, the same link classes (number of
// slices, members per slice, physical torus dims and their extents, ring closure; for
// collective-permute the hop distance and whether it crosses DCN). One pass over the
// collectives' replica groups (O(total group members)) gives the classes; then each class's
// representative is simulated, all classes in lockstep so that a collective starts when the
// slowest class in its group is ready. Memory: O(graph) + O(devices), never their product.
//
// Scheduling (per device class, costs from mesh/cost/cost_model.h):
// - in order (default, `overlap` false): nodes run one after the other in program order; a
//   collective starts when every participating class has reached it;
// - overlapped (`overlap` true), like XLA's latency-hiding scheduler
//   (xla/service/latency_hiding_scheduler.cc): one compute stream and one collective stream per
//   device; a node starts when its operands are done and its stream is free, so a collective
//   runs under independent compute (prefetching FSDP all-gathers, overlapping gradient
//   reduce-scatters). Collectives take their stream in program order. The compute stream takes
//   local ops in one order shared by all classes (one SPMD program), from a list scheduler run
//   on class 0's costs: when the stream is free, a ready local op whose result feeds a
//   collective (directly, or through local ops that feed only collectives: a gradient's dot,
//   convert, transpose, reshape) goes first; otherwise the next other local op in program order,
//   unless such a feeder becomes ready before that op can start. So a gradient collective starts
//   as soon as its operand can be computed, not where program order puts its preparation (after
//   the whole backward pass, in partitioned programs), and a feeder that waits on another
//   collective's result is not pulled ahead of compute that can run. A reduce-scatter that the
//   cost model runs as XLA:TPU's synchronous all-reduce (CostModel::ReduceScatterRunsAsAllReduce:
//   XLA's fusion on a torus, i.e. a TPU) runs on the compute stream instead: it starts when its
//   operand is done and the compute streams of every class it waits for are free, and no local
//   op runs on its class until it ends; it does not queue behind the async collectives in
//   flight (XLA:TPU emits it as a fused all-reduce + dynamic-slice kernel on the TensorCore, not
//   as an async collective; docs/simulator.md, "Reduce-scatter on TPU"; the links it shares
//   with a concurrent all-gather are not modelled). O(n log n) in the nodes.
//   The memory limit XLA puts on how far it prefetches is not modelled.
// Both schedules are always computed; `overlap` picks which one `step_seconds` reports.
//
// Control flow: a program with while loops or conditionals is simulated as the straight-line
// program it executes (mesh/sim/inline_control_flow.h): a loop costs trip count x (body +
// condition), its collectives run once per iteration; a conditional costs its costlier branch.
//
// Memory: live-buffer analysis of the local program in program order. Parameter buffers are
// live from the start until their last use (donated to the outputs, as training loops donate
// the parameters and optimizer state: jax.jit donate_argnums, torch_xla in-place updates);
// every other value from its definition to its last use; the root's elements until the end. A
// value that XLA's fusion would keep on chip (KeptOnChip in mesh/cost/cost_model.h) takes no
// buffer. No rematerialization: every activation the backward pass reads stays live, so models
// trained with remat / flash attention use less than reported (mesh/sim/training_step.h gives
// the memory of a training step under a remat policy and replaces this verdict for generated
// models). Peak bytes per device; a warning (severity "error") when it exceeds the device's HBM.
#ifndef TESSEL_MESH_SIMULATOR_H_
#define TESSEL_MESH_SIMULATOR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/mesh/cost/cost_model.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/partitioner/partitioner.h"

namespace tessel::mesh {

struct SimulatorOptions {
  bool overlap = false;       // report the overlapped schedule as step_seconds
  bool record_trace = false;  // keep per-node events for WriteChromeTrace
  int64_t top_k = 10;         // entries in top_ops / top_collectives
  // Trip count for while loops whose count is not known statically (see
  // mesh/sim/inline_control_flow.h); unset: such a loop is a kFailedPrecondition error.
  std::optional<int64_t> assumed_trip_count;
  CostModelOptions cost;
  // Local ops for which this returns true cost nothing here (no time, flops or bytes): the
  // caller costs what they compute another way. Used for fused (flash) attention: the program
  // holds the dense S x S attention, which a flash kernel never writes to HBM
  // (mesh/sim/training_step.h, IsDenseAttentionNode). Collectives are never skipped. Memory
  // (PeakLiveBytes) still counts these nodes.
  std::function<bool(const Node&)> costed_elsewhere;
  // Dots for which this returns true run at their inputs' peak even under
  // CostModelOptions::matmul_dtype (CostModel::Cost's `quantized` false): the attention matmuls,
  // which quantized training (AQT in MaxText, Transformer Engine's fp8 linear layers) leaves in
  // bf16.
  std::function<bool(const Node&)> unquantized;
};

// One node's cost on the representative device of class 0, for the top-k lists.
struct OpEntry {
  std::string name;    // node name in the local program
  std::string opcode;  // XLA name, e.g. "dot", "all-gather"
  std::string shape;   // local shape, e.g. "bf16[4,2048,8192]"
  double seconds = 0;
  double flops = 0;
  int64_t bytes = 0;  // bytes accessed (local ops) or bytes sent (collectives)
};

// One simulated device class.
struct DeviceClass {
  int64_t representative_device = 0;  // smallest global id of the class
  int64_t num_devices = 0;
  double in_order_seconds = 0;    // step time of the in-order schedule
  double overlapped_seconds = 0;  // step time of the overlapped schedule
  double compute_seconds = 0;     // sum of local-op seconds (roofline)
  double ici_seconds = 0;         // sum of collective ICI seconds
  double dcn_seconds = 0;         // sum of collective DCN seconds
  int64_t ici_bytes = 0;          // bytes this device sends on ICI per step
  int64_t dcn_bytes = 0;          // bytes this device sends on DCN per step
};

// One event of the trace (seconds from the step start).
struct TraceEvent {
  int64_t device_class = 0;
  std::string name;
  std::string opcode;
  double start_seconds = 0;
  double seconds = 0;
  double ici_seconds = 0;
  double dcn_seconds = 0;
};

struct SimulationReport {
  std::string device_name;  // DeviceSpec::name
  int64_t num_devices = 0;
  bool overlap = false;  // which schedule step_seconds is
  // Step time: the slowest class, of the chosen schedule; both schedules given as well.
  double step_seconds = 0;
  double in_order_seconds = 0;
  double overlapped_seconds = 0;
  // Breakdown on the slowest class (seconds per step): compute = local ops (roofline), ICI/DCN
  // = collective time on each link class, exposed = step time minus the time the compute
  // stream is busy (communication not hidden under compute, plus waiting for other classes).
  double compute_seconds = 0;
  double ici_seconds = 0;
  double dcn_seconds = 0;
  double exposed_comm_seconds = 0;
  double flops_per_device = 0;  // local-op flops on one device per step (the program's)
  // Bytes sent per device per step on each link class (slowest class), and over all devices.
  int64_t ici_bytes_per_device = 0;
  int64_t dcn_bytes_per_device = 0;
  int64_t ici_bytes_total = 0;
  int64_t dcn_bytes_total = 0;
  // Memory per device (bytes).
  int64_t peak_memory_bytes = 0;
  int64_t parameter_bytes = 0;  // sum of the local parameter buffers (weights, state, inputs)
  int64_t hbm_bytes = 0;        // the device's capacity
  std::vector<DeviceClass> classes;
  std::vector<OpEntry> top_ops;          // local ops, most expensive first
  std::vector<OpEntry> top_collectives;  // collectives, most expensive first
  // Assumptions (from the cost model) and problems, e.g.
  // "error: peak memory 120.30 GiB per device exceeds the HBM of TPU v5p (95.00 GiB)".
  std::vector<std::string> warnings;
  bool exceeds_hbm = false;
  std::vector<TraceEvent> trace;  // only with SimulatorOptions::record_trace
};

class Simulator {
 public:
  // Errors: those of CostModel::Create.
  [[nodiscard]] static absl::StatusOr<Simulator> Create(const Topology& topology,
                                                        SimulatorOptions options = {});

  // Simulates one execution of `program` on every device of the topology.
  // Errors: kInvalidArgument when program.num_devices differs from the topology's device
  // count, or a collective names a device outside the topology.
  [[nodiscard]] absl::StatusOr<SimulationReport> Run(const partitioner::SpmdProgram& program) const;

  const CostModel& cost_model() const { return cost_model_; }

 private:
  Simulator(CostModel cost_model, SimulatorOptions options)
      : cost_model_(std::move(cost_model)), options_(options) {}
  CostModel cost_model_;
  SimulatorOptions options_;
};

// Live-buffer peak of `program` (see the file comment), bytes per device.
[[nodiscard]] int64_t PeakLiveBytes(const Graph& program);

// Writes `report.trace` as Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): one
// track per device class with every node, plus an "ICI" and a "DCN" track with the
// collectives' link time of class 0. Times in microseconds.
// Errors: kFailedPrecondition when the report has no trace (record_trace was off);
// kInvalidArgument when `path` cannot be written.
[[nodiscard]] absl::Status WriteChromeTrace(const SimulationReport& report,
                                            const std::string& path);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_SIMULATOR_H_
