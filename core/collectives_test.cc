// The reference in-process collectives, run by the executor on device threads.
#include "tessel/core/collectives.h"

#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/executor.h"

namespace tessel {
namespace {

// Runs `fn(device)` on `n` threads and returns each device's result.
template <typename Fn>
std::vector<absl::StatusOr<Literal>> OnDevices(int64_t n, Fn fn) {
  std::vector<absl::StatusOr<Literal>> results(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int64_t d = 0; d < n; ++d) threads.emplace_back([&, d] { results[d] = fn(d); });
  for (std::thread& t : threads) t.join();
  return results;
}

Literal Row(std::vector<float> v) { return Literal::FromVector<float>({1, (int64_t)v.size()}, v); }

TEST(InProcessCollectivesTest, AllReduceAllGatherReduceScatterAllToAll) {
  InProcessCollectives c(4);
  const ReplicaGroups pairs = {{0, 2}, {1, 3}};
  auto sums = OnDevices(4, [&](int64_t d) {
    return c.AllReduce(d, Row({float(d), 1}), pairs, ReduceKind::kAdd);
  });
  EXPECT_EQ(sums[0]->ToDoubles(), (std::vector<double>{2, 2}));
  EXPECT_EQ(sums[3]->ToDoubles(), (std::vector<double>{4, 2}));
  auto gathered =
      OnDevices(4, [&](int64_t d) { return c.AllGather(d, Row({float(d)}), pairs, 0); });
  EXPECT_EQ(gathered[1]->shape(), Shape(DType::kF32, {2, 1}));
  EXPECT_EQ(gathered[1]->ToDoubles(), (std::vector<double>{1, 3}));
  auto scattered = OnDevices(4, [&](int64_t d) {
    return c.ReduceScatter(d, Row({1, 2, 3, 4}), {{0, 1, 2, 3}}, 1, ReduceKind::kMaximum);
  });
  EXPECT_EQ(scattered[2]->ToDoubles(), (std::vector<double>{3}));
  auto swapped = OnDevices(2, [&](int64_t d) {
    return c.AllToAll(d, Row({10.0f * d, 10.0f * d + 1}), {{0, 1}}, 1);
  });
  EXPECT_EQ(swapped[0]->ToDoubles(), (std::vector<double>{0, 10}));
  EXPECT_EQ(swapped[1]->ToDoubles(), (std::vector<double>{1, 11}));
}

TEST(InProcessCollectivesTest, PermuteAndMissingPeers) {
  InProcessCollectives c(3, std::chrono::milliseconds(200));
  auto moved = OnDevices(3, [&](int64_t d) {
    return c.CollectivePermute(d, Row({float(d)}), {{0, 1}, {1, 2}});
  });
  EXPECT_EQ(moved[0]->ToDoubles(), (std::vector<double>{0}));  // no source: zeros
  EXPECT_EQ(moved[2]->ToDoubles(), (std::vector<double>{1}));
  // Device 1 never arrives: device 0 gets a deadline error, not a hang.
  InProcessCollectives lonely(2, std::chrono::milliseconds(100));
  absl::StatusOr<Literal> r = lonely.AllReduce(0, Row({1}), {{0, 1}}, ReduceKind::kAdd);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(lonely.AllReduce(5, Row({1}), {{0, 1}}, ReduceKind::kAdd).ok());
}

TEST(InProcessCollectivesTest, AbortEndsWaitsAtOnceWithItsReason) {
  // Device 1 has failed and will never arrive: Abort wakes device 0 now, not after the 60 s
  // timeout, and every later collective fails the same way; the first reason is kept.
  InProcessCollectives c(2, std::chrono::seconds(60));
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c.Abort(absl::AbortedError("device 1 failed"));
    c.Abort(absl::AbortedError("a later reason"));
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Literal> r = c.AllReduce(0, Row({1}), {{0, 1}}, ReduceKind::kAdd);
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(r.status(), absl::AbortedError("device 1 failed"));
  EXPECT_EQ(c.AllGather(1, Row({1}), {{0, 1}}, 1).status(), absl::AbortedError("device 1 failed"));
}

TEST(InProcessCollectivesTest, ExecutorRunsAnSpmdProgram) {
  // Each device adds its partition-id to x and all-reduces: every device gets sum + 4*x.
  Graph g;
  Node* x = g.AddParameter(0, Shape(DType::kS32, {}), "x").value();
  Node* pid = g.AddNode(Opcode::kPartitionId, {}).value();
  Node* y = g.AddNode(Opcode::kAdd, {x, pid}).value();
  OpAttributes sum;
  sum.replica_groups = {{0, 1, 2, 3}};
  g.set_root(g.AddNode(Opcode::kAllReduce, {y}, sum).value());
  InProcessCollectives c(4);
  auto out = OnDevices(4, [&](int64_t d) -> absl::StatusOr<Literal> {
    ExecutorOptions options;
    options.num_threads = 1;
    options.device_id = d;
    options.collectives = &c;
    TESSEL_ASSIGN_OR_RETURN(auto r, Executor(options).Run(g, {Literal::Scalar<int32_t>(10)}));
    return r[0];
  });
  for (const auto& r : out) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->data<int32_t>()[0], 46);
  }
}

}  // namespace
}  // namespace tessel
