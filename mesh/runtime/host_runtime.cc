#include "tessel/mesh/runtime/host_runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "tessel/core/environment.h"
#include "tessel/core/executor.h"
#include "tessel/core/file_util.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/status_macros.h"
#include "tessel/mesh/cost/cost_model.h"
#include "tessel/mesh/runtime/collective_adapter.h"
#include "tessel/mesh/runtime/compute_slots.h"
#include "tessel/mesh/sim/simulator.h"
#include "tessel/partitioner/combine_collectives.h"
#include "tessel/partitioner/cse.h"
#include "tessel/partitioner/partitioner.h"

namespace tessel::mesh {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Copies the box of `sizes` elements starting at `src_start` in `src` to the origin of `dst`
// (same dtype and rank; the rest of `dst` is untouched): cutting a device's piece out of a
// whole value, or placing unpadded data into a padded piece. Copies whole rows of the last dim.
void CopyBox(const Literal& src, const std::vector<int64_t>& src_start,
             const std::vector<int64_t>& sizes, Literal* dst) {
  const int64_t rank = src.shape().rank();
  const int64_t element = ByteWidth(src.shape().dtype());
  int64_t count = 1;
  for (int64_t size : sizes) count *= size;
  if (count == 0) return;
  if (rank == 0) {
    std::memcpy(dst->raw_data(), src.raw_data(), static_cast<size_t>(element));
    return;
  }
  const std::vector<int64_t> src_strides = src.shape().strides();
  const std::vector<int64_t> dst_strides = dst->shape().strides();
  const int64_t row_bytes = sizes[rank - 1] * element;
  const int64_t rows = count / sizes[rank - 1];
  std::vector<int64_t> index(rank, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t from = src_start[rank - 1], to = 0;
    for (int64_t d = 0; d < rank - 1; ++d) {
      from += (src_start[d] + index[d]) * src_strides[d];
      to += index[d] * dst_strides[d];
    }
    std::memcpy(dst->raw_data() + to * element, src.raw_data() + from * element,
                static_cast<size_t>(row_bytes));
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
}

// The threads that run a host's local devices: one per device but the first, which the caller
// runs, started once and reused by every execution. Starting them per execution cost a thread
// creation and exit per device and step, and each new thread began with a cold malloc cache
// (glibc's per-thread tcache and arena binding) for buffers the executor allocates and frees
// by the thousand per run.
class DeviceThreads {
 public:
  // `count` devices; count - 1 threads. `persistent` false: Run starts and joins the threads at
  // every call instead (the behaviour before; TESSEL_PERSISTENT_DEVICE_THREADS=0, for A/B).
  DeviceThreads(size_t count, bool persistent) : count_(count), persistent_(persistent) {
    if (!persistent_) return;
    for (size_t l = 1; l < count_; ++l) threads_.emplace_back([this, l] { Loop(l); });
  }
  ~DeviceThreads() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }
  DeviceThreads(const DeviceThreads&) = delete;
  DeviceThreads& operator=(const DeviceThreads&) = delete;

  // Runs job(l) for every l in [0, count), l = 0 on the calling thread, and returns when every
  // one has returned. One call at a time.
  void Run(const std::function<void(size_t)>& job) {
    if (!persistent_) {
      std::vector<std::thread> threads;
      for (size_t l = 1; l < count_; ++l) threads.emplace_back(job, l);
      if (count_ > 0) job(0);
      for (std::thread& t : threads) t.join();
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      job_ = &job;
      pending_ = threads_.size();
      ++generation_;
    }
    if (count_ > 0) job(0);
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
    mu_.Await(absl::Condition(&done));
    job_ = nullptr;
  }

 private:
  void Loop(size_t l) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(size_t)>* job = nullptr;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || generation_ != seen;
        };
        mu_.Await(absl::Condition(&ready));
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(l);
      absl::MutexLock lock(&mu_);
      --pending_;
    }
  }

  const size_t count_;
  const bool persistent_;
  absl::Mutex mu_;
  const std::function<void(size_t)>* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // one per Run
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;       // threads still running this Run's job
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// ShardedData.

ShardedData::ShardedData(spmd::ShardedTensor layout, std::vector<int64_t> device_ids,
                         std::vector<std::shared_ptr<Literal>> pieces)
    : layout_(std::move(layout)),
      sharding_text_(layout_.sharding().ToString()),
      device_ids_(std::move(device_ids)),
      pieces_(std::move(pieces)) {
  TESSEL_CHECK(device_ids_.size() == pieces_.size());
}

int64_t ShardedData::local_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : pieces_) bytes += p == nullptr ? 0 : p->byte_size();
  return bytes;
}

std::shared_ptr<const Literal> ShardedData::piece(int64_t device_id) const {
  for (size_t i = 0; i < device_ids_.size(); ++i) {
    if (device_ids_[i] == device_id) return pieces_[i];
  }
  return nullptr;
}

Literal* ShardedData::piece_for_donation(int64_t device_id) const {
  for (size_t i = 0; i < device_ids_.size(); ++i) {
    // A piece another value also holds (use count above this one's) must stay readable.
    if (device_ids_[i] == device_id) {
      return pieces_[i] != nullptr && pieces_[i].use_count() == 1 ? pieces_[i].get() : nullptr;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// State and client.

struct HostRuntime::State {
  Topology topology;
  std::unique_ptr<transport::Communicator> owned_communicator;
  transport::Communicator* communicator = nullptr;
  HostRuntimeOptions options;
  // Passes after partitioning, resolved by Create.
  partitioner::AllReduceCombinerOptions combiner;
  bool transpose_before_all_reduce = true;
  bool cse = true;
  std::unique_ptr<CommunicatorCollectives> collectives;
  std::unique_ptr<ComputeSlots> slots;            // set by Create
  std::unique_ptr<DeviceThreads> device_threads;  // set by Create

  std::optional<Simulator> simulator;  // absent when the topology cannot be costed

  struct Compiled {
    partitioner::SpmdProgram program;
    double simulated_step_seconds = 0;  // the simulator's in-order step time
    std::vector<spmd::ShardedTensor> parameter_layouts;
    std::vector<spmd::ShardedTensor> output_layouts;
    // `program.program` prepared once (Executor::Prepare) and shared by every local device's
    // executor: all run the same per-device program. Null when it does not prepare (the run
    // then reports the error) or TESSEL_EXECUTOR_PREPARED is false.
    std::shared_ptr<const PreparedProgram> prepared;
    bool prepared_fusion = false;  // the fusion option it was planned with
  };
  absl::flat_hash_map<uint64_t, std::shared_ptr<const Compiled>> cache;
  RuntimeMetrics metrics;
  int64_t transfers = 0;

  // Timeline (EnableTracing).
  struct TraceEvent {
    int64_t device = 0;
    std::string name;
    std::string category;  // "execute", "collective" or "slot" (a compute slot's wait)
    std::chrono::steady_clock::time_point start, end;
    int64_t bytes = 0;
  };
  std::atomic<bool> tracing{false};
  std::mutex trace_mu;
  std::vector<TraceEvent> trace;
  void Record(TraceEvent event) {
    std::lock_guard<std::mutex> lock(trace_mu);
    trace.push_back(std::move(event));
  }  // TransferFromDevice calls that gathered (rendezvous tag numbering)

  const std::vector<int64_t>& local_devices() const { return communicator->local_device_ids(); }

  absl::StatusOr<std::shared_ptr<const Compiled>> Compile(const Graph& graph, uint64_t fingerprint);

  // One argument of an execution on this host's devices.
  struct ArgumentPieces {
    std::vector<std::shared_ptr<const Literal>> pieces;  // per local device; nullptr: none
    // Per local device, what that device's executor may take over (ExecutionDonation): for a
    // donated argument, a piece cut for this run or one the donated ShardedData alone holds;
    // nullptr otherwise (not donated, or the piece shared).
    std::vector<Literal*> donatable;
    const ShardedData* source = nullptr;  // the donated value those pieces belong to, if any
  };
  // This host's pieces of `argument` laid out as `layout`; `donate`: the caller gave it up.
  // Errors: kInvalidArgument for data of another client; kFailedPrecondition for a value an
  // earlier execution consumed; Gather's.
  absl::StatusOr<ArgumentPieces> LocalPieces(const DeviceData& argument,
                                             const spmd::ShardedTensor& layout, int64_t parameter,
                                             bool donate);
  absl::StatusOr<std::vector<std::shared_ptr<Literal>>> CutPieces(
      const Literal& whole, const spmd::ShardedTensor& layout);
  absl::StatusOr<Literal> Gather(const ShardedData& data);
};

absl::StatusOr<std::shared_ptr<const HostRuntime::State::Compiled>> HostRuntime::State::Compile(
    const Graph& graph, uint64_t fingerprint) {
  auto it = cache.find(fingerprint);
  if (it != cache.end()) {
    ++metrics.cache_hits;
    return it->second;
  }
  const auto start = std::chrono::steady_clock::now();
  auto compiled = std::make_shared<Compiled>();
  // Every host costs the partitioner's choices on the same topology, so all partition alike.
  TESSEL_ASSIGN_OR_RETURN(mesh::CostModel cost, mesh::CostModel::Create(topology));
  partitioner::PartitionOptions partition_options;
  partition_options.cost_model = &cost;
  TESSEL_ASSIGN_OR_RETURN(compiled->program,
                          partitioner::Partition(graph, topology.num_devices(), partition_options));
  // Passes over the per-device program, as a backend's compiler runs them after XLA's
  // partitioner: merging equal leaves, transposes before all-reduces (so the dot absorbs them),
  // then combining.
  if (cse) {
    compiled->program.program = partitioner::CseConstantsAndBroadcasts(*compiled->program.program);
  }
  if (transpose_before_all_reduce) {
    compiled->program.program =
        partitioner::MoveTransposesBeforeAllReduces(*compiled->program.program);
  }
  if (combiner.threshold_bytes > 0) {
    TESSEL_ASSIGN_OR_RETURN(compiled->program.program,
                            partitioner::CombineAllReduces(*compiled->program.program, combiner));
  }
  TESSEL_ASSIGN_OR_RETURN(const bool reuse, ReusePreparedPrograms());
  if (reuse) {
    const Executor executor(ExecutorOptions{.num_threads = options.threads_per_device,
                                            .collectives = collectives.get()});
    absl::StatusOr<std::shared_ptr<const PreparedProgram>> prepared =
        executor.Prepare(*compiled->program.program);
    if (prepared.ok()) {
      compiled->prepared = *std::move(prepared);
      compiled->prepared_fusion = executor.options().fusion;
    }
  }
  for (const partitioner::ShardedValue& p : compiled->program.parameters) {
    TESSEL_ASSIGN_OR_RETURN(
        spmd::ShardedTensor layout,
        spmd::ShardedTensor::Create(p.global_shape, p.sharding, topology.num_devices()));
    compiled->parameter_layouts.push_back(std::move(layout));
  }
  for (const partitioner::ShardedValue& o : compiled->program.outputs) {
    TESSEL_ASSIGN_OR_RETURN(
        spmd::ShardedTensor layout,
        spmd::ShardedTensor::Create(o.global_shape, o.sharding, topology.num_devices()));
    compiled->output_layouts.push_back(std::move(layout));
  }
  if (simulator.has_value()) {
    absl::StatusOr<SimulationReport> report = simulator->Run(compiled->program);
    if (report.ok()) {
      compiled->simulated_step_seconds = report->in_order_seconds;
    } else if (metrics.simulation_note.empty()) {
      metrics.simulation_note = std::string(report.status().message());
    }
  }
  metrics.compile_seconds += SecondsSince(start);
  ++metrics.compiles;
  if (!options.dump_to.empty() && communicator->rank() == 0) {
    // Whole files or none (a run killed while dumping leaves no torn HLO behind).
    const std::string base = absl::StrFormat("%s/%016x", options.dump_to, fingerprint);
    TESSEL_RETURN_IF_ERROR(
        WriteFileAtomically(base + ".before.hlo", PrintHloModule(graph), "HLO dump"));
    TESSEL_RETURN_IF_ERROR(WriteFileAtomically(
        base + ".spmd.hlo", PrintHloModule(*compiled->program.program), "HLO dump"));
  }
  cache[fingerprint] = compiled;
  return std::shared_ptr<const Compiled>(compiled);
}

absl::StatusOr<std::vector<std::shared_ptr<Literal>>> HostRuntime::State::CutPieces(
    const Literal& whole, const spmd::ShardedTensor& layout) {
  std::vector<std::shared_ptr<Literal>> pieces;
  for (int64_t device : local_devices()) {
    const spmd::Shard* shard = layout.shard_for(device);
    if (shard == nullptr) {
      pieces.push_back(nullptr);
      continue;
    }
    // Cut just this device's ranges (Split would cut every device's), straight into the
    // zero-padded piece.
    std::vector<int64_t> starts, sizes;
    for (const auto& [start, limit] : shard->index) {
      starts.push_back(start);
      sizes.push_back(limit - start);
    }
    auto local = std::make_shared<Literal>(layout.local_shape());
    CopyBox(whole, starts, sizes, local.get());
    // Unreduced subgroups: only unreduced_id 0 carries the value (ShardedTensor::Split).
    if (shard->unreduced_id != 0) *local = Literal(layout.local_shape());
    metrics.host_to_device_bytes += local->byte_size();
    pieces.push_back(std::move(local));
  }
  return pieces;
}

absl::StatusOr<HostRuntime::State::ArgumentPieces> HostRuntime::State::LocalPieces(
    const DeviceData& argument, const spmd::ShardedTensor& layout, int64_t parameter, bool donate) {
  if (argument.donated()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter ", parameter, " was donated to an earlier execution; its value is gone"));
  }
  // Pieces cut for this run belong to nobody else: a donated argument's go to the executors.
  auto fresh = [donate](std::vector<std::shared_ptr<Literal>> cut) {
    ArgumentPieces result;
    for (std::shared_ptr<Literal>& piece : cut) {
      result.donatable.push_back(donate ? piece.get() : nullptr);
      result.pieces.push_back(std::move(piece));
    }
    return result;
  };
  const auto* sharded = dynamic_cast<const ShardedData*>(&argument);
  if (sharded == nullptr) {
    const auto* whole = dynamic_cast<const LiteralData*>(&argument);
    if (whole == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", parameter, " holds data of another computation client (sharding ",
          argument.sharding(), ")"));
    }
    TESSEL_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<Literal>> cut,
                            CutPieces(whole->literal(), layout));
    return fresh(std::move(cut));
  }
  if (sharded->layout().sharding() == layout.sharding() &&
      sharded->layout().local_shape() == layout.local_shape()) {
    ArgumentPieces result;
    for (int64_t device : local_devices()) {
      // Asked before `pieces` takes its reference: the value's own is then the only one.
      Literal* mine = donate ? sharded->piece_for_donation(device) : nullptr;
      result.donatable.push_back(mine);
      if (mine != nullptr) result.source = sharded;
      result.pieces.push_back(sharded->piece(device));
    }
    return result;
  }
  // Another layout: gather through the host and cut again (every host does the same here,
  // since every host runs the same program on equally laid out values).
  ++metrics.reshards;
  TESSEL_ASSIGN_OR_RETURN(Literal whole, Gather(*sharded));
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<Literal>> cut, CutPieces(whole, layout));
  return fresh(std::move(cut));
}

absl::StatusOr<Literal> HostRuntime::State::Gather(const ShardedData& data) {
  if (data.donated()) {
    return absl::FailedPreconditionError(
        "reading a value that was donated to an earlier execution: its pieces are gone");
  }
  const spmd::ShardedTensor& layout = data.layout();
  const Literal* any_local = nullptr;
  for (int64_t device : local_devices()) {
    if (auto p = data.piece(device)) any_local = p.get();
  }
  // Replicated: any local piece is the value.
  if (layout.sharding().IsReplicated() && any_local != nullptr &&
      any_local->shape() == layout.global_shape()) {
    metrics.device_to_host_bytes += any_local->byte_size();
    return *any_local;
  }
  // Every host contributes its pieces: [device id (8 bytes) | piece bytes]...
  std::string payload;
  for (int64_t device : local_devices()) {
    std::shared_ptr<const Literal> p = data.piece(device);
    if (p == nullptr) continue;
    payload.append(reinterpret_cast<const char*>(&device), sizeof(device));
    payload.append(reinterpret_cast<const char*>(p->raw_data()),
                   static_cast<size_t>(p->byte_size()));
  }
  const std::string tag = absl::StrCat("tessel/transfer#", transfers++);
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::string> payloads,
                          communicator->Rendezvous(tag, payload));
  const Shape& local_shape = layout.local_shape();
  const size_t piece_bytes = static_cast<size_t>(local_shape.byte_size());
  absl::flat_hash_map<int64_t, const char*> received;
  for (size_t host = 0; host < payloads.size(); ++host) {
    const std::string& p = payloads[host];
    for (size_t at = 0; at < p.size();) {
      if (p.size() - at < sizeof(int64_t) + piece_bytes) {
        return absl::DataLossError(
            absl::StrCat("value gather: host ", host, " sent a truncated piece"));
      }
      int64_t device = 0;
      std::memcpy(&device, p.data() + at, sizeof(device));
      received[device] = p.data() + at + sizeof(device);
      at += sizeof(device) + piece_bytes;
    }
  }
  std::vector<Literal> locals;
  locals.reserve(layout.shards().size());
  for (const spmd::Shard& shard : layout.shards()) {
    auto it = received.find(shard.device_id);
    if (it == received.end()) {
      return absl::InternalError(
          absl::StrCat("value gather: no piece of device ", shard.device_id));
    }
    Literal piece = Literal::Uninitialized(local_shape);
    std::memcpy(piece.raw_data(), it->second, piece_bytes);
    locals.push_back(std::move(piece));
  }
  TESSEL_ASSIGN_OR_RETURN(Literal whole, layout.Assemble(locals));
  metrics.device_to_host_bytes += whole.byte_size();
  return whole;
}

class HostRuntime::Client final : public ComputationClient {
 public:
  explicit Client(HostRuntime::State* state) : state_(state) {}

  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> Execute(
      const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
      absl::Span<const std::shared_ptr<const DeviceData>> arguments,
      ExecutionStats* stats) override {
    return ExecuteDonated(graph, fingerprint, arguments, std::vector<bool>(arguments.size(), false),
                          stats);
  }

  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> ExecuteDonated(
      const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
      absl::Span<const std::shared_ptr<const DeviceData>> arguments,
      const std::vector<bool>& donated, ExecutionStats* stats) override {
    State& s = *state_;
    if (donated.size() != arguments.size()) {
      return absl::InvalidArgumentError(absl::StrCat("execute ", graph->name(), ": ",
                                                     donated.size(), " donation flags for ",
                                                     arguments.size(), " arguments"));
    }
    TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const State::Compiled> compiled,
                            s.Compile(*graph, fingerprint));
    if (arguments.size() != compiled->parameter_layouts.size()) {
      return absl::InvalidArgumentError(absl::StrCat(graph->name(), " takes ",
                                                     compiled->parameter_layouts.size(),
                                                     " parameters, got ", arguments.size()));
    }
    std::vector<State::ArgumentPieces> pieces;
    pieces.reserve(arguments.size());
    for (size_t i = 0; i < arguments.size(); ++i) {
      // A value bound to two parameters is read twice: neither may take it.
      const bool donate =
          donated[i] && std::count(arguments.begin(), arguments.end(), arguments[i]) == 1;
      TESSEL_ASSIGN_OR_RETURN(State::ArgumentPieces local,
                              s.LocalPieces(*arguments[i], compiled->parameter_layouts[i],
                                            static_cast<int64_t>(i), donate));
      pieces.push_back(std::move(local));
    }
    TESSEL_ASSIGN_OR_RETURN(DeviceRuns runs, RunDevices(*graph, fingerprint, *compiled, pieces));
    return Finish(*compiled, pieces, runs, stats);
  }

  absl::StatusOr<Literal> TransferFromDevice(const DeviceData& data) override {
    if (const auto* whole = dynamic_cast<const LiteralData*>(&data)) return whole->literal();
    const auto* sharded = dynamic_cast<const ShardedData*>(&data);
    if (sharded == nullptr) {
      return absl::InvalidArgumentError("TransferFromDevice: data of another computation client");
    }
    return state_->Gather(*sharded);
  }

 private:
  // What each local device's run gave, by local index.
  struct DeviceRuns {
    std::vector<absl::StatusOr<std::vector<Literal>>> results;
    std::vector<ExecutionStats> stats;
    std::vector<double> seconds;
    std::vector<char> took_donation;  // the executor took the donated pieces offered to it
  };

  // Runs the program on every local device, one thread each (the calling thread runs the
  // first). Errors: a malformed TESSEL_EXECUTOR_PREPARED; a device's own errors are in the
  // result.
  absl::StatusOr<DeviceRuns> RunDevices(const Graph& graph, uint64_t fingerprint,
                                        const State::Compiled& compiled,
                                        const std::vector<State::ArgumentPieces>& pieces) {
    State& s = *state_;
    const std::vector<int64_t>& devices = s.local_devices();
    const size_t num_local = devices.size();
    TESSEL_ASSIGN_OR_RETURN(const bool reuse_prepared, ReusePreparedPrograms());
    DeviceRuns runs;
    runs.results.assign(num_local, absl::UnknownError("device did not run"));
    runs.stats.resize(num_local);
    runs.seconds.assign(num_local, 0);
    runs.took_donation.assign(num_local, 0);
    auto run_device = [&](size_t l) {
      const auto device_start = std::chrono::steady_clock::now();
      s.slots->Acquire();
      if (s.tracing && s.slots->slots() > 0) {
        s.Record({devices[l], "compute-slot", "slot", device_start,
                  std::chrono::steady_clock::now(), 0});
      }
      absl::Cleanup release = [&] { s.slots->Release(); };
      absl::Cleanup record = [&] {
        if (s.tracing) {
          s.Record({devices[l], absl::StrFormat("%s %016x", graph.name(), fingerprint), "execute",
                    device_start, std::chrono::steady_clock::now(), 0});
        }
      };
      std::vector<const Literal*> args;
      std::vector<Literal*> donatable;  // empty unless something is offered to this device
      args.reserve(pieces.size());
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].pieces[l] == nullptr) {
          runs.results[l] = absl::InvalidArgumentError(
              absl::StrCat("device ", devices[l], " holds no piece of parameter ", i));
          return;
        }
        args.push_back(pieces[i].pieces[l].get());
        if (pieces[i].donatable[l] != nullptr && donatable.empty()) donatable.resize(pieces.size());
        if (!donatable.empty()) donatable[i] = pieces[i].donatable[l];
      }
      ExecutionDonation donation{.literals = donatable};
      ExecutorOptions options{.num_threads = s.options.threads_per_device,
                              .device_id = devices[l],
                              .collectives = s.collectives.get()};
      const Executor executor(options);
      runs.results[l] =
          reuse_prepared && compiled.prepared != nullptr &&
                  compiled.prepared_fusion == executor.options().fusion
              ? executor.RunBorrowed(*compiled.prepared, args, &runs.stats[l], &donation)
              : executor.RunBorrowed(*compiled.program.program, args, &runs.stats[l], &donation);
      runs.took_donation[l] = donation.taken;
      runs.seconds[l] = SecondsSince(device_start);
    };
    const auto start = std::chrono::steady_clock::now();
    s.device_threads->Run(run_device);
    s.metrics.execute_seconds += SecondsSince(start);
    return runs;
  }

  // Spends the donated values a device took (even when a run failed: their pieces are gone),
  // counts the run, and assembles the outputs from the devices' results.
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> Finish(
      const State::Compiled& compiled, const std::vector<State::ArgumentPieces>& pieces,
      DeviceRuns& runs, ExecutionStats* stats) {
    State& s = *state_;
    const std::vector<int64_t>& devices = s.local_devices();
    const size_t num_local = devices.size();
    for (size_t l = 0; l < num_local; ++l) {
      if (!runs.took_donation[l]) continue;
      for (const State::ArgumentPieces& argument : pieces) {
        if (argument.donatable[l] == nullptr) continue;
        ++s.metrics.donated_pieces;
        if (argument.source != nullptr) argument.source->MarkDonated();
      }
    }
    s.metrics.device_seconds += *std::max_element(runs.seconds.begin(), runs.seconds.end());
    ++s.metrics.executions;
    s.metrics.simulated_seconds += compiled.simulated_step_seconds;
    s.metrics.last_simulated_step_seconds = compiled.simulated_step_seconds;
    for (size_t l = 0; l < num_local; ++l) {
      if (!runs.results[l].ok()) {
        return absl::Status(runs.results[l].status().code(),
                            absl::StrCat("device ", devices[l], " (host ", s.communicator->rank(),
                                         "): ", runs.results[l].status().message()));
      }
      s.metrics.peak_device_bytes =
          std::max(s.metrics.peak_device_bytes, runs.stats[l].peak_live_bytes);
      s.metrics.donated_in_place += runs.stats[l].donated_in_place;
    }
    if (stats != nullptr) {
      *stats = runs.stats.empty() ? ExecutionStats() : runs.stats[0];
      for (const ExecutionStats& d : runs.stats) {
        stats->peak_live_bytes = std::max(stats->peak_live_bytes, d.peak_live_bytes);
      }
    }
    const size_t num_outputs = compiled.output_layouts.size();
    std::vector<std::shared_ptr<const DeviceData>> values;
    values.reserve(num_outputs);
    for (size_t o = 0; o < num_outputs; ++o) {
      std::vector<std::shared_ptr<Literal>> out_pieces;
      for (size_t l = 0; l < num_local; ++l) {
        std::vector<Literal>& device_results = *runs.results[l];
        if (device_results.size() != num_outputs) {
          return absl::InternalError(absl::StrCat("device program returned ", device_results.size(),
                                                  " values for ", num_outputs, " outputs"));
        }
        out_pieces.push_back(std::make_shared<Literal>(std::move(device_results[o])));
      }
      values.push_back(std::make_shared<const ShardedData>(compiled.output_layouts[o], devices,
                                                           std::move(out_pieces)));
    }
    return values;
  }

  HostRuntime::State* state_;
};

// ---------------------------------------------------------------------------------------------
// HostRuntime.

absl::StatusOr<ProgramPassSettings> ProgramPassesFromEnvironment() {
  ProgramPassSettings settings;
  TESSEL_ASSIGN_OR_RETURN(settings.transpose_before_all_reduce,
                          GetBoolEnv("TESSEL_TRANSPOSE_BEFORE_ALL_REDUCE"));
  TESSEL_ASSIGN_OR_RETURN(settings.cse, GetBoolEnv("TESSEL_PROGRAM_CSE"));
  if (const char* text = std::getenv("TESSEL_COMBINE_ALL_REDUCE_BYTES");
      text != nullptr && *text != '\0') {
    TESSEL_ASSIGN_OR_RETURN(
        settings.combine_all_reduce_bytes,
        ParseInt64(text, "TESSEL_COMBINE_ALL_REDUCE_BYTES", 0, std::numeric_limits<int64_t>::max(),
                   "bytes per combined all-reduce, 0: off"));
  }
  return settings;
}

absl::StatusOr<std::unique_ptr<HostRuntime>> HostRuntime::Create(
    const Topology& topology, std::unique_ptr<transport::Communicator> communicator,
    HostRuntimeOptions options) {
  if (communicator == nullptr) return absl::InvalidArgumentError("HostRuntime: no communicator");
  transport::Communicator* raw = communicator.get();
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<HostRuntime> runtime, Create(topology, raw, options));
  runtime->state_->owned_communicator = std::move(communicator);
  return runtime;
}

absl::StatusOr<std::unique_ptr<HostRuntime>> HostRuntime::Create(
    const Topology& topology, transport::Communicator* communicator, HostRuntimeOptions options) {
  if (communicator == nullptr) return absl::InvalidArgumentError("HostRuntime: no communicator");
  const transport::DeviceMap& map = communicator->device_map();
  if (communicator->size() != topology.num_hosts()) {
    return absl::InvalidArgumentError(absl::StrCat("the topology has ", topology.num_hosts(),
                                                   " hosts but the job has ",
                                                   communicator->size()));
  }
  if (map.num_devices() != topology.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat("the topology has ", topology.num_devices(),
                                                   " devices but the job's device map has ",
                                                   map.num_devices()));
  }
  for (const Device& d : topology.devices()) {
    if (map.host_of_device[d.id] != d.host || map.slice_of_device[d.id] != d.slice) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", d.id, " is on host ", d.host, " slice ", d.slice,
                       " in the topology but on host ", map.host_of_device[d.id], " slice ",
                       map.slice_of_device[d.id], " in the job's device map"));
    }
  }
  if (options.threads_per_device < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads_per_device must be >= 1, got ", options.threads_per_device));
  }
  std::unique_ptr<HostRuntime> runtime(new HostRuntime());
  runtime->state_ = std::make_unique<State>();
  State& s = *runtime->state_;
  s.topology = topology;
  s.communicator = communicator;
  s.options = options;
  std::string dump_source = "HostRuntimeOptions::dump_to";
  if (s.options.dump_to.empty()) {
    if (const char* dump = std::getenv("TESSEL_DUMP_TO"); dump != nullptr) {
      s.options.dump_to = dump;
      dump_source = "TESSEL_DUMP_TO";
    }
  }
  if (!s.options.dump_to.empty()) {
    // A missing folder is made (as XLA's --xla_dump_to does); one that cannot be made is an
    // error now, not HLO silently lost at the first compile.
    std::error_code error;
    std::filesystem::create_directories(s.options.dump_to, error);
    if (error || !std::filesystem::is_directory(s.options.dump_to)) {
      return absl::InvalidArgumentError(absl::StrCat(
          dump_source, "=", s.options.dump_to, ": cannot create the dump folder",
          error ? absl::StrCat(": ", error.message()) : std::string(": not a folder")));
    }
  }
  int64_t slots = 0;
  if (s.options.compute_slots.has_value()) {
    slots = *s.options.compute_slots;
    if (slots < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "HostRuntimeOptions::compute_slots must be >= 0 (0: no limit), got ", slots));
    }
  } else {
    TESSEL_ASSIGN_OR_RETURN(
        std::optional<int64_t> from_env,
        ParseComputeSlots(std::getenv("TESSEL_COMPUTE_SLOTS"), "TESSEL_COMPUTE_SLOTS"));
    slots = from_env.value_or(0);
  }
  s.slots = std::make_unique<ComputeSlots>(slots);
  TESSEL_ASSIGN_OR_RETURN(ProgramPassSettings from_env, ProgramPassesFromEnvironment());
  s.transpose_before_all_reduce = s.options.transpose_before_all_reduce.value_or(
      from_env.transpose_before_all_reduce.value_or(true));
  s.cse = s.options.cse.value_or(from_env.cse.value_or(true));
  s.combiner.threshold_bytes = s.options.combine_all_reduce_bytes.value_or(
      from_env.combine_all_reduce_bytes.value_or(kDefaultCombineAllReduceBytes));
  if (s.combiner.threshold_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostRuntimeOptions::combine_all_reduce_bytes must be >= 0 (0: off), got ",
                     s.combiner.threshold_bytes));
  }
  TESSEL_ASSIGN_OR_RETURN(std::optional<bool> persistent,
                          GetBoolEnv("TESSEL_PERSISTENT_DEVICE_THREADS"));
  s.device_threads = std::make_unique<DeviceThreads>(
      communicator->local_device_ids().size(),
      s.options.persistent_device_threads.value_or(persistent.value_or(true)));
  s.collectives = std::make_unique<CommunicatorCollectives>(communicator);
  s.collectives->set_compute_slots(s.slots.get());
  if (absl::StatusOr<Simulator> simulator = Simulator::Create(topology); simulator.ok()) {
    s.simulator.emplace(*std::move(simulator));
  } else {
    s.metrics.simulation_note = absl::StrCat("no simulated clock: ", simulator.status().message());
  }
  State* state = runtime->state_.get();
  s.collectives->set_observer([state](int64_t device, const char* op,
                                      std::chrono::steady_clock::time_point start,
                                      std::chrono::steady_clock::time_point end, int64_t bytes) {
    if (state->tracing) {
      // A compute slot's wait lies inside its collective's span: its own category, so that
      // the collectives' time is not counted twice.
      const bool slot = std::strcmp(op, "compute-slot") == 0;
      state->Record({device, op, slot ? "slot" : "collective", start, end, bytes});
    }
  });
  runtime->client_ = std::make_shared<Client>(runtime->state_.get());
  return runtime;
}

HostRuntime::~HostRuntime() = default;

int64_t HostRuntime::host_index() const { return state_->communicator->rank(); }
int64_t HostRuntime::num_hosts() const { return state_->communicator->size(); }
int64_t HostRuntime::num_devices() const { return state_->topology.num_devices(); }
const std::vector<int64_t>& HostRuntime::local_device_ids() const {
  return state_->local_devices();
}
const Topology& HostRuntime::topology() const { return state_->topology; }
int64_t HostRuntime::compute_slots() const { return state_->slots->slots(); }
transport::Communicator& HostRuntime::communicator() { return *state_->communicator; }
std::shared_ptr<ComputationClient> HostRuntime::client() { return client_; }

absl::StatusOr<Tensor> HostRuntime::MakeShardedInput(
    const Shape& global_shape, const spmd::Sharding& sharding,
    const std::function<absl::StatusOr<Literal>(const spmd::Shard&)>& load_shard) {
  State& s = *state_;
  TESSEL_ASSIGN_OR_RETURN(spmd::ShardedTensor layout,
                          spmd::ShardedTensor::Create(global_shape, sharding, num_devices()));
  std::vector<std::shared_ptr<Literal>> pieces;
  for (int64_t device : s.local_devices()) {
    const spmd::Shard* shard = layout.shard_for(device);
    if (shard == nullptr) {
      pieces.push_back(nullptr);
      continue;
    }
    TESSEL_ASSIGN_OR_RETURN(Literal data, load_shard(*shard));
    const Shape expected(global_shape.dtype(), shard->data_dims());
    if (data.shape() != expected) {
      return absl::InvalidArgumentError(absl::StrCat("input piece of device ", device,
                                                     ": expected ", expected.ToString(), ", got ",
                                                     data.shape().ToString()));
    }
    auto local = std::make_shared<Literal>(layout.local_shape());
    CopyBox(data, std::vector<int64_t>(data.shape().rank(), 0), data.shape().dims(), local.get());
    s.metrics.host_to_device_bytes += local->byte_size();
    pieces.push_back(std::move(local));
  }
  return Tensor::FromDeviceData(
      std::make_shared<const ShardedData>(std::move(layout), s.local_devices(), std::move(pieces)));
}

absl::StatusOr<transport::CollectiveStats> HostRuntime::SumOverHosts(
    const transport::CollectiveStats& stats) {
  // Every counter as int64, in a fixed order.
  auto fields = [](transport::CollectiveStats& s) {
    std::vector<int64_t*> f = {&s.local.bytes,  &s.local.messages, &s.ici.bytes,
                               &s.ici.messages, &s.dcn.bytes,      &s.dcn.messages};
    for (transport::KindStats& k : s.per_kind) {
      for (int64_t* v : {&k.calls, &k.local.bytes, &k.local.messages, &k.ici.bytes, &k.ici.messages,
                         &k.dcn.bytes, &k.dcn.messages}) {
        f.push_back(v);
      }
    }
    return f;
  };
  transport::CollectiveStats mine = stats;
  std::string payload;
  for (int64_t* v : fields(mine)) payload.append(reinterpret_cast<const char*>(v), sizeof(*v));
  const std::string tag = absl::StrCat("tessel/stats#", state_->transfers++);
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::string> payloads,
                          state_->communicator->Rendezvous(tag, payload));
  transport::CollectiveStats total;
  for (size_t host = 0; host < payloads.size(); ++host) {
    if (payloads[host].size() != payload.size()) {
      return absl::DataLossError(absl::StrCat("traffic sum: host ", host, " sent ",
                                              payloads[host].size(), " bytes, expected ",
                                              payload.size()));
    }
    transport::CollectiveStats theirs;
    std::vector<int64_t*> f = fields(theirs);
    for (size_t i = 0; i < f.size(); ++i) {
      std::memcpy(f[i], payloads[host].data() + i * sizeof(int64_t), sizeof(int64_t));
    }
    total += theirs;
  }
  return total;
}

void HostRuntime::EnableTracing(bool on) { state_->tracing = on; }

absl::StatusOr<TraceEventWriter> HostRuntime::CollectTrace() {
  State& s = *state_;
  nlohmann::json mine = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> lock(s.trace_mu);
    for (const State::TraceEvent& e : s.trace) {
      // Monotonic clock: comparable across the processes of one machine.
      const auto since = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
      };
      mine.push_back(
          {e.device, e.name, e.category, since(e.start), since(e.end) - since(e.start), e.bytes});
    }
  }
  const std::string tag = absl::StrCat("tessel/trace#", s.transfers++);
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::string> payloads,
                          s.communicator->Rendezvous(tag, mine.dump()));
  TraceEventWriter trace;
  if (s.communicator->rank() != 0) return trace;
  double origin = -1;
  std::vector<nlohmann::json> per_host;
  for (const std::string& p : payloads) {
    nlohmann::json host = nlohmann::json::parse(p, nullptr, /*allow_exceptions=*/false);
    if (host.is_discarded() || !host.is_array()) {
      return absl::DataLossError("trace: a host sent a malformed event list");
    }
    for (const auto& e : host) {
      const double ts = e[3].get<double>();
      if (origin < 0 || ts < origin) origin = ts;
    }
    per_host.push_back(std::move(host));
  }
  for (size_t h = 0; h < per_host.size(); ++h) {
    const int64_t pid = static_cast<int64_t>(h);
    trace.AddProcess(pid, absl::StrCat("host ", h));
    for (int64_t d : s.topology.host(pid).device_ids) {
      trace.AddThread(pid, d, absl::StrCat("device ", d));
    }
    for (const auto& e : per_host[h]) {
      TraceCompleteEvent event{.pid = pid,
                               .tid = e[0].get<int64_t>(),
                               .name = e[1].get<std::string>(),
                               .category = e[2].get<std::string>(),
                               .start_us = e[3].get<double>() - origin,
                               .duration_us = e[4].get<double>(),
                               .args = {}};
      if (const int64_t bytes = e[5].get<int64_t>(); bytes > 0) {
        event.args.push_back({"bytes", bytes});
      }
      trace.AddComplete(std::move(event));
    }
  }
  return trace;
}

RuntimeMetrics HostRuntime::metrics() const {
  RuntimeMetrics m = state_->metrics;
  m.collectives = state_->communicator->stats();
  return m;
}

std::string HostRuntime::MetricsReport() const {
  const RuntimeMetrics m = metrics();
  std::string out;
  absl::StrAppendFormat(&out, "Metric: CompileCount: %d\n", m.compiles);
  absl::StrAppendFormat(&out, "Metric: CompileTime: %.3f s\n", m.compile_seconds);
  absl::StrAppendFormat(&out, "Metric: CachedCompile (hits): %d\n", m.cache_hits);
  absl::StrAppendFormat(&out, "Metric: ExecuteCount: %d\n", m.executions);
  absl::StrAppendFormat(&out, "Metric: ExecuteTime: %.3f s (slowest local device: %.3f s)\n",
                        m.execute_seconds, m.device_seconds);
  if (m.simulation_note.empty()) {
    absl::StrAppendFormat(&out,
                          "Metric: SimulatedTime: %.6f s on %s (last step %.3f ms predicted)\n",
                          m.simulated_seconds, state_->topology.device_spec().name,
                          m.last_simulated_step_seconds * 1e3);
  } else {
    absl::StrAppendFormat(&out, "Metric: SimulatedTime: none (%s)\n", m.simulation_note);
  }
  absl::StrAppendFormat(&out, "Metric: HostToDeviceBytes: %d\n", m.host_to_device_bytes);
  absl::StrAppendFormat(&out, "Metric: DeviceToHostBytes: %d\n", m.device_to_host_bytes);
  absl::StrAppendFormat(&out, "Metric: ReshardCount: %d\n", m.reshards);
  absl::StrAppendFormat(&out, "Metric: PeakDeviceLiveBytes: %d\n", m.peak_device_bytes);
  absl::StrAppendFormat(&out, "Metric: DonatedPieces: %d (outputs written in place: %d)\n",
                        m.donated_pieces, m.donated_in_place);
  const transport::CollectiveStats& c = m.collectives;
  absl::StrAppendFormat(
      &out, "Metric: CollectiveBytes: local %d in %d messages, ICI %d in %d, DCN %d in %d\n",
      c.local.bytes, c.local.messages, c.ici.bytes, c.ici.messages, c.dcn.bytes, c.dcn.messages);
  for (int k = 0; k < transport::kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<transport::CollectiveKind>(k);
    const transport::KindStats& ks = c.Kind(kind);
    if (ks.calls == 0) continue;
    absl::StrAppendFormat(&out, "Counter: %s: %d calls, local %d B, ICI %d B, DCN %d B\n",
                          transport::CollectiveKindName(kind), ks.calls, ks.local.bytes,
                          ks.ici.bytes, ks.dcn.bytes);
  }
  return out;
}

}  // namespace tessel::mesh
