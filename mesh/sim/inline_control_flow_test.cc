// The simulator on programs with control flow: a loop costs trip count x its body (collectives
// included), an unknown trip count is an error naming the loop unless one is assumed, and a
// conditional costs its costlier branch.
#include "tessel/mesh/sim/inline_control_flow.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/hlo_text.h"
#include "tessel/mesh/sim/simulator.h"

namespace tessel::mesh {
namespace {

using ::testing::HasSubstr;

// A per-device program on 4 devices: `trips` iterations of an all-reduce of f32[1024] and a
// tanh; the loop bound is `bound_text` (a constant, or a parameter for an unknown count).
std::string LoopProgram(const std::string& bound_text) {
  return R"(
HloModule loop
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] add(%a, %b)
}
%cond (s: (s32[], f32[1024], s32[])) -> pred[] {
  %s = (s32[], f32[1024], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %m = s32[] get-tuple-element(%s), index=2
  %n = s32[] )" +
         bound_text +
         R"(
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (s: (s32[], f32[1024], s32[])) -> (s32[], f32[1024], s32[]) {
  %s = (s32[], f32[1024], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[1024] get-tuple-element(%s), index=1
  %m = s32[] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %r = f32[1024] all-reduce(%x), replica_groups={{0,1,2,3}}, to_apply=%add
  %t = f32[1024] tanh(%r)
  ROOT %state = (s32[], f32[1024], s32[]) tuple(%next, %t, %m)
}
ENTRY %main (x: f32[1024], m: s32[]) -> f32[1024] {
  %x = f32[1024] parameter(0)
  %m = s32[] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[1024], s32[]) tuple(%zero, %x, %m)
  %w = (s32[], f32[1024], s32[]) while(%init), condition=%cond, body=%body
  ROOT %out = f32[1024] get-tuple-element(%w), index=1
}
)";
}

absl::StatusOr<SimulationReport> Simulate(const std::string& text, SimulatorOptions options) {
  absl::StatusOr<Topology> topology = MakeUniformTopology(1, {4}, 1, {true});
  if (!topology.ok()) return topology.status();
  absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloModule(text);
  if (!graph.ok()) return graph.status();
  absl::StatusOr<Simulator> sim = Simulator::Create(*topology, options);
  if (!sim.ok()) return sim.status();
  partitioner::SpmdProgram program;
  program.program = *std::move(graph);
  program.num_devices = 4;
  return sim->Run(program);
}

TEST(InlineControlFlowTest, LoopCostsTripCountTimesItsBody) {
  absl::StatusOr<SimulationReport> one = Simulate(LoopProgram("constant(1)"), {});
  absl::StatusOr<SimulationReport> five = Simulate(LoopProgram("constant(5)"), {});
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(five.ok()) << five.status();
  EXPECT_GT(one->ici_bytes_per_device, 0);
  EXPECT_EQ(five->ici_bytes_per_device, 5 * one->ici_bytes_per_device);
  EXPECT_NEAR(five->ici_seconds, 5 * one->ici_seconds, 1e-12);
  EXPECT_GT(five->step_seconds, 4 * one->step_seconds);
  absl::StatusOr<SimulationReport> none = Simulate(LoopProgram("constant(0)"), {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->ici_bytes_per_device, 0);
}

TEST(InlineControlFlowTest, UnknownTripCountNamesTheLoopUnlessAssumed) {
  // The bound is a loop-invariant input: no static trip count.
  const std::string text = LoopProgram("add(%m, %m)");
  absl::StatusOr<SimulationReport> unknown = Simulate(text, {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("while %w: unknown trip count"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("--assume-trip-count"));
  SimulatorOptions assume;
  assume.assumed_trip_count = 3;
  absl::StatusOr<SimulationReport> three = Simulate(text, assume);
  absl::StatusOr<SimulationReport> one = Simulate(LoopProgram("constant(1)"), {});
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->ici_bytes_per_device, 3 * one->ici_bytes_per_device);
}

TEST(InlineControlFlowTest, ConditionalCostsItsCostlierBranch) {
  constexpr char kCond[] = R"(
HloModule cond
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] add(%a, %b)
}
%cheap (x: f32[1024]) -> f32[1024] {
  %x = f32[1024] parameter(0)
  ROOT %n = f32[1024] negate(%x)
}
%dear (x: f32[1024]) -> f32[1024] {
  %x = f32[1024] parameter(0)
  %r = f32[1024] all-reduce(%x), replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %t = f32[1024] tanh(%r)
}
ENTRY %main (p: pred[], x: f32[1024]) -> f32[1024] {
  %p = pred[] parameter(0)
  %x = f32[1024] parameter(1)
  ROOT %c = f32[1024] conditional(%p, %x, %x), true_computation=%cheap, false_computation=%dear
}
)";
  absl::StatusOr<SimulationReport> report = Simulate(kCond, {});
  ASSERT_TRUE(report.ok()) << report.status();
  absl::StatusOr<SimulationReport> loop_once = Simulate(LoopProgram("constant(1)"), {});
  ASSERT_TRUE(loop_once.ok()) << loop_once.status();
  // The all-reduce branch is the costlier one.
  EXPECT_EQ(report->ici_bytes_per_device, loop_once->ici_bytes_per_device);
}

}  // namespace
}  // namespace tessel::mesh
