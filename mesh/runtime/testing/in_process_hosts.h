// Test helpers for the host runtime: every host of a topology as a thread of the test process
// over transport::InProcTransport (the same collective algorithms and byte accounting as the
// ZeroMQ transport), and deterministic random inputs. Header-only, for tests; not installed.
#ifndef TESSEL_MESH_RUNTIME_TESTING_IN_PROCESS_HOSTS_H_
#define TESSEL_MESH_RUNTIME_TESTING_IN_PROCESS_HOSTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/literal.h"
#include "tessel/mesh/launch/host_env.h"
#include "tessel/mesh/runtime/host_runtime.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/transport/inproc_transport.h"

namespace tessel::mesh::testing {

// Runs `body` once per host of `topology`, each on its own thread with its own HostRuntime
// installed as the thread's computation client, and returns each host's status (index = host
// id). A runtime that fails to start gives that host's status without running `body`.
// `options` are every host's HostRuntimeOptions.
inline std::vector<absl::Status> RunHosts(const Topology& topology,
                                          const std::function<absl::Status(HostRuntime&)>& body,
                                          const HostRuntimeOptions& options = {}) {
  auto job =
      transport::InProcTransport::Create(topology.num_hosts(), DeviceMapOf(topology)).value();
  std::vector<absl::Status> statuses(topology.num_hosts());
  std::vector<std::thread> threads;
  for (int64_t h = 0; h < topology.num_hosts(); ++h) {
    threads.emplace_back([&, h] {
      absl::StatusOr<std::unique_ptr<HostRuntime>> runtime =
          HostRuntime::Create(topology, &job->host(h), options);
      if (!runtime.ok()) {
        statuses[h] = runtime.status();
        return;
      }
      SetComputationClient((*runtime)->client());
      statuses[h] = body(**runtime);
      SetComputationClient(nullptr);
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

// An f32 literal of shape `dims` with values uniform in [-1, 1), the same for the same seed.
inline Literal RandomLiteral(std::vector<int64_t> dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1, 1);
  Literal value(Shape(DType::kF32, std::move(dims)));
  for (float& x : value.data<float>()) x = uniform(rng);
  return value;
}

}  // namespace tessel::mesh::testing

#endif  // TESSEL_MESH_RUNTIME_TESTING_IN_PROCESS_HOSTS_H_
