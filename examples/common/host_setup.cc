#include "examples/common/host_setup.h"

#include <cstdio>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/launch/host_env.h"
#include "tessel/transport/zmq_transport.h"

namespace tessel::examples {

void AddMeshFlags(CLI::App& app, MeshFlags* flags, const std::string& axis_help) {
  app.add_option("--config", flags->config,
                 "topology JSON of the mesh (default: TESSEL_CONFIG, set by tessel run)");
  app.add_option("--ici-mesh-shape", flags->ici_mesh_shape,
                 "logical mesh inside each slice, comma separated (torch_xla HybridMesh)")
      ->delimiter(',')
      ->check(Positive())
      ->default_str(absl::StrJoin(flags->ici_mesh_shape, ","));
  app.add_option("--dcn-mesh-shape", flags->dcn_mesh_shape,
                 "mesh of slices, comma separated (torch_xla HybridMesh)")
      ->delimiter(',')
      ->check(Positive())
      ->default_str(absl::StrJoin(flags->dcn_mesh_shape, ","));
  app.add_option("--axis-names", flags->axis_names, "mesh axis names: " + axis_help)
      ->delimiter(',')
      ->default_str(absl::StrJoin(flags->axis_names, ","));
  app.add_option("--compute-slots", flags->compute_slots,
                 "device threads of a host process that compute at once, 0 for no limit "
                 "(default: TESSEL_COMPUTE_SLOTS, else no limit)")
      ->check(NonNegative())
      ->default_str("auto");
}

absl::StatusOr<spmd::HybridMesh> MakeHybridMesh(const MeshFlags& flags,
                                                const mesh::Topology& topology,
                                                const std::string& config_path) {
  absl::StatusOr<spmd::HybridMesh> hybrid = spmd::HybridMesh::Create(
      flags.ici_mesh_shape, flags.dcn_mesh_shape, flags.axis_names, topology);
  if (!hybrid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ici-mesh-shape ", absl::StrJoin(flags.ici_mesh_shape, ","),
                     " --dcn-mesh-shape ", absl::StrJoin(flags.dcn_mesh_shape, ","),
                     " does not fit ", config_path, ": ", hybrid.status().message()));
  }
  return hybrid;
}

absl::StatusOr<Placement> ConnectHost(const MeshFlags& flags, const std::string& example,
                                      const MeshMaker& make_mesh) {
  Placement placement;
  mesh::HostEnvironment env;
  if (mesh::LaunchedAsHost()) {
    TESSEL_ASSIGN_OR_RETURN(env, mesh::ReadHostEnvironment());
  }
  placement.config_path = !flags.config.empty() ? flags.config : env.config_path;
  if (placement.config_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no topology config: pass --config FILE or start the hosts with `tessel run "
                     "CONFIG --example ",
                     example, "` (or --single-device)"));
  }
  TESSEL_ASSIGN_OR_RETURN(mesh::Topology topology, mesh::LoadTopology(placement.config_path));
  if (!mesh::LaunchedAsHost() && topology.num_hosts() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(placement.config_path, " has ", topology.num_hosts(),
                     " hosts: start them with `tessel run ", placement.config_path, " --example ",
                     example, "` (or `tessel launch`, mpirun, srun)"));
  }
  if (env.num_hosts != topology.num_hosts()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the job has ", env.num_hosts, " hosts (", env.source.empty() ? "default" : env.source,
        ") but ", placement.config_path, " has ", topology.num_hosts()));
  }
  placement.printer = env.host_index == 0;
  TESSEL_ASSIGN_OR_RETURN(placement.mesh, make_mesh(topology, placement.config_path));
  transport::ZmqOptions options;
  options.device_map = mesh::DeviceMapOf(topology);
  options.rank = env.host_index;
  options.num_hosts = env.num_hosts;
  TESSEL_RETURN_IF_ERROR(mesh::ApplyHostEnvironment(env, &options));
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<transport::ZmqTransport> transport,
                          transport::ZmqTransport::Create(std::move(options)));
  mesh::HostRuntimeOptions runtime_options;
  if (flags.compute_slots >= 0) runtime_options.compute_slots = flags.compute_slots;
  TESSEL_ASSIGN_OR_RETURN(placement.runtime, mesh::HostRuntime::Create(
                                                 topology, std::move(transport), runtime_options));
  return placement;
}

void ReportConnectError(const absl::Status& status, const char* program) {
  // Every host reaches the same verdict on config and flag errors: host 0 says it once.
  const bool quiet = mesh::LaunchedAsHost() && status.code() == absl::StatusCode::kInvalidArgument;
  absl::StatusOr<mesh::HostEnvironment> env = mesh::ReadHostEnvironment();
  if (!quiet || !env.ok() || env->host_index == 0) {
    std::fprintf(stderr, "%s: %s\n", program, std::string(status.message()).c_str());
  }
}

int RunExample(const char* program, bool single_device, int single_device_threads,
               const std::function<absl::StatusOr<Placement>()>& connect,
               const std::function<absl::Status(Placement&)>& train) {
  Placement placement;
  if (!single_device) {
    absl::StatusOr<Placement> connected = connect();
    if (!connected.ok()) {
      ReportConnectError(connected.status(), program);
      return 1;
    }
    placement = std::move(*connected);
  }
  return RunOnPlacement(program, placement, single_device_threads, train);
}

int RunOnPlacement(const char* program, Placement& placement, int single_device_threads,
                   const std::function<absl::Status(Placement&)>& train) {
  if (placement.runtime == nullptr) {
    SetExecutorOptions({.num_threads = single_device_threads});
  } else {
    SetComputationClient(placement.runtime->client());
  }
  absl::Status status = train(placement);
  SetComputationClient(nullptr);
  if (status.ok()) return 0;
  std::string where;
  if (placement.runtime != nullptr) {
    where = absl::StrCat("host ", placement.runtime->host_index(), ": ");
  }
  std::fprintf(stderr, "%s: %s%s\n", program, where.c_str(), std::string(status.message()).c_str());
  return 1;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void AddTraffic(const transport::CollectiveStats& before, const transport::CollectiveStats& after,
                transport::CollectiveStats& total) {
  for (auto [sum, a, b] : {std::tuple(&total.local, after.local, before.local),
                           std::tuple(&total.ici, after.ici, before.ici),
                           std::tuple(&total.dcn, after.dcn, before.dcn)}) {
    sum->bytes += a.bytes - b.bytes;
    sum->messages += a.messages - b.messages;
  }
}

}  // namespace tessel::examples
