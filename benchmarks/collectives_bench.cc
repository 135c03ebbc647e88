// collectives_bench: all-reduce and all-gather bus bandwidth of ZmqTransport between real host
// processes on this machine, nccl-tests style; the table format is shared with
// mpi_collectives_bench (the OpenMPI baseline), scripts/bench_collectives.sh runs both.
//
//   collectives_bench [--hosts=2,4,8] [--protocol=ipc|tcp] [--min_bytes=4096]
//                     [--max_bytes=67108864] [--step=4] [--budget_ms=300]
//                     [--chunk_bytes=1048576] [--pipeline_depth=4] [--small_bytes=65536]
//                     [--curve]
//                     [--socket_buffer_bytes=4194304] [--direct_max_bytes=4194304]
//                     [--spin_us=N] [--shared_memory=0|1] [--shm_slots=8]
//                     [--shm_min_bytes=32768] [--memcpy_only]
//                     (CLI11; --help lists them)
//
// For each host count the driver forks that many host processes (one device each); host 0
// prints one row per (collective, size):
//   # collective impl         ranks      bytes           us algbw_gbps busbw_gbps ...
//   all-reduce   tessel-ipc       4    1048576        812.4      1.291      1.936 ...
// The last column, cpu_us, is the CPU time (user + system, every thread: device, progress and
// ZeroMQ I/O) that all hosts together spent per call during the timed loop (memcpy rows: the
// copying process). The column after it, shm_pct, is the share of the messages all hosts sent
// in the timed loop that went through shared-memory slots (the rest: ZeroMQ, because ipc has
// shared memory off, a slot was busy, or tcp); "-" on memcpy rows.
// Sizes are nccl-tests' "size": the all-reduce buffer, the all-gather output (each host
// contributes size / hosts). Bandwidths are 10^9 bytes/s: algbw = size / time; all-reduce
// busbw = algbw * 2(n-1)/n; all-gather busbw = algbw * (n-1)/n. The time of one call is the
// mean over a timed loop (iteration count from one call after 2 warm-up calls, at least 3, so
// that the loop takes about budget_ms) measured on host 0 between two barriers.
//
// The impl column: "tessel-shm" for ipc with shared-memory payloads (ZmqOptions::shared_memory,
// the default), "tessel-ipc" for ipc with --shared_memory=0 (ZeroMQ carries every byte),
// "tessel-tcp" for --protocol=tcp. --curve turns on ZmqOptions::curve (CURVE encryption, never
// with shared memory); the impl column then reads "tessel-tcp-curve" (or "tessel-ipc-curve").
//
// Before the collectives (or alone, with --memcpy_only) it prints rows "memcpy memcpy 1 <bytes>
// ..." for every size: memcpy between two warm buffers of that size in this process, the
// physical limit of any transport that copies each byte once (busbw = algbw).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/fork_hosts.h"
#include "benchmarks/sweep_flags.h"
#include "tessel/core/command_line.h"
#include "tessel/transport/zmq_transport.h"

namespace tessel::transport {
namespace {

struct Flags : benchmarks::SweepFlags {
  ZmqProtocol protocol = ZmqProtocol::kIpc;
  int64_t chunk_bytes = 1 << 20;  // CommunicatorOptions::pipeline_chunk_bytes
  int64_t pipeline_depth = CommunicatorOptions().pipeline_depth;
  int64_t small_bytes = 64 << 10;  // CommunicatorOptions::small_message_bytes
  bool memcpy_only = false;
  bool curve = false;                                                 // ZmqOptions::curve
  int64_t socket_buffer_bytes = ZmqOptions().socket_buffer_bytes;     // 0: the kernel default
  int64_t direct_max_bytes = CommunicatorOptions().direct_max_bytes;  // 0: always the ring
  // CommunicatorOptions::spin_wait in microseconds; 0: sleep at once; -1 (default): the
  // transport's choice (EffectiveSpinWait).
  int64_t spin_us = -1;
  bool shared_memory = true;  // ZmqOptions::shared_memory (ipc only)
  int64_t shm_slots = ZmqOptions().shared_memory_slots;
  int64_t shm_min_bytes = ZmqOptions().shared_memory_min_bytes;
};

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time (user + system, all threads) this process has used, in seconds.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void PrintHeader() {
  std::printf("%-12s %-12s %5s %10s %12s %10s %10s %10s %8s\n", "# collective", "impl", "ranks",
              "bytes", "us", "algbw_gbps", "busbw_gbps", "cpu_us", "shm_pct");
  std::fflush(stdout);
}

// `seconds` and `cpu_seconds` per call; `shm_percent`: share of the messages sent through
// shared memory (negative: not applicable, printed as "-").
void PrintRow(const char* collective, const std::string& impl, int64_t ranks, int64_t bytes,
              double seconds, double bus_factor, double cpu_seconds, double shm_percent = -1) {
  const double algbw_gbps = static_cast<double>(bytes) / seconds / 1e9;
  const std::string shm = shm_percent < 0 ? "-" : absl::StrFormat("%.1f", shm_percent);
  std::printf("%-12s %-12s %5lld %10lld %12.1f %10.3f %10.3f %10.1f %8s\n", collective,
              impl.c_str(), static_cast<long long>(ranks), static_cast<long long>(bytes),
              seconds * 1e6, algbw_gbps, algbw_gbps * bus_factor, cpu_seconds * 1e6, shm.c_str());
  std::fflush(stdout);
}

// memcpy of `bytes` between two warm buffers: seconds per copy (mean over about budget_ms).
double MemcpySeconds(int64_t bytes, int64_t budget_ms, double* cpu_seconds) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);  // warm: every page touched
  const auto t0 = std::chrono::steady_clock::now();
  std::memcpy(b.data(), a.data(), bytes);
  const double one = Seconds(t0, std::chrono::steady_clock::now());
  const int64_t reps =
      std::clamp<int64_t>(static_cast<int64_t>(budget_ms / 1e3 / std::max(one, 1e-8)), 3, 100000);
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ProcessCpuSeconds();
  for (int64_t i = 0; i < reps; ++i) {
    std::memcpy(b.data(), a.data(), bytes);
    // Keep the compiler from merging the copies: the destination is read.
    asm volatile("" : : "r"(b.data()) : "memory");
  }
  *cpu_seconds = (ProcessCpuSeconds() - cpu_start) / static_cast<double>(reps);
  return Seconds(start, std::chrono::steady_clock::now()) / static_cast<double>(reps);
}

// Runs one host of the benchmark; returns the process exit code.
int RunHost(const Flags& flags, int64_t rank, int64_t hosts, const std::string& dir,
            const std::string& token) {
  ZmqOptions options;
  options.job_token = token;  // tcp jobs must be authenticated
  options.rank = rank;
  options.num_hosts = hosts;
  options.device_map = DeviceMap::Uniform(hosts, 1);
  options.protocol = flags.protocol;
  options.coordinator_address = absl::StrCat("ipc://", dir, "/coord");
  options.ipc_dir = dir;
  options.communicator.pipeline_chunk_bytes = flags.chunk_bytes;
  options.communicator.pipeline_depth = flags.pipeline_depth;
  options.communicator.small_message_bytes = flags.small_bytes;
  options.curve = flags.curve;
  options.shared_memory = flags.shared_memory;
  options.shared_memory_slots = static_cast<int32_t>(flags.shm_slots);
  options.shared_memory_min_bytes = flags.shm_min_bytes;
  options.socket_buffer_bytes = flags.socket_buffer_bytes;
  options.communicator.direct_max_bytes = flags.direct_max_bytes;
  if (flags.spin_us >= 0) options.communicator.spin_wait = absl::Microseconds(flags.spin_us);
  auto comm = ZmqTransport::Create(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "host %lld: %s\n", static_cast<long long>(rank),
                 comm.status().ToString().c_str());
    return 3;
  }
  ZmqTransport& c = **comm;
  // ipc with shared-memory payloads (the default) reads "tessel-shm"; "tessel-ipc" is ipc with
  // ZeroMQ carrying every byte.
  const bool shm = flags.protocol == ZmqProtocol::kIpc && flags.shared_memory && !flags.curve;
  const std::string label = absl::StrCat(flags.protocol == ZmqProtocol::kTcp ? "tessel-tcp"
                                         : shm                               ? "tessel-shm"
                                                                             : "tessel-ipc",
                                         flags.curve ? "-curve" : "");
  for (const char* op : {"all-reduce", "all-gather"}) {
    const bool reduce = std::strcmp(op, "all-reduce") == 0;
    for (int64_t size = flags.min_bytes; size <= flags.max_bytes; size *= flags.step) {
      // all-gather: `size` is the output; each host contributes size / hosts.
      const int64_t count = reduce ? size / 4 : size / 4 / hosts;
      if (count == 0) continue;
      std::vector<float> in(count, 1.0f);
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
      // Iterations from one more call on host 0, agreed through a broadcast.
      int64_t iterations = 0;
      const auto t0 = std::chrono::steady_clock::now();
      if (absl::Status s = once(); !s.ok()) {
        std::fprintf(stderr, "host %lld: %s\n", static_cast<long long>(rank), s.ToString().c_str());
        return 3;
      }
      if (rank == 0) {
        const double one = Seconds(t0, std::chrono::steady_clock::now());
        iterations = std::clamp<int64_t>(
            static_cast<int64_t>(flags.budget_ms / 1e3 / std::max(one, 1e-7)), 3, 2000);
      }
      if (!c.Broadcast(rank, {}, 0, DType::kS64, &iterations, 1).ok()) return 3;
      if (!c.Barrier(rank, {}).ok()) return 3;
      // Messages sent in the timed loop, and how many of them through shared memory.
      auto messages = [&c]() {
        const CollectiveStats s = c.stats();
        return static_cast<double>(s.local.messages + s.ici.messages + s.dcn.messages);
      };
      double sent[2] = {-messages(), -static_cast<double>(c.shared_memory_messages())};
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = ProcessCpuSeconds();
      for (int64_t i = 0; i < iterations; ++i) {
        if (absl::Status s = once(); !s.ok()) {
          std::fprintf(stderr, "host %lld: %s\n", static_cast<long long>(rank),
                       s.ToString().c_str());
          return 3;
        }
      }
      sent[0] += messages();
      sent[1] += static_cast<double>(c.shared_memory_messages());
      if (!c.Barrier(rank, {}).ok()) return 3;
      const double seconds = Seconds(start, std::chrono::steady_clock::now()) / iterations;
      // Every host's CPU time per call, summed on host 0 (after the timed loop).
      double cpu = (ProcessCpuSeconds() - cpu_start) / static_cast<double>(iterations);
      if (!c.AllReduce(rank, {}, ReduceKind::kAdd, DType::kF64, &cpu, &cpu, 1).ok()) return 3;
      if (!c.AllReduce(rank, {}, ReduceKind::kAdd, DType::kF64, sent, sent, 2).ok()) return 3;
      // A check that the collective did its work (every host contributed 1.0f).
      const float expected = reduce ? static_cast<float>(hosts) : 1.0f;
      if (out.front() != expected || out.back() != expected) {
        std::fprintf(stderr, "host %lld: wrong result %g (expected %g)\n",
                     static_cast<long long>(rank), out.front(), expected);
        return 4;
      }
      if (rank == 0) {
        const int64_t bytes = reduce ? count * 4 : count * 4 * hosts;
        const double factor = reduce ? 2.0 * (hosts - 1) / hosts : 1.0 * (hosts - 1) / hosts;
        PrintRow(op, label, hosts, bytes, seconds, factor, cpu,
                 sent[0] > 0 ? 100.0 * sent[1] / sent[0] : 0.0);
      }
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{
      "All-reduce and all-gather bus bandwidth of ZmqTransport between forked host "
      "processes (nccl-tests definitions), and memcpy.",
      "collectives_bench"};
  benchmarks::AddSweepFlags(app, &flags, /*min_hosts=*/1);
  std::string protocol = "ipc";
  app.add_option("--protocol", protocol, "ipc or tcp")->check(CLI::IsMember({"ipc", "tcp"}));
  app.add_option("--chunk_bytes", flags.chunk_bytes, "CommunicatorOptions::pipeline_chunk_bytes")
      ->check(Positive());
  app.add_option(
         "--pipeline_depth", flags.pipeline_depth,
         "CommunicatorOptions::pipeline_depth: segments a step sends ahead (0: all at once)")
      ->check(NonNegative());
  app.add_option("--small_bytes", flags.small_bytes, "CommunicatorOptions::small_message_bytes")
      ->check(Positive());
  app.add_option("--direct_max_bytes", flags.direct_max_bytes,
                 "CommunicatorOptions::direct_max_bytes (0: always the ring)")
      ->check(NonNegative());
  app.add_option("--socket_buffer_bytes", flags.socket_buffer_bytes,
                 "ZmqOptions::socket_buffer_bytes (0: the kernel default)")
      ->check(NonNegative());
  app.add_option("--spin_us", flags.spin_us,
                 "CommunicatorOptions::spin_wait in us (default: the transport's choice)")
      ->check(NonNegative());
  app.add_flag("--curve", flags.curve, "ZmqOptions::curve (CURVE encryption)");
  app.add_option("--shared_memory", flags.shared_memory,
                 "ZmqOptions::shared_memory: payloads through shared-memory slots over ipc (1, "
                 "the default; impl tessel-shm) or ZeroMQ carries every byte (0; tessel-ipc)");
  app.add_option("--shm_slots", flags.shm_slots, "ZmqOptions::shared_memory_slots")
      ->check(CLI::Range(1, 1024));
  app.add_option("--shm_min_bytes", flags.shm_min_bytes, "ZmqOptions::shared_memory_min_bytes")
      ->check(NonNegative());
  app.add_flag("--memcpy_only", flags.memcpy_only, "only the memcpy rows");
  if (int code = ParseCommandLine(app, argc, argv); code >= 0) return code;
  flags.protocol = protocol == "tcp" ? ZmqProtocol::kTcp : ZmqProtocol::kIpc;
  PrintHeader();
  for (int64_t size = flags.min_bytes; size <= flags.max_bytes; size *= flags.step) {
    double cpu = 0;
    const double seconds = MemcpySeconds(size, flags.budget_ms, &cpu);
    PrintRow("memcpy", "memcpy", 1, size, seconds, 1.0, cpu);
  }
  if (flags.memcpy_only) return 0;
  int result = 0;
  std::random_device random;
  const std::string token =
      absl::StrFormat("%08x%08x%08x%08x", random(), random(), random(), random());
  for (int64_t hosts : flags.hosts) {
    result |=
        benchmarks::RunForkedHosts(hosts, "tsl-bench", [&](int64_t rank, const std::string& dir) {
          return RunHost(flags, rank, hosts, dir, token);
        });
  }
  return result;
}

}  // namespace
}  // namespace tessel::transport

int main(int argc, char** argv) { return tessel::transport::Main(argc, argv); }
