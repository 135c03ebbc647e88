// `tessel run CONFIG --example fashion-mnist-mlp [flags]`: the main job. Launches one process per
// host of CONFIG on this machine (each re-runs this same command line as a host, told its place
// by TESSEL_HOST_INDEX and friends), waits for them and fails as soon as one host fails.
//
// Before anything starts, the config, the mesh flags and the dataset are checked here, so a bad
// value gives one error line instead of one per host. Started by mpirun or srun (the
// environment names a rank), the command runs as that host directly.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "examples/fashion_mnist_mlp/fashion_mnist.h"
#include "mesh/launch/host_env.h"
#include "mesh/launch/launcher.h"
#include "mesh/topology/topology.h"
#include "tools/command.h"

namespace tessel::tools {
namespace {

// This process's command line, from /proc/self/cmdline (Linux), with argv[0] replaced by the
// path of the running binary so the hosts run exactly this program.
absl::StatusOr<std::vector<std::string>> OwnCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  if (!in) return absl::InternalError("cannot read /proc/self/cmdline");
  std::vector<std::string> argv;
  std::string arg;
  while (std::getline(in, arg, '\0')) argv.push_back(arg);
  if (argv.empty()) return absl::InternalError("/proc/self/cmdline is empty");
  std::vector<char> self(4096);
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n > 0) argv[0] = std::string(self.data(), static_cast<size_t>(n));
  return argv;
}

}  // namespace

CommandFn AddRunCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "launch the hosts of a topology config on this machine and run an example on the mesh "
      "(the main job)");
  static std::string config;
  static std::string example = "fashion-mnist-mlp";
  static examples::FashionMnistFlags flags;
  cmd->add_option("CONFIG", config, "topology JSON (e.g. configs/two_slices_2x2hosts.json)")
      ->required();
  cmd->add_option("--example", example, "the program every host runs")
      ->check(CLI::IsMember({"fashion-mnist-mlp"}))
      ->capture_default_str();
  examples::AddFashionMnistFlags(*cmd, &flags);
  return [] {
    if (!flags.config.empty() && flags.config != config) {
      std::fprintf(stderr, "tessel run: --config %s differs from CONFIG %s; give one\n",
                   flags.config.c_str(), config.c_str());
      return kExitUsage;
    }
    flags.config = config;
    if (flags.single_device || mesh::LaunchedAsHost()) {
      return examples::RunFashionMnist(flags);
    }
    absl::StatusOr<mesh::Topology> topology = mesh::LoadTopology(config);
    if (!topology.ok()) {
      std::fprintf(stderr, "tessel run: %s\n", std::string(topology.status().message()).c_str());
      return 1;
    }
    if (absl::Status s = examples::CheckFashionMnistRun(flags, *topology, config); !s.ok()) {
      std::fprintf(stderr, "tessel run: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    absl::StatusOr<std::vector<std::string>> argv = OwnCommandLine();
    if (!argv.ok()) {
      std::fprintf(stderr, "tessel run: %s\n", std::string(argv.status().message()).c_str());
      return 1;
    }
    mesh::LaunchOptions options;
    options.argv = *std::move(argv);
    options.num_hosts = topology->num_hosts();
    options.config_path = config;
    options.program_name = "tessel run";
    absl::StatusOr<mesh::LaunchResult> result = mesh::LaunchHosts(options);
    if (!result.ok()) {
      std::fprintf(stderr, "tessel run: %s\n", std::string(result.status().message()).c_str());
      return 1;
    }
    // LaunchHosts has already said which host failed (one line on stderr).
    return result->exit_code;
  };
}

}  // namespace tessel::tools
