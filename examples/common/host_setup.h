// What every `tessel run` example shares: the mesh flags (torch_xla HybridMesh's
// ici_mesh_shape, dcn_mesh_shape and axis names), connecting this host process to its job
// (launcher environment, topology, ZeroMQ transport, HostRuntime), flag validators and small
// run-time helpers. The Fashion-MNIST MLP and the GPT examples both use it.
//
//   MeshFlags mesh_flags{.ici_mesh_shape = {1, 2, 2}, .dcn_mesh_shape = {2, 1, 1},
//                        .axis_names = {"data", "fsdp", "tensor"}};
//   AddMeshFlags(app, &mesh_flags, "the batch over data and fsdp, ...");
//   TESSEL_ASSIGN_OR_RETURN(Placement p, ConnectHost(mesh_flags, "gpt", make_mesh));
#ifndef TESSEL_EXAMPLES_COMMON_HOST_SETUP_H_
#define TESSEL_EXAMPLES_COMMON_HOST_SETUP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/core/command_line.h"
#include "tessel/mesh/runtime/host_runtime.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/spmd/mesh.h"
#include "tessel/transport/collective_stats.h"

namespace tessel::examples {

// The topology and logical mesh of a sharded run.
struct MeshFlags {
  std::string config = "";  // topology JSON (else TESSEL_CONFIG, set by tessel run)
  std::vector<int64_t> ici_mesh_shape = {};
  std::vector<int64_t> dcn_mesh_shape = {};
  std::vector<std::string> axis_names = {};
  // --compute-slots: device threads of a host process that compute at once (0: no limit); -1,
  // the default: TESSEL_COMPUTE_SLOTS, else no limit (mesh/runtime/compute_slots.h).
  int64_t compute_slots = -1;
};

// Adds --config, --ici-mesh-shape, --dcn-mesh-shape, --axis-names and --compute-slots
// (defaults: the values in `flags`); `axis_help` says what the example does with each axis.
void AddMeshFlags(CLI::App& app, MeshFlags* flags, const std::string& axis_help);

// The HybridMesh of `flags` on `topology`. Errors: kInvalidArgument naming the mesh flags and
// `config_path` with HybridMesh::Create's reason.
[[nodiscard]] absl::StatusOr<spmd::HybridMesh> MakeHybridMesh(const MeshFlags& flags,
                                                              const mesh::Topology& topology,
                                                              const std::string& config_path);

// Where an example runs: one device, or this host's devices of a mesh.
struct Placement {
  std::unique_ptr<mesh::HostRuntime> runtime;  // null: single device
  std::optional<spmd::HybridMesh> mesh;
  std::string config_path;
  bool printer = true;  // host 0 (or single device) writes the log
};

// Builds the example's mesh from the flags on a topology (MakeHybridMesh plus the example's
// own axis checks).
using MeshMaker = std::function<absl::StatusOr<spmd::HybridMesh>(const mesh::Topology& topology,
                                                                 const std::string& config_path)>;

// Connects this host process to its job (launcher environment, topology, transport, runtime)
// and builds the mesh with `make_mesh`. `example` names the `tessel run --example` value in
// messages. Errors name the config, the environment variable or the flag at fault
// (kInvalidArgument), or the transport's error (kUnavailable, kDeadlineExceeded).
[[nodiscard]] absl::StatusOr<Placement> ConnectHost(const MeshFlags& flags,
                                                    const std::string& example,
                                                    const MeshMaker& make_mesh);

// Prints ConnectHost's error once per job: configuration errors (kInvalidArgument, which every
// host reaches alike) only on host 0, anything else on every host. Prefix: `program`.
void ReportConnectError(const absl::Status& status, const char* program);

// Runs `train` on `placement` (an example's main loop) with the runtime's computation client
// installed (none for a single device, which gets `single_device_threads` executor threads
// instead); returns the process exit code: 0, or 1 after printing the error prefixed with
// `program` and, on a mesh, the host index.
int RunOnPlacement(const char* program, Placement& placement, int single_device_threads,
                   const std::function<absl::Status(Placement&)>& train);

// An example's whole run: on a mesh (`single_device` false) connects this host with `connect`
// (ConnectHost; its error is printed by ReportConnectError and gives exit code 1), then
// RunOnPlacement; on one device runs `train` on an empty placement. Returns the exit code.
int RunExample(const char* program, bool single_device, int single_device_threads,
               const std::function<absl::StatusOr<Placement>()>& connect,
               const std::function<absl::Status(Placement&)>& train);

// Seconds since `start` (steady clock).
double SecondsSince(std::chrono::steady_clock::time_point start);

// Adds the traffic between two snapshots of the communicator's counters to `total`.
void AddTraffic(const transport::CollectiveStats& before, const transport::CollectiveStats& after,
                transport::CollectiveStats& total);

}  // namespace tessel::examples

#endif  // TESSEL_EXAMPLES_COMMON_HOST_SETUP_H_
