#include "tessel/mesh/launch/launcher.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tessel/core/status_macros.h"

extern char** environ;

namespace tessel::mesh {
namespace {

// How often the launcher looks at its hosts while it waits.
constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

// Signals the launcher caught during LaunchHosts: the last one and how many.
volatile std::sig_atomic_t g_last_signal = 0;
volatile std::sig_atomic_t g_signal_count = 0;

void OnSignal(int signo) {
  g_last_signal = signo;
  g_signal_count = g_signal_count + 1;
}

// One LaunchHosts at a time: the signal state above is process-wide.
ABSL_CONST_INIT absl::Mutex g_launch_mutex(absl::kConstInit);

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string SignalText(int signo) {
  const char* name = strsignal(signo);
  return absl::StrCat("signal ", signo, " (", name != nullptr ? name : "unknown", ")");
}

// Installs OnSignal for SIGINT and SIGTERM; restores the previous handlers when destroyed.
class ForwardedSignals {
 public:
  ForwardedSignals() {
    g_last_signal = 0;
    g_signal_count = 0;
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a signal wakes the wait loop
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~ForwardedSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;

 private:
  struct sigaction old_int_;
  struct sigaction old_term_;
};

// A private directory made by mkdtemp, removed with its contents when destroyed.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Make() {
    std::string base;
    if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && tmp[0] != '\0') base = tmp;
    if (base.empty()) base = "/tmp";
    std::string pattern = absl::StrCat(base, "/tessel-launch-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      const int err = errno;
      return absl::InternalError(absl::StrCat("cannot create a private directory ", pattern,
                                              " (from $TMPDIR, else /tmp): ", ErrnoText(err)));
    }
    TempDir dir;
    dir.path_ = pattern;
    return dir;
  }
  TempDir() = default;
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A file descriptor closed when destroyed.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// 128 random bits as 32 hex digits.
std::string RandomToken() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&token, "%08x", device());
  return token;
}

bool IsExecutableFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

// The environment of every host but TESSEL_HOST_INDEX, as NAME=VALUE strings: the launcher's,
// minus the names set here, then the job's variables, then extra_env.
std::vector<std::string> JobEnvironment(const LaunchOptions& options, const std::string& config,
                                        const std::string& dir, const std::string& token) {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"TESSEL_NUM_HOSTS", absl::StrCat(options.num_hosts)},
      {"TESSEL_COORDINATOR", absl::StrCat("ipc://", dir, "/coordinator")},
      {"TESSEL_IPC_DIR", dir},
      {"TESSEL_JOB_TOKEN", token},
  };
  if (!config.empty()) ours.emplace_back("TESSEL_CONFIG", config);
  for (const auto& [name, value] : options.extra_env) ours.emplace_back(name, value);

  std::set<std::string> replaced = {"TESSEL_HOST_INDEX", "TESSEL_EXTERNAL_COORDINATOR"};
  for (const auto& entry : ours) replaced.insert(entry.first);
  std::vector<std::string> env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string entry = *p;
    const std::string name = entry.substr(0, entry.find('='));
    if (replaced.count(name) == 0) env.push_back(entry);
  }
  // Later entries of `ours` win (extra_env over the job's variables).
  for (const auto& entry : ours) {
    const std::string prefix = entry.first + "=";
    std::erase_if(env, [&prefix](const std::string& e) { return e.rfind(prefix, 0) == 0; });
    env.push_back(prefix + entry.second);
  }
  return env;
}

// argv / envp for execve: pointers into `strings` (which must outlive them), then nullptr.
std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Sends `signo` to the process group of `pid` (the host and what it started), or to the
// process alone if the group is gone.
void SignalHost(pid_t pid, int signo) {
  if (kill(-pid, signo) != 0) kill(pid, signo);
}

// Forks and execs one host. The child leads its own process group, dies with the launcher
// (PR_SET_PDEATHSIG), and reports a failed execve through a close-on-exec pipe. Between fork
// and execve the child calls only async-signal-safe functions on memory prepared beforehand.
absl::StatusOr<pid_t> SpawnHost(int64_t host, const std::string& path, char* const* argv,
                                char* const* envp, int stdin_fd, int stdout_fd) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    return absl::InternalError(absl::StrCat("host ", host, ": pipe2: ", ErrnoText(err)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return absl::InternalError(absl::StrCat("host ", host, ": fork: ", ErrnoText(err)));
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = SIG_DFL;
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
    if (dup2(stdin_fd, STDIN_FILENO) >= 0 &&
        (stdout_fd < 0 || dup2(stdout_fd, STDOUT_FILENO) >= 0)) {
      execve(path.c_str(), argv, envp);
    }
    const int err = errno;
    ssize_t ignored = write(pipe_fds[1], &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  close(pipe_fds[1]);
  setpgid(pid, pid);  // also done by the child; whichever runs first wins, the other may fail
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(pipe_fds[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(pipe_fds[0]);
  if (n > 0) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return absl::InternalError(
        absl::StrCat("host ", host, ": cannot execute ", path, ": ", ErrnoText(child_errno)));
  }
  return pid;
}

struct HostProcess {
  pid_t pid = -1;
  bool running = false;
};

// SIGKILLs and reaps every running host (used on errors while starting).
void KillAndReap(std::vector<HostProcess>& hosts) {
  for (HostProcess& h : hosts) {
    if (h.running) SignalHost(h.pid, SIGKILL);
  }
  for (HostProcess& h : hosts) {
    if (!h.running) continue;
    int status;
    while (waitpid(h.pid, &status, 0) < 0 && errno == EINTR) {
    }
    h.running = false;
  }
}

std::string DescribeExit(int64_t host, pid_t pid, int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("host ", host, " (pid ", pid, ") was killed by ",
                        SignalText(WTERMSIG(status)));
  }
  return absl::StrCat("host ", host, " (pid ", pid, ") exited with status ", WEXITSTATUS(status));
}

int ExitCodeOf(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

void PrintLine(const LaunchOptions& options, const std::string& text) {
  std::fprintf(stderr, "%s: %s\n", options.program_name.c_str(), text.c_str());
  std::fflush(stderr);
}

}  // namespace

absl::StatusOr<std::string> ResolveProgram(const std::string& program) {
  if (program.empty()) return absl::InvalidArgumentError("empty program name");
  if (program.find('/') != std::string::npos) {
    if (IsExecutableFile(program)) return program;
    struct stat info;
    if (stat(program.c_str(), &info) != 0) {
      return absl::NotFoundError(absl::StrCat("program \"", program, "\" not found"));
    }
    return absl::NotFoundError(absl::StrCat("program \"", program, "\" is not an executable file"));
  }
  const char* path_env = std::getenv("PATH");
  const std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (absl::string_view dir : absl::StrSplit(search, ':')) {
    const std::string candidate =
        dir.empty() ? absl::StrCat("./", program) : absl::StrCat(dir, "/", program);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("program \"", program, "\" not found in $PATH (", search, ")"));
}

namespace {

// The checks on `options` that need no process: a program, hosts, grace and variable names.
absl::Status CheckLaunchOptions(const LaunchOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("no program to launch (empty argv)");
  }
  if (options.num_hosts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of hosts must be at least 1, got ", options.num_hosts));
  }
  if (options.num_hosts > options.max_hosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.num_hosts, " host processes requested, more than the ", options.max_hosts,
        " one launch starts on this machine (max_hosts); a topology this large is for "
        "`tessel simulate`, or for mpirun / srun across machines"));
  }
  if (options.failure_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("failure_grace must not be negative, got ",
                                                   absl::FormatDuration(options.failure_grace)));
  }
  for (const auto& [name, value] : options.extra_env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad environment variable name \"", name, "\" in extra_env"));
    }
  }
  return absl::OkStatus();
}

// Watches the spawned hosts until every one has ended: forwards the launcher's first signal
// and SIGKILLs on the second, stops the other hosts when one fails (blaming the right one), and
// SIGKILLs hosts that outlive the grace period after a stop.
class HostSupervisor {
 public:
  HostSupervisor(const LaunchOptions& options, std::vector<HostProcess>& hosts)
      : options_(options), hosts_(hosts), running_(static_cast<int64_t>(hosts.size())) {}

  LaunchResult Run() {
    while (running_ > 0) {
      ForwardSignals();
      ReapEnded();
      KillAfterGrace();
      if (running_ > 0) absl::SleepFor(kPollInterval);
    }
    if (interrupt_signal_ != 0 && result_.failed_host < 0) {
      result_.exit_code = 128 + interrupt_signal_;
      result_.message = absl::StrCat("interrupted by ", SignalText(interrupt_signal_), "; stopped ",
                                     interrupted_hosts_, " host(s)");
    }
    return result_;
  }

 private:
  void StopAll(int signo) {
    for (const HostProcess& h : hosts_) {
      if (h.running) SignalHost(h.pid, signo);
    }
  }

  void ForwardSignals() {
    const int count = g_signal_count;
    if (count == seen_signals_) return;
    seen_signals_ = count;
    const int signo = g_last_signal;
    if (!stopping_) {
      stopping_ = true;
      interrupt_signal_ = signo;
      interrupted_hosts_ = running_;
      kill_deadline_ = absl::Now() + options_.failure_grace;
      PrintLine(options_, absl::StrCat("received ", SignalText(signo), "; forwarding it to ",
                                       running_, " running host(s)"));
      StopAll(signo);
    } else if (!killed_) {
      killed_ = true;
      PrintLine(options_, absl::StrCat("received ", SignalText(signo),
                                       " while stopping the hosts; killing them (SIGKILL)"));
      StopAll(SIGKILL);
    }
  }

  void ReapEnded() {
    // Of several hosts that failed in one sweep, one killed by a signal is blamed first: the
    // others most likely failed because they lost it.
    int64_t first_failed = -1;
    int first_failed_status = 0;
    for (int64_t h = 0; h < static_cast<int64_t>(hosts_.size()); ++h) {
      HostProcess& host = hosts_[h];
      if (!host.running) continue;
      int status = 0;
      const pid_t r = waitpid(host.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      host.running = false;
      --running_;
      if (r < 0) status = 1 << 8;  // reaped elsewhere (SIGCHLD ignored): unknown, count as 1
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!failed || stopping_) continue;
      const bool better =
          first_failed < 0 || (WIFSIGNALED(status) && !WIFSIGNALED(first_failed_status));
      if (better) {
        first_failed = h;
        first_failed_status = status;
      }
    }
    if (first_failed < 0) return;
    stopping_ = true;
    result_.failed_host = first_failed;
    result_.exit_code = ExitCodeOf(first_failed_status);
    result_.message = DescribeExit(first_failed, hosts_[first_failed].pid, first_failed_status);
    kill_deadline_ = absl::Now() + options_.failure_grace;
    PrintLine(options_, running_ > 0 ? absl::StrCat(result_.message, "; stopping the other ",
                                                    running_, " host(s)")
                                     : result_.message);
    StopAll(SIGTERM);
  }

  void KillAfterGrace() {
    if (!stopping_ || killed_ || running_ == 0 || absl::Now() < kill_deadline_) return;
    killed_ = true;
    for (int64_t h = 0; h < static_cast<int64_t>(hosts_.size()); ++h) {
      if (!hosts_[h].running) continue;
      PrintLine(options_, absl::StrCat("host ", h, " (pid ", hosts_[h].pid, ") still running ",
                                       absl::FormatDuration(options_.failure_grace),
                                       " after the stop signal; sending SIGKILL"));
    }
    StopAll(SIGKILL);
  }

  const LaunchOptions& options_;
  std::vector<HostProcess>& hosts_;
  LaunchResult result_;
  int64_t running_;
  bool stopping_ = false;
  bool killed_ = false;
  absl::Time kill_deadline_ = absl::InfiniteFuture();
  int seen_signals_ = 0;
  int interrupt_signal_ = 0;
  int64_t interrupted_hosts_ = 0;  // hosts still running when the signal came
};

}  // namespace

absl::StatusOr<LaunchResult> LaunchHosts(const LaunchOptions& options) {
  TESSEL_RETURN_IF_ERROR(CheckLaunchOptions(options));
  absl::StatusOr<std::string> path = ResolveProgram(options.argv[0]);
  if (!path.ok()) return path.status();
  std::string config;
  if (!options.config_path.empty()) {
    std::error_code error;
    config = std::filesystem::absolute(options.config_path, error).string();
    if (error) {
      return absl::InvalidArgumentError(
          absl::StrCat("config path \"", options.config_path, "\": ", error.message()));
    }
  }

  absl::MutexLock lock(&g_launch_mutex);
  absl::StatusOr<TempDir> dir = TempDir::Make();
  if (!dir.ok()) return dir.status();

  // Everything the children need is built before the first fork.
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv = CStrings(argv_strings);
  const std::vector<std::string> job_env =
      JobEnvironment(options, config, dir->path(), RandomToken());
  std::vector<std::vector<std::string>> env_strings(options.num_hosts, job_env);
  std::vector<std::vector<char*>> envs;
  for (int64_t h = 0; h < options.num_hosts; ++h) {
    env_strings[h].push_back(absl::StrCat("TESSEL_HOST_INDEX=", h));
    envs.push_back(CStrings(env_strings[h]));
  }
  Fd dev_null(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (dev_null.get() < 0) {
    const int err = errno;
    return absl::InternalError(absl::StrCat("cannot open /dev/null: ", ErrnoText(err)));
  }

  ForwardedSignals signals;
  std::vector<HostProcess> hosts(options.num_hosts);
  for (int64_t h = 0; h < options.num_hosts; ++h) {
    const int stdout_fd = (h == 0 || options.forward_all_stdout) ? -1 : dev_null.get();
    absl::StatusOr<pid_t> pid =
        SpawnHost(h, *path, argv.data(), envs[h].data(), dev_null.get(), stdout_fd);
    if (!pid.ok()) {
      KillAndReap(hosts);
      return pid.status();
    }
    hosts[h].pid = *pid;
    hosts[h].running = true;
  }
  return HostSupervisor(options, hosts).Run();
}

}  // namespace tessel::mesh
