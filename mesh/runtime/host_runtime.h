// HostRuntime: runs lazily traced SPMD programs on the devices of one host of a multi-host mesh,
// with real numbers and real collectives. The multi-controller model of JAX and PyTorch/XLA
// SPMD: every host process traces the same global graph, partitions it the same way
// (deterministically, cached by the graph fingerprint) and runs its own devices, one thread per
// device, each executing the per-device program with the core Executor and calling the
// transport's Communicator for the collectives. The per-device program is prepared once when it
// is partitioned (Executor::Prepare: fusion plan, liveness) and that PreparedProgram is shared by
// every local device's executor at every step, as XLA compiles the partitioned module once;
// TESSEL_EXECUTOR_PREPARED=0 prepares at every run instead (A/B timing).
//
//   // In each host process (e.g. started by `tessel run` or `tessel launch`):
//   TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<HostRuntime> runtime,
//                           HostRuntime::Create(topology, std::move(communicator)));
//   SetComputationClient(runtime->client());      // this thread's Sync() now runs SPMD
//   Tensor w = Tensor::FromLiteral(weights);       // the same value on every host
//   TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(w, mesh, {kNone, "model"}));
//   ... build the step, Sync() ...                 // partitioned once, then cache hits
//   std::cout << runtime->MetricsReport();
//
// Data. Values the runtime returns are ShardedData: the global shape, the XLA sharding the
// partitioner chose (or the annotation), and this host's pieces only (one per local device, in
// the padded local shape of spmd::ShardedTensor). Fed back into the next graph, a value whose
// sharding equals the parameter sharding the program expects is used in place (and, when Sync
// donates it, each device's executor takes its piece over and may write an output into it, as
// the local client does: core/tensor.h Sync, TESSEL_DONATE_PARAMS); host data
// (Tensor::FromLiteral) is cut into the local pieces (host-to-device bytes); a value in another
// sharding is re-laid out through the host (gathered, then cut). Reading a value back
// (Tensor::ToLiteral) is a host-level gather: every host must read the same values at the same
// point of the program, as with torch_xla's `tensor.cpu()` on a sharded tensor; a replicated
// value needs no communication.
//
// Input sharding (torch_xla MpDeviceLoader with `input_sharding`): MakeShardedInput asks a
// callback for the pieces of this host's devices only, so each host loads just its part of the
// global batch.
//
// Simulated clock: each program is also run once through the mesh simulator (mesh/sim/simulator.h)
// when it is compiled; every execution then advances the clock of the host's devices by the
// predicted step time on the topology's hardware (e.g. TPU v4), reported next to wall time.
//
// Thread model: one runtime per host process (or per host thread in single-process tests with
// InProcTransport); its client is used from one thread at a time. The runtime keeps one thread
// per local device but the first (which the calling thread runs) for its lifetime
// (HostRuntimeOptions::persistent_device_threads).
#ifndef TESSEL_MESH_HOST_RUNTIME_H_
#define TESSEL_MESH_HOST_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/literal.h"
#include "tessel/core/tensor.h"
#include "tessel/core/trace_events.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/spmd/sharded_tensor.h"
#include "tessel/spmd/sharding.h"
#include "tessel/transport/collective_stats.h"
#include "tessel/transport/communicator.h"

namespace tessel::mesh {

// A sharded value as one host holds it.
class ShardedData final : public DeviceData {
 public:
  // `pieces[i]` is the piece of `device_ids[i]` (a local device), nullptr when that device holds
  // nothing of the value. Every piece has the padded local shape of `layout`.
  ShardedData(spmd::ShardedTensor layout, std::vector<int64_t> device_ids,
              std::vector<std::shared_ptr<Literal>> pieces);

  const Shape& shape() const override { return layout_.global_shape(); }
  const std::string& sharding() const override { return sharding_text_; }
  int64_t local_bytes() const override;

  const spmd::ShardedTensor& layout() const { return layout_; }
  const std::vector<int64_t>& device_ids() const { return device_ids_; }
  // The piece of local device `device_id`, or nullptr (not local, or holds nothing).
  // Precondition: !donated().
  std::shared_ptr<const Literal> piece(int64_t device_id) const;

  // Donation (ComputationClient::ExecuteDonated, as LiteralData's): the piece of local device
  // `device_id` for a device's executor to take over, or nullptr when this value does not hold
  // it alone (not local, no piece, or the piece shared with another value). Once any device
  // took its piece, MarkDonated() spends the whole value: donated() is true and no piece may be
  // read. Const because values are shared as shared_ptr<const DeviceData>; a donated value has
  // no other holder to see it change.
  Literal* piece_for_donation(int64_t device_id) const;
  void MarkDonated() const { donated_ = true; }
  bool donated() const override { return donated_; }

 private:
  spmd::ShardedTensor layout_;
  std::string sharding_text_;
  std::vector<int64_t> device_ids_;
  std::vector<std::shared_ptr<Literal>> pieces_;
  mutable bool donated_ = false;
};

// Counters of one host, like torch_xla's metrics_report(). Times are wall seconds.
struct RuntimeMetrics {
  int64_t compiles = 0;        // graphs partitioned (partition-cache misses)
  int64_t cache_hits = 0;      // executions that found their partitioned program cached
  double compile_seconds = 0;  // time in propagation + partitioning
  int64_t executions = 0;      // Execute calls
  double execute_seconds = 0;  // wall time of the device threads' runs (all devices together)
  // Wall time of the slowest local device, summed over executions (the host's step time).
  double device_seconds = 0;
  int64_t host_to_device_bytes = 0;  // pieces cut from host data or loaded by MakeShardedInput
  int64_t device_to_host_bytes = 0;  // bytes of values read back whole (TransferFromDevice)
  int64_t reshards = 0;              // arguments re-laid out through the host
  int64_t peak_device_bytes = 0;     // highest executor peak of live bytes on a local device
  // Donation (Sync, TESSEL_DONATE_PARAMS): pieces of donated arguments the local devices'
  // executors took over, and outputs they wrote into one of those buffers
  // (ExecutionStats::donated_in_place), summed over the local devices.
  int64_t donated_pieces = 0;
  int64_t donated_in_place = 0;
  // Traffic this host's devices sent (transport::Communicator::stats()).
  transport::CollectiveStats collectives;
  // The simulated clock (mesh/sim/simulator.h: the cost model of the topology's hardware, in-order
  // schedule): seconds the executions so far would take on the real devices, summed, and the
  // predicted step time of the last execution. 0 when the topology cannot be costed (see
  // simulation_note).
  double simulated_seconds = 0;
  double last_simulated_step_seconds = 0;
  std::string simulation_note;
};

// The runtime's all-reduce combining limit, bytes per device and combined all-reduce: the
// concatenate/slice form copies the combined bytes twice (about 10 GB/s on one core, see
// docs/PERFORMANCE.md "Collectives vs OpenMPI and memcpy"), which pays for the 23-46 us of a
// collective's wake-ups up to some 100-250 KiB; measured in docs/PERFORMANCE.md ("GPT training
// step: Tessel vs JAX").
inline constexpr int64_t kDefaultCombineAllReduceBytes = 256 << 10;

struct HostRuntimeOptions {
  // Executor threads per device (each device already runs on its own thread).
  int threads_per_device = 1;
  // How many of this host's device threads compute at once (mesh/runtime/compute_slots.h): a
  // positive count, or 0 for no limit. nullopt (the default): the environment variable
  // TESSEL_COMPUTE_SLOTS if set, else no limit (compute_slots.h says why).
  // Errors from Create: kInvalidArgument for a negative count or a TESSEL_COMPUTE_SLOTS value
  // that is not a non-negative integer, naming the value.
  std::optional<int64_t> compute_slots;
  // When not empty, every graph partitioned is written there as HLO text, before
  // (`<fingerprint>.before.hlo`) and after (`<fingerprint>.spmd.hlo`) partitioning, by host 0
  // only (like XLA's --xla_dump_to). Default: the environment variable TESSEL_DUMP_TO. A
  // missing folder is created by HostRuntime::Create; one that cannot be created (a file there,
  // no permission) makes Create fail with kInvalidArgument naming the folder.
  std::string dump_to;
  // The all-reduce combiner run on every partitioned program before it is cached
  // (partitioner/combine_collectives.h, XLA's AllReduceCombiner): the largest combined
  // all-reduce in bytes per device, or 0 to run the program as partitioned. nullopt (the
  // default): the environment variable TESSEL_COMBINE_ALL_REDUCE_BYTES if set, else
  // kDefaultCombineAllReduceBytes. Errors from Create: kInvalidArgument for a negative value
  // or one that is not an integer, naming it.
  std::optional<int64_t> combine_all_reduce_bytes;
  // Whether every partitioned program's `transpose(all-reduce(x))` becomes
  // `all-reduce(transpose(x))` (partitioner::MoveTransposesBeforeAllReduces), so that the
  // executor folds the transpose into the dot producing x. nullopt (the default): the
  // environment variable TESSEL_TRANSPOSE_BEFORE_ALL_REDUCE (a boolean, core/environment.h) if
  // set, else true. Errors from Create: kInvalidArgument for a value that is not a boolean.
  std::optional<bool> transpose_before_all_reduce;
  // Whether every partitioned program's equal constants, iotas and broadcasts are merged
  // (partitioner::CseConstantsAndBroadcasts). nullopt (the default): the environment variable
  // TESSEL_PROGRAM_CSE (a boolean) if set, else true. Errors from Create: as above.
  std::optional<bool> cse;
  // Whether the threads that run the local devices are started once, with the runtime, and
  // reused by every execution (true), or started and joined at every execution (false, the
  // behaviour before; for A/B timing). nullopt (the default): the environment variable
  // TESSEL_PERSISTENT_DEVICE_THREADS (a boolean) if set, else true. Errors from Create:
  // kInvalidArgument for a value that is not a boolean.
  std::optional<bool> persistent_device_threads;
};

// The passes' settings the environment gives (unset variables: nullopt), as HostRuntime::Create
// reads them; `tessel run` checks them once before any host starts.
// Errors: kInvalidArgument naming the variable and the value: TESSEL_COMBINE_ALL_REDUCE_BYTES
// not a non-negative integer, TESSEL_TRANSPOSE_BEFORE_ALL_REDUCE or TESSEL_PROGRAM_CSE not a
// boolean.
struct ProgramPassSettings {
  std::optional<int64_t> combine_all_reduce_bytes;
  std::optional<bool> transpose_before_all_reduce;
  std::optional<bool> cse;
};
[[nodiscard]] absl::StatusOr<ProgramPassSettings> ProgramPassesFromEnvironment();

class HostRuntime {
 public:
  // A runtime for the host `communicator->rank()` of `topology`, whose hosts and devices must be
  // those of the communicator's device map (global device ids = topology device ids).
  // Errors: kInvalidArgument when the topology and the communicator disagree (host count,
  // device count, a device's host or slice), naming the first difference.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostRuntime>> Create(
      const Topology& topology, std::unique_ptr<transport::Communicator> communicator,
      HostRuntimeOptions options = {});
  // The same with a communicator owned elsewhere (it must outlive the runtime), e.g. a host of
  // an InProcTransport in single-process tests.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostRuntime>> Create(
      const Topology& topology, transport::Communicator* communicator,
      HostRuntimeOptions options = {});
  ~HostRuntime();

  int64_t host_index() const;
  int64_t num_hosts() const;
  int64_t num_devices() const;
  const std::vector<int64_t>& local_device_ids() const;
  const Topology& topology() const;
  // The compute slots in use (HostRuntimeOptions::compute_slots resolved); 0: no limit.
  int64_t compute_slots() const;
  transport::Communicator& communicator();

  // The ComputationClient that runs graphs on this host's devices; install it with
  // SetComputationClient on the thread that traces.
  std::shared_ptr<ComputationClient> client();

  // A tensor of `global_shape` laid out with `sharding`, whose pieces come from
  // `load_shard(shard)`, called once per local device that holds data, with the global index
  // ranges of that device's piece. The callback returns the data of those ranges (shape:
  // shard.data_dims(), the unpadded extent); padding is added here.
  // Errors: kInvalidArgument for a sharding that does not fit the shape (spmd::ShardedTensor)
  // or a callback result of the wrong shape or dtype (naming the device and both shapes); the
  // callback's own errors.
  [[nodiscard]] absl::StatusOr<Tensor> MakeShardedInput(
      const Shape& global_shape, const spmd::Sharding& sharding,
      const std::function<absl::StatusOr<Literal>(const spmd::Shard&)>& load_shard);

  // `stats` summed over every host of the job (each host passes its own, e.g. the difference of
  // two communicator().stats() snapshots): the job's traffic. A host-level collective (through
  // Communicator::Rendezvous): every host must call it at the same point of the program.
  // Errors: those of Rendezvous (kUnavailable for a lost host, ...); kDataLoss for a malformed
  // payload.
  [[nodiscard]] absl::StatusOr<transport::CollectiveStats> SumOverHosts(
      const transport::CollectiveStats& stats);

  // Timeline recording (off by default): while on, every execution of a program on a local
  // device (category "execute") and every collective it calls ("collective") is recorded with
  // its wall start and duration, and with compute slots every wait for a slot ("slot", name
  // "compute-slot": at the start of a run, and inside a collective's span after the transport
  // returned), i.e. the time a device was ready to compute but queued for one of the cores.
  void EnableTracing(bool on);
  // Gathers every host's recorded events (a host-level collective: every host calls it at the
  // same point) and returns them on host 0 as a Chrome trace (core/trace_events.h; opens in
  // Perfetto / chrome://tracing): one process per host, one thread per device, times in
  // microseconds since the first event. Other hosts get an empty trace.
  // Errors: those of Rendezvous; kDataLoss when a host sends a malformed event list.
  [[nodiscard]] absl::StatusOr<TraceEventWriter> CollectTrace();

  // Counters so far (collective traffic read from the communicator now).
  RuntimeMetrics metrics() const;
  // The counters as text, one "name: value" per line, torch_xla metrics_report() style,
  // including bytes per collective kind and link class.
  std::string MetricsReport() const;

  class Client;

 private:
  HostRuntime() = default;
  struct State;
  std::unique_ptr<State> state_;
  std::shared_ptr<Client> client_;
};

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_HOST_RUNTIME_H_
