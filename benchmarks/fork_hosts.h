// Runs one benchmark "host" per forked process, as the multi-process collective benchmarks
// (collectives_bench, zmq_floor_bench) do.
//
//   int code = RunForkedHosts(4, "tsl-bench", [&](int64_t rank, const std::string& dir) {
//     return RunHost(flags, rank, 4, dir);   // the process's exit code
//   });
#ifndef TESSEL_BENCHMARKS_FORK_HOSTS_H_
#define TESSEL_BENCHMARKS_FORK_HOSTS_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

namespace tessel::benchmarks {

// Makes a fresh directory /tmp/<prefix>-XXXXXX (for ipc endpoints and rendezvous files), forks
// `hosts` processes, runs `host(rank, dir)` in process `rank` (0-based) and exits it with the
// returned code, waits for all of them and removes the directory. Returns 0 if every process
// exited with 0, else 1 (also when the directory cannot be made, with a message on stderr).
inline int RunForkedHosts(int64_t hosts, const std::string& prefix,
                          const std::function<int(int64_t rank, const std::string& dir)>& host) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror(("mkdtemp " + pattern).c_str());
    return 1;
  }
  const std::string dir = pattern;
  std::vector<pid_t> children;
  for (int64_t r = 0; r < hosts; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(host(r, dir));
    children.push_back(pid);
  }
  int result = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) result = 1;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return result;
}

}  // namespace tessel::benchmarks

#endif  // TESSEL_BENCHMARKS_FORK_HOSTS_H_
