// zmq_floor_bench: what ZeroMQ alone costs for the exchange under a direct all-gather, with none
// of Tessel's protocol (no headers, matching, progress thread, deadlines or statistics). A
// baseline that separates Tessel's own overhead from the carrier's in the comparison with
// OpenMPI (scripts/bench_collectives.sh runs it). Not a strict floor: Tessel's ring and
// pipelining beat this one-message-per-peer exchange in most cells (docs/PERFORMANCE.md).
//
//   zmq_floor_bench [--hosts=2,4,8] [--protocol=ipc|tcp] [--min_bytes=4096]
//                   [--max_bytes=67108864] [--step=4] [--budget_ms=300]
//                   [--socket_buffer_bytes=4194304] [--chunk_bytes=1048576] [--poll]
//
// For each host count the driver forks that many processes. Each binds a ROUTER (ipc under a
// temporary directory, or tcp on 127.0.0.1 with a kernel-chosen port published through a file)
// and connects one DEALER to every other process, with the socket buffers Tessel uses
// (ZmqOptions::socket_buffer_bytes on ipc, the kernel's autotuning on tcp). One call: every
// process sends its block (size / hosts bytes) to every other process straight from its input, in
// zero-copy messages of at most chunk_bytes (Tessel's pipeline_chunk_bytes, 1 MiB), copies its
// own block into the output, and copies each received message out of ZeroMQ's frame into the
// output at its place; messages between a pair arrive in order, so consecutive calls need no
// other synchronisation. This is Tessel's direct all-gather without its protocol. Process 0 prints
// rows in collectives_bench's format (impl "zmq-raw-ipc" / "zmq-raw-tcp", collective "all-gather",
// busbw = algbw * (n-1)/n, cpu_us = CPU time of all processes per call). The iteration count is
// fixed from the size (about budget_ms at 1 GB/s, 3 to 2000), so no process has to agree on it.
// A process waits asleep in zmq recv, or with --poll (impl "zmq-raw-poll-ipc") polls the socket
// without sleeping, yielding its core between tries, as OpenMPI's ranks wait.
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "benchmarks/fork_hosts.h"
#include "benchmarks/sweep_flags.h"
#include "tessel/core/command_line.h"
#include "zmq.hpp"

namespace {

struct Flags : tessel::benchmarks::SweepFlags {
  bool tcp = false;
  int64_t socket_buffer_bytes = 4 << 20;  // ipc only, as ZmqOptions::socket_buffer_bytes
  int64_t chunk_bytes = 1 << 20;          // largest message, as pipeline_chunk_bytes
  bool poll = false;  // wait by polling the socket (yielding the core), not asleep in recv
};

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void NoFree(void*, void*) {}

// Waits until `path` exists and returns its content (the endpoint another process bound).
std::string ReadEndpoint(const std::string& path) {
  while (true) {
    std::ifstream in(path);
    std::string endpoint;
    if (in && std::getline(in, endpoint) && !endpoint.empty()) return endpoint;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// One process of the job; returns the exit code.
int RunHost(const Flags& flags, int rank, int hosts, const std::string& dir) {
  // Buffers outlive the context: zero-copy sends may still read them while it closes.
  const int64_t max_block = flags.max_bytes / hosts;
  std::vector<char> input(static_cast<size_t>(max_block), static_cast<char>(rank + 1));
  std::vector<char> output(static_cast<size_t>(max_block * hosts), 0);
  std::vector<double> cpu_in(1), cpu_out(static_cast<size_t>(hosts));
  zmq::context_t context(1);
  zmq::socket_t in(context, zmq::socket_type::router);
  if (!flags.tcp) {
    in.set(zmq::sockopt::rcvbuf, static_cast<int>(flags.socket_buffer_bytes));
    in.bind(absl::StrCat("ipc://", dir, "/h", rank));
  } else {
    in.bind("tcp://127.0.0.1:*");
  }
  {
    std::ofstream(absl::StrCat(dir, "/h", rank, ".tmp")) << in.get(zmq::sockopt::last_endpoint);
    std::filesystem::rename(absl::StrCat(dir, "/h", rank, ".tmp"),
                            absl::StrCat(dir, "/h", rank, ".endpoint"));
  }
  std::vector<zmq::socket_t> out(static_cast<size_t>(hosts));
  for (int p = 0; p < hosts; ++p) {
    if (p == rank) continue;
    out[p] = zmq::socket_t(context, zmq::socket_type::dealer);
    out[p].set(zmq::sockopt::routing_id, absl::StrCat(rank));
    if (!flags.tcp) out[p].set(zmq::sockopt::sndbuf, static_cast<int>(flags.socket_buffer_bytes));
    out[p].connect(ReadEndpoint(absl::StrCat(dir, "/h", p, ".endpoint")));
  }
  // Messages from each process in the order it sent them: the next one from `p` is either
  // queued here (it came while another process's was awaited) or still in the socket.
  std::vector<std::deque<zmq::message_t>> pending(static_cast<size_t>(hosts));
  auto receive_from = [&](int p) {
    while (pending[p].empty()) {
      zmq::message_t id;
      zmq::message_t body;
      if (flags.poll) {
        // Poll without sleeping, yielding the core: OpenMPI's way of waiting, and Tessel's
        // spin_wait without its bound.
        if (!in.recv(id, zmq::recv_flags::dontwait)) {
          sched_yield();
          continue;
        }
      } else {
        (void)in.recv(id);
      }
      (void)in.recv(body);  // the rest of a multipart message is there once its first frame is
      pending[std::stoi(id.to_string())].push_back(std::move(body));
    }
    zmq::message_t body = std::move(pending[p].front());
    pending[p].pop_front();
    return body;
  };
  // Every process sends `bytes` from `data` to every other and receives theirs into `into`
  // (block of process p at p * bytes), in messages of at most chunk_bytes as Tessel's
  // pipeline_chunk_bytes.
  auto exchange = [&](const char* data, int64_t bytes, char* into) {
    for (int d = 1; d < hosts; ++d) {
      const int p = (rank + d) % hosts;
      for (int64_t at = 0; at < bytes || at == 0; at += flags.chunk_bytes) {
        const int64_t n = std::min(flags.chunk_bytes, bytes - at);
        zmq::message_t m(const_cast<char*>(data + at), static_cast<size_t>(n), NoFree, nullptr);
        (void)out[p].send(m, zmq::send_flags::none);
        if (n == bytes - at) break;
      }
    }
    if (into + rank * bytes != data) std::memcpy(into + rank * bytes, data, bytes);
    for (int d = 1; d < hosts; ++d) {
      const int p = (rank - d + hosts) % hosts;
      for (int64_t at = 0; at < bytes || at == 0; at += flags.chunk_bytes) {
        const int64_t n = std::min(flags.chunk_bytes, bytes - at);
        zmq::message_t body = receive_from(p);
        std::memcpy(into + p * bytes + at, body.data(), std::min<size_t>(body.size(), n));
        if (n == bytes - at) break;
      }
    }
  };
  // A barrier: an empty message to every other process, then one from each.
  auto barrier = [&] {
    for (int d = 1; d < hosts; ++d) {
      zmq::message_t empty;
      (void)out[(rank + d) % hosts].send(empty, zmq::send_flags::none);
    }
    for (int d = 1; d < hosts; ++d) (void)receive_from((rank - d + hosts) % hosts);
  };
  barrier();
  for (int64_t size = flags.min_bytes; size <= flags.max_bytes; size *= flags.step) {
    const int64_t block = size / hosts;
    if (block == 0) continue;
    for (int i = 0; i < 2; ++i) exchange(input.data(), block, output.data());
    const int64_t iterations =
        std::clamp<int64_t>(flags.budget_ms * 1'000'000 / std::max<int64_t>(size, 1), 3, 2000);
    barrier();
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = ProcessCpuSeconds();
    for (int64_t i = 0; i < iterations; ++i) exchange(input.data(), block, output.data());
    barrier();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        static_cast<double>(iterations);
    // Every process's CPU time per call, gathered on all (a barrier of 8 bytes).
    cpu_in[0] = (ProcessCpuSeconds() - cpu_start) / static_cast<double>(iterations);
    exchange(reinterpret_cast<const char*>(cpu_in.data()), sizeof(double),
             reinterpret_cast<char*>(cpu_out.data()));
    for (int p = 0; p < hosts; ++p) {
      if (output[static_cast<size_t>(p * block)] != static_cast<char>(p + 1)) {
        std::fprintf(stderr, "process %d: wrong block from %d\n", rank, p);
        return 4;
      }
    }
    if (rank == 0) {
      double cpu = 0;
      for (double c : cpu_out) cpu += c;
      const int64_t bytes = block * hosts;
      const double algbw_gbps = static_cast<double>(bytes) / seconds / 1e9;
      std::printf("%-12s %-12s %5d %10lld %12.1f %10.3f %10.3f %10.1f\n", "all-gather",
                  absl::StrCat(flags.poll ? "zmq-raw-poll-" : "zmq-raw-", flags.tcp ? "tcp" : "ipc")
                      .c_str(),
                  hosts, static_cast<long long>(bytes), seconds * 1e6, algbw_gbps,
                  algbw_gbps * (hosts - 1) / hosts, cpu * 1e6);
      std::fflush(stdout);
    }
  }
  barrier();  // nobody closes while a peer's last messages are in flight
  for (auto& s : out) {
    if (s.handle() != nullptr) s.set(zmq::sockopt::linger, 1000);
  }
  return 0;
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{
      "Tessel's direct all-gather exchange on bare ZeroMQ sockets between forked "
      "processes: a baseline for the carrier, in collectives_bench's table.",
      "zmq_floor_bench"};
  tessel::benchmarks::AddSweepFlags(app, &flags, /*min_hosts=*/2);
  std::string protocol = "ipc";
  app.add_option("--protocol", protocol, "ipc or tcp")->check(CLI::IsMember({"ipc", "tcp"}));
  app.add_option("--socket_buffer_bytes", flags.socket_buffer_bytes, "ipc socket buffers")
      ->check(tessel::Positive());
  app.add_option("--chunk_bytes", flags.chunk_bytes, "largest message")->check(tessel::Positive());
  app.add_flag("--poll", flags.poll,
               "wait by polling the socket, yielding the core (impl zmq-raw-poll-*)");
  if (int code = tessel::ParseCommandLine(app, argc, argv); code >= 0) return code;
  flags.tcp = protocol == "tcp";
  std::printf("%-12s %-12s %5s %10s %12s %10s %10s %10s\n", "# collective", "impl", "ranks",
              "bytes", "us", "algbw_gbps", "busbw_gbps", "cpu_us");
  std::fflush(stdout);
  int result = 0;
  for (int64_t hosts : flags.hosts) {
    result |= tessel::benchmarks::RunForkedHosts(
        hosts, "tsl-floor", [&](int64_t rank, const std::string& dir) {
          try {
            return RunHost(flags, static_cast<int>(rank), static_cast<int>(hosts), dir);
          } catch (const zmq::error_t& e) {
            std::fprintf(stderr, "zmq_floor_bench: process %lld: %s\n",
                         static_cast<long long>(rank), e.what());
            return 3;
          }
        });
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
