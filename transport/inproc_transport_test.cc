#include "tessel/transport/inproc_transport.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/status_macros.h"
#include "tessel/transport/testing/collective_checks.h"

namespace tessel::transport {
namespace {

using ::testing::HasSubstr;

// Runs fn(device_id) on one thread per device of the job; returns the statuses by device.
std::vector<absl::Status> RunDevices(InProcTransport& job,
                                     const std::function<absl::Status(int64_t)>& fn) {
  const int64_t n = job.host(0).device_map().num_devices();
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int64_t d = 0; d < n; ++d) {
    threads.emplace_back([&, d] { statuses[d] = fn(d); });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t d = 0; d < statuses.size(); ++d) {
    EXPECT_TRUE(statuses[d].ok()) << "device " << d << ": " << statuses[d];
  }
}

std::unique_ptr<InProcTransport> MakeJob(int64_t hosts, const DeviceMap& map,
                                         CommunicatorOptions options = {}) {
  auto job = InProcTransport::Create(hosts, map, options);
  EXPECT_TRUE(job.ok()) << job.status();
  return std::move(job).value();
}

void RunChecks(int64_t hosts, const DeviceMap& map, const CommunicatorOptions& options,
               const testing::CheckOptions& checks) {
  SCOPED_TRACE(absl::StrCat(hosts, " hosts, ", map.num_devices(), " devices"));
  auto job = MakeJob(hosts, map, options);
  ExpectAllOk(RunDevices(*job, [&](int64_t d) {
    return testing::RunCollectiveChecks(job->host_of_device(d), d, checks);
  }));
  for (int64_t h = 0; h < hosts; ++h) EXPECT_TRUE(job->host(h).health().ok());
}

// Small buffers: recursive doubling, direct sends and binomial trees.
TEST(InProcTransportTest, EveryCollectiveSmallPath) {
  for (int64_t hosts : {2, 3, 4, 8}) {
    RunChecks(hosts, DeviceMap::Uniform(hosts, 1), CommunicatorOptions{}, testing::CheckOptions{});
  }
}

// Every size takes the ring / chain, cut into segments of 24 bytes, so the pipelined paths run
// with uneven chunk and segment sizes; with every segment of a step sent at once (depth 0), one
// segment ahead, and the default depth.
TEST(InProcTransportTest, EveryCollectiveRingPathWithSegments) {
  for (int64_t depth : {int64_t{0}, int64_t{1}, CommunicatorOptions().pipeline_depth}) {
    SCOPED_TRACE(absl::StrCat("pipeline_depth ", depth));
    CommunicatorOptions options;
    options.small_message_bytes = 0;
    options.direct_max_bytes = 0;
    options.pipeline_chunk_bytes = 24;
    options.pipeline_depth = depth;
    testing::CheckOptions checks;
    checks.counts = {1, -1, 37};
    for (int64_t hosts : {2, 3, 4, 8}) {
      RunChecks(hosts, DeviceMap::Uniform(hosts, 1), options, checks);
    }
  }
}

// Every size of 3 or more members takes the direct all-reduce / all-gather (every member sends
// to every other at once), in segments of 24 bytes.
TEST(InProcTransportTest, EveryCollectiveDirectPathWithSegments) {
  CommunicatorOptions options;
  options.small_message_bytes = 0;
  options.pipeline_chunk_bytes = 24;
  options.direct_max_bytes = int64_t{1} << 30;
  testing::CheckOptions checks;
  checks.counts = {1, -1, 37};
  for (int64_t hosts : {3, 4, 8}) {
    RunChecks(hosts, DeviceMap::Uniform(hosts, 1), options, checks);
  }
  RunChecks(3, DeviceMap::Uniform(3, 2), options, checks);
}

// An all-reduce whose output is its input gives the same bits as one into another buffer, on
// every algorithm (the direct and ring ones read the input while they write the output).
TEST(InProcTransportTest, InPlaceAllReduceMatchesOutOfPlace) {
  for (int64_t direct_max : {int64_t{0}, int64_t{1} << 20}) {
    for (int64_t small_bytes : {int64_t{0}, int64_t{1} << 20}) {
      for (int64_t hosts : {2, 3, 5}) {
        SCOPED_TRACE(absl::StrCat(hosts, " hosts, direct_max_bytes ", direct_max,
                                  ", small_message_bytes ", small_bytes));
        CommunicatorOptions options;
        options.small_message_bytes = small_bytes;
        options.direct_max_bytes = direct_max;
        options.pipeline_chunk_bytes = 40;
        auto job = MakeJob(hosts, DeviceMap::Uniform(hosts, 1), options);
        const int64_t count = 301;
        std::vector<std::vector<float>> in(hosts, std::vector<float>(count));
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> dist(-100.f, 100.f);
        for (auto& v : in) {
          for (float& x : v) x = dist(rng);
        }
        std::vector<std::vector<float>> out(hosts, std::vector<float>(count));
        std::vector<std::vector<float>> inout = in;
        ExpectAllOk(RunDevices(*job, [&](int64_t d) -> absl::Status {
          Communicator& c = job->host_of_device(d);
          TESSEL_RETURN_IF_ERROR(c.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in[d].data(),
                                             out[d].data(), count));
          return c.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, inout[d].data(), inout[d].data(),
                             count);
        }));
        for (int64_t d = 0; d < hosts; ++d) {
          EXPECT_EQ(std::memcmp(out[d].data(), inout[d].data(), count * sizeof(float)), 0)
              << "device " << d;
        }
      }
    }
  }
}

TEST(InProcTransportTest, SeveralDevicesPerHost) {
  testing::CheckOptions checks;
  checks.counts = {-1, 300};
  RunChecks(2, DeviceMap::Uniform(2, 4), CommunicatorOptions{}, checks);
  CommunicatorOptions ring;
  ring.small_message_bytes = 0;
  ring.direct_max_bytes = 0;
  ring.pipeline_chunk_bytes = 64;
  RunChecks(3, DeviceMap::Uniform(3, 2), ring, checks);
}

// Two slices of two hosts of two devices: groups spanning both slices take the hierarchical
// all-reduce (the checks' full group and the 2x4 mesh's columns).
TEST(InProcTransportTest, HierarchicalAllReduceOnTwoSlices) {
  testing::CheckOptions checks;
  checks.counts = {-1, 300};
  RunChecks(4, DeviceMap::Uniform(4, 2, 2), CommunicatorOptions{}, checks);
  CommunicatorOptions ring;
  ring.small_message_bytes = 0;
  ring.direct_max_bytes = 0;
  ring.pipeline_chunk_bytes = 40;
  RunChecks(4, DeviceMap::Uniform(4, 2, 2), ring, checks);
}

// Random floats: every participant gets the same bits; the ring result equals the documented
// fold ((x[j+1] + x[j+2]) + ...) + x[j] for chunk j, the direct one ((x[0] + x[1]) + ...) +
// x[n-1].
TEST(InProcTransportTest, FloatSumsAreBitIdenticalAndFollowTheDocumentedOrder) {
  // (small_message_bytes, direct_max_bytes): recursive doubling, ring, direct.
  for (auto [small_bytes, direct_max] :
       {std::pair<int64_t, int64_t>{1 << 20, 0}, {0, 0}, {0, 1 << 20}}) {
    for (int64_t hosts : {3, 5, 8}) {
      SCOPED_TRACE(absl::StrCat(hosts, " hosts, small_message_bytes ", small_bytes,
                                ", direct_max_bytes ", direct_max));
      CommunicatorOptions options;
      options.small_message_bytes = small_bytes;
      options.direct_max_bytes = direct_max;
      options.pipeline_chunk_bytes = 36;
      auto job = MakeJob(hosts, DeviceMap::Uniform(hosts, 1), options);
      const int64_t count = 1000;
      std::vector<std::vector<float>> in(hosts, std::vector<float>(count));
      std::mt19937 rng(42);
      std::uniform_real_distribution<float> dist(-1000.f, 1000.f);
      for (auto& v : in) {
        for (float& x : v) x = dist(rng) * std::pow(10.f, static_cast<float>(rng() % 7) - 3);
      }
      std::vector<std::vector<float>> out(hosts, std::vector<float>(count));
      ExpectAllOk(RunDevices(*job, [&](int64_t d) {
        return job->host_of_device(d).AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in[d].data(),
                                                out[d].data(), count);
      }));
      for (int64_t d = 1; d < hosts; ++d) {
        EXPECT_EQ(std::memcmp(out[0].data(), out[d].data(), count * sizeof(float)), 0)
            << "device " << d << " differs from device 0";
      }
      if (small_bytes == 0) {
        const int64_t base = count / hosts, extra = count % hosts;
        // The member whose value starts chunk j's fold: j + 1 (ring) or 0 (direct).
        // A copy: clang 14 does not capture structured bindings in lambdas.
        const bool direct = direct_max > 0;
        auto start = [&](int64_t j) { return direct ? int64_t{0} : j + 1; };
        int64_t begin = 0;
        for (int64_t j = 0; j < hosts; ++j) {
          const int64_t end = begin + base + (j < extra ? 1 : 0);
          for (int64_t i = begin; i < end; ++i) {
            float acc = in[start(j) % hosts][i];
            for (int64_t k = 1; k < hosts; ++k) acc = acc + in[(start(j) + k) % hosts][i];
            ASSERT_EQ(std::memcmp(&acc, &out[0][i], sizeof(float)), 0)
                << "element " << i << " of chunk " << j;
          }
          begin = end;
        }
      }
    }
  }
}

// 2 slices x 2 hosts x 2 devices; an all-reduce of N f32 over all 8 devices. Hierarchical:
// DCN carries only the cross-slice all-reduce of each device's 1/4 chunk: over the job,
// 2 * (slices - 1) * N * 4 bytes. Flat ring: every ring step crosses DCN twice.
TEST(InProcTransportTest, HierarchicalDcnBytesMatchFormula) {
  const DeviceMap map = DeviceMap::Uniform(4, 2, 2);
  for (int64_t count : {int64_t{10001}, int64_t{16}}) {
    for (bool hierarchical : {true, false}) {
      SCOPED_TRACE(absl::StrCat("count ", count, " hierarchical ", hierarchical));
      CommunicatorOptions options;
      options.hierarchical_all_reduce = hierarchical;
      options.pipeline_chunk_bytes = 1024;
      auto job = MakeJob(4, map, options);
      std::vector<std::vector<float>> in(8, std::vector<float>(count, 1.0f));
      std::vector<std::vector<float>> out(8, std::vector<float>(count));
      ExpectAllOk(RunDevices(*job, [&](int64_t d) {
        return job->host_of_device(d).AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in[d].data(),
                                                out[d].data(), count);
      }));
      for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(out[d][count - 1], 8.0f);
      const CollectiveStats stats = job->TotalStats();
      const KindStats& ar = stats.Kind(CollectiveKind::kAllReduce);
      EXPECT_EQ(ar.calls, 8);
      const int64_t bytes = count * 4;
      if (hierarchical) {
        EXPECT_EQ(stats.dcn.bytes, 2 * (2 - 1) * bytes);
        EXPECT_EQ(ar.dcn.bytes, stats.dcn.bytes);
        // Reduce-scatter + all-gather rings of 4 inside each slice: 2 * 3 * N per slice.
        EXPECT_EQ(stats.ici.bytes + stats.local.bytes, 2 * 2 * 3 * bytes);
      } else {
        EXPECT_GT(stats.dcn.bytes, 2 * (2 - 1) * bytes);
      }
    }
  }
}

// 2 slices x 2 hosts x 2 devices; all-gathers over all 8 devices, over the data-parallel pairs
// of the main job ({0,2,4,6}, {1,3,5,7}) and over a group listed out of slice order. The
// hierarchical form sends each block across DCN once per other slice: over the job, a block
// of B bytes per member, (slices - 1) * B * 8 bytes. The result is the flat one, block i from
// member i of the group, with or without it.
TEST(InProcTransportTest, HierarchicalAllGatherDcnBytesMatchFormula) {
  const DeviceMap map = DeviceMap::Uniform(4, 2, 2);
  const std::vector<ReplicaGroups> group_sets = {
      {}, {{0, 2, 4, 6}, {1, 3, 5, 7}}, {{6, 1, 4, 3}, {0, 7, 2, 5}}};
  for (const ReplicaGroups& groups : group_sets) {
    for (int64_t count : {int64_t{10001}, int64_t{16}}) {
      for (bool hierarchical : {true, false}) {
        SCOPED_TRACE(absl::StrCat("groups #", &groups - group_sets.data(), " count ", count,
                                  " hierarchical ", hierarchical));
        CommunicatorOptions options;
        options.hierarchical_all_gather = hierarchical;
        options.pipeline_chunk_bytes = 1024;
        auto job = MakeJob(4, map, options);
        const int64_t members = groups.empty() ? 8 : 4;
        std::vector<std::vector<float>> in(8, std::vector<float>(count));
        for (int64_t d = 0; d < 8; ++d) {
          for (int64_t i = 0; i < count; ++i) in[d][i] = static_cast<float>(d * 100000 + i);
        }
        std::vector<std::vector<float>> out(8, std::vector<float>(count * members));
        ExpectAllOk(RunDevices(*job, [&](int64_t d) {
          return job->host_of_device(d).AllGather(d, groups, DType::kF32, in[d].data(),
                                                  out[d].data(), count);
        }));
        for (int64_t d = 0; d < 8; ++d) {
          std::vector<int64_t> group;
          for (const auto& g : groups) {
            if (std::find(g.begin(), g.end(), d) != g.end()) group = g;
          }
          if (groups.empty()) group = {0, 1, 2, 3, 4, 5, 6, 7};
          for (int64_t j = 0; j < members; ++j) {
            ASSERT_EQ(std::memcmp(&out[d][j * count], in[group[j]].data(), count * sizeof(float)),
                      0)
                << "device " << d << " block " << j;
          }
        }
        const CollectiveStats stats = job->TotalStats();
        const int64_t bytes = count * 4;
        if (hierarchical) {
          EXPECT_EQ(stats.dcn.bytes, (2 - 1) * bytes * 8);
          // Inside the slice each member sends its 2 blocks to its k - 1 slice mates.
          EXPECT_EQ(stats.ici.bytes + stats.local.bytes, 8 * (members / 2 - 1) * 2 * bytes);
        } else {
          EXPECT_GT(stats.dcn.bytes, (2 - 1) * bytes * 8);
        }
      }
    }
  }
}

// The same job and group sets for the reduce-scatter: the hierarchical form sends each member's
// chunk across DCN once per other slice, (slices - 1) * B * 8 bytes over the job for a chunk of
// B bytes, and every member gets the sum of its chunk (exact here: integer-valued floats).
TEST(InProcTransportTest, HierarchicalReduceScatterDcnBytesMatchFormula) {
  const DeviceMap map = DeviceMap::Uniform(4, 2, 2);
  const std::vector<ReplicaGroups> group_sets = {
      {}, {{0, 2, 4, 6}, {1, 3, 5, 7}}, {{6, 1, 4, 3}, {0, 7, 2, 5}}};
  for (const ReplicaGroups& groups : group_sets) {
    for (int64_t count : {int64_t{10001}, int64_t{16}}) {
      for (bool hierarchical : {true, false}) {
        SCOPED_TRACE(absl::StrCat("groups #", &groups - group_sets.data(), " count ", count,
                                  " hierarchical ", hierarchical));
        CommunicatorOptions options;
        options.hierarchical_reduce_scatter = hierarchical;
        options.pipeline_chunk_bytes = 1024;
        auto job = MakeJob(4, map, options);
        const int64_t members = groups.empty() ? 8 : 4;
        std::vector<std::vector<float>> in(8, std::vector<float>(count * members));
        for (int64_t d = 0; d < 8; ++d) {
          for (int64_t x = 0; x < count * members; ++x) in[d][x] = static_cast<float>(d * 7 + x);
        }
        std::vector<std::vector<float>> out(8, std::vector<float>(count));
        ExpectAllOk(RunDevices(*job, [&](int64_t d) {
          return job->host_of_device(d).ReduceScatter(d, groups, ReduceKind::kAdd, DType::kF32,
                                                      in[d].data(), out[d].data(), count);
        }));
        for (int64_t d = 0; d < 8; ++d) {
          std::vector<int64_t> group = {0, 1, 2, 3, 4, 5, 6, 7};
          for (const auto& g : groups) {
            if (std::find(g.begin(), g.end(), d) != g.end()) group = g;
          }
          const int64_t j = std::find(group.begin(), group.end(), d) - group.begin();
          int64_t id_sum = 0;
          for (int64_t m : group) id_sum += m;
          for (int64_t i = 0; i < count; ++i) {
            const float want = static_cast<float>(7 * id_sum + members * (j * count + i));
            ASSERT_EQ(out[d][i], want) << "device " << d << " element " << i;
          }
        }
        const CollectiveStats stats = job->TotalStats();
        const int64_t bytes = count * 4;
        if (hierarchical) {
          EXPECT_EQ(stats.dcn.bytes, (2 - 1) * bytes * 8);
          // Inside the slice each member sends 2 chunks (one per slice) to each slice mate.
          EXPECT_EQ(stats.ici.bytes + stats.local.bytes, 8 * (members / 2 - 1) * 2 * bytes);
        } else {
          EXPECT_GT(stats.dcn.bytes, (2 - 1) * bytes * 8);
        }
      }
    }
  }
}

TEST(InProcTransportTest, LinkClassesFollowTheDeviceMap) {
  // Devices 0,1 on host 0 and 2,3 on host 1, one slice per host.
  auto job = MakeJob(2, DeviceMap::Uniform(2, 2, 1));
  std::vector<float> data(100, 1.0f), out(100);
  ExpectAllOk(RunDevices(*job, [&](int64_t d) -> absl::Status {
    // Pairs inside host 0 (local) and across hosts (DCN: different slices).
    SourceTargetPairs pairs = {{0, 1}, {2, 0}};
    return job->host_of_device(d).CollectivePermute(d, pairs, DType::kF32, data.data(), out.data(),
                                                    100);
  }));
  const CollectiveStats s = job->TotalStats();
  EXPECT_EQ(s.local.bytes, 400);
  EXPECT_EQ(s.local.messages, 1);
  EXPECT_EQ(s.dcn.bytes, 400);
  EXPECT_EQ(s.ici.bytes, 0);
  EXPECT_EQ(s.Kind(CollectiveKind::kCollectivePermute).calls, 4);
  EXPECT_THAT(s.ToString(), HasSubstr("collective-permute: 4 calls"));
  job->ResetStats();
  EXPECT_EQ(job->TotalStats(), CollectiveStats());
}

TEST(InProcTransportTest, MismatchedCollectiveIsReportedOnBothSides) {
  CommunicatorOptions options;
  options.collective_timeout = absl::Seconds(20);
  auto job = MakeJob(2, DeviceMap::Uniform(2, 1), options);
  std::vector<float> in(10, 1.0f), out(20);
  std::vector<absl::Status> s = RunDevices(*job, [&](int64_t d) {
    Communicator& c = job->host_of_device(d);
    if (d == 0) return c.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in.data(), out.data(), 10);
    return c.AllGather(d, {}, DType::kF32, in.data(), out.data(), 10);
  });
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(s[d].code(), absl::StatusCode::kFailedPrecondition) << s[d];
    EXPECT_THAT(std::string(s[d].message()), HasSubstr("all-reduce(add, f32, 10 elements"));
    EXPECT_THAT(std::string(s[d].message()), HasSubstr("all-gather(f32, 10 elements"));
  }
  // The job stays failed.
  EXPECT_FALSE(job->host(0).health().ok());
  EXPECT_EQ(job->host(1).Barrier(1, {}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(InProcTransportTest, MismatchedCountDtypeOrGroupsIsReported) {
  struct Case {
    int64_t count1;
    DType dtype1;
    ReplicaGroups groups1;
    const char* expect;
  };
  for (const Case& c : {Case{12, DType::kF32, {}, "12 elements"}, Case{10, DType::kS32, {}, "s32"},
                        Case{10, DType::kF32, {{1, 0}}, "groups #"}}) {
    auto job = MakeJob(2, DeviceMap::Uniform(2, 1));
    std::vector<float> in(12, 1.0f), out(12);
    std::vector<absl::Status> s = RunDevices(*job, [&](int64_t d) {
      Communicator& comm = job->host_of_device(d);
      if (d == 0) {
        return comm.AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in.data(), out.data(), 10);
      }
      return comm.AllReduce(d, c.groups1, ReduceKind::kAdd, c.dtype1, in.data(), out.data(),
                            c.count1);
    });
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(s[d].code(), absl::StatusCode::kFailedPrecondition) << s[d];
      EXPECT_THAT(std::string(s[d].message()), HasSubstr("collective mismatch"));
      EXPECT_THAT(std::string(s[d].message()), HasSubstr(c.expect));
    }
  }
}

TEST(InProcTransportTest, PeerThatNeverCallsTimesOut) {
  CommunicatorOptions options;
  options.collective_timeout = absl::Milliseconds(200);
  auto job = MakeJob(2, DeviceMap::Uniform(2, 1), options);
  std::vector<float> in(10), out(10);
  absl::Status s =
      job->host(0).AllReduce(0, {}, ReduceKind::kAdd, DType::kF32, in.data(), out.data(), 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("all-reduce #0 on device 0 (host 0)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("no message from device 1 (host 1)"));
}

TEST(InProcTransportTest, LostHostFailsWaitingAndLaterCalls) {
  auto job = MakeJob(3, DeviceMap::Uniform(3, 1));
  std::vector<float> in(10), out(10);
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    job->SimulateHostLoss(2);
  });
  std::vector<absl::Status> s(2);
  std::vector<std::thread> threads;
  for (int d = 0; d < 2; ++d) {
    threads.emplace_back([&, d] {
      s[d] =
          job->host(d).AllReduce(d, {}, ReduceKind::kAdd, DType::kF32, in.data(), out.data(), 10);
    });
  }
  for (auto& t : threads) t.join();
  killer.join();
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(s[d].code(), absl::StatusCode::kUnavailable) << s[d];
    EXPECT_THAT(std::string(s[d].message()), HasSubstr("lost host 2"));
    EXPECT_THAT(std::string(s[d].message()), HasSubstr("all-reduce"));
  }
  absl::Status later = job->host(0).Barrier(0, {});
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(later.message()), HasSubstr("barrier #1"));
}

TEST(InProcTransportTest, InvalidArgumentsAreRejected) {
  auto job = MakeJob(2, DeviceMap::Uniform(2, 2));
  Communicator& h0 = job->host(0);
  std::vector<float> buf(8);
  auto code = [](const absl::Status& s) { return s.code(); };
  EXPECT_EQ(code(h0.AllReduce(2, {}, ReduceKind::kAdd, DType::kF32, buf.data(), buf.data(), 1)),
            absl::StatusCode::kInvalidArgument);  // device 2 is host 1's
  EXPECT_EQ(
      code(h0.AllReduce(0, {{1, 2}}, ReduceKind::kAdd, DType::kF32, buf.data(), buf.data(), 1)),
      absl::StatusCode::kInvalidArgument);  // not in any group
  absl::Status dup = h0.AllGather(0, {{0, 1}, {1, 2}}, DType::kF32, buf.data(), buf.data(), 1);
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dup.message()), HasSubstr("device 1 appears twice"));
  EXPECT_EQ(code(h0.AllGather(0, {{0, 9}}, DType::kF32, buf.data(), buf.data(), 1)),
            absl::StatusCode::kInvalidArgument);
  absl::Status and_float =
      h0.AllReduce(0, {}, ReduceKind::kAnd, DType::kF32, buf.data(), buf.data(), 1);
  EXPECT_EQ(and_float.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(and_float.message()), HasSubstr("and is not defined on f32"));
  EXPECT_EQ(code(h0.AllReduce(0, {}, ReduceKind::kAdd, DType::kF32, buf.data(), buf.data(), -1)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(h0.Broadcast(0, {{0, 1}}, 2, DType::kF32, buf.data(), 1)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(h0.CollectivePermute(0, {{0, 1}, {0, 2}}, DType::kF32, buf.data(), buf.data(), 1)),
            absl::StatusCode::kInvalidArgument);
  // collective-permute and all-to-all send from the input while they write the output.
  absl::Status in_place = h0.CollectivePermute(0, {{0, 1}}, DType::kF32, buf.data(), buf.data(), 1);
  EXPECT_EQ(in_place.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(in_place.message()),
              HasSubstr("collective-permute: the input and output buffers overlap"));
  EXPECT_EQ(code(h0.AllToAll(0, {}, DType::kF32, buf.data(), buf.data() + 1, 1)),
            absl::StatusCode::kInvalidArgument);
  // Rejected calls do not fail the job or consume a sequence number.
  EXPECT_TRUE(h0.health().ok());
  EXPECT_FALSE(InProcTransport::Create(3, DeviceMap::Uniform(2, 1)).ok());
  CommunicatorOptions bad;
  bad.pipeline_chunk_bytes = 0;
  EXPECT_FALSE(InProcTransport::Create(2, DeviceMap::Uniform(2, 1), bad).ok());
  CommunicatorOptions negative_depth;
  negative_depth.pipeline_depth = -1;
  absl::Status depth =
      InProcTransport::Create(2, DeviceMap::Uniform(2, 1), negative_depth).status();
  EXPECT_EQ(depth.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(depth.message()), HasSubstr("pipeline_depth must be >= 0, got -1"));
  CommunicatorOptions negative_spin;
  negative_spin.spin_wait = absl::Microseconds(-1);
  absl::Status spin = InProcTransport::Create(2, DeviceMap::Uniform(2, 1), negative_spin).status();
  EXPECT_EQ(spin.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spin.message()), HasSubstr("spin_wait must be >= 0, got -1us"));
}

TEST(InProcTransportTest, RendezvousReturnsEveryPayloadAndChecksTags) {
  auto job = MakeJob(3, DeviceMap::Uniform(3, 1));
  std::vector<absl::StatusOr<std::vector<std::string>>> results(3);
  std::vector<std::thread> threads;
  for (int h = 0; h < 3; ++h) {
    threads.emplace_back([&, h] {
      results[h] = job->host(h).Rendezvous("init", std::string(h + 1, static_cast<char>('a' + h)));
    });
  }
  for (auto& t : threads) t.join();
  for (int h = 0; h < 3; ++h) {
    ASSERT_TRUE(results[h].ok()) << results[h].status();
    EXPECT_EQ(*results[h], (std::vector<std::string>{"a", "bb", "ccc"}));
  }
  threads.clear();
  for (int h = 0; h < 3; ++h) {
    threads.emplace_back(
        [&, h] { results[h] = job->host(h).Rendezvous(h == 1 ? "step" : "init", ""); });
  }
  for (auto& t : threads) t.join();
  for (int h = 0; h < 3; ++h) {
    ASSERT_FALSE(results[h].ok());
    EXPECT_EQ(results[h].status().code(), absl::StatusCode::kFailedPrecondition)
        << results[h].status();
    EXPECT_THAT(std::string(results[h].status().message()), HasSubstr("rendezvous"));
  }
}

TEST(InProcTransportTest, SendRecvKeepsOrderAndChecksTypes) {
  auto job = MakeJob(2, DeviceMap::Uniform(2, 1));
  std::vector<absl::Status> s = RunDevices(*job, [&](int64_t d) -> absl::Status {
    Communicator& c = job->host_of_device(d);
    if (d == 0) {
      for (int32_t i = 0; i < 5; ++i) {
        TESSEL_RETURN_IF_ERROR(c.Send(0, 1, 9, DType::kS32, &i, 1));
      }
      int64_t x = 7;
      return c.Send(0, 1, 10, DType::kS64, &x, 1);
    }
    for (int32_t i = 0; i < 5; ++i) {
      int32_t got = -1;
      TESSEL_RETURN_IF_ERROR(c.Recv(1, 0, 9, DType::kS32, &got, 1));
      if (got != i) return absl::InternalError(absl::StrCat("got ", got, " expected ", i));
    }
    int32_t wrong;
    return c.Recv(1, 0, 10, DType::kS32, &wrong, 1);
  });
  EXPECT_TRUE(s[0].ok()) << s[0];
  EXPECT_EQ(s[1].code(), absl::StatusCode::kFailedPrecondition) << s[1];
  EXPECT_THAT(std::string(s[1].message()), HasSubstr("device 0 sent s64 x 1"));
}

}  // namespace
}  // namespace tessel::transport
