// The partitioner on while and conditional: the loop state's sharding as a fixed point of the
// body (propagation.h step 5), the partitioned body's signature, and a conditional's branches.
// Numerical correctness is tests/integration/partition_property_test.cc.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/propagation.h"

namespace tessel::partitioner {
namespace {

using spmd::ParseSharding;
using spmd::Sharding;

// (counter, x, acc): acc starts as zeros with no sharding of its own; the body adds tanh(x) to
// it and returns x unchanged. x is row-sharded over 4 devices.
constexpr char kAccumulate[] = R"(
HloModule accumulate

%cond (s: (s32[], f32[8,6], f32[8,6])) -> pred[] {
  %s = (s32[], f32[8,6], f32[8,6]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[8,6], f32[8,6])) -> (s32[], f32[8,6], f32[8,6]) {
  %s = (s32[], f32[8,6], f32[8,6]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[8,6] get-tuple-element(%s), index=1
  %acc = f32[8,6] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %t = f32[8,6] tanh(%x)
  %sum = f32[8,6] add(%acc, %t)
  ROOT %state = (s32[], f32[8,6], f32[8,6]) tuple(%next, %x, %sum)
}

ENTRY %main (x: f32[8,6]) -> f32[8,6] {
  %x = f32[8,6] parameter(0), sharding={devices=[4,1]0,1,2,3}
  %zero = s32[] constant(0)
  %zeros = f32[] constant(0)
  %acc = f32[8,6] broadcast(%zeros), dimensions={}
  %init = (s32[], f32[8,6], f32[8,6]) tuple(%zero, %x, %acc)
  %loop = (s32[], f32[8,6], f32[8,6]) while(%init), condition=%cond, body=%body
  ROOT %out = f32[8,6] get-tuple-element(%loop), index=2
}
)";

const Sharding& ShardingOf(const Graph& g, const std::vector<Sharding>& shardings,
                           const std::string& name) {
  for (int64_t i = 0; i < g.num_nodes(); ++i) {
    if (g.nodes()[i]->name() == name) return shardings[i];
  }
  ADD_FAILURE() << "no node " << name;
  return shardings[0];
}

TEST(ControlFlowPartitionTest, LoopStateIsAFixedPointOfTheBody) {
  auto g = ParseHloModule(kAccumulate);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::vector<Sharding>> shardings = ComputeShardings(**g, 4);
  ASSERT_TRUE(shardings.ok()) << shardings.status();
  const Sharding rows = *ParseSharding("{devices=[4,1]0,1,2,3}");
  // The accumulator has no sharding of its own: it takes the body's (acc + tanh(x), row-sharded
  // like x), and the zeros that initialize it learn it backward from the loop.
  const Sharding& loop = ShardingOf(**g, *shardings, "loop");
  ASSERT_TRUE(loop.IsTuple()) << loop.ToString();
  EXPECT_TRUE(loop.tuple_elements()[0].IsReplicated());
  EXPECT_EQ(loop.tuple_elements()[1], rows);
  EXPECT_EQ(loop.tuple_elements()[2], rows) << loop.ToString();
  EXPECT_EQ(ShardingOf(**g, *shardings, "acc"), rows);
  EXPECT_EQ(ShardingOf(**g, *shardings, "out"), rows);
  // The body, propagated with that state on its parameter and root, agrees everywhere.
  const Graph& body = *(*g)->FindNode("loop")->attrs().called_computations[1];
  absl::StatusOr<std::vector<Sharding>> inside = ComputeCalledShardings(body, 4, loop, loop);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(ShardingOf(body, *inside, "sum"), rows);
  EXPECT_EQ(ShardingOf(body, *inside, "t"), rows);
}

TEST(ControlFlowPartitionTest, BodyIsPartitionedOnceWithTheLocalState) {
  auto g = ParseHloModule(kAccumulate);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<SpmdProgram> program = Partition(**g, 4);
  ASSERT_TRUE(program.ok()) << program.status();
  const Node* loop = nullptr;
  for (const Node* node : program->program->nodes()) {
    if (node->opcode() == Opcode::kWhile) loop = node;
  }
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->shape().ToString(), "(s32[], f32[2,6], f32[2,6])");
  const Graph& body = *loop->attrs().called_computations[1];
  EXPECT_EQ(body.parameters()[0]->shape(), loop->shape());
  EXPECT_EQ(body.root()->shape(), loop->shape());
  // Nothing moves: the state keeps its sharding in and out of the body.
  EXPECT_TRUE(CountCollectives(*program->program).empty()) << PrintHloModule(*program->program);
  std::vector<LoopCollectives> loops = ListLoopCollectives(*program->program);
  ASSERT_EQ(loops.size(), 1u);
  EXPECT_EQ(loops[0].trip_count, 5);
  EXPECT_TRUE(loops[0].per_iteration.empty());
}

TEST(ControlFlowPartitionTest, CollectivesInTheBodyCountOncePerIteration) {
  // The body reduces x over its sharded rows: one all-reduce per iteration.
  std::string text = kAccumulate;
  const std::string t = "%t = f32[8,6] tanh(%x)";
  text.replace(text.find(t), t.size(),
               "%z = f32[] constant(0)\n  %r = f32[6] reduce(%x, %z), dimensions={0}, "
               "to_apply=%add\n  %t = f32[8,6] broadcast(%r), dimensions={1}");
  text.insert(text.find("%cond"),
              "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] "
              "parameter(1)\n  ROOT %c = f32[] add(%a, %b)\n}\n\n");
  auto g = ParseHloModule(text);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<SpmdProgram> program = Partition(**g, 4);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(CountCollectives(*program->program)["all-reduce"].count, 1);
  ExecutedCollectives executed = CountExecutedCollectives(*program->program);
  EXPECT_FALSE(executed.unknown_trip_count);
  EXPECT_EQ(executed.counts["all-reduce"].count, 5);
  EXPECT_EQ(executed.counts["all-reduce"].result_bytes, 5 * 6 * 4);
}

TEST(ControlFlowPartitionTest, ConditionalBranchesTakeTheOperandSharding) {
  constexpr char kCond[] = R"(
HloModule cond
%neg (a: f32[8,6]) -> f32[8,6] {
  %a = f32[8,6] parameter(0)
  ROOT %n = f32[8,6] negate(%a)
}
%ex (a: f32[8,6]) -> f32[8,6] {
  %a = f32[8,6] parameter(0)
  ROOT %e = f32[8,6] exponential(%a)
}
ENTRY %main (p: pred[], x: f32[8,6]) -> f32[8,6] {
  %p = pred[] parameter(0)
  %x = f32[8,6] parameter(1), sharding={devices=[1,2]0,1}
  ROOT %c = f32[8,6] conditional(%p, %x, %x), true_computation=%neg, false_computation=%ex, sharding={devices=[2,1]0,1}
}
)";
  auto g = ParseHloModule(kCond);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<SpmdProgram> program = Partition(**g, 2);
  ASSERT_TRUE(program.ok()) << program.status();
  const Node* cond = program->program->root();
  ASSERT_EQ(cond->opcode(), Opcode::kConditional) << PrintHloModule(*program->program);
  EXPECT_EQ(cond->shape().ToString(), "f32[4,6]");
  for (const auto& branch : cond->attrs().called_computations) {
    // Each branch takes x as it arrives (columns split) and leaves in the result's rows: an
    // all-to-all inside the branch, none before it.
    EXPECT_EQ(branch->parameters()[0]->shape().ToString(), "f32[8,3]");
    EXPECT_EQ(branch->root()->shape().ToString(), "f32[4,6]");
  }
  EXPECT_EQ(CountExecutedCollectives(*program->program).counts.size(), 1u);
}

}  // namespace
}  // namespace tessel::partitioner
