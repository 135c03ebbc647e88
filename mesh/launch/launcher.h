// The embedded launcher: starts one OS process per host of a job on this machine and watches
// them, as torchrun (torch.distributed.run, --standalone) and `mpirun -np N` do. It backs
// `tessel launch CONFIG -- PROGRAM ARGS...` and `tessel run`.
//
//   mesh::LaunchOptions options;
//   options.argv = {"host_probe", "--iterations", "20"};  // found through PATH
//   options.num_hosts = 4;
//   options.config_path = "configs/two_slices_2x2hosts.json";
//   absl::StatusOr<mesh::LaunchResult> result = mesh::LaunchHosts(options);
//   // result->exit_code == 0 when every host exited 0; otherwise result->message says which
//   // host failed first and how: "host 2 (pid 1234) was killed by signal 9 (Killed)".
//
// Each host process gets, on top of the launcher's own environment (see mesh/launch/host_env.h):
//   TESSEL_HOST_INDEX=i, TESSEL_NUM_HOSTS=n, TESSEL_CONFIG=<absolute config path>,
//   TESSEL_COORDINATOR=ipc://<private dir>/coordinator (host 0 serves the bootstrap there),
//   TESSEL_IPC_DIR=<private dir> (the hosts' ipc data sockets), TESSEL_JOB_TOKEN=<128 random
//   bits in hex>, then LaunchOptions::extra_env. TESSEL_EXTERNAL_COORDINATOR is removed. The
//   private directory is made with mkdtemp under $TMPDIR (else /tmp) and removed at the end
//   (a launcher killed by SIGKILL cannot remove it: an empty-ish tessel-launch-XXXXXX stays).
//
// Process handling (Linux):
//   - fork + execve, no shell. stdin is /dev/null. Host 0's stdout is the launcher's; the other
//     hosts' stdout goes to /dev/null unless forward_all_stdout. Every host's stderr is the
//     launcher's.
//   - Each host leads its own process group (so stopping a host also stops what it started) and
//     has PR_SET_PDEATHSIG = SIGKILL: if the launcher dies, even by SIGKILL, the hosts die too.
//   - The first host that exits non-zero or is killed by a signal fails the job: the launcher
//     sends SIGTERM to the process groups of the hosts still running and SIGKILL to those still
//     running failure_grace later, then reaps them all. Nothing is left running on return.
//   - SIGINT / SIGTERM sent to the launcher during LaunchHosts are forwarded to every running
//     host (its process group); SIGKILL follows failure_grace later, or at once on a second
//     signal (or a signal that arrives while the hosts are being stopped after a failure).
//     The launcher's previous handlers are restored on return.
//   - Messages of its own go to stderr, one line each, prefixed by program_name: the failure
//     (the same text as LaunchResult::message, when it is detected), a forwarded signal, and
//     hosts that needed SIGKILL. Callers need not print LaunchResult::message again.
#ifndef TESSEL_MESH_LAUNCHER_H_
#define TESSEL_MESH_LAUNCHER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessel::mesh {

// What to start and how.
struct LaunchOptions {
  // Program and arguments, run once per host. argv[0] is resolved through $PATH when it has no
  // '/', as execvp does; it is passed to the program unchanged.
  std::vector<std::string> argv;
  int64_t num_hosts = 1;  // processes to start, >= 1
  // The most processes one launch starts on this machine. A topology of a whole pod (e.g.
  // configs/4x_v5p-4096.json: 4096 hosts) is meant for `tessel simulate`, or for mpirun / srun
  // across machines; starting it here by mistake would fork thousands of processes, so it is
  // refused unless this is raised (mpirun likewise refuses more ranks than slots without
  // --oversubscribe).
  int64_t max_hosts = 256;
  // Exported as TESSEL_CONFIG, made absolute (relative to the current directory) so hosts may
  // change directory. Empty: TESSEL_CONFIG is passed on unchanged from the launcher's
  // environment (or stays unset).
  std::string config_path;
  // Set in every host's environment last (they override the TESSEL_* variables above).
  std::map<std::string, std::string> extra_env;
  // Default: host 0's stdout passes through, the other hosts' stdout is discarded (as torchrun
  // --tee / mpirun --output-filename filter ranks); every host's stderr passes through.
  bool forward_all_stdout = false;
  // After a host fails (or a signal is forwarded): SIGTERM the others, SIGKILL after this.
  absl::Duration failure_grace = absl::Seconds(2);
  std::string program_name = "tessel run";  // prefix of the launcher's own messages
};

// How a job ended.
struct LaunchResult {
  // 0 when every host exited 0. Otherwise: the failed host's exit status, or 128 + the signal
  // number when it was killed (the shell's convention); 128 + the signal number the launcher
  // received when it was interrupted.
  int exit_code = 0;
  int64_t failed_host = -1;  // the first host that failed; -1 if none (success, interrupted)
  // "" on success; else "host 2 (pid 1234) was killed by signal 9 (Killed)", "host 1 (pid 1233)
  // exited with status 3", or "interrupted by signal 2 (Interrupt); stopped 4 host(s)".
  std::string message;
};

// Starts one process per host with the environment above, waits for all, and returns 0 when
// all exit 0; when one fails, stops the others and names it (see the file comment). Blocks
// until every host process has been reaped. Calls are serialized (one job at a time per
// process). The calling thread must stay alive until it returns (PR_SET_PDEATHSIG follows the
// thread that forked).
// Errors (no host is left running on any error):
//   kInvalidArgument: empty argv or argv[0], num_hosts < 1, num_hosts > max_hosts, a negative
//     failure_grace, or an extra_env name that is empty or contains '=';
//   kNotFound: argv[0] is not an executable file (searched through $PATH when it has no '/');
//   kInternal: mkdtemp, fork, pipe or execve failed, with the errno text and the host index.
[[nodiscard]] absl::StatusOr<LaunchResult> LaunchHosts(const LaunchOptions& options);

// The file execve would run for `program`: `program` itself when it contains '/', else the
// first executable regular file `dir/program` over the ':'-separated directories of $PATH
// (an empty entry means the current directory). Errors: kNotFound naming the program and,
// for the $PATH search, that it searched $PATH.
[[nodiscard]] absl::StatusOr<std::string> ResolveProgram(const std::string& program);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_LAUNCHER_H_
