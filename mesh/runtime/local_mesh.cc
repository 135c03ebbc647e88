#include "tessel/mesh/runtime/local_mesh.h"

#include <memory>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/tensor.h"
#include "tessel/transport/inproc_transport.h"

namespace tessel::mesh {

struct LocalMesh::Job {
  std::unique_ptr<transport::InProcTransport> transport;
};

// The runtime's client behind one mutex. The runtime drives every device thread for one
// program at a time, and the collectives of two programs, matched by call order, must not
// interleave; the mutex also keeps the runtime's counters consistent for metrics(). Close()
// drops the runtime's client (which points into the runtime) so that threads that still have
// this client installed after the mesh is gone get an error, not a dangling pointer.
class LocalMesh::SerialClient final : public ComputationClient {
 public:
  explicit SerialClient(std::shared_ptr<ComputationClient> inner) : inner_(std::move(inner)) {}

  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> Execute(
      const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
      absl::Span<const std::shared_ptr<const DeviceData>> arguments,
      ExecutionStats* stats) override {
    absl::MutexLock lock(&mu_);
    TESSEL_RETURN_IF_ERROR(CheckOpen());
    return inner_->Execute(graph, fingerprint, arguments, stats);
  }

  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> ExecuteDonated(
      const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
      absl::Span<const std::shared_ptr<const DeviceData>> arguments,
      const std::vector<bool>& donated, ExecutionStats* stats) override {
    absl::MutexLock lock(&mu_);
    TESSEL_RETURN_IF_ERROR(CheckOpen());
    return inner_->ExecuteDonated(graph, fingerprint, arguments, donated, stats);
  }

  absl::StatusOr<Literal> TransferFromDevice(const DeviceData& data) override {
    absl::MutexLock lock(&mu_);
    TESSEL_RETURN_IF_ERROR(CheckOpen());
    return inner_->TransferFromDevice(data);
  }

  // Waits for a running call, then refuses every later one.
  void Close() {
    absl::MutexLock lock(&mu_);
    inner_.reset();
  }

  absl::Mutex& mu() const ABSL_LOCK_RETURNED(mu_) { return mu_; }

 private:
  absl::Status CheckOpen() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (inner_ != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "the LocalMesh whose client this thread uses was destroyed; run on a live mesh "
        "(LocalMesh::UseOnThisThread) or call SetComputationClient(nullptr)");
  }

  mutable absl::Mutex mu_;
  std::shared_ptr<ComputationClient> inner_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<LocalMesh>> LocalMesh::Create(int64_t num_devices,
                                                             LocalMeshOptions options) {
  if (num_devices < 1 || num_devices > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("LocalMesh: num_devices must be in [1, ",
                                                   kMaxDevices, "], got ", num_devices));
  }
  // A line of N chips on one host: the shape only matters to the simulated clock, and a line
  // has one ICI link per neighbour pair, so a mesh axis of any size maps onto it.
  TESSEL_ASSIGN_OR_RETURN(Topology topology, MakeUniformTopology(1, {num_devices}, 1));
  return Create(topology, std::move(options));
}

absl::StatusOr<std::unique_ptr<LocalMesh>> LocalMesh::Create(const Topology& topology,
                                                             LocalMeshOptions options) {
  const std::string name = topology.name().empty() ? "the topology" : topology.name();
  if (topology.num_hosts() != 1 || topology.num_devices() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LocalMesh: ", name, " has ", topology.num_hosts(), " hosts and ", topology.num_devices(),
        " devices; an in-process mesh needs one host with devices (run a multi-host topology "
        "with `tessel run`)"));
  }
  if (topology.num_devices() > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LocalMesh: ", name, " has ", topology.num_devices(), " devices, more than ", kMaxDevices));
  }
  if (options.threads_per_device < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LocalMesh: threads_per_device must be at least 1, got ", options.threads_per_device));
  }
  auto local = std::unique_ptr<LocalMesh>(new LocalMesh());
  local->topology_ = topology;
  local->job_ = std::make_unique<Job>();
  // One host owning every device; the slice comes from the topology so that a one-host topology
  // with devices in one slice validates the same way HostRuntime checks it.
  transport::DeviceMap device_map;
  for (const Device& device : topology.devices()) {
    device_map.host_of_device.push_back(device.host);
    device_map.slice_of_device.push_back(device.slice);
  }
  TESSEL_ASSIGN_OR_RETURN(local->job_->transport,
                          transport::InProcTransport::Create(1, std::move(device_map)));
  HostRuntimeOptions runtime_options;
  runtime_options.threads_per_device = options.threads_per_device;
  runtime_options.dump_to = std::move(options.dump_to);
  TESSEL_ASSIGN_OR_RETURN(
      local->runtime_,
      HostRuntime::Create(local->topology_, &local->job_->transport->host(0), runtime_options));
  local->client_ = std::make_shared<SerialClient>(local->runtime_->client());
  SetComputationClient(local->client_);
  return local;
}

LocalMesh::~LocalMesh() {
  // Only a fully made mesh has a client; a half-made one (an error in Create) installed none.
  if (client_ == nullptr) return;
  client_->Close();
  if (&GetComputationClient() == client_.get()) SetComputationClient(nullptr);
}

LocalMesh::ThreadScope LocalMesh::UseOnThisThread() {
  SetComputationClient(client_);
  return ThreadScope(client_.get());
}

LocalMesh::ThreadScope::~ThreadScope() {
  if (&GetComputationClient() == client_) SetComputationClient(nullptr);
}

RuntimeMetrics LocalMesh::metrics() const {
  absl::MutexLock lock(&client_->mu());
  return runtime_->metrics();
}

std::string LocalMesh::MetricsReport() const {
  absl::MutexLock lock(&client_->mu());
  return runtime_->MetricsReport();
}

absl::StatusOr<spmd::Mesh> LocalMesh::MakeMesh(std::vector<int64_t> mesh_shape,
                                               std::vector<std::string> axis_names) const {
  int64_t size = 1;
  for (int64_t n : mesh_shape) size *= n;
  if (size != num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat("LocalMesh::MakeMesh: mesh shape [",
                                                   absl::StrJoin(mesh_shape, ", "), "] has ", size,
                                                   " devices, the local mesh has ", num_devices()));
  }
  std::vector<int64_t> ids(num_devices());
  std::iota(ids.begin(), ids.end(), 0);
  return spmd::Mesh::Create(std::move(ids), std::move(mesh_shape), std::move(axis_names));
}

absl::StatusOr<std::vector<Literal>> LocalMesh::RunHlo(std::string_view hlo_text,
                                                       absl::Span<const Literal> inputs) {
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Graph> parsed, ParseHloModule(hlo_text));
  std::shared_ptr<const Graph> graph(std::move(parsed));
  const std::vector<Node*> parameters = graph->parameters();
  if (parameters.size() != inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("LocalMesh::RunHlo: the module has ",
                                                   parameters.size(), " parameters, got ",
                                                   inputs.size(), " inputs"));
  }
  std::vector<std::shared_ptr<const DeviceData>> arguments;
  arguments.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape() != parameters[i]->shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LocalMesh::RunHlo: parameter ", i, " (", parameters[i]->name(), ") is ",
          parameters[i]->shape().ToString(), ", input ", i, " is ", inputs[i].shape().ToString()));
    }
    arguments.push_back(std::make_shared<LiteralData>(inputs[i]));
  }
  // Not the thread's installed client: RunHlo works from any thread, installed or not.
  ComputationClient& client = *client_;
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const DeviceData>> results,
                          client.Execute(graph, GraphFingerprint(*graph), arguments, nullptr));
  std::vector<Literal> outputs;
  outputs.reserve(results.size());
  for (const std::shared_ptr<const DeviceData>& result : results) {
    TESSEL_ASSIGN_OR_RETURN(Literal value, client.TransferFromDevice(*result));
    outputs.push_back(std::move(value));
  }
  return outputs;
}

}  // namespace tessel::mesh
