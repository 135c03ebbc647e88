// LocalMesh: N devices inside this process (one thread each) with the whole partitioned
// execution path behind them, in one call. What JAX gives with
// `--xla_force_host_platform_device_count=N` and torch_xla with its CPU devices: a user program
// that shards a model and runs it on N devices without starting host processes or knowing the
// runtime's parts.
//
//   TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<mesh::LocalMesh> local, mesh::LocalMesh::Create(8));
//   TESSEL_ASSIGN_OR_RETURN(spmd::Mesh mesh, local->MakeMesh({4, 2}, {"data", "model"}));
//   Tensor x = Tensor::FromLiteral(batch);                          // global f32[B, 784]
//   TESSEL_RETURN_IF_ERROR(spmd::mark_sharding(x, mesh, {"data", spmd::kNone}));
//   ... build the step with core/tensor.h or nn/ ..., Sync() ...    // runs on the 8 devices
//   TESSEL_ASSIGN_OR_RETURN(Literal loss, loss_tensor.ToLiteral()); // a host array
//   std::cout << local->runtime().MetricsReport();
//
//   // Or a module in HLO text (e.g. dumped by JAX), its shardings in the text:
//   TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> outs, local->RunHlo(hlo_text, {x_value,
//   w_value}));
//
// What it is made of (nothing here is new machinery): a one-host topology of N devices
// (mesh::MakeUniformTopology(1, {N}, 1): a line of N chips with the placeholder "test-device"
// spec, so the runtime's simulated clock reports a nominal step time), an InProcTransport job of
// one host (the transport's collective algorithms between the device threads, traffic counted as
// host-local), and a HostRuntime over both (mesh/runtime/host_runtime.h: partitioning cached by
// graph fingerprint, one executor per device, ShardedData values, metrics, tracing). Its
// ComputationClient (serialised, see below) is installed on the thread that calls Create, so
// that thread's Sync() and Tensor::ToLiteral() run on the mesh until the LocalMesh is destroyed;
// UseOnThisThread() installs it on any other thread.
//
// Shapes: tensors and literals the user sees are global (unpartitioned); each device thread runs
// the per-device program on local pieces (ceil(dim / tiles) per tiled dim, padding included).
// Reading a tensor back (ToLiteral) assembles the global value.
//
// Thread model: any thread may use a LocalMesh. Every program run on it (RunHlo, a Sync() or
// ToLiteral() of any thread the mesh's client is installed on, metrics()) takes one mutex, so
// calls from several threads run one at a time, each whole (the runtime drives all N device
// threads for one program at a time: the collectives of two programs must not interleave).
// Concurrent RunHlo calls therefore give the same results as the same calls made one after
// another, in some order; parsing the HLO text happens outside the mutex. Limits that remain:
//   - One host: N devices in this process only. A job over several hosts is one process per
//     host (`tessel run`, docs/runtime.md); Create refuses a topology with several hosts.
//   - No parallelism between programs: two threads do not run two programs at once on disjoint
//     devices (make one LocalMesh per group of devices for that).
//   - Tensors are per thread: the lazy tensor context is (core/tensor.h), so a Tensor traced on
//     one thread is used on that thread; pass values between threads as Literals
//     (ToLiteral / FromLiteral).
//   - runtime() itself is not serialised: its methods (EnableTracing, CollectTrace,
//     MakeShardedInput, metrics) must not run while another thread runs a program on the mesh;
//     use LocalMesh::metrics() / MetricsReport() for counters from any thread.
//   - The LocalMesh may be destroyed on any thread once no call on it is running (the
//     destructor waits for a running one). A thread that still has its client installed then
//     gets kFailedPrecondition from Sync() / ToLiteral() instead of a crash.
// Several LocalMesh objects may exist at once, each with its own devices.
//
// Source: JAX's forced host platform devices and torch_xla's PJRT CPU client with N devices
// (single controller, N devices in one process); the runtime is torch_xla SPMD's (one graph,
// partitioned once, executed on every device).
#ifndef TESSEL_MESH_LOCAL_MESH_H_
#define TESSEL_MESH_LOCAL_MESH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/literal.h"
#include "tessel/mesh/runtime/host_runtime.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/spmd/mesh.h"

namespace tessel::mesh {

struct LocalMeshOptions {
  // Executor threads per device (each device already runs on its own thread). Keep it at 1
  // unless the machine has more cores than devices.
  int threads_per_device = 1;
  // When not empty, every graph partitioned is written there as HLO text, before and after
  // partitioning (HostRuntimeOptions::dump_to). Default: the environment variable TESSEL_DUMP_TO.
  std::string dump_to;
};

class LocalMesh {
 public:
  // The largest device count Create accepts (threads of one process; the partitioner has no
  // such limit, the machine does).
  static constexpr int64_t kMaxDevices = 1024;

  // N = `num_devices` devices in this process, with the runtime's client installed on the
  // calling thread.
  // Errors: kInvalidArgument for num_devices < 1 or > kMaxDevices, or threads_per_device < 1
  // (naming the value); HostRuntime::Create's errors.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LocalMesh>> Create(
      int64_t num_devices, LocalMeshOptions options = {});
  // The same on `topology`, which must have exactly one host (e.g. configs/dgx_h100.json: one
  // host of 8 H100s), so that the simulated clock uses its hardware.
  // Errors: kInvalidArgument naming the topology and its host count when it has several hosts
  // (a multi-host job is one process per host: `tessel run`, docs/runtime.md) or no device;
  // as above otherwise.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LocalMesh>> Create(
      const Topology& topology, LocalMeshOptions options = {});

  // Waits for a running program, then closes the mesh: a thread whose client is still this
  // mesh's gets kFailedPrecondition ("... LocalMesh ... was destroyed") from it from then on.
  // Uninstalls the client from the calling thread if it is installed there (back to the
  // single-device executor). Any thread.
  ~LocalMesh();
  LocalMesh(const LocalMesh&) = delete;
  LocalMesh& operator=(const LocalMesh&) = delete;

  int64_t num_devices() const { return runtime_->num_devices(); }
  const Topology& topology() const { return topology_; }
  // The runtime: metrics(), MetricsReport(), EnableTracing / CollectTrace, MakeShardedInput.
  // Not serialised (see "Thread model" above).
  HostRuntime& runtime() { return *runtime_; }

  // HostRuntime::metrics() and MetricsReport(), read under the mesh's mutex: safe from any
  // thread while others run programs (they see the counters between two programs).
  RuntimeMetrics metrics() const;
  std::string MetricsReport() const;

  // Installs the mesh's (serialised) client on the calling thread for as long as the returned
  // object lives, so that this thread's Sync() and Tensor::ToLiteral() run on the mesh; its
  // destruction (on the same thread) puts the thread back on the single-device executor if the
  // mesh's client is still the one installed. Tensors traced under it stay on this thread (see
  // "Thread model").
  //
  //   std::thread worker([&] {
  //     LocalMesh::ThreadScope scope = local->UseOnThisThread();
  //     ... trace, Sync(), ToLiteral() ...
  //   });
  class ThreadScope {
   public:
    ~ThreadScope();
    ThreadScope(const ThreadScope&) = delete;
    ThreadScope& operator=(const ThreadScope&) = delete;

   private:
    friend class LocalMesh;
    explicit ThreadScope(const ComputationClient* client) : client_(client) {}
    const ComputationClient* client_;
  };
  [[nodiscard]] ThreadScope UseOnThisThread();

  // A logical mesh over all devices: ids 0..N-1 reshaped row-major to `mesh_shape`, one name per
  // axis (torch_xla `Mesh(np.arange(N), mesh_shape, axis_names)`).
  // Errors: kInvalidArgument when the product of `mesh_shape` is not num_devices(), and
  // spmd::Mesh::Create's errors (bad names, entries < 1).
  [[nodiscard]] absl::StatusOr<spmd::Mesh> MakeMesh(std::vector<int64_t> mesh_shape,
                                                    std::vector<std::string> axis_names) const;

  // Thread-safe: concurrent calls run their programs one at a time (see "Thread model").
  // Parses an HLO module (XLA text; shardings from its `sharding={...}` attributes, e.g. a
  // module JAX lowered with jax.jit and NamedSharding; devices 0..num_devices()-1), runs it on
  // the mesh through the runtime (partitioned once per module text, then cached) with `inputs`
  // bound to the entry parameters 0, 1, ... (global shapes), and returns the outputs as global
  // host arrays: one per element of a tuple root, else one.
  // Errors: ParseHloModule's (kInvalidArgument naming the line); kInvalidArgument when the
  // input count or an input's shape differs from the parameters' (naming the parameter and both
  // shapes); partitioning errors (kUnimplemented naming an op without a rule, kInvalidArgument
  // for a sharding over more devices than the mesh has); execution errors.
  [[nodiscard]] absl::StatusOr<std::vector<Literal>> RunHlo(std::string_view hlo_text,
                                                            absl::Span<const Literal> inputs);

 private:
  LocalMesh() = default;
  Topology topology_;
  struct Job;  // the in-process transport (owned here, outlives the runtime)
  std::unique_ptr<Job> job_;
  std::unique_ptr<HostRuntime> runtime_;
  class SerialClient;  // the runtime's client behind the mesh's mutex
  std::shared_ptr<SerialClient> client_;
};

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_LOCAL_MESH_H_
