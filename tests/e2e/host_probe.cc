// host_probe: one host of a multi-host job, for the launcher's end-to-end tests and as the
// smallest example of a program started by `tessel launch`, mpirun or srun.
//
//   tessel launch configs/two_slices_2x2hosts.json -- host_probe --iterations 20
//   mpirun -np 4 -x TESSEL_CONFIG=$PWD/configs/two_slices_2x2hosts.json host_probe
//
// It reads its place in the job (mesh::ReadHostEnvironment), the topology named by
// TESSEL_CONFIG, connects a ZmqTransport (mesh::ApplyHostEnvironment, mesh::DeviceMapOf), and
// runs --iterations all-reduces (sum) of --elements f32 over every device of the job, one thread
// per local device, checking every element of every result exactly. Then it prints
//   host <i>: ok (<n> all-reduces of <k> f32 over <d> devices on <h> hosts; rank from <VAR>)
// on stdout.
//
// Flags: --iterations N (default 1), --sleep-ms M between iterations (default 0), --elements K
// (default 4096), --exit-code C --fail-host H (host H exits with status C right after the
// bootstrap, without saying goodbye, as a crashed host would), --tag T (ignored: marks the
// processes of one test for pgrep); `--name value` or `--name=value`, --help lists them.
// Exit status: 0 success; 1 any error (one line on stderr: "host_probe: ..." before the host
// index is known, "host_probe host <i>: ..." after); 2 bad flags, unknown ones included (one line
// "host_probe: ..." on stderr); C for the failing host.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/command_line.h"
#include "tessel/core/status_macros.h"
#include "tessel/mesh/launch/host_env.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/transport/zmq_transport.h"

namespace tessel {
namespace {

struct ProbeFlags {
  int64_t iterations = 1;
  int64_t sleep_ms = 0;
  int64_t elements = 4096;
  int64_t exit_code = 0;
  int64_t fail_host = -1;
  std::string tag;
};

// Declares the flags of the header comment on `app`, writing into `flags`.
void AddProbeFlags(CLI::App& app, ProbeFlags* flags) {
  const CLI::Range non_negative(int64_t{0}, std::numeric_limits<int64_t>::max());
  app.add_option("--iterations", flags->iterations, "all-reduces to run")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--sleep-ms", flags->sleep_ms, "pause between all-reduces, ms")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--elements", flags->elements, "f32 elements per all-reduce")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--exit-code", flags->exit_code, "exit status of --fail-host")
      ->check(CLI::Range(0, 255));
  app.add_option("--fail-host", flags->fail_host,
                 "host that exits with --exit-code right after the bootstrap (-1: none)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--tag", flags->tag, "ignored: marks the processes of one test for pgrep");
}

// Device `device_id`'s element i in iteration `iteration`: small integers, so every sum is
// exact in f32.
float Input(int64_t device_id, int64_t iteration, int64_t i) {
  return static_cast<float>((device_id + 1) * (iteration % 16 + 1) + i % 7);
}

// Runs the all-reduces on one local device; the first wrong element is an error.
absl::Status RunDevice(transport::Communicator& comm, int64_t device_id, const ProbeFlags& flags) {
  const int64_t n = comm.device_map().num_devices();
  std::vector<float> in(flags.elements), out(flags.elements);
  for (int64_t iteration = 0; iteration < flags.iterations; ++iteration) {
    for (int64_t i = 0; i < flags.elements; ++i) in[i] = Input(device_id, iteration, i);
    TESSEL_RETURN_IF_ERROR(comm.AllReduce(device_id, {}, ReduceKind::kAdd, DType::kF32, in.data(),
                                          out.data(), flags.elements));
    for (int64_t i = 0; i < flags.elements; ++i) {
      // Sum over devices d of (d + 1) * m + i % 7, in exact integer arithmetic.
      const int64_t expected_sum = (iteration % 16 + 1) * (n * (n + 1) / 2) + n * (i % 7);
      const float expected = static_cast<float>(expected_sum);
      if (out[i] != expected) {
        return absl::InternalError(absl::StrCat("all-reduce #", iteration, " on device ", device_id,
                                                ": element ", i, " = ", out[i], ", expected ",
                                                expected));
      }
    }
    if (flags.sleep_ms > 0 && iteration + 1 < flags.iterations) {
      std::this_thread::sleep_for(std::chrono::milliseconds(flags.sleep_ms));
    }
  }
  return absl::OkStatus();
}

absl::Status Probe(const mesh::HostEnvironment& env, const ProbeFlags& flags) {
  if (env.config_path.empty()) {
    return absl::InvalidArgumentError("TESSEL_CONFIG is not set (the topology JSON of the job)");
  }
  TESSEL_ASSIGN_OR_RETURN(mesh::Topology topology, mesh::LoadTopology(env.config_path));
  if (topology.num_hosts() != env.num_hosts) {
    return absl::InvalidArgumentError(absl::StrCat(env.config_path, " has ", topology.num_hosts(),
                                                   " hosts but the job has ", env.num_hosts,
                                                   " (rank from ", env.source, ")"));
  }
  transport::ZmqOptions options;
  TESSEL_RETURN_IF_ERROR(mesh::ApplyHostEnvironment(env, &options));
  options.device_map = mesh::DeviceMapOf(topology);
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<transport::ZmqTransport> comm,
                          transport::ZmqTransport::Create(options));
  if (env.host_index == flags.fail_host) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(static_cast<int>(flags.exit_code));
  }
  std::vector<absl::Status> statuses(comm->local_device_ids().size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < statuses.size(); ++i) {
    threads.emplace_back(
        [&, i] { statuses[i] = RunDevice(*comm, comm->local_device_ids()[i], flags); });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : statuses) TESSEL_RETURN_IF_ERROR(s);
  std::printf(
      "host %lld: ok (%lld all-reduces of %lld f32 over %lld devices on %lld hosts; "
      "rank from %s)\n",
      static_cast<long long>(env.host_index), static_cast<long long>(flags.iterations),
      static_cast<long long>(flags.elements), static_cast<long long>(topology.num_devices()),
      static_cast<long long>(env.num_hosts), env.source.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  ProbeFlags flags;
  CLI::App app{"One host of a multi-host job: all-reduces over every device, checked exactly.",
               "host_probe"};
  AddProbeFlags(app, &flags);
  if (int code = ParseCommandLine(app, argc, argv); code >= 0) return code;
  absl::StatusOr<mesh::HostEnvironment> env = mesh::ReadHostEnvironment();
  if (!env.ok()) {
    std::fprintf(stderr, "host_probe: %s\n", std::string(env.status().message()).c_str());
    return 1;
  }
  absl::Status status = Probe(*env, flags);
  if (!status.ok()) {
    // Transport errors already start with "host <i>: "; say it once.
    std::string message(status.message());
    const std::string host_prefix = absl::StrCat("host ", env->host_index, ": ");
    if (message.rfind(host_prefix, 0) == 0) message.erase(0, host_prefix.size());
    std::fprintf(stderr, "host_probe host %lld: %s\n", static_cast<long long>(env->host_index),
                 message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) { return tessel::Main(argc, argv); }
