#include "tessel/mesh/launch/host_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tessel/core/environment.h"
#include "tessel/core/fingerprint.h"
#include "tessel/core/status_macros.h"

namespace tessel::mesh {
namespace {

// One launcher's pair of variables: the rank and the number of ranks.
struct RankFamily {
  const char* rank_variable;
  const char* size_variable;
  const char* launcher;      // for messages
  bool derives_coordinator;  // an ipc coordinator may be derived from the MPI job id
};

constexpr RankFamily kFamilies[] = {
    {"TESSEL_HOST_INDEX", "TESSEL_NUM_HOSTS", "tessel launch", false},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun", true},
    {"PMI_RANK", "PMI_SIZE", "hydra mpiexec", true},
    {"SLURM_PROCID", "SLURM_NTASKS", "srun", false},
};

std::optional<std::string> GetEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// A folder only this user can enter, for the sockets of jobs whose ranks must find each other
// without talking first: $XDG_RUNTIME_DIR when it is ours with mode 0700 (systemd's per-user
// runtime folder), else $TMPDIR/tessel-<uid> (TMPDIR defaults to /tmp), made with mode 0700 and
// checked like tmux checks its socket folder. Every rank derives the same name, so no rank has to
// tell the others; a folder of that name made by someone else, or left open to others, is
// refused, never used: another user can make the job fail, never join it.
absl::StatusOr<std::string> PrivateSocketFolder() {
  const uid_t uid = getuid();
  if (std::optional<std::string> xdg = GetEnv("XDG_RUNTIME_DIR");
      xdg.has_value() && !xdg->empty()) {
    struct stat info;
    if (lstat(xdg->c_str(), &info) == 0 && S_ISDIR(info.st_mode) && info.st_uid == uid &&
        (info.st_mode & 0777) == 0700) {
      return *xdg;
    }
  }
  std::string base = GetEnv("TMPDIR").value_or("");
  if (base.empty()) base = "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const std::string folder = absl::StrFormat("%s/tessel-%d", base, static_cast<int64_t>(uid));
  if (mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the private socket folder ", folder, ": ", strerror(errno)));
  }
  struct stat info;
  if (lstat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != uid ||
      (info.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not a private folder of this user (uid %d): it must be a directory owned by uid "
        "%d with mode 0700, not a link; another user may have made it. Remove it, or set "
        "TESSEL_COORDINATOR=ipc://<a path in a folder only you can enter>",
        folder, static_cast<int64_t>(uid), static_cast<int64_t>(uid)));
  }
  return folder;
}

// The ipc:// coordinator address every rank of one mpirun / hydra job derives from the job id
// (a socket in PrivateSocketFolder), or nullopt when none of kDerivedCoordinatorSources is set.
absl::StatusOr<std::optional<std::string>> DerivedCoordinator() {
  for (std::string_view name : kDerivedCoordinatorSources) {
    std::optional<std::string> job_id = GetEnv(std::string(name).c_str());
    if (!job_id.has_value() || job_id->empty()) continue;
    TESSEL_ASSIGN_OR_RETURN(std::string folder, PrivateSocketFolder());
    return std::optional<std::string>(
        absl::StrFormat("ipc://%s/tessel-%016x.coord", folder, Fnv1a64(*job_id)));
  }
  return std::optional<std::string>();
}

}  // namespace

bool LaunchedAsHost() {
  for (const RankFamily& family : kFamilies) {
    if (std::getenv(family.rank_variable) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<HostEnvironment> ReadHostEnvironment() {
  const RankFamily* family = nullptr;
  for (const RankFamily& f : kFamilies) {
    if (std::getenv(f.rank_variable) != nullptr) {
      family = &f;
      break;
    }
  }
  if (family == nullptr) {
    return absl::NotFoundError(
        "no host index in the environment: none of TESSEL_HOST_INDEX, OMPI_COMM_WORLD_RANK, "
        "PMI_RANK, SLURM_PROCID is set (start the program with `tessel launch CONFIG -- ...`, "
        "mpirun or srun)");
  }
  HostEnvironment env;
  env.source = family->rank_variable;

  const std::string rank_text = *GetEnv(family->rank_variable);
  absl::StatusOr<int64_t> rank =
      ParseInt64(rank_text, family->rank_variable, std::numeric_limits<int64_t>::min(),
                 std::numeric_limits<int64_t>::max());
  if (!rank.ok()) return rank.status();
  env.host_index = *rank;

  // An explicit TESSEL_NUM_HOSTS wins; otherwise the count of the launcher that gave the rank.
  const char* size_variable =
      std::getenv("TESSEL_NUM_HOSTS") != nullptr ? "TESSEL_NUM_HOSTS" : family->size_variable;
  std::optional<std::string> size_text = GetEnv(size_variable);
  if (!size_text.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(family->rank_variable, "=", rank_text,
                                                   " is set but ", size_variable,
                                                   " (the number of hosts) is not"));
  }
  absl::StatusOr<int64_t> size =
      ParseInt64(*size_text, size_variable, std::numeric_limits<int64_t>::min(),
                 std::numeric_limits<int64_t>::max());
  if (!size.ok()) return size.status();
  if (*size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(size_variable, "=", *size_text, ": the number of hosts must be at least 1"));
  }
  env.num_hosts = *size;
  if (env.host_index < 0 || env.host_index >= env.num_hosts) {
    return absl::InvalidArgumentError(absl::StrCat(family->rank_variable, "=", rank_text,
                                                   " is outside [0, ", env.num_hosts, ") (",
                                                   size_variable, "=", *size_text, ")"));
  }

  env.config_path = GetEnv("TESSEL_CONFIG").value_or("");
  env.job_token = GetEnv("TESSEL_JOB_TOKEN").value_or("");
  env.tcp_interface = GetEnv("TESSEL_TCP_INTERFACE").value_or("");
  env.ipc_dir = GetEnv("TESSEL_IPC_DIR").value_or("");

  if (std::optional<std::string> timeout = GetEnv("TESSEL_BOOTSTRAP_TIMEOUT_S")) {
    double seconds = 0.0;
    if (!absl::SimpleAtod(*timeout, &seconds) || !(seconds > 0.0) || seconds > 1e9) {
      return absl::InvalidArgumentError(absl::StrCat("TESSEL_BOOTSTRAP_TIMEOUT_S=\"", *timeout,
                                                     "\": expected a positive number of seconds"));
    }
    env.bootstrap_timeout = absl::Seconds(seconds);
  }

  if (std::optional<std::string> coordinator = GetEnv("TESSEL_COORDINATOR");
      coordinator.has_value() && !coordinator->empty()) {
    if (!absl::StartsWith(*coordinator, "tcp://") && !absl::StartsWith(*coordinator, "ipc://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("TESSEL_COORDINATOR=\"", *coordinator,
                       "\": expected tcp://<host>:<port> or ipc://<path>"));
    }
    env.coordinator = *coordinator;
  } else if (env.num_hosts > 1) {
    std::optional<std::string> derived;
    if (family->derives_coordinator) {
      TESSEL_ASSIGN_OR_RETURN(derived, DerivedCoordinator());
    }
    if (!derived.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          family->rank_variable, "=", rank_text, " (", family->launcher,
          "): no coordinator address; set TESSEL_COORDINATOR=tcp://<host>:<port> for every "
          "host, with <host> the machine that runs ",
          family->rank_variable, "=0 and <port> a free port there"));
    }
    env.coordinator = *derived;
    // The data sockets beside the coordinator, in the same private folder.
    if (env.ipc_dir.empty())
      env.ipc_dir = env.coordinator.substr(6, env.coordinator.rfind('/') - 6);
  }
  // A tcp job is reachable by every process that reaches the port: without a token any of them
  // could join it. No secret can be derived from what the launcher sets (job ids and host
  // names are guessable), so the user must give one.
  if (env.num_hosts > 1 && absl::StartsWith(env.coordinator, "tcp://") && env.job_token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        family->rank_variable, "=", rank_text, " (", family->launcher,
        "): TESSEL_COORDINATOR=", env.coordinator,
        " is tcp but TESSEL_JOB_TOKEN is not set, so any process that reaches the port could "
        "join the job. Set the same random secret on every host and keep it off the command "
        "line: `export TESSEL_JOB_TOKEN=$(openssl rand -hex 16)`, then `mpirun -x "
        "TESSEL_JOB_TOKEN ...` or `srun --export=ALL,... ...`; add TESSEL_CURVE=1 to encrypt "
        "the traffic too (docs/launch.md)"));
  }
  return env;
}

absl::Status ApplyHostEnvironment(const HostEnvironment& env, transport::ZmqOptions* options) {
  options->rank = env.host_index;
  options->num_hosts = env.num_hosts;
  options->coordinator_address = env.coordinator;
  options->protocol = absl::StartsWith(env.coordinator, "tcp://") ? transport::ZmqProtocol::kTcp
                                                                  : transport::ZmqProtocol::kIpc;
  options->job_token = env.job_token;
  if (env.bootstrap_timeout.has_value()) options->bootstrap_timeout = *env.bootstrap_timeout;
  if (!env.tcp_interface.empty()) options->tcp_interface = env.tcp_interface;
  if (!env.ipc_dir.empty()) options->ipc_dir = env.ipc_dir;
  return transport::ApplyEnvironment(options);
}

transport::DeviceMap DeviceMapOf(const Topology& topology) {
  transport::DeviceMap map;
  map.host_of_device.reserve(topology.num_devices());
  map.slice_of_device.reserve(topology.num_devices());
  for (const Device& device : topology.devices()) {
    map.host_of_device.push_back(device.host);
    map.slice_of_device.push_back(device.slice);
  }
  return map;
}

}  // namespace tessel::mesh
