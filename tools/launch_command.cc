// `tessel launch CONFIG [--all-stdout] [--grace-s S] [--json] -- PROGRAM ARGS...`: starts PROGRAM
// once per host of the topology CONFIG on this machine, multi-controller style, as torchrun
// (--standalone --nproc-per-node) and `mpirun -np N` do. Host i gets TESSEL_HOST_INDEX=i,
// TESSEL_NUM_HOSTS, TESSEL_CONFIG (absolute), TESSEL_COORDINATOR (a private ipc:// address) and
// TESSEL_JOB_TOKEN (mesh/launch/launcher.h, mesh/launch/host_env.h, docs/launch.md).
//
//   $ tessel launch configs/two_slices_2x2hosts.json -- build/tests/e2e/host_probe --iterations 20
//   host 0: ok (20 all-reduces of 4096 f32 over 8 devices on 4 hosts; rank from TESSEL_HOST_INDEX)
//
// Host 0's stdout passes through (--all-stdout: every host's); every host's stderr passes
// through. When a host fails the others are stopped and the failure is named on stderr:
//   tessel launch: host 2 (pid 4242) exited with status 3; stopping the other 3 host(s)
//
// --max-hosts N (default 256): a topology of more hosts is refused (exit 1), as mpirun refuses
// more ranks than slots; a pod-sized topology belongs to `tessel simulate`.
// --json: the hosts' stdout goes to this command's stderr, and stdout gets one object when the
// job ends: {"config", "num_hosts", "program": [argv...], "ok", "exit_code", "failed_host" (null
// when none), "message", "wall_s"} (docs/cli.md).
// Exit codes: 0 every host exited 0; 1 CONFIG does not load or PROGRAM cannot be started (one
// line on stderr: `tessel launch: <error>`); 2 bad arguments (tools/command.h); otherwise the
// failed host's status (128 + signal number when it was killed, or when the launcher was
// interrupted).
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tessel/mesh/launch/launcher.h"
#include "tessel/mesh/topology/topology.h"
#include "tools/command.h"

namespace tessel::tools {
namespace {

struct LaunchCommandOptions {
  std::string config_path;
  std::vector<std::string> argv;
  bool all_stdout = false;
  double grace_s = 2.0;
  bool json = false;
  int64_t max_hosts = mesh::LaunchOptions{}.max_hosts;
};

// While alive, file descriptor 1 (inherited by the hosts) is this process's stderr, so the
// hosts' output cannot mix with the one JSON object on stdout.
class StdoutToStderr {
 public:
  StdoutToStderr() {
    std::fflush(stdout);
    saved_ = dup(STDOUT_FILENO);
    if (saved_ >= 0 && dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      close(saved_);
      saved_ = -1;
    }
  }
  ~StdoutToStderr() {
    if (saved_ < 0) return;
    std::fflush(stdout);
    dup2(saved_, STDOUT_FILENO);
    close(saved_);
  }
  StdoutToStderr(const StdoutToStderr&) = delete;
  StdoutToStderr& operator=(const StdoutToStderr&) = delete;
  bool ok() const { return saved_ >= 0; }

 private:
  int saved_ = -1;
};

int RunLaunch(const LaunchCommandOptions& options) {
  if (!(options.grace_s >= 0.0) || options.grace_s > 3600.0) {
    std::cerr << "tessel: launch: --grace-s must be in [0, 3600] seconds, got " << options.grace_s
              << "\n";
    return kExitUsage;
  }
  absl::StatusOr<mesh::Topology> topology = mesh::LoadTopology(options.config_path);
  if (!topology.ok()) {
    std::cerr << "tessel launch: " << topology.status().message() << "\n";
    return 1;
  }
  mesh::LaunchOptions launch;
  launch.argv = options.argv;
  launch.num_hosts = topology->num_hosts();
  launch.config_path = options.config_path;
  launch.forward_all_stdout = options.all_stdout;
  launch.failure_grace = absl::Seconds(options.grace_s);
  launch.program_name = "tessel launch";
  launch.max_hosts = options.max_hosts;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<mesh::LaunchResult> result;
  if (options.json) {
    StdoutToStderr redirect;
    if (!redirect.ok()) {
      std::cerr << "tessel launch: --json: cannot redirect the hosts' stdout to stderr\n";
      return kExitFailed;
    }
    result = mesh::LaunchHosts(launch);
  } else {
    result = mesh::LaunchHosts(launch);
  }
  if (!result.ok()) {
    std::cerr << "tessel launch: " << result.status().message() << "\n";
    return 1;
  }
  if (options.json) {
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    nlohmann::ordered_json out = {
        {"config", options.config_path},
        {"num_hosts", topology->num_hosts()},
        {"program", options.argv},
        {"ok", result->exit_code == 0},
        {"exit_code", result->exit_code},
        {"failed_host", result->failed_host >= 0 ? nlohmann::ordered_json(result->failed_host)
                                                 : nlohmann::ordered_json(nullptr)},
        {"message", result->message},
        {"wall_s", wall_s}};
    std::cout << out.dump(2) << "\n";
  }
  // LaunchHosts already printed the failure when it happened (mesh/launch/launcher.h).
  return result->exit_code;
}

}  // namespace

CommandFn AddLaunchCommand(CLI::App& app) {
  auto options = std::make_shared<LaunchCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "launch",
      "Start PROGRAM once per host of the topology CONFIG on this machine (like torchrun / "
      "mpirun; PROGRAM after --)");
  command
      ->add_option("CONFIG", options->config_path,
                   "topology JSON file; its number of hosts is the number of processes")
      ->required();
  command->add_option("PROGRAM", options->argv, "program and its arguments, after --")->required();
  command->add_flag("--all-stdout", options->all_stdout,
                    "pass every host's stdout through (default: host 0's only)");
  command->add_option("--grace-s", options->grace_s,
                      "after a host fails: seconds between SIGTERM and SIGKILL to the others "
                      "(default 2)");
  command->add_flag("--json", options->json,
                    "hosts' stdout to stderr; print one JSON object when the job ends");
  command
      ->add_option("--max-hosts", options->max_hosts,
                   "refuse a topology of more hosts than this (processes on this machine)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  return [options]() { return RunLaunch(*options); };
}

}  // namespace tessel::tools
