// CseConstantsAndBroadcasts: equal constants, iotas and broadcasts merge, unequal ones stay,
// and the program computes the same.
#include "tessel/partitioner/cse.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/verifier.h"

namespace tessel::partitioner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Two Adam-like scalings by 0.9 (one constant and broadcast each), a 0.5 that must stay apart,
// a broadcast of 0.9 to another shape, and two equal iotas.
constexpr char kProgram[] = R"(HloModule m
ENTRY %main (p: f32[4,3], q: f32[4,3]) -> (f32[4,3], f32[4,3], f32[4,3], f32[3], s32[4,3]) {
  %p = f32[4,3] parameter(0)
  %q = f32[4,3] parameter(1)
  %b1 = f32[] constant(0.9)
  %bb1 = f32[4,3] broadcast(%b1), dimensions={}
  %m1 = f32[4,3] multiply(%bb1, %p)
  %b2 = f32[] constant(0.9)
  %bb2 = f32[4,3] broadcast(%b2), dimensions={}
  %m2 = f32[4,3] multiply(%bb2, %q)
  %h = f32[] constant(0.5)
  %hb = f32[4,3] broadcast(%h), dimensions={}
  %m3 = f32[4,3] multiply(%hb, %q)
  %b3 = f32[] constant(0.9)
  %row = f32[3] broadcast(%b3), dimensions={}
  %i1 = s32[4,3] iota(), iota_dimension=1
  %i2 = s32[4,3] iota(), iota_dimension=1
  %i3 = s32[4,3] iota(), iota_dimension=0
  %s = s32[4,3] add(%i1, %i2)
  %s2 = s32[4,3] add(%s, %i3)
  ROOT %t = (f32[4,3], f32[4,3], f32[4,3], f32[3], s32[4,3]) tuple(%m1, %m2, %m3, %row, %s2)
}
)";

TEST(CseConstantsAndBroadcastsTest, MergesEqualLeavesOnly) {
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseHloModule(kProgram);
  ASSERT_TRUE(g.ok()) << g.status();
  int64_t removed = -1;
  std::unique_ptr<Graph> out = CseConstantsAndBroadcasts(**g, &removed);
  ASSERT_TRUE(Verify(*out).ok()) << Verify(*out);
  // %b2, %b3 (= %b1), %bb2 (= %bb1 once %b2 is %b1), %i2 (= %i1).
  EXPECT_EQ(removed, 4);
  const std::string text = PrintHloModule(*out);
  EXPECT_THAT(text, HasSubstr("%m2 = f32[4,3] multiply(%bb1, %q)"));
  EXPECT_THAT(text, HasSubstr("%m3 = f32[4,3] multiply(%hb, %q)"));
  EXPECT_THAT(text, HasSubstr("%row = f32[3] broadcast(%b1)"));
  EXPECT_THAT(text, HasSubstr("%s = s32[4,3] add(%i1, %i1)"));
  EXPECT_THAT(text, HasSubstr("%i3 = s32[4,3] iota(), iota_dimension=0"));
  EXPECT_THAT(text, Not(HasSubstr("%b2")));
  EXPECT_THAT(text, Not(HasSubstr("%bb2")));

  std::vector<Literal> args;
  args.push_back(Literal::FromVector<float>({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  args.push_back(Literal::FromVector<float>({4, 3}, {-1, 2, -3, 4, -5, 6, -7, 8, -9, 1, 0, 2}));
  absl::StatusOr<std::vector<Literal>> want = Executor({.num_threads = 1}).Run(**g, args);
  absl::StatusOr<std::vector<Literal>> got = Executor({.num_threads = 1}).Run(*out, args);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) EXPECT_TRUE((*got)[i] == (*want)[i]) << "output " << i;
}

TEST(CseConstantsAndBroadcastsTest, NothingEqualNothingRemoved) {
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseHloModule(R"(HloModule m
ENTRY %main (p: f32[2]) -> f32[2] {
  %p = f32[2] parameter(0)
  %c = f32[2] constant({1, 2})
  %d = f32[2] constant({1, 3})
  %a = f32[2] add(%p, %c)
  ROOT %r = f32[2] add(%a, %d)
}
)");
  ASSERT_TRUE(g.ok()) << g.status();
  int64_t removed = -1;
  std::unique_ptr<Graph> out = CseConstantsAndBroadcasts(**g, &removed);
  EXPECT_EQ(removed, 0);
  EXPECT_EQ(PrintHloModule(*out), PrintHloModule(**g));
}

}  // namespace
}  // namespace tessel::partitioner
