#include "tessel/mesh/launch/host_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/transport/zmq_transport.h"

namespace tessel::mesh {
namespace {

using ::testing::HasSubstr;

// Every variable ReadHostEnvironment or ApplyEnvironment looks at.
const std::vector<std::string> kVariables = {"TESSEL_HOST_INDEX",
                                             "TESSEL_NUM_HOSTS",
                                             "TESSEL_CONFIG",
                                             "TESSEL_COORDINATOR",
                                             "TESSEL_JOB_TOKEN",
                                             "TESSEL_EXTERNAL_COORDINATOR",
                                             "TESSEL_CURVE",
                                             "TESSEL_SHARED_MEMORY",
                                             "TESSEL_BOOTSTRAP_TIMEOUT_S",
                                             "TESSEL_TCP_INTERFACE",
                                             "TESSEL_IPC_DIR",
                                             "OMPI_COMM_WORLD_RANK",
                                             "OMPI_COMM_WORLD_SIZE",
                                             "PMIX_NAMESPACE",
                                             "OMPI_MCA_ess_base_jobid",
                                             "PMI_RANK",
                                             "PMI_SIZE",
                                             "PMI_KVSNAME",
                                             "SLURM_PROCID",
                                             "SLURM_NTASKS",
                                             "TMPDIR",
                                             "XDG_RUNTIME_DIR"};

// Clears the variables for each test and restores the process environment afterwards.
class HostEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& name : kVariables) {
      if (const char* v = std::getenv(name.c_str())) saved_[name] = v;
      unsetenv(name.c_str());
    }
  }
  void TearDown() override {
    for (const std::string& name : kVariables) unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }
  static void Set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(HostEnvTest, NoRankVariableIsNotFound) {
  EXPECT_FALSE(LaunchedAsHost());
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(env.status().message(), HasSubstr("TESSEL_HOST_INDEX"));
}

TEST_F(HostEnvTest, TesselVariables) {
  Set("TESSEL_HOST_INDEX", "2");
  Set("TESSEL_NUM_HOSTS", "4");
  Set("TESSEL_CONFIG", "/cfg/x.json");
  Set("TESSEL_COORDINATOR", "ipc:///tmp/job/coordinator");
  Set("TESSEL_JOB_TOKEN", "abc123");
  Set("TESSEL_BOOTSTRAP_TIMEOUT_S", "1.5");
  Set("TESSEL_IPC_DIR", "/tmp/job");
  // Another launcher's variables are ignored when TESSEL_HOST_INDEX is set.
  Set("OMPI_COMM_WORLD_RANK", "0");
  Set("OMPI_COMM_WORLD_SIZE", "8");
  EXPECT_TRUE(LaunchedAsHost());
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->host_index, 2);
  EXPECT_EQ(env->num_hosts, 4);
  EXPECT_EQ(env->config_path, "/cfg/x.json");
  EXPECT_EQ(env->coordinator, "ipc:///tmp/job/coordinator");
  EXPECT_EQ(env->job_token, "abc123");
  EXPECT_EQ(env->source, "TESSEL_HOST_INDEX");
  ASSERT_TRUE(env->bootstrap_timeout.has_value());
  EXPECT_EQ(*env->bootstrap_timeout, absl::Milliseconds(1500));

  transport::ZmqOptions options;
  ASSERT_TRUE(ApplyHostEnvironment(*env, &options).ok());
  EXPECT_EQ(options.rank, 2);
  EXPECT_EQ(options.num_hosts, 4);
  EXPECT_EQ(options.coordinator_address, "ipc:///tmp/job/coordinator");
  EXPECT_EQ(options.protocol, transport::ZmqProtocol::kIpc);
  EXPECT_EQ(options.job_token, "abc123");
  EXPECT_EQ(options.bootstrap_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(options.ipc_dir, "/tmp/job");
  EXPECT_EQ(options.tcp_interface, "127.0.0.1");
  EXPECT_FALSE(options.external_coordinator);
}

TEST_F(HostEnvTest, TcpCoordinatorSelectsTcp) {
  Set("TESSEL_HOST_INDEX", "0");
  Set("TESSEL_NUM_HOSTS", "2");
  Set("TESSEL_COORDINATOR", "tcp://10.0.0.1:5555");
  Set("TESSEL_JOB_TOKEN", "f00d");
  Set("TESSEL_TCP_INTERFACE", "10.0.0.2");
  Set("TESSEL_EXTERNAL_COORDINATOR", "1");
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  transport::ZmqOptions options;
  ASSERT_TRUE(ApplyHostEnvironment(*env, &options).ok());
  EXPECT_EQ(options.protocol, transport::ZmqProtocol::kTcp);
  EXPECT_EQ(options.coordinator_address, "tcp://10.0.0.1:5555");
  EXPECT_EQ(options.tcp_interface, "10.0.0.2");
  EXPECT_TRUE(options.external_coordinator);
  EXPECT_EQ(options.bootstrap_timeout, absl::Seconds(60));  // unchanged default
}

// The boolean variables take 1/0, true/false, yes/no, on/off in any case; anything else stops
// the host with the variable named, where "true" used to leave CURVE silently off.
TEST_F(HostEnvTest, BooleanVariablesAreParsedStrictly) {
  Set("TESSEL_HOST_INDEX", "0");
  Set("TESSEL_NUM_HOSTS", "1");
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  Set("TESSEL_CURVE", "true");
  Set("TESSEL_SHARED_MEMORY", "Off");
  Set("TESSEL_EXTERNAL_COORDINATOR", "no");
  transport::ZmqOptions options;
  options.external_coordinator = true;
  ASSERT_TRUE(ApplyHostEnvironment(*env, &options).ok());
  EXPECT_TRUE(options.curve);
  EXPECT_FALSE(options.shared_memory);
  EXPECT_FALSE(options.external_coordinator);

  for (const char* variable :
       {"TESSEL_CURVE", "TESSEL_SHARED_MEMORY", "TESSEL_EXTERNAL_COORDINATOR"}) {
    Set(variable, "enabled");
    transport::ZmqOptions rejected;
    absl::Status status = ApplyHostEnvironment(*env, &rejected);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << variable;
    EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat(variable, "=\"enabled\"")));
    Set(variable, "1");
  }
}

// A fresh folder for TMPDIR / XDG_RUNTIME_DIR, removed at the end.
class ScratchFolder {
 public:
  ScratchFolder() {
    char pattern[] = "/tmp/tsl-env-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST_F(HostEnvTest, OpenMpiDerivesSharedIpcCoordinator) {
  ScratchFolder tmp;
  Set("OMPI_COMM_WORLD_RANK", "3");
  Set("OMPI_COMM_WORLD_SIZE", "4");
  Set("PMIX_NAMESPACE", "prterun-box-1234@1");
  Set("TMPDIR", tmp.path() + "/");
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->host_index, 3);
  EXPECT_EQ(env->num_hosts, 4);
  EXPECT_EQ(env->source, "OMPI_COMM_WORLD_RANK");
  // In a folder only this user can enter, never a name anyone can take in /tmp itself.
  const std::string folder = absl::StrFormat("%s/tessel-%d", tmp.path(), getuid());
  const std::string prefix = absl::StrCat("ipc://", folder, "/tessel-");
  EXPECT_EQ(env->coordinator.rfind(prefix, 0), 0u) << env->coordinator;
  EXPECT_EQ(env->coordinator.size(), prefix.size() + 16 + std::string(".coord").size());
  EXPECT_EQ(env->ipc_dir, folder);
  struct stat info;
  ASSERT_EQ(lstat(folder.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  EXPECT_EQ(info.st_uid, getuid());
  const std::string rank3 = env->coordinator;

  // Another rank of the same job derives the same address; another job a different one.
  Set("OMPI_COMM_WORLD_RANK", "0");
  absl::StatusOr<HostEnvironment> rank0 = ReadHostEnvironment();
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  EXPECT_EQ(rank0->coordinator, rank3);
  Set("PMIX_NAMESPACE", "prterun-box-1235@1");
  absl::StatusOr<HostEnvironment> other_job = ReadHostEnvironment();
  ASSERT_TRUE(other_job.ok()) << other_job.status();
  EXPECT_NE(other_job->coordinator, rank3);

  // Open MPI 4's job id alone is enough; an explicit TESSEL_COORDINATOR wins.
  unsetenv("PMIX_NAMESPACE");
  Set("OMPI_MCA_ess_base_jobid", "2290679809");
  absl::StatusOr<HostEnvironment> jobid = ReadHostEnvironment();
  ASSERT_TRUE(jobid.ok()) << jobid.status();
  EXPECT_EQ(jobid->coordinator.rfind(prefix, 0), 0u);
  Set("TESSEL_COORDINATOR", "tcp://127.0.0.1:4000");
  Set("TESSEL_JOB_TOKEN", "f00d");
  absl::StatusOr<HostEnvironment> explicit_address = ReadHostEnvironment();
  ASSERT_TRUE(explicit_address.ok()) << explicit_address.status();
  EXPECT_EQ(explicit_address->coordinator, "tcp://127.0.0.1:4000");
  EXPECT_EQ(explicit_address->ipc_dir, "");
}

// XDG_RUNTIME_DIR (systemd's per-user 0700 folder) is used when it is ours and private; one
// open to others is passed over for the TMPDIR folder.
TEST_F(HostEnvTest, DerivedCoordinatorPrefersAPrivateXdgRuntimeDir) {
  ScratchFolder runtime, tmp;
  Set("OMPI_COMM_WORLD_RANK", "1");
  Set("OMPI_COMM_WORLD_SIZE", "2");
  Set("PMIX_NAMESPACE", "prterun-box-1234@1");
  Set("TMPDIR", tmp.path());
  Set("XDG_RUNTIME_DIR", runtime.path());
  ASSERT_EQ(chmod(runtime.path().c_str(), 0700), 0);
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->coordinator.rfind(absl::StrCat("ipc://", runtime.path(), "/tessel-"), 0), 0u)
      << env->coordinator;
  ASSERT_EQ(chmod(runtime.path().c_str(), 0755), 0);
  env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->coordinator.rfind(
                absl::StrFormat("ipc://%s/tessel-%d/tessel-", tmp.path(), getuid()), 0),
            0u)
      << env->coordinator;
}

// A folder of the derived name that others may enter, or that another user made, is refused
// with the reason: such a user could otherwise bind the coordinator first and read every
// registration.
TEST_F(HostEnvTest, DerivedCoordinatorRefusesAFolderThatIsNotPrivate) {
  ScratchFolder tmp;
  Set("OMPI_COMM_WORLD_RANK", "1");
  Set("OMPI_COMM_WORLD_SIZE", "2");
  Set("PMIX_NAMESPACE", "prterun-box-1234@1");
  Set("TMPDIR", tmp.path());
  const std::string folder = absl::StrFormat("%s/tessel-%d", tmp.path(), getuid());
  ASSERT_EQ(mkdir(folder.c_str(), 0777), 0);
  ASSERT_EQ(chmod(folder.c_str(), 0777), 0);
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(env.status().message(), HasSubstr(absl::StrCat(folder, " is not a private folder")));
  if (geteuid() == 0) {  // root can hand the folder to another user, as an attacker would make it
    ASSERT_EQ(chmod(folder.c_str(), 0700), 0);
    ASSERT_EQ(chown(folder.c_str(), 65534, 65534), 0);
    env = ReadHostEnvironment();
    ASSERT_FALSE(env.ok());
    EXPECT_THAT(env.status().message(), HasSubstr("is not a private folder"));
  }
  // A link to a private folder is not taken either.
  ASSERT_EQ(rmdir(folder.c_str()), 0);
  const std::string target = tmp.path() + "/elsewhere";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(symlink(target.c_str(), folder.c_str()), 0);
  env = ReadHostEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(env.status().message(), HasSubstr("is not a private folder"));
}

// Under mpirun or srun a tcp job without TESSEL_JOB_TOKEN is refused before it opens a socket,
// saying how to pass a token with either launcher; with one it goes on.
TEST_F(HostEnvTest, TcpJobWithoutTokenIsRefused) {
  for (const auto& [rank, size, how] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun -x TESSEL_JOB_TOKEN"},
           {"SLURM_PROCID", "SLURM_NTASKS", "srun --export=ALL"},
           {"TESSEL_HOST_INDEX", "TESSEL_NUM_HOSTS", "TESSEL_JOB_TOKEN"}}) {
    for (const std::string& name : kVariables) unsetenv(name.c_str());
    Set(rank, "1");
    Set(size, "4");
    Set("TESSEL_COORDINATOR", "tcp://127.0.0.1:29500");
    absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
    ASSERT_FALSE(env.ok()) << rank;
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(env.status().message(), HasSubstr(absl::StrCat(rank, "=1")));
    EXPECT_THAT(env.status().message(), HasSubstr("TESSEL_JOB_TOKEN is not set"));
    EXPECT_THAT(env.status().message(), HasSubstr(how));
    EXPECT_THAT(env.status().message(), HasSubstr("TESSEL_CURVE=1"));
    Set("TESSEL_JOB_TOKEN", "0123456789abcdef");
    env = ReadHostEnvironment();
    ASSERT_TRUE(env.ok()) << env.status();
    EXPECT_EQ(env->job_token, "0123456789abcdef");
  }
  // ipc admits only this user's processes: no token needed there.
  for (const std::string& name : kVariables) unsetenv(name.c_str());
  Set("OMPI_COMM_WORLD_RANK", "1");
  Set("OMPI_COMM_WORLD_SIZE", "4");
  Set("TESSEL_COORDINATOR", "ipc:///tmp/x/coord");
  EXPECT_TRUE(ReadHostEnvironment().ok());
}

TEST_F(HostEnvTest, HydraPmiVariables) {
  ScratchFolder tmp;
  Set("TMPDIR", tmp.path());
  Set("PMI_RANK", "1");
  Set("PMI_SIZE", "2");
  Set("PMI_KVSNAME", "kvs_1234_0");
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->host_index, 1);
  EXPECT_EQ(env->num_hosts, 2);
  EXPECT_EQ(env->source, "PMI_RANK");
  EXPECT_THAT(env->coordinator, HasSubstr(".coord"));
}

TEST_F(HostEnvTest, SlurmNeedsCoordinator) {
  Set("SLURM_PROCID", "1");
  Set("SLURM_NTASKS", "4");
  Set("PMIX_NAMESPACE", "slurm.pmix.42.0");  // srun --mpi=pmix sets it; not used for srun
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(env.status().message(), HasSubstr("SLURM_PROCID=1"));
  EXPECT_THAT(env.status().message(), HasSubstr("TESSEL_COORDINATOR=tcp://"));

  Set("TESSEL_COORDINATOR", "tcp://node0:29500");
  Set("TESSEL_JOB_TOKEN", "f00d");
  env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->host_index, 1);
  EXPECT_EQ(env->num_hosts, 4);
  EXPECT_EQ(env->source, "SLURM_PROCID");
  EXPECT_EQ(env->coordinator, "tcp://node0:29500");
}

TEST_F(HostEnvTest, SingleHostNeedsNoCoordinator) {
  Set("SLURM_PROCID", "0");
  Set("SLURM_NTASKS", "1");
  absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->num_hosts, 1);
  EXPECT_EQ(env->coordinator, "");
}

// Bad values: kInvalidArgument naming the variable and the value.
struct BadCase {
  std::map<std::string, std::string> vars;
  std::string expected;  // substring of the message
};

TEST_F(HostEnvTest, BadValuesNameVariableAndValue) {
  const std::vector<BadCase> cases = {
      {{{"TESSEL_HOST_INDEX", "two"}, {"TESSEL_NUM_HOSTS", "4"}},
       "TESSEL_HOST_INDEX=\"two\": expected an integer in [-9223372036854775808, "},
      {{{"TESSEL_HOST_INDEX", "1"}, {"TESSEL_NUM_HOSTS", "4x"}},
       "TESSEL_NUM_HOSTS=\"4x\": expected an integer in ["},
      {{{"TESSEL_HOST_INDEX", "99999999999999999999"}, {"TESSEL_NUM_HOSTS", "4"}},
       "TESSEL_HOST_INDEX=\"99999999999999999999\": expected an integer in [-9223372036854775808, "
       "9223372036854775807]"},
      {{{"TESSEL_HOST_INDEX", "4"}, {"TESSEL_NUM_HOSTS", "4"}, {"TESSEL_COORDINATOR", "ipc:///c"}},
       "TESSEL_HOST_INDEX=4 is outside [0, 4)"},
      {{{"TESSEL_HOST_INDEX", "-1"}, {"TESSEL_NUM_HOSTS", "4"}}, "TESSEL_HOST_INDEX=-1 is outside"},
      {{{"TESSEL_HOST_INDEX", "0"}, {"TESSEL_NUM_HOSTS", "0"}},
       "TESSEL_NUM_HOSTS=0: the number of hosts must be at least 1"},
      {{{"TESSEL_HOST_INDEX", "0"}}, "TESSEL_NUM_HOSTS (the number of hosts) is not"},
      {{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
       "OMPI_COMM_WORLD_RANK=5 is outside [0, 2)"},
      {{{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "2"}}, "SLURM_PROCID=\"x\""},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", ""}}, "SLURM_NTASKS=\"\""},
      {{{"TESSEL_HOST_INDEX", "0"}, {"TESSEL_NUM_HOSTS", "2"}},
       "TESSEL_HOST_INDEX=0 (tessel launch): no coordinator address"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
       "set TESSEL_COORDINATOR=tcp://"},  // mpirun without any job id
      {{{"TESSEL_HOST_INDEX", "0"}, {"TESSEL_NUM_HOSTS", "2"}, {"TESSEL_COORDINATOR", "host:1"}},
       "TESSEL_COORDINATOR=\"host:1\": expected tcp://<host>:<port> or ipc://<path>"},
      {{{"TESSEL_HOST_INDEX", "0"}, {"TESSEL_NUM_HOSTS", "1"}, {"TESSEL_BOOTSTRAP_TIMEOUT_S", "0"}},
       "TESSEL_BOOTSTRAP_TIMEOUT_S=\"0\": expected a positive number of seconds"},
      {{{"TESSEL_HOST_INDEX", "0"},
        {"TESSEL_NUM_HOSTS", "1"},
        {"TESSEL_BOOTSTRAP_TIMEOUT_S", "soon"}},
       "TESSEL_BOOTSTRAP_TIMEOUT_S=\"soon\""},
  };
  for (const BadCase& c : cases) {
    for (const std::string& name : kVariables) unsetenv(name.c_str());
    std::string described;
    for (const auto& [name, value] : c.vars) {
      Set(name, value);
      absl::StrAppend(&described, name, "=", value, " ");
    }
    EXPECT_TRUE(LaunchedAsHost()) << described;
    absl::StatusOr<HostEnvironment> env = ReadHostEnvironment();
    ASSERT_FALSE(env.ok()) << described;
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument) << described;
    EXPECT_THAT(env.status().message(), HasSubstr(c.expected)) << described;
  }
}

TEST_F(HostEnvTest, DeviceMapOfTwoSlices) {
  absl::StatusOr<Topology> topology = MakeUniformTopology(2, {2, 2, 1}, 2);
  ASSERT_TRUE(topology.ok()) << topology.status();
  const transport::DeviceMap map = DeviceMapOf(*topology);
  EXPECT_EQ(map.host_of_device, (std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(map.slice_of_device, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(map, transport::DeviceMap::Uniform(4, 2, 2));
  EXPECT_TRUE(map.Validate(4).ok());
}

}  // namespace
}  // namespace tessel::mesh
