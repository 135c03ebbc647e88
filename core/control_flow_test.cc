// while and conditional: HLO text round trip, the verifier's signature checks, the executor on
// a counted loop and on both conditional forms, and the trip-count analysis.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/internal/lazy.h"
#include "tessel/core/literal.h"
#include "tessel/core/tensor.h"
#include "tessel/core/while_loop_analysis.h"

namespace tessel {
namespace {

// x doubled `bound` times (a fori_loop: counter in element 0, init 0, += 1, < bound).
std::string CountedLoop(int bound, const std::string& extra_attrs = "") {
  return "HloModule loop\n\n"
         "%cond (s: (s32[], f32[3])) -> pred[] {\n"
         "  %s = (s32[], f32[3]) parameter(0)\n"
         "  %i = s32[] get-tuple-element(%s), index=0\n"
         "  %n = s32[] constant(" +
         std::to_string(bound) +
         ")\n"
         "  ROOT %lt = pred[] compare(%i, %n), direction=LT\n"
         "}\n\n"
         "%body (s: (s32[], f32[3])) -> (s32[], f32[3]) {\n"
         "  %s = (s32[], f32[3]) parameter(0)\n"
         "  %i = s32[] get-tuple-element(%s), index=0\n"
         "  %x = f32[3] get-tuple-element(%s), index=1\n"
         "  %one = s32[] constant(1)\n"
         "  %next = s32[] add(%i, %one)\n"
         "  %y = f32[3] add(%x, %x)\n"
         "  ROOT %t = (s32[], f32[3]) tuple(%next, %y)\n"
         "}\n\n"
         "ENTRY %main (x: f32[3]) -> f32[3] {\n"
         "  %x = f32[3] parameter(0)\n"
         "  %zero = s32[] constant(0)\n"
         "  %init = (s32[], f32[3]) tuple(%zero, %x)\n"
         "  %w = (s32[], f32[3]) while(%init), condition=%cond, body=%body" +
         extra_attrs +
         "\n"
         "  ROOT %r = f32[3] get-tuple-element(%w), index=1\n"
         "}\n";
}

// Branch 0 negates, branch 1 doubles, branch 2 exponentiates (f32[2] -> f32[2]).
constexpr char kBranches[] = R"(
%neg (a: f32[2]) -> f32[2] {
  %a = f32[2] parameter(0)
  ROOT %n = f32[2] negate(%a)
}

%dbl (a: f32[2]) -> f32[2] {
  %a = f32[2] parameter(0)
  ROOT %d = f32[2] add(%a, %a)
}

%ex (a: f32[2]) -> f32[2] {
  %a = f32[2] parameter(0)
  ROOT %e = f32[2] exponential(%a)
}
)";

std::string PredConditional() {
  return std::string("HloModule cond\n") + kBranches +
         "\nENTRY %main (p: pred[], x: f32[2]) -> f32[2] {\n"
         "  %p = pred[] parameter(0)\n"
         "  %x = f32[2] parameter(1)\n"
         "  ROOT %c = f32[2] conditional(%p, %x, %x), true_computation=%neg, "
         "false_computation=%dbl\n"
         "}\n";
}

std::string IndexedConditional() {
  return std::string("HloModule cond\n") + kBranches +
         "\nENTRY %main (k: s32[], x: f32[2]) -> f32[2] {\n"
         "  %k = s32[] parameter(0)\n"
         "  %x = f32[2] parameter(1)\n"
         "  ROOT %c = f32[2] conditional(%k, %x, %x, %x), branch_computations={%neg, %dbl, %ex}\n"
         "}\n";
}

std::vector<float> RunGraph(const Graph& g, const std::vector<Literal>& args) {
  absl::StatusOr<std::vector<Literal>> out = Executor().Run(g, args);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  auto data = (*out)[0].data<float>();
  return std::vector<float>(data.begin(), data.end());
}

TEST(ControlFlowTest, WhileRoundTripsThroughText) {
  auto g = ParseHloModule(CountedLoop(4, ", backend_config={\"known_trip_count\":{\"n\":\"4\"}}"));
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string text = PrintHloModule(**g);
  EXPECT_NE(text.find("%cond (s: (s32[], f32[3])) -> pred[] {"), std::string::npos) << text;
  EXPECT_NE(text.find("while(%init), condition=%cond, body=%body, "
                      "backend_config={\"known_trip_count\":{\"n\":\"4\"}}"),
            std::string::npos)
      << text;
  auto again = ParseHloModule(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(PrintHloModule(**again), text);
}

TEST(ControlFlowTest, ConditionalsRoundTripThroughText) {
  for (const std::string& module : {PredConditional(), IndexedConditional()}) {
    auto g = ParseHloModule(module);
    ASSERT_TRUE(g.ok()) << g.status();
    const std::string text = PrintHloModule(**g);
    auto again = ParseHloModule(text);
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
    EXPECT_EQ(PrintHloModule(**again), text);
  }
  EXPECT_NE(PrintHloModule(**ParseHloModule(PredConditional()))
                .find("true_computation=%neg, false_computation=%dbl"),
            std::string::npos);
  EXPECT_NE(PrintHloModule(**ParseHloModule(IndexedConditional()))
                .find("branch_computations={%neg, %dbl, %ex}"),
            std::string::npos);
}

TEST(ControlFlowTest, VerifierNamesABodyOfTheWrongShape) {
  std::string text = CountedLoop(4);
  // The body drops the counter: it returns (f32[3]) where the state is (s32[], f32[3]).
  const std::string root = "ROOT %t = (s32[], f32[3]) tuple(%next, %y)";
  text.replace(text.find(root), root.size(), "ROOT %t = (f32[3]) tuple(%y)");
  const std::string sig = "%body (s: (s32[], f32[3])) -> (s32[], f32[3])";
  text.replace(text.find(sig), sig.size(), "%body (s: (s32[], f32[3])) -> (f32[3])");
  auto g = ParseHloModule(text);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find(
                "body %body returns (f32[3]) but the loop state (init) is (s32[], f32[3])"),
            std::string::npos)
      << g.status();
}

TEST(ControlFlowTest, VerifierRejectsAConditionThatIsNotAPred) {
  std::string text = CountedLoop(4);
  const std::string root = "ROOT %lt = pred[] compare(%i, %n), direction=LT";
  text.replace(text.find(root), root.size(), "ROOT %lt = s32[] add(%i, %n)");
  auto g = ParseHloModule(text);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("condition %cond returns s32[], not pred[]"),
            std::string::npos)
      << g.status();
}

TEST(ControlFlowTest, VerifierChecksBranchSignatures) {
  std::string text = PredConditional();
  // A pred selector with three branches.
  const std::string attrs = "true_computation=%neg, false_computation=%dbl";
  text.replace(text.find(attrs), attrs.size(), "branch_computations={%neg, %dbl, %ex}");
  text.replace(text.find("conditional(%p, %x, %x)"), 23, "conditional(%p, %x, %x, %x)");
  auto g = ParseHloModule(text);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("a pred[] selector needs 2 branches, got 3"),
            std::string::npos)
      << g.status();
  auto unknown = ParseHloModule(
      std::string(PredConditional()).replace(PredConditional().find("=%dbl"), 5, "=%nope"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown computation \"%nope\""), std::string::npos)
      << unknown.status();
}

TEST(ControlFlowTest, ExecutorRunsACountedLoop) {
  for (int bound : {0, 1, 5}) {
    auto g = ParseHloModule(CountedLoop(bound));
    ASSERT_TRUE(g.ok()) << g.status();
    const float scale = static_cast<float>(1 << bound);
    EXPECT_EQ(RunGraph(**g, {Literal::FromVector<float>({3}, {1, -2, 0.5f})}),
              (std::vector<float>{scale, -2 * scale, 0.5f * scale}))
        << "bound " << bound;
  }
}

// A loop that would run for hours (2^31 - 1 iterations) stops at the run's deadline with
// kDeadlineExceeded naming the loop; `tessel verify` hung on such a loop before.
TEST(ControlFlowTest, ExecutorStopsALoopAtTheDeadline) {
  auto g = ParseHloModule(CountedLoop(2147483647));
  ASSERT_TRUE(g.ok()) << g.status();
  ExecutorOptions options;
  options.deadline = absl::Now() + absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<Literal>> out =
      Executor(options).Run(**g, {Literal::FromVector<float>({3}, {1, -2, 0.5f})});
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  ASSERT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded) << out.status();
  EXPECT_NE(out.status().message().find("does its condition ever turn false?"),
            absl::string_view::npos)
      << out.status();
}

TEST(ControlFlowTest, ExecutorStopsWhenCancelled) {
  // Set from another thread while a loop of 2^31 iterations runs: the run stops at its next
  // node with kCancelled (Python's Ctrl-C in tessel.verify sets such a flag).
  auto g = ParseHloModule(CountedLoop(2147483647));
  ASSERT_TRUE(g.ok()) << g.status();
  std::atomic<bool> cancel{false};
  ExecutorOptions options;
  options.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel.store(true);
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<Literal>> out =
      Executor(options).Run(**g, {Literal::FromVector<float>({3}, {1, -2, 0.5f})});
  canceller.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  ASSERT_EQ(out.status().code(), absl::StatusCode::kCancelled) << out.status();
  EXPECT_NE(out.status().message().find("the run was cancelled before %"), absl::string_view::npos)
      << out.status();
  // Already set: nothing runs.
  EXPECT_EQ(
      Executor(options).Run(**g, {Literal::FromVector<float>({3}, {1, -2, 0.5f})}).status().code(),
      absl::StatusCode::kCancelled);
}

TEST(ControlFlowTest, ExecutorRunsBothConditionalForms) {
  auto pred = ParseHloModule(PredConditional());
  ASSERT_TRUE(pred.ok()) << pred.status();
  const Literal x = Literal::FromVector<float>({2}, {1, -3});
  EXPECT_EQ(RunGraph(**pred, {Literal::Scalar<bool>(true), x}), (std::vector<float>{-1, 3}));
  EXPECT_EQ(RunGraph(**pred, {Literal::Scalar<bool>(false), x}), (std::vector<float>{2, -6}));
  auto indexed = ParseHloModule(IndexedConditional());
  ASSERT_TRUE(indexed.ok()) << indexed.status();
  EXPECT_EQ(RunGraph(**indexed, {Literal::Scalar<int32_t>(0), x}), (std::vector<float>{-1, 3}));
  EXPECT_EQ(RunGraph(**indexed, {Literal::Scalar<int32_t>(1), x}), (std::vector<float>{2, -6}));
  const std::vector<float> e = RunGraph(**indexed, {Literal::Scalar<int32_t>(2), x});
  ASSERT_EQ(e.size(), 2u);
  EXPECT_NEAR(e[0], 2.7182817f, 1e-5);
  // XLA: an index outside 0..N-1 runs the last branch.
  EXPECT_EQ(RunGraph(**indexed, {Literal::Scalar<int32_t>(7), x}), e);
  EXPECT_EQ(RunGraph(**indexed, {Literal::Scalar<int32_t>(-1), x}), e);
}

const Node& WhileOf(const Graph& g) {
  for (const Node* node : g.nodes()) {
    if (node->opcode() == Opcode::kWhile) return *node;
  }
  ADD_FAILURE() << "no while";
  return *g.root();
}

TEST(ControlFlowTest, TripCountFromThePatternAndTheBackendConfig) {
  auto counted = ParseHloModule(CountedLoop(5));
  ASSERT_TRUE(counted.ok());
  EXPECT_EQ(ComputeWhileLoopTripCount(WhileOf(**counted)), 5);
  auto never = ParseHloModule(CountedLoop(0));
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(ComputeWhileLoopTripCount(WhileOf(**never)), 0);
  // LE counts the bound too; a step of 2 halves the count (rounded up).
  std::string le = CountedLoop(5);
  le.replace(le.find("direction=LT"), 12, "direction=LE");
  EXPECT_EQ(ComputeWhileLoopTripCount(WhileOf(**ParseHloModule(le))), 6);
  std::string by_two = CountedLoop(5);
  by_two.replace(by_two.find("%one = s32[] constant(1)"), 24, "%one = s32[] constant(2)");
  EXPECT_EQ(ComputeWhileLoopTripCount(WhileOf(**ParseHloModule(by_two))), 3);
  // The backend config wins over the pattern.
  auto known =
      ParseHloModule(CountedLoop(5, ", backend_config={\"known_trip_count\":{\"n\":\"7\"}}"));
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_EQ(ComputeWhileLoopTripCount(WhileOf(**known)), 7);
  // A counter that never moves: no trip count.
  std::string stuck = CountedLoop(5);
  stuck.replace(stuck.find("%one = s32[] constant(1)"), 24, "%one = s32[] constant(0)");
  EXPECT_EQ(ComputeWhileLoopTripCount(WhileOf(**ParseHloModule(stuck))), std::nullopt);
}

TEST(ControlFlowTest, FingerprintCoversTheCalledComputations) {
  auto three = ParseHloModule(CountedLoop(3));
  auto four = ParseHloModule(CountedLoop(4));
  auto again = ParseHloModule(CountedLoop(3));
  ASSERT_TRUE(three.ok() && four.ok() && again.ok());
  EXPECT_NE(GraphFingerprint(**three), GraphFingerprint(**four));
  EXPECT_EQ(GraphFingerprint(**three), GraphFingerprint(**again));
}

// No gradient rule for control flow: a loss computed through a while fails loudly rather than
// giving zeros. The Tensor API has no while, so the lazy node is built directly.
TEST(ControlFlowTest, GradientThroughAWhileIsUnimplemented) {
  auto loop_graph = ParseHloModule(CountedLoop(2));
  ASSERT_TRUE(loop_graph.ok()) << loop_graph.status();
  const Node* loop = nullptr;
  for (const Node* node : (*loop_graph)->nodes()) {
    if (node->opcode() == Opcode::kWhile) loop = node;
  }
  ASSERT_NE(loop, nullptr);
  Tensor x = Tensor::FromLiteral(Literal::FromVector<float>({3}, {1, 2, 3}));
  Tensor zero = Tensor::Constant(Literal::Scalar<int32_t>(0));
  auto node = [](Opcode opcode, const Shape& shape, OpAttributes attrs,
                 std::vector<std::shared_ptr<internal_lazy::LazyNode>> operands) {
    auto n = std::make_shared<internal_lazy::LazyNode>();
    n->opcode = opcode;
    n->shape = shape;
    n->attrs = std::move(attrs);
    n->operands = std::move(operands);
    return Tensor(internal_lazy::MakeImpl(std::move(n)));
  };
  Tensor init = node(Opcode::kTuple, loop->shape(), {}, {zero.impl()->node, x.impl()->node});
  Tensor state = node(Opcode::kWhile, loop->shape(), loop->attrs(), {init.impl()->node});
  OpAttributes gte;
  gte.tuple_index = 1;
  Tensor y = node(Opcode::kGetTupleElement, x.shape(), gte, {state.impl()->node});
  std::vector<Tensor> grads = Grad(ReduceSum(y, {0}), {x});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0].status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(grads[0].status().message().find("no gradient through while"), std::string::npos)
      << grads[0].status();
}

}  // namespace
}  // namespace tessel
