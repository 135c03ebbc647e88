// transport_worker: one host process of a multi-process transport test. The tests in
// zmq_transport_test.cc start several of these (fork + exec) on loopback / ipc.
//
//   transport_worker --rank=0 --num_hosts=3 --coordinator=ipc:///tmp/x/coord
//       --scenario=checks [--protocol=tcp] [--devices_per_host=2] [--hosts_per_slice=1]
//       [--external_coordinator=1] [--token=T] [--ring=1] [--timeout_s=30]
//       [--bootstrap_timeout_s=30] [--ipc_dir=D] [--curve=1] [--shared_memory=0] [--count=N]
//       [--iterations=N] [--sleep_ms=MS]
//
// Every host prints "endpoint=<its data endpoint>" once it is connected.
//
// Flags take `--name=value` or `--name value`; --help lists them with their ranges.
// Scenarios:
//   checks        every collective, dtype, count and replica-group set (RunCollectiveChecks)
//                 on every local device, a rendezvous, and bit-identical float sums; prints
//                 "shared_memory_messages=N shared_memory_queued_headers=N
//                 shared_memory_peers=N"
//   loop          all-reduce 64 KiB of ones, checking the sums, forever or --iterations times
//                 (then prints "ok iterations=N"), sleeping --sleep_ms between them; prints
//                 "ready" after the first one
//   mismatch      host 0 calls all-reduce, the others all-gather
//   hierarchical  one all-reduce of --count f32 over all devices; prints "dcn_bytes=N
//                 ici_bytes=N local_bytes=N"
// Exit status: 0 on success; 3 with the error on stderr otherwise; 2 for a bad, missing or
// unknown flag (one line "transport_worker: ..." on stderr).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "tessel/core/command_line.h"
#include "tessel/core/fingerprint.h"
#include "tessel/core/status_macros.h"
#include "tessel/transport/testing/collective_checks.h"
#include "tessel/transport/zmq_transport.h"

namespace tessel::transport {
namespace {

struct WorkerFlags {
  int64_t rank = -1;
  int64_t num_hosts = 0;
  int64_t devices_per_host = 1;
  int64_t hosts_per_slice = 1;
  std::string coordinator;
  std::string token;
  std::string ipc_dir;
  std::string protocol = "ipc";
  int64_t external_coordinator = 0;
  int64_t curve = 0;
  int64_t shared_memory = 1;
  int64_t bootstrap_timeout_s = 30;
  int64_t timeout_s = 30;
  int64_t ring = 0;
  std::string scenario = "checks";
  int64_t count = 100000;
  int64_t iterations = 0;  // loop: 0 = forever
  int64_t sleep_ms = 0;    // loop: pause between all-reduces
};

// Declares the flags of the header comment on `app`, writing into `flags`.
void AddWorkerFlags(CLI::App& app, WorkerFlags* flags) {
  const CLI::Range non_negative(int64_t{0}, std::numeric_limits<int64_t>::max());
  const CLI::Range positive(int64_t{1}, std::numeric_limits<int64_t>::max());
  app.add_option("--rank", flags->rank, "this host's rank")->required()->check(non_negative);
  app.add_option("--num_hosts", flags->num_hosts, "hosts in the job")->required()->check(positive);
  app.add_option("--devices_per_host", flags->devices_per_host, "devices (threads) per host")
      ->check(positive);
  app.add_option("--hosts_per_slice", flags->hosts_per_slice,
                 "hosts per slice; divides --num_hosts")
      ->check(positive);
  app.add_option("--coordinator", flags->coordinator, "bootstrap coordinator address");
  app.add_option("--token", flags->token, "job token");
  app.add_option("--ipc_dir", flags->ipc_dir, "folder of the ipc endpoints");
  app.add_option("--protocol", flags->protocol, "ipc or tcp")->check(CLI::IsMember({"ipc", "tcp"}));
  app.add_option("--external_coordinator", flags->external_coordinator,
                 "1: a coordinator is served elsewhere, not by host 0")
      ->check(CLI::Range(0, 1));
  app.add_option("--curve", flags->curve, "1: CURVE encryption")->check(CLI::Range(0, 1));
  app.add_option("--shared_memory", flags->shared_memory, "0: ZeroMQ carries every byte")
      ->check(CLI::Range(0, 1));
  app.add_option("--bootstrap_timeout_s", flags->bootstrap_timeout_s, "bootstrap timeout, s")
      ->check(positive);
  app.add_option("--timeout_s", flags->timeout_s, "collective timeout, s")->check(positive);
  app.add_option("--ring", flags->ring,
                 "1: ring algorithms for every size; 2: the direct ones; 0: the defaults")
      ->check(CLI::Range(0, 2));
  app.add_option("--scenario", flags->scenario, "checks, loop, mismatch or hierarchical")
      ->check(CLI::IsMember({"checks", "loop", "mismatch", "hierarchical"}));
  app.add_option("--count", flags->count, "f32 elements of the hierarchical all-reduce")
      ->check(positive);
  app.add_option("--iterations", flags->iterations, "loop: all-reduces to run; 0: forever")
      ->check(non_negative);
  app.add_option("--sleep_ms", flags->sleep_ms, "loop: pause between all-reduces, ms")
      ->check(non_negative);
}

// Runs fn(device) on one thread per local device; the first error wins.
absl::Status OnLocalDevices(Communicator& comm, const std::function<absl::Status(int64_t)>& fn) {
  std::vector<absl::Status> statuses(comm.local_device_ids().size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < statuses.size(); ++i) {
    threads.emplace_back([&, i] { statuses[i] = fn(comm.local_device_ids()[i]); });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : statuses) TESSEL_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status Checks(Communicator& comm) {
  testing::CheckOptions checks;
  checks.counts = {1, -1, 300, 20000};
  TESSEL_RETURN_IF_ERROR(OnLocalDevices(
      comm, [&](int64_t d) { return testing::RunCollectiveChecks(comm, d, checks); }));
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::string> names,
                          comm.Rendezvous("names", absl::StrCat("host", comm.rank())));
  for (int64_t h = 0; h < comm.size(); ++h) {
    if (names[h] != absl::StrCat("host", h)) {
      return absl::InternalError(absl::StrCat("rendezvous: host ", h, " sent ", names[h]));
    }
  }
  // Random float sums (ring and recursive doubling): the same bits everywhere.
  std::vector<std::string> hashes_mine;
  for (int64_t count : {int64_t{100}, int64_t{50000}}) {
    std::vector<std::vector<float>> out(comm.local_device_ids().size(), std::vector<float>(count));
    TESSEL_RETURN_IF_ERROR(OnLocalDevices(comm, [&](int64_t d) {
      std::mt19937 rng(static_cast<uint32_t>(d * 7919 + count));
      std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
      std::vector<float> in(count);
      for (float& x : in) x = dist(rng);
      const size_t i =
          std::find(comm.local_device_ids().begin(), comm.local_device_ids().end(), d) -
          comm.local_device_ids().begin();
      return comm.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in.data(), out[i].data(), count);
    }));
    for (const auto& o : out) {
      hashes_mine.push_back(absl::StrCat(Fnv1a64(o.data(), o.size() * sizeof(float))));
    }
  }
  // Devices of this host agree with each other (per size), then hosts compare.
  const size_t local = comm.local_device_ids().size();
  for (size_t i = 0; i < hashes_mine.size(); ++i) {
    if (hashes_mine[i] != hashes_mine[(i / local) * local]) {
      return absl::InternalError(
          absl::StrCat("float all-reduce differs between devices of host ", comm.rank()));
    }
  }
  const std::string mine = absl::StrCat(hashes_mine[0], "/", hashes_mine.back());
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::string> all, comm.Rendezvous("hashes", mine));
  for (int64_t h = 0; h < comm.size(); ++h) {
    if (all[h] != mine) {
      return absl::InternalError(absl::StrCat("float all-reduce differs: host ", comm.rank(),
                                              " got ", mine, ", host ", h, " got ", all[h]));
    }
  }
  return absl::OkStatus();
}

absl::Status Loop(Communicator& comm, int64_t iterations, int64_t sleep_ms) {
  const int64_t count = 16 << 10;  // 64 KiB of f32: the ring path
  const float expected = static_cast<float>(comm.device_map().num_devices());
  bool announced = false;
  for (int64_t iteration = 0; iterations == 0 || iteration < iterations; ++iteration) {
    TESSEL_RETURN_IF_ERROR(OnLocalDevices(comm, [&](int64_t d) -> absl::Status {
      std::vector<float> in(count, 1.0f), out(count);
      TESSEL_RETURN_IF_ERROR(
          comm.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in.data(), out.data(), count));
      for (int64_t i = 0; i < count; ++i) {
        if (out[i] != expected) {
          return absl::InternalError(absl::StrCat("all-reduce #", iteration, ": element ", i, " = ",
                                                  out[i], ", expected ", expected));
        }
      }
      return absl::OkStatus();
    }));
    if (!announced) {
      std::printf("ready\n");
      std::fflush(stdout);
      announced = true;
    }
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  }
  std::printf("ok iterations=%lld\n", static_cast<long long>(iterations));
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Mismatch(Communicator& comm) {
  return OnLocalDevices(comm, [&](int64_t d) {
    std::vector<float> in(10, 1.0f), out(10 * comm.device_map().num_devices());
    if (comm.rank() == 0) {
      return comm.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in.data(), out.data(), 10);
    }
    return comm.AllGather(d, {}, DType::kF32, in.data(), out.data(), 10);
  });
}

absl::Status Hierarchical(Communicator& comm, int64_t count) {
  TESSEL_RETURN_IF_ERROR(OnLocalDevices(comm, [&](int64_t d) -> absl::Status {
    std::vector<float> in(count, static_cast<float>(d)), out(count);
    TESSEL_RETURN_IF_ERROR(
        comm.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in.data(), out.data(), count));
    const int64_t n = comm.device_map().num_devices();
    const float expected = static_cast<float>(n * (n - 1) / 2);
    for (int64_t i = 0; i < count; ++i) {
      if (out[i] != expected) {
        return absl::InternalError(
            absl::StrCat("element ", i, " = ", out[i], ", expected ", expected));
      }
    }
    return absl::OkStatus();
  }));
  const CollectiveStats s = comm.stats();
  std::printf("dcn_bytes=%lld ici_bytes=%lld local_bytes=%lld\n",
              static_cast<long long>(s.dcn.bytes), static_cast<long long>(s.ici.bytes),
              static_cast<long long>(s.local.bytes));
  std::fflush(stdout);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  WorkerFlags flags;
  CLI::App app{"One host process of a multi-process transport test.", "transport_worker"};
  AddWorkerFlags(app, &flags);
  if (int code = ParseCommandLine(app, argc, argv); code >= 0) return code;
  if (flags.num_hosts % flags.hosts_per_slice != 0) {
    std::fprintf(
        stderr, "transport_worker: --hosts_per_slice=%lld does not divide --num_hosts=%lld\n",
        static_cast<long long>(flags.hosts_per_slice), static_cast<long long>(flags.num_hosts));
    return kExitBadFlags;
  }
  ZmqOptions options;
  options.rank = flags.rank;
  options.num_hosts = flags.num_hosts;
  options.device_map =
      DeviceMap::Uniform(flags.num_hosts, flags.devices_per_host, flags.hosts_per_slice);
  options.coordinator_address = flags.coordinator;
  options.job_token = flags.token;
  options.ipc_dir = flags.ipc_dir;
  options.external_coordinator = flags.external_coordinator == 1;
  options.curve = flags.curve == 1;
  options.shared_memory = flags.shared_memory == 1;
  if (flags.protocol == "tcp") options.protocol = ZmqProtocol::kTcp;
  options.bootstrap_timeout = absl::Seconds(flags.bootstrap_timeout_s);
  options.communicator.collective_timeout = absl::Seconds(flags.timeout_s);
  // --ring=1: the ring algorithms for every size; --ring=2: the direct ones (groups of 3 or
  // more). Both in 4 KiB segments, zero-copy from 1 KiB.
  if (flags.ring == 1 || flags.ring == 2) {
    options.communicator.small_message_bytes = 0;
    options.communicator.direct_max_bytes = flags.ring == 1 ? 0 : int64_t{1} << 30;
    options.communicator.pipeline_chunk_bytes = 4096;
    options.zero_copy_min_bytes = 1024;
    options.shared_memory_min_bytes = 1024;
  }
  const std::string& scenario = flags.scenario;

  absl::StatusOr<std::unique_ptr<ZmqTransport>> comm = ZmqTransport::Create(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "transport_worker host %lld: %s\n", static_cast<long long>(options.rank),
                 comm.status().ToString().c_str());
    return 3;
  }
  std::printf("endpoint=%s\n", (*comm)->endpoint().c_str());
  std::fflush(stdout);
  absl::Status status;
  if (scenario == "checks") {
    status = Checks(**comm);
    // What went through shared memory, for the tests that check the path was taken.
    std::printf(
        "shared_memory_messages=%lld shared_memory_queued_headers=%lld "
        "shared_memory_peers=%lld\n",
        static_cast<long long>((*comm)->shared_memory_messages()),
        static_cast<long long>((*comm)->shared_memory_queued_headers()),
        static_cast<long long>((*comm)->shared_memory_peers()));
    std::fflush(stdout);
  } else if (scenario == "loop") {
    status = Loop(**comm, flags.iterations, flags.sleep_ms);
  } else if (scenario == "mismatch") {
    status = Mismatch(**comm);
  } else {  // "hierarchical"
    status = Hierarchical(**comm, flags.count);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "transport_worker host %lld: %s\n", static_cast<long long>(options.rank),
                 status.ToString().c_str());
    return 3;
  }
  std::printf("refused_connections=%lld\n", static_cast<long long>((*comm)->refused_connections()));
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace tessel::transport

int main(int argc, char** argv) { return tessel::transport::Main(argc, argv); }
