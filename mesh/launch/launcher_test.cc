#include "tessel/mesh/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::mesh {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// A fresh directory for the files the hosts write.
class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessel-launcher-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Options that run `script` with /bin/sh on `num_hosts` hosts, OUT set to the directory.
  LaunchOptions Script(const std::string& script, int64_t num_hosts) const {
    LaunchOptions options;
    options.argv = {"sh", "-c", script};
    options.num_hosts = num_hosts;
    options.extra_env["OUT"] = dir_;
    options.failure_grace = absl::Milliseconds(500);
    options.program_name = "launcher_test";
    return options;
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Waits up to 10 s for file `name` and returns the number it holds.
  pid_t WaitForPid(const std::string& name) const {
    for (int i = 0; i < 1000; ++i) {
      int64_t pid = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(Read(name)), &pid)) return pid;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return -1;
  }

  std::string dir_;
};

// True once `pid` no longer runs (gone, or a zombie nobody reaped yet).
bool Gone(pid_t pid) {
  if (pid <= 0) return false;  // never found: kill(-1, 0) would probe every process
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

bool AllGoneWithin(const std::vector<pid_t>& pids, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    bool all = true;
    for (pid_t pid : pids) all &= Gone(pid);
    if (all) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST_F(LauncherTest, AllHostsSucceedWithTheirEnvironment) {
  LaunchOptions options = Script(
      "echo \"$TESSEL_HOST_INDEX $TESSEL_NUM_HOSTS $TESSEL_CONFIG $TESSEL_COORDINATOR "
      "$TESSEL_JOB_TOKEN $TESSEL_IPC_DIR ${TESSEL_EXTERNAL_COORDINATOR:-unset} $EXTRA\" "
      "> \"$OUT/host$TESSEL_HOST_INDEX\"",
      3);
  options.config_path = "configs/two_slices_2x2hosts.json";  // relative: made absolute
  options.extra_env["EXTRA"] = "x=y";
  setenv("TESSEL_EXTERNAL_COORDINATOR", "1", 1);  // must not leak into the hosts
  absl::StatusOr<LaunchResult> result = LaunchHosts(options);
  unsetenv("TESSEL_EXTERNAL_COORDINATOR");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->failed_host, -1);
  EXPECT_EQ(result->message, "");

  const std::string config =
      (std::filesystem::current_path() / "configs/two_slices_2x2hosts.json").string();
  std::set<std::string> coordinators, tokens;
  for (int h = 0; h < 3; ++h) {
    std::vector<std::string> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(Read(absl::StrCat("host", h))), ' ');
    ASSERT_EQ(fields.size(), 8u) << Read(absl::StrCat("host", h));
    EXPECT_EQ(fields[0], absl::StrCat(h));
    EXPECT_EQ(fields[1], "3");
    EXPECT_EQ(fields[2], config);
    EXPECT_THAT(fields[3], MatchesRegex("ipc://.*/tessel-launch-....../coordinator"));
    EXPECT_THAT(fields[4], MatchesRegex("[0-9a-f]{32}"));
    EXPECT_EQ(absl::StrCat("ipc://", fields[5], "/coordinator"), fields[3]);
    EXPECT_EQ(fields[6], "unset");
    EXPECT_EQ(fields[7], "x=y");
    coordinators.insert(fields[3]);
    tokens.insert(fields[4]);
    // The private directory is removed at the end.
    EXPECT_FALSE(std::filesystem::exists(fields[5])) << fields[5];
  }
  EXPECT_EQ(coordinators.size(), 1u);
  EXPECT_EQ(tokens.size(), 1u);

  // A second job gets another directory and token.
  absl::StatusOr<LaunchResult> again = LaunchHosts(options);
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<std::string> fields = absl::StrSplit(Read("host0"), ' ');
  ASSERT_EQ(fields.size(), 8u);
  EXPECT_EQ(coordinators.count(fields[3]), 0u) << fields[3];
  EXPECT_EQ(tokens.count(fields[4]), 0u) << fields[4];
}

TEST_F(LauncherTest, FailedHostIsNamedAndTheOthersStopped) {
  // Host 1 fails once every host has written its pid.
  LaunchOptions options = Script(
      "echo $$ > \"$OUT/pid$TESSEL_HOST_INDEX\"; "
      "if [ \"$TESSEL_HOST_INDEX\" = 1 ]; then for h in 0 2 3; do "
      "while [ ! -s \"$OUT/pid$h\" ]; do sleep 0.01; done; done; exit 3; fi; exec sleep 60",
      4);
  absl::StatusOr<LaunchResult> result = LaunchHosts(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_EQ(result->failed_host, 1);
  EXPECT_EQ(result->message,
            absl::StrCat("host 1 (pid ", WaitForPid("pid1"), ") exited with status 3"));
  // The sleepers were stopped, not waited for: all are gone now.
  std::vector<pid_t> pids;
  for (int h = 0; h < 4; ++h) pids.push_back(WaitForPid(absl::StrCat("pid", h)));
  for (pid_t pid : pids) EXPECT_TRUE(Gone(pid)) << pid;
}

TEST_F(LauncherTest, KilledHostIsNamedWithTheSignal) {
  LaunchOptions options = Script(
      "if [ \"$TESSEL_HOST_INDEX\" = 2 ]; then echo $$ > \"$OUT/pid\"; kill -9 $$; fi; "
      "exec sleep 60",
      3);
  absl::StatusOr<LaunchResult> result = LaunchHosts(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 128 + 9);
  EXPECT_EQ(result->failed_host, 2);
  EXPECT_EQ(result->message,
            absl::StrCat("host 2 (pid ", WaitForPid("pid"), ") was killed by signal 9 (Killed)"));
}

TEST_F(LauncherTest, HostIgnoringSigtermIsKilled) {
  // TERM ignored by the shell and inherited as ignored by its sleep: only SIGKILL stops it.
  // Host 0 fails once host 1 ignores TERM.
  LaunchOptions options = Script(
      "if [ \"$TESSEL_HOST_INDEX\" = 0 ]; then while [ ! -s \"$OUT/pid\" ]; do sleep 0.01; "
      "done; exit 5; fi; trap '' TERM; echo $$ > \"$OUT/pid\"; while :; do sleep 0.05; done",
      2);
  options.failure_grace = absl::Milliseconds(300);
  absl::StatusOr<LaunchResult> result = LaunchHosts(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 5);
  EXPECT_EQ(result->failed_host, 0);
  const pid_t pid = WaitForPid("pid");
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(Gone(pid));
}

TEST_F(LauncherTest, HostsStopWhenTheLauncherIsKilled) {
  LaunchOptions options = Script(
      "echo \"$TESSEL_IPC_DIR\" > \"$OUT/ipc_dir\"; echo $$ > \"$OUT/pid$TESSEL_HOST_INDEX\"; "
      "exec sleep 60",
      2);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    absl::StatusOr<LaunchResult> result = LaunchHosts(options);
    _exit(result.ok() ? 0 : 100);
  }
  const std::vector<pid_t> hosts = {WaitForPid("pid0"), WaitForPid("pid1")};
  ASSERT_GT(hosts[0], 0);
  ASSERT_GT(hosts[1], 0);
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  // PR_SET_PDEATHSIG: the orphans are killed.
  EXPECT_TRUE(AllGoneWithin(hosts, absl::Seconds(10)));
  // A launcher killed by SIGKILL cannot remove its private directory; the test does.
  const std::string ipc_dir(absl::StripAsciiWhitespace(Read("ipc_dir")));
  ASSERT_THAT(ipc_dir, HasSubstr("/tessel-launch-"));
  std::filesystem::remove_all(ipc_dir);
}

TEST_F(LauncherTest, SigtermToTheLauncherIsForwarded) {
  // Each host notes the SIGTERM it receives; SIGKILL (after failure_grace) would leave no note.
  LaunchOptions options = Script(
      "trap 'echo term > \"$OUT/term$TESSEL_HOST_INDEX\"; exit 0' TERM; "
      "echo $$ > \"$OUT/pid$TESSEL_HOST_INDEX\"; while :; do sleep 0.05; done",
      2);
  options.failure_grace = absl::Seconds(20);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    absl::StatusOr<LaunchResult> result = LaunchHosts(options);
    if (!result.ok()) _exit(100);
    if (result->failed_host != -1 ||
        result->message != "interrupted by signal 15 (Terminated); stopped 2 host(s)") {
      _exit(101);
    }
    _exit(result->exit_code);
  }
  const std::vector<pid_t> hosts = {WaitForPid("pid0"), WaitForPid("pid1")};
  ASSERT_GT(hosts[0], 0);
  ASSERT_GT(hosts[1], 0);
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_TRUE(AllGoneWithin(hosts, absl::Seconds(10)));
  EXPECT_EQ(Read("term0"), "term\n");
  EXPECT_EQ(Read("term1"), "term\n");
}

// Runs LaunchHosts with the process's stdout sent to `path`.
absl::StatusOr<LaunchResult> LaunchWithStdoutTo(const LaunchOptions& options,
                                                const std::string& path) {
  std::fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  const int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(file, STDOUT_FILENO);
  close(file);
  absl::StatusOr<LaunchResult> result = LaunchHosts(options);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  return result;
}

TEST_F(LauncherTest, OnlyHostZeroStdoutByDefault) {
  LaunchOptions options = Script("echo \"out $TESSEL_HOST_INDEX\"", 3);
  absl::StatusOr<LaunchResult> result = LaunchWithStdoutTo(options, dir_ + "/stdout");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(Read("stdout"), "out 0\n");

  options.forward_all_stdout = true;
  result = LaunchWithStdoutTo(options, dir_ + "/stdout_all");
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<std::string> lines = absl::StrSplit(Read("stdout_all"), '\n', absl::SkipEmpty());
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"out 0", "out 1", "out 2"}));
}

TEST_F(LauncherTest, BadOptions) {
  LaunchOptions options;
  absl::StatusOr<LaunchResult> result = LaunchHosts(options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);

  options.argv = {"true"};
  options.num_hosts = 0;
  result = LaunchHosts(options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("got 0"));

  // More hosts than one machine is allowed: refused before any process starts.
  options.num_hosts = 3;
  options.max_hosts = 2;
  result = LaunchHosts(options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              HasSubstr("3 host processes requested, more than the 2 one launch starts"));
  options.max_hosts = LaunchOptions{}.max_hosts;

  options.num_hosts = 2;
  options.argv = {"tessel-no-such-program"};
  result = LaunchHosts(options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(result.status().message(),
              HasSubstr("\"tessel-no-such-program\" not found in $PATH"));

  options.argv = {"/nonexistent/dir/prog"};
  result = LaunchHosts(options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(result.status().message(), HasSubstr("/nonexistent/dir/prog"));

  options.argv = {dir_};  // a directory
  result = LaunchHosts(options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(result.status().message(), HasSubstr("not an executable file"));

  options.argv = {"true"};
  options.extra_env["A=B"] = "c";
  result = LaunchHosts(options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LauncherTest, ExecFailureIsInternal) {
  // Executable bit but not a valid executable and no #! line: execve fails with ENOEXEC.
  const std::string bogus = dir_ + "/bogus";
  {
    std::ofstream out(bogus, std::ios::binary);
    out << std::string(
        "\x7f"
        "ELF garbage",
        12);
  }
  std::filesystem::permissions(bogus, std::filesystem::perms::owner_all);
  LaunchOptions options;
  options.argv = {bogus};
  options.num_hosts = 2;
  absl::StatusOr<LaunchResult> result = LaunchHosts(options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(), HasSubstr("host 0: cannot execute " + bogus));
}

TEST(ResolveProgramTest, SearchesPath) {
  absl::StatusOr<std::string> sh = ResolveProgram("sh");
  ASSERT_TRUE(sh.ok()) << sh.status();
  EXPECT_THAT(*sh, MatchesRegex(".*/sh"));
  EXPECT_EQ(ResolveProgram("/bin/sh").value(), "/bin/sh");
}

}  // namespace
}  // namespace tessel::mesh
