// CombineAllReduces: which all-reduces it merges (independent ones of one key, within the
// thresholds), which it leaves (dependent ones, other groups / reductions / types), and that
// the combined program computes exactly what the original does on 4 devices.
#include "tessel/partitioner/combine_collectives.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/collectives.h"
#include "tessel/core/executor.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/verifier.h"

namespace tessel::partitioner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kHeader[] = R"(HloModule m, num_partitions=4
%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
%isum (i: s32[], j: s32[]) -> s32[] {
  %i = s32[] parameter(0)
  %j = s32[] parameter(1)
  ROOT %k = s32[] add(s32[] %i, s32[] %j)
}
%max (c: f32[], d: f32[]) -> f32[] {
  %c = f32[] parameter(0)
  %d = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %c, f32[] %d)
}
)";

// Three gradients reduced over {0,1},{2,3}; %ar3 reduces a value computed from %ar1, so it
// depends on it; %n1 squares %ar1 right after it, as the partitioned gradient-norm code does.
constexpr char kGradients[] = R"(
ENTRY %main (x: f32[4,8], y: f32[8], z: f32[]) -> (f32[], f32[8], f32[]) {
  %x = f32[4,8] parameter(0)
  %y = f32[8] parameter(1)
  %z = f32[] parameter(2)
  %ar1 = f32[4,8] all-reduce(%x), replica_groups={{0,1},{2,3}}, to_apply=%sum
  %sq = f32[4,8] multiply(%ar1, %ar1)
  %zero = f32[] constant(0)
  %n1 = f32[] reduce(%sq, %zero), dimensions={0,1}, to_apply=%sum
  %ar2 = f32[8] all-reduce(%y), replica_groups={{0,1},{2,3}}, to_apply=%sum
  %ar3 = f32[] all-reduce(%n1), replica_groups={{0,1},{2,3}}, to_apply=%sum
  %ar4 = f32[] all-reduce(%z), replica_groups={{0,1},{2,3}}, to_apply=%sum
  %sum34 = f32[] add(%ar3, %ar4)
  ROOT %t = (f32[], f32[8], f32[]) tuple(%sum34, %ar2, %n1)
}
)";

std::unique_ptr<Graph> Parse(const std::string& body) {
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseHloModule(std::string(kHeader) + body);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : nullptr;
}

int64_t CountAllReduces(const Graph& g) {
  int64_t n = 0;
  for (const Node* node : g.nodes()) n += node->opcode() == Opcode::kAllReduce;
  return n;
}

// Runs `g` on 4 devices with the reference collectives; device d's arguments are `args[d]`.
std::vector<std::vector<Literal>> RunOn4(const Graph& g,
                                         const std::vector<std::vector<Literal>>& args) {
  InProcessCollectives collectives(4);
  std::vector<std::vector<Literal>> results(4);
  std::vector<std::thread> threads;
  for (int64_t d = 0; d < 4; ++d) {
    threads.emplace_back([&, d] {
      ExecutorOptions options{.num_threads = 1, .device_id = d, .collectives = &collectives};
      absl::StatusOr<std::vector<Literal>> r = Executor(options).Run(g, args[d]);
      ASSERT_TRUE(r.ok()) << r.status();
      results[d] = std::move(*r);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<std::vector<Literal>> GradientArguments() {
  std::vector<std::vector<Literal>> args;
  for (int64_t d = 0; d < 4; ++d) {
    std::vector<float> x(32), y(8);
    for (int64_t i = 0; i < 32; ++i) x[i] = 0.1f * static_cast<float>(i * (d + 1)) - 1.3f;
    for (int64_t i = 0; i < 8; ++i)
      y[i] = 0.7f * static_cast<float>(d) - 0.3f * static_cast<float>(i);
    std::vector<Literal> device_args;
    device_args.push_back(Literal::FromVector<float>({4, 8}, x));
    device_args.push_back(Literal::FromVector<float>({8}, y));
    device_args.push_back(Literal::FromVector<float>({}, {1.5f * static_cast<float>(d)}));
    args.push_back(std::move(device_args));
  }
  return args;
}

TEST(CombineAllReducesTest, MergesTheIndependentOnesAndLeavesTheDependentOne) {
  std::unique_ptr<Graph> g = Parse(kGradients);
  ASSERT_NE(g, nullptr);
  AllReduceCombineStats stats;
  absl::StatusOr<std::unique_ptr<Graph>> out = CombineAllReduces(*g, {}, &stats);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(Verify(**out).ok()) << Verify(**out) << "\n" << PrintHloModule(**out);
  // %ar1, %ar2, %ar4 are ready together (32 + 8 + 1 floats): one all-reduce; %ar3 needs %ar1's
  // result and runs after it, alone.
  EXPECT_EQ(stats.all_reduces_before, 4);
  EXPECT_EQ(stats.all_reduces_after, 2);
  EXPECT_EQ(stats.combined, 1);
  EXPECT_EQ(CountAllReduces(**out), 2);
  const std::string text = PrintHloModule(**out);
  EXPECT_THAT(text, HasSubstr("%ar1.combined = f32[41] all-reduce(%ar1.operands)"));
  EXPECT_THAT(text, HasSubstr("%ar1.operands = f32[41] concatenate(%ar1.flat, %y, %ar4.flat)"));
  EXPECT_THAT(text, HasSubstr("%ar1 = f32[4,8] reshape(%ar1.flat_result)"));
  EXPECT_THAT(text, HasSubstr("%ar2 = f32[8] slice(%ar1.combined), slice={[32:40]}"));
  EXPECT_THAT(text, HasSubstr("%ar3 = f32[] all-reduce(%n1)"));
  // The root and parameters are kept.
  EXPECT_EQ((*out)->root()->name(), "t");
  EXPECT_EQ((*out)->parameters().size(), 3u);
}

TEST(CombineAllReducesTest, CombinedProgramComputesTheSameOnFourDevices) {
  std::unique_ptr<Graph> g = Parse(kGradients);
  ASSERT_NE(g, nullptr);
  absl::StatusOr<std::unique_ptr<Graph>> out = CombineAllReduces(*g);
  ASSERT_TRUE(out.ok()) << out.status();
  const auto args = GradientArguments();
  const auto want = RunOn4(*g, args);
  const auto got = RunOn4(**out, args);
  for (int64_t d = 0; d < 4; ++d) {
    ASSERT_EQ(want[d].size(), 3u);
    ASSERT_EQ(got[d].size(), 3u);
    // Element by element the same sums in the same order: equal bit for bit.
    for (size_t o = 0; o < 3; ++o) EXPECT_TRUE(got[d][o] == want[d][o]) << "device " << d;
  }
}

TEST(CombineAllReducesTest, KeepsDifferentGroupsReductionsAndTypesApart) {
  std::unique_ptr<Graph> g = Parse(R"(
ENTRY %main (x: f32[8], y: f32[8], i: s32[8]) -> (f32[8], f32[8], f32[8], f32[8], s32[8]) {
  %x = f32[8] parameter(0)
  %y = f32[8] parameter(1)
  %i = s32[8] parameter(2)
  %a = f32[8] all-reduce(%x), replica_groups={{0,1},{2,3}}, to_apply=%sum
  %b = f32[8] all-reduce(%y), replica_groups={{0,2},{1,3}}, to_apply=%sum
  %c = f32[8] all-reduce(%y), replica_groups={{0,1},{2,3}}, to_apply=%max
  %d = f32[8] all-reduce(%x), replica_groups={{0,2},{1,3}}, to_apply=%sum
  %e = s32[8] all-reduce(%i), replica_groups={{0,1},{2,3}}, to_apply=%isum
  ROOT %t = (f32[8], f32[8], f32[8], f32[8], s32[8]) tuple(%a, %b, %c, %d, %e)
}
)");
  ASSERT_NE(g, nullptr);
  AllReduceCombineStats stats;
  absl::StatusOr<std::unique_ptr<Graph>> out = CombineAllReduces(*g, {}, &stats);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(Verify(**out).ok()) << Verify(**out);
  // Only %b and %d share a key.
  EXPECT_EQ(stats.all_reduces_after, 4);
  EXPECT_EQ(stats.combined, 1);
  const std::string text = PrintHloModule(**out);
  EXPECT_THAT(text, HasSubstr("%b.operands = f32[16] concatenate(%y, %x)"));
  EXPECT_THAT(text, HasSubstr("%a = f32[8] all-reduce(%x)"));
  EXPECT_THAT(text, HasSubstr("%e = s32[8] all-reduce(%i)"));
}

TEST(CombineAllReducesTest, ThresholdsLimitACombination) {
  std::unique_ptr<Graph> g = Parse(kGradients);
  ASSERT_NE(g, nullptr);
  // 128 + 32 + 4 bytes are ready together. %ar1 is above 36 bytes and runs alone; then %ar3 is
  // ready too, and 36 bytes hold %ar2 and %ar3 but not %ar4 as well.
  AllReduceCombineStats stats;
  absl::StatusOr<std::unique_ptr<Graph>> out =
      CombineAllReduces(*g, {.threshold_bytes = 36, .threshold_count = 256}, &stats);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(stats.all_reduces_after, 3);
  const std::string small = PrintHloModule(**out);
  EXPECT_THAT(small, HasSubstr("%ar1 = f32[4,8] all-reduce(%x)"));
  EXPECT_THAT(small, HasSubstr("%ar2.operands = f32[9] concatenate(%y, %ar3.flat)"));
  EXPECT_THAT(small, HasSubstr("%ar4 = f32[] all-reduce(%z)"));
  // A count of 2 takes %ar1 and %ar2; %ar4 waits and goes with %ar3.
  out = CombineAllReduces(*g, {.threshold_bytes = 1 << 20, .threshold_count = 2}, &stats);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(stats.all_reduces_after, 2);
  const std::string text = PrintHloModule(**out);
  EXPECT_THAT(text, HasSubstr("%ar1.operands = f32[40] concatenate(%ar1.flat, %y)"));
  EXPECT_THAT(text, HasSubstr("%ar3.operands = f32[2] concatenate(%ar3.flat, %ar4.flat)"));
  const auto args = GradientArguments();
  const auto want = RunOn4(*g, args);
  const auto got = RunOn4(**out, args);
  for (int64_t d = 0; d < 4; ++d) {
    ASSERT_EQ(got[d].size(), 3u);
    for (size_t o = 0; o < 3; ++o) EXPECT_TRUE(got[d][o] == want[d][o]) << "device " << d;
  }
}

TEST(CombineAllReducesTest, OffLeavesTheProgramAsItIs) {
  std::unique_ptr<Graph> g = Parse(kGradients);
  ASSERT_NE(g, nullptr);
  for (AllReduceCombinerOptions off : {AllReduceCombinerOptions{.threshold_bytes = 0},
                                       AllReduceCombinerOptions{.threshold_count = 0}}) {
    AllReduceCombineStats stats;
    absl::StatusOr<std::unique_ptr<Graph>> out = CombineAllReduces(*g, off, &stats);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(PrintHloModule(**out), PrintHloModule(*g));
    EXPECT_EQ(stats.all_reduces_after, 4);
    EXPECT_EQ(stats.combined, 0);
  }
  absl::StatusOr<std::unique_ptr<Graph>> bad = CombineAllReduces(*g, {.threshold_bytes = -1});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("threshold_bytes=-1"));
}

TEST(CombineAllReducesTest, NoAllReduceNoChange) {
  std::unique_ptr<Graph> g = Parse(R"(
ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8] parameter(0)
  ROOT %n = f32[8] negate(%x)
}
)");
  ASSERT_NE(g, nullptr);
  absl::StatusOr<std::unique_ptr<Graph>> out = CombineAllReduces(*g);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(PrintHloModule(**out), PrintHloModule(*g));
  EXPECT_THAT(PrintHloModule(**out), Not(HasSubstr("all-reduce")));
}

}  // namespace
}  // namespace tessel::partitioner

namespace tessel::partitioner {
namespace {

// The partitioner's weight gradient: transpose(all-reduce(dot)). %keep's all-reduce is also
// used untransposed, so its transpose stays after it.
constexpr char kTransposedGradients[] = R"(
ENTRY %main (x: f32[6,4], g: f32[6,3]) -> (f32[3,4], f32[4,4], f32[4,4]) {
  %x = f32[6,4] parameter(0)
  %g = f32[6,3] parameter(1)
  %dw = f32[4,3] dot(%x, %g), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %ar = f32[4,3] all-reduce(%dw), replica_groups={{0,1,2,3}}, to_apply=%sum
  %t = f32[3,4] transpose(%ar), dimensions={1,0}
  %xx = f32[4,4] dot(%x, %x), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %ar2 = f32[4,4] all-reduce(%xx), replica_groups={{0,1},{2,3}}, to_apply=%sum
  %keep = f32[4,4] transpose(%ar2), dimensions={1,0}
  ROOT %out = (f32[3,4], f32[4,4], f32[4,4]) tuple(%t, %keep, %ar2)
}
)";

TEST(MoveTransposesBeforeAllReducesTest, MovesTheTransposeOfAnAllReduceWithOneUser) {
  std::unique_ptr<Graph> g = Parse(kTransposedGradients);
  ASSERT_NE(g, nullptr);
  int64_t moved = -1;
  std::unique_ptr<Graph> out = MoveTransposesBeforeAllReduces(*g, &moved);
  ASSERT_TRUE(Verify(*out).ok()) << Verify(*out) << "\n" << PrintHloModule(*out);
  EXPECT_EQ(moved, 1);
  const std::string text = PrintHloModule(*out);
  EXPECT_THAT(text, HasSubstr("%t = f32[3,4] transpose(%dw), dimensions={1,0}"));
  EXPECT_THAT(text, HasSubstr("%ar = f32[3,4] all-reduce(%t)"));
  EXPECT_THAT(text, HasSubstr("tuple(%ar, %keep, %ar2)"));
  EXPECT_THAT(text, HasSubstr("%keep = f32[4,4] transpose(%ar2)"));
  // Same values on every device, bit for bit.
  std::vector<std::vector<Literal>> args;
  for (int64_t d = 0; d < 4; ++d) {
    std::vector<float> x(24), grad(18);
    for (int64_t i = 0; i < 24; ++i) x[i] = 0.25f * static_cast<float>((i * 7 + d) % 11) - 1.0f;
    for (int64_t i = 0; i < 18; ++i) grad[i] = 0.5f * static_cast<float>((i + 3 * d) % 5) - 0.7f;
    std::vector<Literal> device_args;
    device_args.push_back(Literal::FromVector<float>({6, 4}, x));
    device_args.push_back(Literal::FromVector<float>({6, 3}, grad));
    args.push_back(std::move(device_args));
  }
  const auto want = RunOn4(*g, args);
  const auto got = RunOn4(*out, args);
  for (int64_t d = 0; d < 4; ++d) {
    ASSERT_EQ(got[d].size(), 3u);
    for (size_t o = 0; o < 3; ++o) EXPECT_TRUE(got[d][o] == want[d][o]) << "device " << d;
  }
}

TEST(MoveTransposesBeforeAllReducesTest, NothingToMove) {
  std::unique_ptr<Graph> g = Parse(kGradients);
  ASSERT_NE(g, nullptr);
  int64_t moved = -1;
  std::unique_ptr<Graph> out = MoveTransposesBeforeAllReduces(*g, &moved);
  EXPECT_EQ(moved, 0);
  EXPECT_EQ(PrintHloModule(*out), PrintHloModule(*g));
}

}  // namespace
}  // namespace tessel::partitioner
