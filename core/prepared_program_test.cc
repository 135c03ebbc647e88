// Executor::Prepare: a prepared program run many times gives bitwise the results, the stats and
// the errors of fresh Run(graph) calls -- with fusion, transpose folding, dot updates, in-place
// fused outputs, donated arguments, while and conditional bodies, and from several threads.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/collectives.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/internal/fusion.h"
#include "tessel/core/literal.h"
#include "tessel/core/tensor.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

Literal Random(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> values(shape.num_elements());
  for (float& v : values) v = dist(gen);
  return Literal::FromVector<float>(shape.dims(), values);
}

// One training step: ReLU layer (a compare+select fusion), a weight gradient through a folded
// transpose, an SGD update run as a dot update, and a momentum update as a fusion. Outputs
// (new w, new m, activation).
constexpr char kStep[] = R"(HloModule step

ENTRY %main (x: f32[64,32], w: f32[32,16], m: f32[32,16], lr: f32[]) -> (f32[32,16], f32[32,16], f32[64,16]) {
  %x = f32[64,32] parameter(0)
  %w = f32[32,16] parameter(1)
  %m = f32[32,16] parameter(2)
  %lr = f32[] parameter(3)
  %h = f32[64,16] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %zero = f32[] constant(0)
  %zb = f32[64,16] broadcast(%zero), dimensions={}
  %pos = pred[64,16] compare(%h, %zb), direction=GT
  %r = f32[64,16] select(%pos, %h, %zb)
  %xt = f32[32,64] transpose(%x), dimensions={1,0}
  %g = f32[32,16] dot(%xt, %r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %g2 = f32[32,16] dot(%xt, %r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %lrb = f32[32,16] broadcast(%lr), dimensions={}
  %step = f32[32,16] multiply(%lrb, %g2)
  %w1 = f32[32,16] subtract(%w, %step)
  %beta = f32[] constant(0.9)
  %bb = f32[32,16] broadcast(%beta), dimensions={}
  %mb = f32[32,16] multiply(%m, %bb)
  %ga = f32[32,16] abs(%g)
  %gs = f32[32,16] sqrt(%ga)
  %m1 = f32[32,16] add(%mb, %gs)
  ROOT %out = (f32[32,16], f32[32,16], f32[64,16]) tuple(%w1, %m1, %r)
}
)";

// A loop of fused elementwise ops, then a conditional on its result.
constexpr char kControlFlow[] = R"(HloModule flow

%cond (s: (s32[], f32[300])) -> pred[] {
  %s = (s32[], f32[300]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[300])) -> (s32[], f32[300]) {
  %s = (s32[], f32[300]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[300] get-tuple-element(%s), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %c = f32[] constant(0.5)
  %cb = f32[300] broadcast(%c), dimensions={}
  %y = f32[300] multiply(%x, %cb)
  %z = f32[300] add(%y, %x)
  %t = f32[300] tanh(%z)
  ROOT %st = (s32[], f32[300]) tuple(%next, %t)
}

%neg (a: f32[300]) -> f32[300] {
  %a = f32[300] parameter(0)
  ROOT %n = f32[300] negate(%a)
}

%sq (a: f32[300]) -> f32[300] {
  %a = f32[300] parameter(0)
  %d = f32[300] add(%a, %a)
  ROOT %e = f32[300] multiply(%d, %a)
}

ENTRY %main (p: pred[], x: f32[300]) -> f32[300] {
  %p = pred[] parameter(0)
  %x = f32[300] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[300]) tuple(%zero, %x)
  %w = (s32[], f32[300]) while(%init), condition=%cond, body=%body
  %r = f32[300] get-tuple-element(%w), index=1
  ROOT %c = f32[300] conditional(%p, %r, %r), true_computation=%neg, false_computation=%sq
}
)";

std::vector<Literal> StepArguments(uint32_t seed) {
  std::vector<Literal> args;
  args.push_back(Random(Shape(DType::kF32, {64, 32}), seed));
  args.push_back(Random(Shape(DType::kF32, {32, 16}), seed + 1));
  args.push_back(Random(Shape(DType::kF32, {32, 16}), seed + 2));
  args.push_back(Literal::Scalar<float>(0.01f * static_cast<float>(seed)));
  return args;
}

void ExpectSameStats(const ExecutionStats& a, const ExecutionStats& b) {
  EXPECT_EQ(a.peak_live_bytes, b.peak_live_bytes);
  EXPECT_EQ(a.nodes_executed, b.nodes_executed);
  EXPECT_EQ(a.kernels, b.kernels);
  EXPECT_EQ(a.fusions, b.fusions);
  EXPECT_EQ(a.in_place, b.in_place);
  EXPECT_EQ(a.fusion_extra_outputs, b.fusion_extra_outputs);
  EXPECT_EQ(a.donated_arguments, b.donated_arguments);
  EXPECT_EQ(a.donated_in_place, b.donated_in_place);
}

TEST(PreparedProgramTest, RunsTwiceBitwiseAsFreshRuns) {
  std::unique_ptr<Graph> g = ParseHloModule(kStep).value();
  for (bool fusion : {true, false}) {
    SCOPED_TRACE(absl::StrCat("fusion ", fusion));
    const Executor executor({.fusion = fusion});
    absl::StatusOr<std::shared_ptr<const PreparedProgram>> program = executor.Prepare(*g);
    ASSERT_TRUE(program.ok()) << program.status();
    for (uint32_t seed : {1u, 7u, 1u}) {
      const std::vector<Literal> args = StepArguments(seed);
      ExecutionStats fresh_stats, prepared_stats;
      const std::vector<Literal> fresh = executor.Run(*g, args, &fresh_stats).value();
      absl::StatusOr<std::vector<Literal>> prepared =
          executor.Run(**program, args, &prepared_stats);
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      ASSERT_EQ(prepared->size(), 3u);
      for (size_t o = 0; o < fresh.size(); ++o) EXPECT_EQ((*prepared)[o], fresh[o]) << o;
      ExpectSameStats(prepared_stats, fresh_stats);
      if (fusion) {
        EXPECT_GT(prepared_stats.fusions, 0);  // the plan is used, not skipped
      }
    }
  }
}

TEST(PreparedProgramTest, DonatedArgumentsAreWrittenInPlaceAsInFreshRuns) {
  std::unique_ptr<Graph> g = ParseHloModule(kStep).value();
  const Executor executor;
  std::shared_ptr<const PreparedProgram> program = executor.Prepare(*g).value();
  for (uint32_t seed : {3u, 11u}) {
    const std::vector<Literal> reference = StepArguments(seed);
    const std::vector<Literal> undonated = executor.Run(*g, reference).value();
    std::vector<std::vector<Literal>> results;
    std::vector<ExecutionStats> stats(2);
    for (int prepared = 0; prepared < 2; ++prepared) {
      std::vector<Literal> args = StepArguments(seed);
      const std::byte* w_buffer = args[1].raw_data();
      const std::byte* m_buffer = args[2].raw_data();
      const Literal* pointers[] = {&args[0], &args[1], &args[2], &args[3]};
      Literal* donated[] = {nullptr, &args[1], &args[2], nullptr};
      ExecutionDonation donation{.literals = donated};
      absl::StatusOr<std::vector<Literal>> out =
          prepared == 1 ? executor.RunBorrowed(*program, pointers, &stats[prepared], &donation)
                        : executor.RunBorrowed(*g, pointers, &stats[prepared], &donation);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_TRUE(donation.taken);
      // The SGD dot update writes w's buffer, the momentum fusion m's.
      EXPECT_EQ((*out)[0].raw_data(), w_buffer);
      EXPECT_EQ((*out)[1].raw_data(), m_buffer);
      results.push_back(*std::move(out));
    }
    for (size_t o = 0; o < undonated.size(); ++o) {
      EXPECT_EQ(results[1][o], undonated[o]) << o;
      EXPECT_EQ(results[1][o], results[0][o]) << o;
    }
    ExpectSameStats(stats[1], stats[0]);
    EXPECT_EQ(stats[1].donated_arguments, 2);
    EXPECT_EQ(stats[1].donated_in_place, 2);
  }
}

TEST(PreparedProgramTest, WhileAndConditionalBodiesRunPrepared) {
  std::unique_ptr<Graph> g = ParseHloModule(kControlFlow).value();
  const Executor executor;
  std::shared_ptr<const PreparedProgram> program = executor.Prepare(*g).value();
  for (uint32_t seed : {5u, 6u}) {
    for (bool pred : {true, false}) {
      const std::vector<Literal> args = {Literal::Scalar<bool>(pred),
                                         Random(Shape(DType::kF32, {300}), seed)};
      ExecutionStats fresh_stats, prepared_stats;
      const std::vector<Literal> fresh = executor.Run(*g, args, &fresh_stats).value();
      absl::StatusOr<std::vector<Literal>> prepared = executor.Run(*program, args, &prepared_stats);
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      EXPECT_EQ((*prepared)[0], fresh[0]);
      ExpectSameStats(prepared_stats, fresh_stats);
      EXPECT_GE(prepared_stats.fusions, 4);  // one per loop iteration at least
    }
  }
}

TEST(PreparedProgramTest, WhileStateElementsMovedAcrossIndices) {
  // (i, a, b) -> (i + 1, b, a + b), 6 times: the body's get-tuple-elements move the elements out
  // of the owned state and the root tuple puts them back at other indices.
  constexpr char kText[] = R"(HloModule swap

%cond (s: (s32[], f32[1000], f32[1000])) -> pred[] {
  %s = (s32[], f32[1000], f32[1000]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(6)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[1000], f32[1000])) -> (s32[], f32[1000], f32[1000]) {
  %s = (s32[], f32[1000], f32[1000]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %a = f32[1000] get-tuple-element(%s), index=1
  %b = f32[1000] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %sum = f32[1000] add(%a, %b)
  ROOT %t = (s32[], f32[1000], f32[1000]) tuple(%next, %b, %sum)
}

ENTRY %main (a: f32[1000], b: f32[1000]) -> f32[1000] {
  %a = f32[1000] parameter(0)
  %b = f32[1000] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[1000], f32[1000]) tuple(%zero, %a, %b)
  %w = (s32[], f32[1000], f32[1000]) while(%init), condition=%cond, body=%body
  ROOT %r = f32[1000] get-tuple-element(%w), index=2
}
)";
  std::unique_ptr<Graph> g = ParseHloModule(kText).value();
  const Shape shape(DType::kF32, {1000});
  const std::vector<Literal> args = {Random(shape, 31), Random(shape, 32)};
  std::vector<float> a(args[0].data<float>().begin(), args[0].data<float>().end());
  std::vector<float> b(args[1].data<float>().begin(), args[1].data<float>().end());
  for (int step = 0; step < 6; ++step) {
    for (size_t k = 0; k < a.size(); ++k) {
      const float sum = a[k] + b[k];
      a[k] = b[k];
      b[k] = sum;
    }
  }
  const Executor executor;
  std::shared_ptr<const PreparedProgram> program = executor.Prepare(*g).value();
  for (int repeat = 0; repeat < 2; ++repeat) {
    const std::vector<Literal> out = executor.Run(*program, args).value();
    EXPECT_EQ(out[0], Literal::FromVector<float>({1000}, b));
  }
}

TEST(PreparedProgramTest, SharedByThreadsRunningAtOnce) {
  std::unique_ptr<Graph> g = ParseHloModule(kStep).value();
  const Executor preparer;
  std::shared_ptr<const PreparedProgram> program = preparer.Prepare(*g).value();
  constexpr int kThreads = 4;
  std::vector<std::vector<Literal>> expected, got(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    expected.push_back(preparer.Run(*g, StepArguments(20 + t)).value());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each "device" has its own executor (one thread, its own id) and shares the program.
      const Executor device({.num_threads = 1, .device_id = t});
      for (int repeat = 0; repeat < 3; ++repeat) {
        got[t] = device.Run(*program, StepArguments(20 + t)).value();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(got[t].size(), expected[t].size());
    for (size_t o = 0; o < got[t].size(); ++o) EXPECT_EQ(got[t][o], expected[t][o]) << t;
  }
}

TEST(PreparedProgramTest, FusionsAreCompiledOnceAndSharedByRunsAndDevices) {
  std::unique_ptr<Graph> g = ParseHloModule(kStep).value();
  const Executor preparer;
  constexpr int kThreads = 4;
  std::vector<std::vector<Literal>> expected;
  for (int t = 0; t < kThreads; ++t) {
    expected.push_back(preparer.Run(*g, StepArguments(30 + t)).value());  // compiles its own
  }
  const int64_t before = internal::CompiledFusionCount();
  std::shared_ptr<const PreparedProgram> program = preparer.Prepare(*g).value();
  const int64_t prepared = internal::CompiledFusionCount();
  EXPECT_GT(prepared, before);  // the step has fusions, compiled by Prepare
  std::vector<std::vector<Literal>> got(kThreads);
  std::vector<ExecutionStats> stats(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const Executor device({.num_threads = 1, .device_id = t});
      for (int repeat = 0; repeat < 3; ++repeat) {
        got[t] = device.Run(*program, StepArguments(30 + t), &stats[t]).value();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // 12 runs with fusions, no compilation: every run bound its buffers to the compiled loops.
  EXPECT_EQ(internal::CompiledFusionCount(), prepared);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_GT(stats[t].fusions, 0);
    ASSERT_EQ(got[t].size(), expected[t].size());
    for (size_t o = 0; o < got[t].size(); ++o) EXPECT_EQ(got[t][o], expected[t][o]) << t;
  }
}

TEST(PreparedProgramTest, ErrorsAreThoseOfAnUnpreparedRun) {
  // A node breaking its shape rule: Prepare reports what Run reports.
  Graph bad;
  Node* x = bad.AddParameter(0, Shape(DType::kF32, {4}), "x").value();
  bad.AddNodeUnchecked(Opcode::kAdd, Shape(DType::kF32, {5}), {x, x}, {}, "bad");
  const Executor executor;
  const absl::Status run_error = executor.Run(bad, {Literal(Shape(DType::kF32, {4}))}).status();
  const absl::Status prepare_error = executor.Prepare(bad).status();
  EXPECT_EQ(prepare_error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(prepare_error.message(), HasSubstr("%bad"));
  EXPECT_EQ(prepare_error, run_error);
  // An empty graph.
  Graph empty("empty");
  EXPECT_EQ(executor.Prepare(empty).status(), executor.Run(empty, {}).status());

  // Bad arguments to a prepared program: the messages of Run(graph).
  std::unique_ptr<Graph> g = ParseHloModule(kStep).value();
  std::shared_ptr<const PreparedProgram> program = executor.Prepare(*g).value();
  std::vector<Literal> args = StepArguments(1);
  args[1] = Literal(Shape(DType::kF32, {16, 32}));
  absl::Status shape_error = executor.Run(*program, args).status();
  EXPECT_EQ(shape_error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape_error.message(), HasSubstr("argument 1 has shape f32[16,32]"));
  EXPECT_EQ(shape_error, executor.Run(*g, args).status());
  args.pop_back();
  EXPECT_EQ(executor.Run(*program, args).status(), executor.Run(*g, args).status());

  // Run under another fusion option than it was planned with.
  const absl::Status mismatch =
      Executor({.fusion = false}).Run(*program, StepArguments(1)).status();
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.message(), HasSubstr("prepared with fusion on"));
}

TEST(PreparedProgramTest, CollectiveNeedsABackendAtRunToo) {
  Graph spmd("spmd");
  Node* pid = spmd.AddNodeUnchecked(Opcode::kPartitionId, Shape(DType::kS32, {}), {}, {}, "pid");
  OpAttributes sum;
  sum.replica_groups = {{0, 1}};
  spmd.set_root(spmd.AddNode(Opcode::kAllReduce, {pid}, sum, "ar").value());
  const absl::Status run_error = Executor().Run(spmd, {}).status();
  EXPECT_EQ(run_error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Executor().Prepare(spmd).status(), run_error);
  // Prepared where a backend exists, run where none does: the same error, not a crash.
  InProcessCollectives backend(2);
  std::shared_ptr<const PreparedProgram> program =
      Executor({.collectives = &backend}).Prepare(spmd).value();
  EXPECT_EQ(Executor().Run(*program, {}).status(), run_error);
}

TEST(PreparedProgramTest, BadBranchIsReportedOnlyWhenItRuns) {
  // A branch holding a collective: an unprepared run fails only when that branch is taken, and
  // so does a prepared one (Prepare itself succeeds).
  constexpr char kText[] = R"(HloModule branches

%add_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%plain (a: f32[2]) -> f32[2] {
  %a = f32[2] parameter(0)
  ROOT %n = f32[2] negate(%a)
}

%reduced (a: f32[2]) -> f32[2] {
  %a = f32[2] parameter(0)
  ROOT %r = f32[2] all-reduce(%a), replica_groups={{0,1}}, to_apply=%add_f32
}

ENTRY %main (p: pred[], x: f32[2]) -> f32[2] {
  %p = pred[] parameter(0)
  %x = f32[2] parameter(1)
  ROOT %c = f32[2] conditional(%p, %x, %x), true_computation=%plain, false_computation=%reduced
}
)";
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseHloModule(kText);
  ASSERT_TRUE(g.ok()) << g.status();
  const Executor executor;
  absl::StatusOr<std::shared_ptr<const PreparedProgram>> program = executor.Prepare(**g);
  ASSERT_TRUE(program.ok()) << program.status();
  const Literal x = Literal::FromVector<float>({2}, {1, -3});
  const std::vector<Literal> plain = {Literal::Scalar<bool>(true), x};
  EXPECT_EQ(executor.Run(**program, plain).value()[0], executor.Run(**g, plain).value()[0]);
  const std::vector<Literal> reduced = {Literal::Scalar<bool>(false), x};
  const absl::Status run_error = executor.Run(**g, reduced).status();
  EXPECT_EQ(run_error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(run_error.message(), HasSubstr("%r"));
  EXPECT_EQ(executor.Run(**program, reduced).status(), run_error);
}

// Sets TESSEL_EXECUTOR_PREPARED for one scope.
class PreparedSwitch {
 public:
  explicit PreparedSwitch(const char* value) { setenv("TESSEL_EXECUTOR_PREPARED", value, 1); }
  ~PreparedSwitch() { unsetenv("TESSEL_EXECUTOR_PREPARED"); }
};

// Runs kStep through `client` (seed's arguments, w and m donated) and returns its outputs.
std::vector<Literal> ClientStep(LocalComputationClient& client,
                                const std::shared_ptr<const Graph>& graph, uint32_t seed) {
  std::vector<std::shared_ptr<const DeviceData>> arguments;
  for (Literal& arg : StepArguments(seed)) {
    arguments.push_back(std::make_shared<const LiteralData>(std::move(arg)));
  }
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> out = client.ExecuteDonated(
      graph, GraphFingerprint(*graph), arguments, {false, true, true, false}, nullptr);
  EXPECT_TRUE(out.ok()) << out.status();
  std::vector<Literal> values;
  if (!out.ok()) return values;
  for (const auto& data : *out) values.push_back(client.TransferFromDevice(*data).value());
  return values;
}

TEST(PreparedProgramTest, LocalClientKeepsThePreparedProgram) {
  std::shared_ptr<const Graph> graph = ParseHloModule(kStep).value();
  LocalComputationClient kept, unprepared;
  for (uint32_t seed : {2u, 9u, 2u}) {
    const std::vector<Literal> with = ClientStep(kept, graph, seed);
    std::vector<Literal> without;
    {
      PreparedSwitch off("0");
      without = ClientStep(unprepared, graph, seed);
    }
    ASSERT_EQ(with.size(), 3u);
    ASSERT_EQ(without.size(), 3u);
    for (size_t o = 0; o < with.size(); ++o) EXPECT_EQ(with[o], without[o]) << o;
  }
  // A malformed switch is an error naming it.
  PreparedSwitch bad("sometimes");
  std::vector<std::shared_ptr<const DeviceData>> arguments;
  for (Literal& arg : StepArguments(1)) {
    arguments.push_back(std::make_shared<const LiteralData>(std::move(arg)));
  }
  absl::Status status = kept.Execute(graph, GraphFingerprint(*graph), arguments, nullptr).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("TESSEL_EXECUTOR_PREPARED"));
}

}  // namespace
}  // namespace tessel
