// collectives_bench: all-reduce and all-gather bus bandwidth of ZmqTransport between real host
// processes on this machine, nccl-tests style.
//
//   collectives_bench [--hosts=2,4,8] [--protocol=ipc|tcp] [--min_bytes=4096]
//                     [--max_bytes=67108864] [--step=4] [--budget_ms=300]
//                     [--chunk_bytes=1048576]
//
// For each host count the driver forks that many host processes (one device each); host 0
// prints one line per (collective, size):
//   all-reduce  hosts=4  bytes=1048576  us=812.4  algbw_gbps=1.29  busbw_gbps=1.94
// Sizes are nccl-tests' "size": the all-reduce buffer, the all-gather output. Bandwidths are
// 10^9 bytes/s: algbw = size / time; all-reduce busbw = algbw * 2(n-1)/n; all-gather busbw =
// algbw * (n-1)/n. The time of one call is the mean over a timed loop after 2 warm-up calls,
// measured on host 0 between two barriers. Also printed: this machine's memcpy bandwidth on a
// warm 64 MiB buffer (the physical limit of any in-memory transport).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "transport/zmq_transport.h"

namespace tessel::transport {
namespace {

struct Flags {
  std::vector<int64_t> hosts = {2, 4, 8};
  ZmqProtocol protocol = ZmqProtocol::kIpc;
  int64_t min_bytes = 4096;
  int64_t max_bytes = 64 << 20;
  int64_t step = 4;
  int64_t budget_ms = 300;
  int64_t chunk_bytes = 1 << 20;  // CommunicatorOptions::pipeline_chunk_bytes
};

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double MemcpyGbps() {
  const size_t bytes = 64 << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);  // warm
  const auto start = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int i = 0; i < reps; ++i) std::memcpy(b.data(), a.data(), bytes);
  const double s = Seconds(start, std::chrono::steady_clock::now());
  return reps * static_cast<double>(bytes) / s / 1e9;
}

// Runs one host of the benchmark; returns the process exit code.
int RunHost(const Flags& flags, int64_t rank, int64_t hosts, const std::string& dir) {
  ZmqOptions options;
  options.rank = rank;
  options.num_hosts = hosts;
  options.device_map = DeviceMap::Uniform(hosts, 1);
  options.protocol = flags.protocol;
  options.coordinator_address = absl::StrCat("ipc://", dir, "/coord");
  options.ipc_dir = dir;
  options.communicator.pipeline_chunk_bytes = flags.chunk_bytes;
  auto comm = ZmqTransport::Create(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "host %lld: %s\n", static_cast<long long>(rank),
                 comm.status().ToString().c_str());
    return 3;
  }
  Communicator& c = **comm;
  for (const char* op : {"all-reduce", "all-gather"}) {
    const bool reduce = std::strcmp(op, "all-reduce") == 0;
    for (int64_t size = flags.min_bytes; size <= flags.max_bytes; size *= flags.step) {
      // all-gather: `size` is the output; each host contributes size / hosts.
      const int64_t count = reduce ? size / 4 : size / 4 / hosts;
      if (count == 0) continue;
      std::vector<float> in(reduce ? count : count, 1.0f);
      std::vector<float> out(reduce ? count : count * hosts);
      auto once = [&]() {
        return reduce ? c.AllReduce(rank, {}, ReduceKind::kAdd, DType::kF32, in.data(), out.data(),
                                    count)
                      : c.AllGather(rank, {}, DType::kF32, in.data(), out.data(), count);
      };
      for (int i = 0; i < 2; ++i) {
        if (absl::Status s = once(); !s.ok()) {
          std::fprintf(stderr, "host %lld: %s\n", static_cast<long long>(rank),
                       s.ToString().c_str());
          return 3;
        }
      }
      // Iterations from the warm-up time on host 0, agreed through a broadcast.
      int64_t iterations = 0;
      if (rank == 0) {
        const auto t0 = std::chrono::steady_clock::now();
        (void)once();
        const double one = Seconds(t0, std::chrono::steady_clock::now());
        iterations = std::clamp<int64_t>(
            static_cast<int64_t>(flags.budget_ms / 1e3 / std::max(one, 1e-7)), 3, 2000);
      } else {
        (void)once();
      }
      if (!c.Broadcast(rank, {}, 0, DType::kS64, &iterations, 1).ok()) return 3;
      if (!c.Barrier(rank, {}).ok()) return 3;
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < iterations; ++i) {
        if (absl::Status s = once(); !s.ok()) {
          std::fprintf(stderr, "host %lld: %s\n", static_cast<long long>(rank),
                       s.ToString().c_str());
          return 3;
        }
      }
      if (!c.Barrier(rank, {}).ok()) return 3;
      const double seconds = Seconds(start, std::chrono::steady_clock::now()) / iterations;
      if (rank == 0) {
        const int64_t bytes = reduce ? count * 4 : count * 4 * hosts;
        const double algbw = bytes / seconds / 1e9;
        const double factor = reduce ? 2.0 * (hosts - 1) / hosts : 1.0 * (hosts - 1) / hosts;
        std::printf("%-11s hosts=%lld  bytes=%-9lld us=%-10.1f algbw_gbps=%-7.3f busbw_gbps=%.3f\n",
                    op, static_cast<long long>(hosts), static_cast<long long>(bytes), seconds * 1e6,
                    algbw, algbw * factor);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    int64_t v = 0;
    if (kv.first == "--hosts") {
      flags.hosts.clear();
      for (absl::string_view h : absl::StrSplit(kv.second, ',')) {
        if (!absl::SimpleAtoi(h, &v) || v < 1) return 2;
        flags.hosts.push_back(v);
      }
    } else if (kv.first == "--protocol") {
      flags.protocol = kv.second == "tcp" ? ZmqProtocol::kTcp : ZmqProtocol::kIpc;
    } else if (absl::SimpleAtoi(kv.second, &v) && v > 0) {
      if (kv.first == "--min_bytes") flags.min_bytes = v;
      if (kv.first == "--max_bytes") flags.max_bytes = v;
      if (kv.first == "--step") flags.step = std::max<int64_t>(v, 2);
      if (kv.first == "--budget_ms") flags.budget_ms = v;
      if (kv.first == "--chunk_bytes") flags.chunk_bytes = v;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  std::printf("memcpy (warm 64 MiB): %.2f GB/s\n", MemcpyGbps());
  std::fflush(stdout);
  int result = 0;
  for (int64_t hosts : flags.hosts) {
    char pattern[] = "/tmp/tsl-bench-XXXXXX";
    const std::string dir = mkdtemp(pattern);
    std::vector<pid_t> children;
    for (int64_t r = 0; r < hosts; ++r) {
      const pid_t pid = fork();
      if (pid == 0) _exit(RunHost(flags, r, hosts, dir));
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) result = 1;
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return result;
}

}  // namespace
}  // namespace tessel::transport

int main(int argc, char** argv) { return tessel::transport::Main(argc, argv); }
