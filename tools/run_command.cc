// `tessel run CONFIG --example fashion-mnist-mlp|gpt [flags]`: the main job. Launches one process
// per host of CONFIG on this machine (each re-runs this same command line as a host, told its
// place by TESSEL_HOST_INDEX and friends), waits for them and fails as soon as one host fails.
//
// Before anything starts, the config, the mesh flags and the dataset are checked here, so a bad
// value gives one error line instead of one per host. Started by mpirun or srun (the
// environment names a rank), the command runs as that host directly.
//
// Progress: a line every 50 training steps by default (--log-every 0 for none), so a run is
// never silent for long. --json: the example prints JSON Lines (one record per progress line,
// epoch or evaluation, and a last one with "summary": true); this command collects host 0's
// lines, passes each record to stderr as it comes (progress), and prints ONE object on stdout
// when the run ends: {"ok", "exit_code", "records": [...], "summary": {...} | null}
// (docs/cli.md). The hosts themselves (TESSEL_HOST_INDEX set) print the lines unchanged.
// TESSEL_DUMP_TO, when set, names a folder for the partitioned HLO (mesh/runtime/host_runtime.h);
// it is created here, and a value that cannot be a folder fails before any host starts, as does a
// TESSEL_COMPUTE_SLOTS that is not a non-negative integer (mesh/runtime/compute_slots.h), and a
// bad TESSEL_COMBINE_ALL_REDUCE_BYTES or TESSEL_TRANSPOSE_BEFORE_ALL_REDUCE
// (mesh/runtime/host_runtime.h, ProgramPassesFromEnvironment).
//
// Each example has its own flags (`tessel run CONFIG --example gpt --help` lists the GPT's). The
// subcommand is built before CLI11 parses, so the example is read from the command line first
// (ExampleOnCommandLine) and only that example's flags are added: a flag of the other example
// is then an unknown option (exit 2), as it should be.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "examples/fashion_mnist_mlp/fashion_mnist.h"
#include "examples/gpt/gpt_example.h"
#include "nlohmann/json.hpp"
#include "tessel/mesh/launch/host_env.h"
#include "tessel/mesh/launch/launcher.h"
#include "tessel/mesh/runtime/compute_slots.h"
#include "tessel/mesh/runtime/host_runtime.h"
#include "tessel/mesh/topology/topology.h"
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

// The value of `--example` (or `--example=...`) after the `run` word of this process's command
// line; the default example when there is none. Any other value is kept for CLI11's IsMember
// check to reject.
std::string ExampleOnCommandLine() {
  absl::StatusOr<std::vector<std::string>> argv = OwnCommandLine();
  std::string example = "fashion-mnist-mlp";
  if (!argv.ok()) return example;
  bool after_run = false;
  for (size_t i = 1; i < argv->size(); ++i) {
    const std::string& arg = (*argv)[i];
    if (!after_run) {
      after_run = arg == "run";
      continue;
    }
    if (arg == "--example" && i + 1 < argv->size()) example = (*argv)[i + 1];
    if (arg.rfind("--example=", 0) == 0) example = arg.substr(10);
  }
  return example;
}

// While started, file descriptor 1 (this process's and every host's stdout) is a pipe that a
// thread reads line by line: JSON objects become records (and go on to stderr as progress), the
// one with "summary": true is kept apart, anything else goes to stderr as it is.
class JsonLinesCapture {
 public:
  JsonLinesCapture() = default;
  JsonLinesCapture(const JsonLinesCapture&) = delete;
  JsonLinesCapture& operator=(const JsonLinesCapture&) = delete;
  ~JsonLinesCapture() { Stop(); }

  absl::Status Start() {
    int fds[2];
    std::fflush(stdout);
    if (pipe(fds) != 0) return absl::InternalError("--json: cannot make a pipe for stdout");
    saved_stdout_ = dup(STDOUT_FILENO);
    if (saved_stdout_ < 0 || dup2(fds[1], STDOUT_FILENO) < 0) {
      close(fds[0]);
      close(fds[1]);
      return absl::InternalError("--json: cannot redirect stdout");
    }
    close(fds[1]);
    FILE* in = fdopen(fds[0], "r");
    reader_ = std::thread([this, in] { Read(in); });
    return absl::OkStatus();
  }

  // Restores stdout and waits for the reader to see the end of every writer's output.
  void Stop() {
    if (saved_stdout_ < 0) return;
    std::fflush(stdout);
    dup2(saved_stdout_, STDOUT_FILENO);
    close(saved_stdout_);
    saved_stdout_ = -1;
    if (reader_.joinable()) reader_.join();
  }

  nlohmann::json Result(int exit_code) const {
    return {{"ok", exit_code == 0},
            {"exit_code", exit_code},
            {"records", records_},
            {"summary", summary_}};
  }

 private:
  void Read(FILE* in) {
    char* line = nullptr;
    size_t capacity = 0;
    while (getline(&line, &capacity, in) >= 0) {
      nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.value("summary", false)) {
        summary_ = std::move(record);
        continue;
      }
      if (record.is_object()) records_.push_back(std::move(record));
      std::fputs(line, stderr);
      std::fflush(stderr);
    }
    std::free(line);
    std::fclose(in);
  }

  int saved_stdout_ = -1;
  std::thread reader_;
  nlohmann::json records_ = nlohmann::json::array();
  nlohmann::json summary_ = nullptr;
};

// Runs `run` with --json's single object: records collected as described above.
int RunCollectingJson(const std::function<int()>& run) {
  JsonLinesCapture capture;
  if (absl::Status started = capture.Start(); !started.ok()) {
    std::fprintf(stderr, "tessel run: %s\n", std::string(started.message()).c_str());
    return kExitFailed;
  }
  const int exit_code = run();
  capture.Stop();
  std::printf("%s\n", capture.Result(exit_code).dump().c_str());
  std::fflush(stdout);
  return exit_code;
}

// The folder TESSEL_DUMP_TO names exists (made here when missing), or the variable is unset.
absl::Status CheckDumpFolder() {
  const char* dump = std::getenv("TESSEL_DUMP_TO");
  if (dump == nullptr || *dump == '\0') return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(dump, error);
  if (error || !std::filesystem::is_directory(dump)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TESSEL_DUMP_TO=", dump, ": cannot create the dump folder",
                     error ? absl::StrCat(": ", error.message()) : std::string(": not a folder")));
  }
  return absl::OkStatus();
}

// Checks and launches the hosts; `check` is the example's pre-launch check.
int LaunchRun(const std::string& config,
              const std::function<absl::Status(const mesh::Topology&)>& check) {
  absl::StatusOr<mesh::Topology> topology = mesh::LoadTopology(config);
  if (!topology.ok()) {
    std::fprintf(stderr, "tessel run: %s\n", std::string(topology.status().message()).c_str());
    return 1;
  }
  if (topology->num_hosts() > mesh::LaunchOptions{}.max_hosts) {
    std::fprintf(stderr,
                 "tessel run: %s lists %lld hosts, more than the %lld processes tessel run starts "
                 "on this machine; to start them anyway: tessel launch %s --max-hosts %lld -- "
                 "tessel run %s ...\n",
                 config.c_str(), static_cast<long long>(topology->num_hosts()),
                 static_cast<long long>(mesh::LaunchOptions{}.max_hosts), config.c_str(),
                 static_cast<long long>(topology->num_hosts()), config.c_str());
    return 1;
  }
  if (absl::Status s = CheckDumpFolder(); !s.ok()) {
    std::fprintf(stderr, "tessel run: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  // Every host would refuse a bad value alike: say it once, before any host starts.
  if (absl::StatusOr<std::optional<int64_t>> slots =
          mesh::ParseComputeSlots(std::getenv("TESSEL_COMPUTE_SLOTS"), "TESSEL_COMPUTE_SLOTS");
      !slots.ok()) {
    std::fprintf(stderr, "tessel run: %s\n", std::string(slots.status().message()).c_str());
    return 1;
  }
  if (absl::StatusOr<mesh::ProgramPassSettings> passes = mesh::ProgramPassesFromEnvironment();
      !passes.ok()) {
    std::fprintf(stderr, "tessel run: %s\n", std::string(passes.status().message()).c_str());
    return 1;
  }
  if (absl::Status s = check(*topology); !s.ok()) {
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
}

// --config and CONFIG name the same file, or --config is absent.
bool SameConfig(const std::string& flag, const std::string& config) {
  if (flag.empty() || flag == config) return true;
  std::fprintf(stderr, "tessel run: --config %s differs from CONFIG %s; give one\n", flag.c_str(),
               config.c_str());
  return false;
}

}  // namespace

CommandFn AddRunCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Launch the hosts of the topology CONFIG on this machine and run an example on the mesh "
      "(the main job)");
  static std::string config;
  static std::string example = ExampleOnCommandLine();
  static examples::FashionMnistFlags mlp_flags = [] {
    examples::FashionMnistFlags flags;
    flags.log_every = 50;  // a progress line by default (the standalone example's default: 0)
    return flags;
  }();
  static examples::GptFlags gpt_flags;
  cmd->add_option("CONFIG", config, "topology JSON (e.g. configs/two_slices_2x2hosts.json)")
      ->required();
  cmd->add_option("--example", example,
                  "the program every host runs (each has its own flags: add --help after it)")
      ->check(CLI::IsMember({"fashion-mnist-mlp", "gpt"}))
      ->capture_default_str();
  if (example == "gpt") {
    examples::AddGptFlags(*cmd, &gpt_flags);
  } else {
    examples::AddFashionMnistFlags(*cmd, &mlp_flags);
  }
  std::function<int()> run = [] {
    if (example == "gpt") {
      if (!SameConfig(gpt_flags.mesh.config, config)) return kExitUsage;
      gpt_flags.mesh.config = config;
      if (gpt_flags.single_device || mesh::LaunchedAsHost()) return examples::RunGpt(gpt_flags);
      return LaunchRun(config, [](const mesh::Topology& topology) {
        return examples::CheckGptRun(gpt_flags, topology, config);
      });
    }
    if (!SameConfig(mlp_flags.mesh.config, config)) return kExitUsage;
    mlp_flags.mesh.config = config;
    if (mlp_flags.single_device || mesh::LaunchedAsHost()) {
      return examples::RunFashionMnist(mlp_flags);
    }
    return LaunchRun(config, [](const mesh::Topology& topology) {
      return examples::CheckFashionMnistRun(mlp_flags, topology, config);
    });
  };
  return [run] {
    const bool json = example == "gpt" ? gpt_flags.json : mlp_flags.json;
    // A host prints its lines for the launching process to collect.
    if (!json || mesh::LaunchedAsHost()) return run();
    return RunCollectingJson(run);
  };
}

}  // namespace tessel::tools
