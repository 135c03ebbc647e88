// Why-this-sharding: the propagation's explanation (ComputeShardings with a ShardingExplanation)
// and the partitioner's (PartitionExplanation): each rule recorded where it applies, the same
// shardings as without explaining, and one note per collective of the program.
#include <algorithm>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/propagation.h"

namespace tessel::partitioner {
namespace {

using Rule = ShardingStep::Rule;
using spmd::ParseSharding;
using spmd::Sharding;

// %n takes %p's row tiling forward, then %u's column tiling backward: a refinement into both.
// %c (a constant nobody shards) stays replicated by default.
constexpr char kRefine[] = R"(
HloModule refine

ENTRY %main (p: f32[8,8]) -> (f32[8,8], f32[2]) {
  %p = f32[8,8] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  %n = f32[8,8] negate(%p)
  %u = f32[8,8] negate(%n), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}
  %c = f32[2] constant({1, 2})
  ROOT %t = (f32[8,8], f32[2]) tuple(%u, %c)
}
)";

// A loop whose accumulator learns its sharding from the loop state, with a dot in the body.
constexpr char kLoop[] = R"(
HloModule loop

%cond (s: (s32[], f32[8,8], f32[8,8])) -> pred[] {
  %s = (s32[], f32[8,8], f32[8,8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[8,8], f32[8,8])) -> (s32[], f32[8,8], f32[8,8]) {
  %s = (s32[], f32[8,8], f32[8,8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[8,8] get-tuple-element(%s), index=1
  %acc = f32[8,8] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %d = f32[8,8] dot(%x, %acc), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %state = (s32[], f32[8,8], f32[8,8]) tuple(%next, %x, %d)
}

ENTRY %main (x: f32[8,8], w: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8] parameter(0), sharding={devices=[4,1]0,1,2,3}
  %w = f32[8,8] parameter(1), sharding={devices=[1,4]0,1,2,3}
  %zero = s32[] constant(0)
  %init = (s32[], f32[8,8], f32[8,8]) tuple(%zero, %x, %w)
  %loop = (s32[], f32[8,8], f32[8,8]) while(%init), condition=%cond, body=%body
  %r = f32[8,8] get-tuple-element(%loop), index=2
  ROOT %y = f32[8,8] dot(%r, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";

const Node* Find(const Graph& g, const std::string& name) {
  for (const Node* n : g.nodes()) {
    if (n->name() == name) return n;
  }
  return nullptr;
}

int64_t IndexOf(const Graph& g, const std::string& name) {
  for (int64_t i = 0; i < g.num_nodes(); ++i) {
    if (g.nodes()[i]->name() == name) return i;
  }
  return -1;
}

TEST(ExplainTest, RecordsEachRuleAndKeepsTheShardings) {
  auto graph = ParseHloModule(kRefine);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto plain = ComputeShardings(**graph, 4);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ShardingExplanation explanation;
  auto explained = ComputeShardings(**graph, 4, &explanation);
  ASSERT_TRUE(explained.ok()) << explained.status();
  ASSERT_EQ(explained->size(), plain->size());
  for (size_t i = 0; i < plain->size(); ++i) EXPECT_EQ((*explained)[i], (*plain)[i]) << i;
  ASSERT_EQ(explanation.steps.size(), static_cast<size_t>((*graph)->num_nodes()));

  const auto& p = explanation.steps[IndexOf(**graph, "p")];
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rule, Rule::kAnnotation);

  // Filled forward from %p, then refined backward from %u into [2,2].
  const auto& n = explanation.steps[IndexOf(**graph, "n")];
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n[0].rule, Rule::kForward);
  ASSERT_EQ(n[0].from.size(), 1u);
  EXPECT_EQ(n[0].from[0], Find(**graph, "p"));
  EXPECT_FALSE(n[0].previous.has_value());
  EXPECT_EQ(n[1].rule, Rule::kBackward);
  ASSERT_EQ(n[1].from.size(), 1u);
  EXPECT_EQ(n[1].from[0], Find(**graph, "u"));
  ASSERT_TRUE(n[1].previous.has_value());
  EXPECT_EQ(*n[1].previous, n[0].sharding);
  EXPECT_EQ(n[1].sharding, *ParseSharding("{devices=[2,2]0,1,2,3}"));
  EXPECT_EQ(n[1].sharding, (*explained)[IndexOf(**graph, "n")]);

  const auto& c = explanation.steps[IndexOf(**graph, "c")];
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].rule, Rule::kDefault);

  const std::string text = FormatShardingExplanation(**graph, *explained, explanation, {{"p", 5}});
  EXPECT_NE(text.find("backward from %u (negate, operand 0); merged with "
                      "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate} into "
                      "{devices=[2,2]0,1,2,3}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("from: %p (annotation, line 5), %u (annotation)"), std::string::npos) << text;
  EXPECT_NE(text.find("%c = f32[2] {replicated}\n  1. nothing reached it"), std::string::npos)
      << text;
}

TEST(ExplainTest, LoopStateAndEveryCollective) {
  auto graph = ParseHloModule(kLoop);
  ASSERT_TRUE(graph.ok()) << graph.status();
  PartitionExplanation explanation;
  std::vector<Sharding> shardings;
  PartitionOptions options;
  options.explain = &explanation;
  options.shardings = &shardings;
  auto program = Partition(**graph, 4, options);
  ASSERT_TRUE(program.ok()) << program.status();
  auto plain = Partition(**graph, 4);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(PrintHloModule(*program->program), PrintHloModule(*plain->program));

  // The while's state elements come from the init tuple's operands.
  const auto& loop = explanation.propagation.steps[IndexOf(**graph, "loop")];
  ASSERT_FALSE(loop.empty());
  for (const ShardingStep& step : loop) {
    EXPECT_EQ(step.rule, Rule::kLoopState);
    ASSERT_EQ(step.operand_index.size(), 1u);
  }
  EXPECT_EQ(shardings.size(), static_cast<size_t>((*graph)->num_nodes()));

  // One note per collective in the text of the program (the body's included), one choice per
  // dot (the body's and the entry's), each choosing the cheapest candidate.
  int64_t collectives = 0;
  for (const auto& [kind, count] : CountCollectives(*program->program)) collectives += count.count;
  EXPECT_GT(collectives, 0);
  EXPECT_EQ(static_cast<int64_t>(explanation.collectives.size()), collectives);
  bool in_body = false;
  for (const auto& c : explanation.collectives) {
    EXPECT_FALSE(c.instruction.empty());
    EXPECT_GT(c.bytes, 0);
    EXPECT_GT(c.seconds, 0);
    in_body |= c.computation == "body";
  }
  EXPECT_TRUE(in_body);
  ASSERT_EQ(explanation.dots.size(), 2u);
  for (const auto& dot : explanation.dots) {
    ASSERT_FALSE(dot.seconds.empty());
    EXPECT_EQ(dot.seconds[dot.chosen], *std::min_element(dot.seconds.begin(), dot.seconds.end()));
  }
  const std::string text = FormatPartitionExplanation(**graph, shardings, explanation);
  EXPECT_NE(text.find("loop state element 2 from the init tuple's %w"), std::string::npos) << text;
  EXPECT_NE(text.find("in %body: %d: chose "), std::string::npos) << text;
}

// A backward-scan shape: the body adds a weight-gradient-like dot (contracting the row-sharded
// dim, so the body alone leaves it {replicated}) into an accumulator that the loop's user wants
// column-sharded. The accumulator must wait for that user (first phase: only tiled shardings fix
// an element) rather than be fixed {replicated} by the body, so the body's partial sums are
// reduce-scattered and no operand is gathered.
constexpr char kGradientLoop[] = R"(
HloModule gradient_loop

%cond (s: (s32[], f32[8,8], f32[8,8])) -> pred[] {
  %s = (s32[], f32[8,8], f32[8,8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(2)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[8,8], f32[8,8])) -> (s32[], f32[8,8], f32[8,8]) {
  %s = (s32[], f32[8,8], f32[8,8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[8,8] get-tuple-element(%s), index=1
  %acc = f32[8,8] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %g = f32[8,8] dot(%x, %x), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %sum = f32[8,8] add(%acc, %g)
  ROOT %state = (s32[], f32[8,8], f32[8,8]) tuple(%next, %x, %sum)
}

ENTRY %main (x: f32[8,8], w: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8] parameter(0), sharding={devices=[4,1]0,1,2,3}
  %w = f32[8,8] parameter(1), sharding={devices=[1,4]0,1,2,3}
  %zero = s32[] constant(0)
  %z = f32[] constant(0)
  %zeros = f32[8,8] broadcast(%z), dimensions={}
  %init = (s32[], f32[8,8], f32[8,8]) tuple(%zero, %x, %zeros)
  %loop = (s32[], f32[8,8], f32[8,8]) while(%init), condition=%cond, body=%body
  %r = f32[8,8] get-tuple-element(%loop), index=2
  ROOT %y = f32[8,8] add(%r, %w)
}
)";

TEST(ExplainTest, AccumulatorWaitsForTheLoopsUsers) {
  auto graph = ParseHloModule(kGradientLoop);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ShardingExplanation explanation;
  auto shardings = ComputeShardings(**graph, 4, &explanation);
  ASSERT_TRUE(shardings.ok()) << shardings.status();
  const Sharding& state = (*shardings)[IndexOf(**graph, "loop")];
  ASSERT_TRUE(state.IsTuple());
  EXPECT_EQ(state.tuple_elements()[2], *ParseSharding("{devices=[1,4]0,1,2,3}"));
  bool from_user = false;
  for (const ShardingStep& step : explanation.steps[IndexOf(**graph, "loop")]) {
    if (step.operand_index == std::vector<int64_t>{2}) {
      ASSERT_EQ(step.from.size(), 1u);
      from_user = step.from[0] == Find(**graph, "r");
    }
  }
  EXPECT_TRUE(from_user);
  auto program = Partition(**graph, 4);
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<LoopCollectives> loops = ListLoopCollectives(*program->program);
  ASSERT_EQ(loops.size(), 1u);
  EXPECT_EQ(loops[0].per_iteration.count("all-gather"), 0u);
  EXPECT_EQ(loops[0].per_iteration.count("reduce-scatter"), 1u);
}

}  // namespace
}  // namespace tessel::partitioner
