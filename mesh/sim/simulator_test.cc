#include "tessel/mesh/sim/simulator.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tessel/nn/transformer.h"
#include "tessel/spmd/mesh.h"

namespace tessel::mesh {
namespace {

using ::testing::HasSubstr;

Topology Uniform(int64_t slices, std::vector<int64_t> shape, int64_t hosts,
                 std::vector<bool> wrap = {}) {
  absl::StatusOr<Topology> t = MakeUniformTopology(slices, shape, hosts, wrap);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

SimulatorOptions TraceOptions() {
  SimulatorOptions options;
  options.record_trace = true;
  return options;
}

partitioner::SpmdProgram Program(std::unique_ptr<Graph> graph, int64_t num_devices) {
  partitioner::SpmdProgram p;
  p.program = std::move(graph);
  p.num_devices = num_devices;
  return p;
}

TEST(SimulatorTest, RingAllReduceOnFourDevicesCostsTheFormula) {
  // MakeUniformTopology: ICI 400 Gbps (50e9 B/s per direction), 1 us per hop.
  Topology topology = Uniform(1, {4}, 1, {true});
  auto g = std::make_unique<Graph>("ar");
  Node* p = g->AddParameter(0, Shape(DType::kF32, {1 << 20})).value();
  OpAttributes attrs;
  attrs.replica_groups = {{0, 1, 2, 3}};
  g->set_root(g->AddNode(Opcode::kAllReduce, {p}, attrs).value());
  Simulator sim = *Simulator::Create(topology);
  absl::StatusOr<SimulationReport> r = sim.Run(Program(std::move(g), 4));
  ASSERT_TRUE(r.ok()) << r.status();
  const double v = 4.0 * (1 << 20);
  const double expected = 2 * 3.0 / 4 * v / 100e9 + 2 * 2 * 1e-6;
  EXPECT_NEAR(r->step_seconds, expected, 1e-15);
  EXPECT_NEAR(r->ici_seconds, expected, 1e-15);
  EXPECT_EQ(r->dcn_seconds, 0);
  EXPECT_EQ(r->compute_seconds, 0);
  EXPECT_NEAR(r->exposed_comm_seconds, expected, 1e-15);
  EXPECT_EQ(r->classes.size(), 1u);  // every device of a ring looks the same
  EXPECT_EQ(r->ici_bytes_per_device, static_cast<int64_t>(1.5 * v));
  EXPECT_EQ(r->ici_bytes_total, 4 * static_cast<int64_t>(1.5 * v));
}

// A program with one DCN all-reduce (one device per slice) of `bytes`.
SimulationReport DcnStep(double dcn_gbps) {
  std::string json = absl::StrCat(
      "{\"device_spec\": {\"peak_tflops\": {\"bf16\": 1}, \"hbm_bytes\": 1073741824, "
      "\"hbm_bandwidth_gbytes_per_s\": 1000}, \"ici\": {\"kind\": \"torus\", "
      "\"bandwidth_gbps\": 400, \"latency_us\": 1}, \"dcn\": {\"bandwidth_gbps\": ",
      dcn_gbps,
      ", \"latency_us\": 0}, \"slices\": [{\"shape\": [2], \"wraparound\": [false], \"hosts\": 1, "
      "\"devices_per_host\": 2}, {\"shape\": [2], \"wraparound\": [false], \"hosts\": 1, "
      "\"devices_per_host\": 2}]}");
  Topology topology = *ParseTopology(json, "<test>");
  auto g = std::make_unique<Graph>("dp");
  Node* p = g->AddParameter(0, Shape(DType::kF32, {1 << 20})).value();
  OpAttributes attrs;
  attrs.replica_groups = {{0, 2}, {1, 3}};
  g->set_root(g->AddNode(Opcode::kAllReduce, {p}, attrs).value());
  Simulator sim = *Simulator::Create(topology);
  return *sim.Run(Program(std::move(g), 4));
}

TEST(SimulatorTest, DoublingDcnBandwidthHalvesTheDcnTerm) {
  SimulationReport slow = DcnStep(200), fast = DcnStep(400);
  ASSERT_GT(slow.dcn_seconds, 0);
  EXPECT_DOUBLE_EQ(fast.dcn_seconds, slow.dcn_seconds / 2);
  // DCN per device: 200 Gbps / 8 / 2 devices per host; ring of 2 slices: 2 * (1/2) * V.
  EXPECT_NEAR(slow.dcn_seconds, 4.0 * (1 << 20) / (200e9 / 8 / 2), 1e-12);
  EXPECT_EQ(slow.ici_seconds, 0);
  EXPECT_EQ(slow.dcn_bytes_per_device, 4 << 20);
}

TEST(SimulatorTest, OverlapHidesAnIndependentCollective) {
  Topology topology = Uniform(1, {4}, 1, {true});
  auto g = std::make_unique<Graph>("overlap");
  Node* w = g->AddParameter(0, Shape(DType::kF32, {256, 256})).value();
  Node* a = g->AddParameter(1, Shape(DType::kF32, {256, 256})).value();
  OpAttributes ag;
  ag.replica_groups = {{0, 1, 2, 3}};
  ag.dimensions = {0};
  Node* gathered = g->AddNode(Opcode::kAllGather, {w}, ag).value();  // f32[1024,256]
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  Node* y = g->AddNode(Opcode::kDot, {a, a}, dot).value();  // independent of the gather
  Node* z = g->AddNode(Opcode::kDot, {gathered, y}, dot).value();
  g->set_root(z);
  SimulatorOptions options;
  options.overlap = true;
  Simulator sim = *Simulator::Create(topology, options);
  partitioner::SpmdProgram program = Program(std::move(g), 4);
  SimulationReport r = *sim.Run(program);
  const CostModel& m = sim.cost_model();
  const double t_ag = m.Cost(*gathered, 0).seconds, t_y = m.Cost(*y, 0).seconds,
               t_z = m.Cost(*z, 0).seconds;
  EXPECT_NEAR(r.in_order_seconds, t_ag + t_y + t_z, 1e-15);
  EXPECT_NEAR(r.overlapped_seconds, std::max(t_ag, t_y) + t_z, 1e-15);
  EXPECT_DOUBLE_EQ(r.step_seconds, r.overlapped_seconds);
  EXPECT_NEAR(r.compute_seconds, t_y + t_z, 1e-15);
  EXPECT_NEAR(r.exposed_comm_seconds, std::max(0.0, t_ag - t_y), 1e-15);
}

// The start time of `name` on class 0 in the report's trace (-1 when it has no event).
double TraceStart(const SimulationReport& r, const std::string& name) {
  for (const TraceEvent& e : r.trace) {
    if (e.device_class == 0 && e.name == name) return e.start_seconds;
  }
  return -1;
}

OpAttributes MatMul() {
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  return dot;
}

// Program order puts a gradient's convert after independent compute (as the partitioned
// backward pass does): gw = dot(a, a); y = dot(b, b); c = convert(gw); all-reduce(c). The
// overlapped schedule takes the convert as soon as gw is done, so the all-reduce runs under y.
// By hand (MakeUniformTopology: 1 TFLOP/s, 1000 GB/s HBM, ring of 4 at 100 GB/s both ways, 1 us
// per hop):
//   gw  = 2 * 256^3 flop / 1e12             = 33.554432 us
//   y   = 2 * 512^3 flop / 1e12             = 268.435456 us
//   c   = (262144 B read + 131072 B written) / 1e12 B/s = 0.393216 us (memory-bound)
//   all-reduce of 131072 B = 1.5 * 131072 / 100e9 + 4 * 1 us = 5.96608 us
// In program order the compute stream runs gw, y, c, then the all-reduce is exposed:
// 33.554432 + 268.435456 + 0.393216 + 5.96608 = 308.349184 us (the in-order step, and what the
// overlapped schedule gave when it took local ops in program order). Overlapped now: gw, c, y
// with the all-reduce from 33.947648 to 39.913728 us, so the step is 302.383104 us and nothing
// is exposed.
// gw = dot(a, a); y = dot(b, b); c = convert(gw); `reduction`(c) over devices 0-3 (along dim 0
// for a reduce-scatter); the root is (y, the reduction). The program owns the nodes.
struct GradientProgram {
  partitioner::SpmdProgram program;
  Node *gw, *y, *c, *reduction;
};
GradientProgram MakeGradientProgram(Opcode reduction) {
  auto g = std::make_unique<Graph>("gradient");
  GradientProgram p;
  Node* a = g->AddParameter(0, Shape(DType::kF32, {256, 256})).value();
  Node* b = g->AddParameter(1, Shape(DType::kF32, {512, 512})).value();
  p.gw = g->AddNode(Opcode::kDot, {a, a}, MatMul()).value();
  p.y = g->AddNode(Opcode::kDot, {b, b}, MatMul()).value();
  p.c = g->AddNode(Opcode::kConvert, Shape(DType::kBF16, {256, 256}), {p.gw}).value();
  OpAttributes all;
  all.replica_groups = {{0, 1, 2, 3}};
  if (reduction == Opcode::kReduceScatter) all.dimensions = {0};
  p.reduction = g->AddNode(reduction, {p.c}, all).value();
  g->set_root(g->AddNode(Opcode::kTuple, {p.y, p.reduction}).value());
  p.program = Program(std::move(g), 4);
  return p;
}

TEST(SimulatorTest, OverlapStartsAGradientCollectiveAsSoonAsItsConvertCanRun) {
  Topology topology = Uniform(1, {4}, 1, {true});
  GradientProgram p = MakeGradientProgram(Opcode::kAllReduce);
  Node *gw = p.gw, *y = p.y, *c = p.c, *ar = p.reduction;
  SimulatorOptions options = TraceOptions();
  options.overlap = true;
  Simulator sim = *Simulator::Create(topology, options);
  SimulationReport r = *sim.Run(p.program);
  const CostModel& m = sim.cost_model();
  EXPECT_NEAR(m.Cost(*gw, 0).seconds, 33.554432e-6, 1e-15);
  EXPECT_NEAR(m.Cost(*y, 0).seconds, 268.435456e-6, 1e-15);
  EXPECT_NEAR(m.Cost(*c, 0).seconds, 0.393216e-6, 1e-15);
  EXPECT_NEAR(m.Cost(*ar, 0).seconds, 5.96608e-6, 1e-15);
  EXPECT_NEAR(r.in_order_seconds, 308.349184e-6, 1e-15);
  EXPECT_NEAR(r.overlapped_seconds, 302.383104e-6, 1e-15);
  EXPECT_DOUBLE_EQ(r.step_seconds, r.overlapped_seconds);
  EXPECT_NEAR(r.compute_seconds, 302.383104e-6, 1e-15);
  EXPECT_NEAR(r.exposed_comm_seconds, 0, 1e-15);
  // The trace shows the same schedule.
  EXPECT_NEAR(TraceStart(r, gw->name()), 0, 1e-15);
  EXPECT_NEAR(TraceStart(r, c->name()), 33.554432e-6, 1e-15);
  EXPECT_NEAR(TraceStart(r, ar->name()), 33.947648e-6, 1e-15);
  EXPECT_NEAR(TraceStart(r, y->name()), 33.947648e-6, 1e-15);
}

// The same program with a reduce-scatter of the gradient instead of the all-reduce. On a TPU
// (XLA's fusion on a torus) XLA runs it as a synchronous all-reduce of c (CostModel::
// ReduceScatterRunsAsAllReduce): 5.96608 us as above, and it holds the compute stream, so y waits
// for it: gw 0..33.554432, c ..33.947648, the reduction ..39.913728, y ..308.349184 us, with the
// 5.96608 us exposed. On a switch (NCCL) the reduce-scatter is a ring over one 400 Gbps port,
// 0.75 * 131072 / 50e9 + 3 * 1 us = 4.96608 us, and runs under y: 302.383104 us, nothing exposed.
TEST(SimulatorTest, OverlapHoldsTheComputeStreamForXlaTpuGradientReduction) {
  for (const bool tpu : {true, false}) {
    SCOPED_TRACE(tpu ? "torus" : "switch");
    Topology topology =
        tpu ? Uniform(1, {4}, 1, {true})
            : *ParseTopology(
                  "{\"device_spec\": {\"peak_tflops\": {\"bf16\": 1, \"f32\": 1}, "
                  "\"hbm_bytes\": 1073741824, \"hbm_bandwidth_gbytes_per_s\": 1000}, "
                  "\"ici\": {\"kind\": \"switch\", \"bandwidth_gbps\": 400, \"latency_us\": 1}, "
                  "\"dcn\": {\"bandwidth_gbps\": 200, \"latency_us\": 10}, \"slices\": "
                  "[{\"shape\": [4], \"wraparound\": [false], \"hosts\": 1, "
                  "\"devices_per_host\": 4}]}",
                  "<test>");
    GradientProgram p = MakeGradientProgram(Opcode::kReduceScatter);
    Node *y = p.y, *rs = p.reduction;
    SimulatorOptions options = TraceOptions();
    options.overlap = true;
    Simulator sim = *Simulator::Create(topology, options);
    SimulationReport r = *sim.Run(p.program);
    const double t_rs = tpu ? 5.96608e-6 : 4.96608e-6;
    EXPECT_NEAR(sim.cost_model().Cost(*rs, 0).seconds, t_rs, 1e-15);
    EXPECT_NEAR(r.in_order_seconds, 302.383104e-6 + t_rs, 1e-15);
    EXPECT_NEAR(r.compute_seconds, 302.383104e-6, 1e-15);
    EXPECT_NEAR(TraceStart(r, rs->name()), 33.947648e-6, 1e-15);
    if (tpu) {
      EXPECT_NEAR(r.overlapped_seconds, 308.349184e-6, 1e-15);
      EXPECT_NEAR(r.exposed_comm_seconds, 5.96608e-6, 1e-15);
      EXPECT_NEAR(TraceStart(r, y->name()), 39.913728e-6, 1e-15);
    } else {
      EXPECT_NEAR(r.overlapped_seconds, 302.383104e-6, 1e-15);
      EXPECT_NEAR(r.exposed_comm_seconds, 0, 1e-15);
      EXPECT_NEAR(TraceStart(r, y->name()), 33.947648e-6, 1e-15);
    }
  }
}

// A local op that feeds a collective but reads another collective's result is not pulled ahead
// of compute that can run now: program order ar1 = all-reduce(p); y = dot(b, b);
// h = convert(ar1); ar2 = all-reduce(h). By hand (as above):
//   ar1 of 4 MiB = 1.5 * 4194304 / 100e9 + 4 us = 66.91456 us
//   y   = 268.435456 us
//   h   = (4194304 B read + 2097152 B written) / 1e12 B/s = 6.291456 us
//   ar2 of 2 MiB = 1.5 * 2097152 / 100e9 + 4 us = 35.45728 us
// y runs at once, h when y is done (ar1 finished long before), ar2 after h:
// 268.435456 + 6.291456 + 35.45728 = 310.184192 us. Taking h first would leave the compute
// stream idle until ar1 is done and end at 66.91456 + 6.291456 + 268.435456 = 341.641472 us.
TEST(SimulatorTest, OverlapKeepsAFeederOfACollectiveResultInProgramOrder) {
  Topology topology = Uniform(1, {4}, 1, {true});
  auto g = std::make_unique<Graph>("chained");
  Node* p = g->AddParameter(0, Shape(DType::kF32, {1 << 20})).value();
  Node* b = g->AddParameter(1, Shape(DType::kF32, {512, 512})).value();
  OpAttributes all;
  all.replica_groups = {{0, 1, 2, 3}};
  Node* ar1 = g->AddNode(Opcode::kAllReduce, {p}, all).value();
  Node* y = g->AddNode(Opcode::kDot, {b, b}, MatMul()).value();
  Node* h = g->AddNode(Opcode::kConvert, Shape(DType::kBF16, {1 << 20}), {ar1}).value();
  Node* ar2 = g->AddNode(Opcode::kAllReduce, {h}, all).value();
  g->set_root(g->AddNode(Opcode::kTuple, {y, ar2}).value());
  SimulatorOptions options = TraceOptions();
  options.overlap = true;
  Simulator sim = *Simulator::Create(topology, options);
  partitioner::SpmdProgram program = Program(std::move(g), 4);  // owns the nodes used below
  SimulationReport r = *sim.Run(program);
  const CostModel& m = sim.cost_model();
  EXPECT_NEAR(m.Cost(*ar1, 0).seconds, 66.91456e-6, 1e-15);
  EXPECT_NEAR(m.Cost(*h, 0).seconds, 6.291456e-6, 1e-15);
  EXPECT_NEAR(m.Cost(*ar2, 0).seconds, 35.45728e-6, 1e-15);
  EXPECT_NEAR(r.overlapped_seconds, 310.184192e-6, 1e-15);
  EXPECT_NEAR(TraceStart(r, ar1->name()), 0, 1e-15);
  EXPECT_NEAR(TraceStart(r, y->name()), 0, 1e-15);
  EXPECT_NEAR(TraceStart(r, h->name()), 268.435456e-6, 1e-15);
  EXPECT_NEAR(TraceStart(r, ar2->name()), 274.726912e-6, 1e-15);
}

TEST(SimulatorTest, CollectivesSynchroniseSlowerClasses) {
  // Devices 0,1 in slice 0 and 2,3 in slice 1. Device 0 sends to 1 (collective-permute; both
  // take the transfer time), 2 and 3 take no part; then all four all-reduce together: devices
  // 2 and 3 must wait for 0 and 1 to arrive.
  Topology topology = Uniform(2, {2}, 1);
  auto g = std::make_unique<Graph>("sync");
  Node* p = g->AddParameter(0, Shape(DType::kF32, {1 << 18})).value();
  OpAttributes permute;
  permute.source_target_pairs = {{0, 1}};
  Node* a = g->AddNode(Opcode::kCollectivePermute, {p}, permute).value();
  OpAttributes all;
  all.replica_groups = {{0, 1, 2, 3}};
  Node* b = g->AddNode(Opcode::kAllReduce, {a}, all).value();
  g->set_root(b);
  Simulator sim = *Simulator::Create(topology);
  partitioner::SpmdProgram program = Program(std::move(g), 4);
  SimulationReport r = *sim.Run(program);
  ASSERT_EQ(r.classes.size(), 3u);  // sender, receiver, bystanders
  const double t_a = sim.cost_model().Cost(*a, 0).seconds;
  EXPECT_DOUBLE_EQ(sim.cost_model().Cost(*a, 1).seconds, t_a);
  EXPECT_EQ(sim.cost_model().Cost(*a, 2).seconds, 0);
  const double t_b = sim.cost_model().Cost(*b, 0).seconds;
  ASSERT_GT(t_a, 0);
  for (const DeviceClass& c : r.classes) {
    EXPECT_NEAR(c.in_order_seconds, t_a + t_b, 1e-15) << c.representative_device;
    EXPECT_NEAR(c.overlapped_seconds, t_a + t_b, 1e-15) << c.representative_device;
  }
  EXPECT_EQ(r.classes[2].num_devices, 2);
}

TEST(SimulatorTest, LiveBufferPeak) {
  // p0 f32[100] (400 B) -> exp (fused into add) -> add with p1 -> reduce; tuple root.
  auto g = std::make_unique<Graph>("mem");
  Node* p0 = g->AddParameter(0, Shape(DType::kF32, {100})).value();
  Node* p1 = g->AddParameter(1, Shape(DType::kF32, {100})).value();
  Node* e = g->AddNode(Opcode::kExp, {p0}).value();     // fused: no buffer
  Node* s = g->AddNode(Opcode::kAdd, {e, p1}).value();  // user is reduce: materialized
  Node* zero = g->AddConstant(Literal::FromVector<float>({}, {0.0f}));
  OpAttributes reduce;
  reduce.dimensions = {0};
  Node* r = g->AddNode(Opcode::kReduce, {s, zero}, reduce).value();  // f32[]
  g->set_root(g->AddNode(Opcode::kTuple, {r, s}).value());           // s is an output: materialized
  // Live: params 800; + s 400 = 1200 (p0, p1 freed after the add, which reads them through the
  // fused exp); then the reduce's 4 bytes (the constant is fused into the reduce).
  EXPECT_EQ(PeakLiveBytes(*g), 1200);
}

TEST(SimulatorTest, HbmOverflowIsAnErrorLevelWarning) {
  std::string json =
      "{\"device_spec\": {\"name\": \"tiny\", \"peak_tflops\": {\"bf16\": 1}, \"hbm_bytes\": "
      "1000, \"hbm_bandwidth_gbytes_per_s\": 1000}, \"ici\": {\"kind\": \"torus\", "
      "\"bandwidth_gbps\": 400, \"latency_us\": 1}, \"slices\": [{\"shape\": [1], "
      "\"wraparound\": [false], \"hosts\": 1, \"devices_per_host\": 1}]}";
  Topology topology = *ParseTopology(json, "<test>");
  auto g = std::make_unique<Graph>("big");
  Node* p = g->AddParameter(0, Shape(DType::kF32, {1000})).value();
  g->set_root(g->AddNode(Opcode::kExp, {p}).value());
  SimulationReport r = *(*Simulator::Create(topology)).Run(Program(std::move(g), 1));
  EXPECT_TRUE(r.exceeds_hbm);
  EXPECT_EQ(r.peak_memory_bytes, 8000);
  EXPECT_THAT(r.warnings.back(), HasSubstr("error: peak memory"));
  EXPECT_THAT(r.warnings.back(), HasSubstr("exceeds the HBM of tiny"));
}

TEST(SimulatorTest, WrongDeviceCountIsAnError) {
  auto g = std::make_unique<Graph>("x");
  g->set_root(g->AddParameter(0, Shape(DType::kF32, {4})).value());
  Simulator sim = *Simulator::Create(Uniform(1, {4}, 1));
  EXPECT_THAT(sim.Run(Program(std::move(g), 8)).status().message(),
              HasSubstr("partitioned for 8 devices but the topology"));
}

spmd::Mesh Mesh8() {
  std::vector<int64_t> ids(8);
  for (int64_t i = 0; i < 8; ++i) ids[i] = i;
  return *spmd::Mesh::Create(ids, {2, 2, 2}, {"data", "fsdp", "tensor"});
}

nn::TransformerConfig Tiny(nn::TransformerArch arch) {
  nn::TransformerConfig c;
  c.arch = arch;
  c.layers = 2;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = arch == nn::TransformerArch::kLlama ? 2 : 0;
  c.ffn = 32;
  c.vocab = 24;
  c.seq_len = 8;
  c.batch = 4;
  return c;
}

TEST(SimulatorTest, EveryRecipePartitionsAndSimulatesOnEightDevices) {
  Topology topology = Uniform(2, {2, 2}, 2);
  Simulator sim = *Simulator::Create(topology, TraceOptions());
  for (nn::TransformerArch arch : {nn::TransformerArch::kGpt, nn::TransformerArch::kLlama}) {
    for (nn::ShardingRecipe recipe :
         {nn::ShardingRecipe::kDp, nn::ShardingRecipe::kFsdp, nn::ShardingRecipe::kTp,
          nn::ShardingRecipe::kFsdpTp, nn::ShardingRecipe::kMultisliceDp}) {
      SCOPED_TRACE(absl::StrCat(std::string(nn::TransformerArchName(arch)), " ",
                                std::string(nn::ShardingRecipeName(recipe))));
      absl::StatusOr<nn::TransformerStep> step =
          nn::BuildTransformerStep(Tiny(arch), Mesh8(), recipe);
      ASSERT_TRUE(step.ok()) << step.status();
      absl::StatusOr<partitioner::SpmdProgram> program = partitioner::Partition(*step->graph, 8);
      ASSERT_TRUE(program.ok()) << program.status();
      std::map<std::string, partitioner::CollectiveCount> counts =
          partitioner::CountCollectives(*program->program);
      // Every recipe needs at least the gradient all-reduce / reduce-scatter.
      EXPECT_FALSE(counts.empty());
      absl::StatusOr<SimulationReport> r = sim.Run(*program);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_GT(r->compute_seconds, 0);
      EXPECT_GT(r->ici_seconds + r->dcn_seconds, 0);
      EXPECT_GE(r->in_order_seconds, r->overlapped_seconds);
      EXPECT_GE(r->peak_memory_bytes, r->parameter_bytes);
      EXPECT_FALSE(r->top_ops.empty());
      EXPECT_FALSE(r->top_collectives.empty());
    }
  }
}

// The overlapped trace of real partitioned training steps is a valid schedule on every class:
// every node starts after its operands are done, local ops (and, on a TPU, reduce-scatters)
// never overlap on the compute stream nor collectives on the collective stream, and the last end
// is the overlapped step.
TEST(SimulatorTest, OverlappedTraceIsAValidScheduleForEveryRecipe) {
  Topology topology = Uniform(2, {2, 2}, 2);
  SimulatorOptions options = TraceOptions();
  options.overlap = true;
  Simulator sim = *Simulator::Create(topology, options);
  for (nn::ShardingRecipe recipe :
       {nn::ShardingRecipe::kDp, nn::ShardingRecipe::kFsdp, nn::ShardingRecipe::kTp,
        nn::ShardingRecipe::kFsdpTp, nn::ShardingRecipe::kMultisliceDp}) {
    SCOPED_TRACE(std::string(nn::ShardingRecipeName(recipe)));
    absl::StatusOr<nn::TransformerStep> step =
        nn::BuildTransformerStep(Tiny(nn::TransformerArch::kLlama), Mesh8(), recipe);
    ASSERT_TRUE(step.ok()) << step.status();
    absl::StatusOr<partitioner::SpmdProgram> program = partitioner::Partition(*step->graph, 8);
    ASSERT_TRUE(program.ok()) << program.status();
    absl::StatusOr<SimulationReport> r = sim.Run(*program);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int64_t c = 0; c < static_cast<int64_t>(r->classes.size()); ++c) {
      std::map<std::string, const TraceEvent*> events;
      for (const TraceEvent& e : r->trace) {
        if (e.device_class == c) events[e.name] = &e;
      }
      std::vector<std::pair<double, double>> compute, comm;
      std::map<const Node*, double> done;
      double end = 0;
      for (const Node* node : program->program->nodes()) {
        double ready = 0;
        for (const Node* operand : node->operands()) ready = std::max(ready, done.at(operand));
        auto it = events.find(node->name());
        if (it == events.end()) {  // takes no time: done when ready
          done[node] = ready;
          continue;
        }
        const TraceEvent& e = *it->second;
        EXPECT_GE(e.start_seconds, ready - 1e-15) << node->name();
        done[node] = e.start_seconds + e.seconds;
        end = std::max(end, done[node]);
        // On this torus (a TPU) a reduce-scatter is a kernel on the compute stream.
        const bool on_compute_stream =
            !IsCollective(node->opcode()) || (node->opcode() == Opcode::kReduceScatter &&
                                              sim.cost_model().ReduceScatterRunsAsAllReduce());
        (on_compute_stream ? compute : comm)
            .emplace_back(e.start_seconds, e.start_seconds + e.seconds);
      }
      for (auto* stream : {&compute, &comm}) {
        std::sort(stream->begin(), stream->end());
        for (size_t k = 1; k < stream->size(); ++k) {
          EXPECT_GE((*stream)[k].first, (*stream)[k - 1].second - 1e-15) << "class " << c;
        }
      }
      EXPECT_NEAR(end, r->classes[c].overlapped_seconds, 1e-15) << "class " << c;
    }
  }
}

TEST(SimulatorTest, ReplicatedAndFsdpDifferByTheShardedBytes) {
  Topology topology = Uniform(2, {2, 2}, 2);
  Simulator sim = *Simulator::Create(topology);
  nn::TransformerConfig c = Tiny(nn::TransformerArch::kGpt);
  auto run = [&](nn::ShardingRecipe recipe) {
    nn::TransformerStep step = *nn::BuildTransformerStep(c, Mesh8(), recipe);
    return *sim.Run(*partitioner::Partition(*step.graph, 8));
  };
  SimulationReport dp = run(nn::ShardingRecipe::kDp);
  SimulationReport fsdp = run(nn::ShardingRecipe::kFsdp);
  // FSDP shards one dim of every weight matrix 8 ways (by hand, elements saved per device):
  // embedding [24,16] -> [24,2]: 336; position [8,16] -> [8,2]: 112; per layer wq, wk, wv
  // [16,16] -> [2,16]: 3 x 224 = 672, wo [16,16] -> [16,2]: 224, w1 [16,32] -> [2,32]: 448, w2
  // [32,16] -> [32,2]: 448 (1792 x 2 layers = 3584); head [16,24] -> [2,24]: 336. Total 4368 f32
  // elements, for the parameter and its two Adam moments: 4368 * 4 * 3 = 52416 bytes.
  EXPECT_EQ(dp.parameter_bytes - fsdp.parameter_bytes, 52416);
  EXPECT_GT(dp.peak_memory_bytes, fsdp.peak_memory_bytes);
}

TEST(SimulatorTest, ChromeTraceHasOneTrackPerClassAndLinkTracks) {
  Topology topology = Uniform(2, {2}, 1);
  auto g = std::make_unique<Graph>("t");
  Node* p = g->AddParameter(0, Shape(DType::kF32, {1024})).value();
  OpAttributes attrs;
  attrs.replica_groups = {{0, 1, 2, 3}};
  Node* e = g->AddNode(Opcode::kExp, {p}).value();
  g->set_root(g->AddNode(Opcode::kAllReduce, {e}, attrs).value());
  Simulator sim = *Simulator::Create(topology, TraceOptions());
  SimulationReport r = *sim.Run(Program(std::move(g), 4));
  std::string path = ::testing::TempDir() + "/tessel_trace.json";
  ASSERT_TRUE(WriteChromeTrace(r, path).ok());
  std::ifstream in(path);
  nlohmann::json trace = nlohmann::json::parse(in);
  int complete = 0;
  std::set<int64_t> tids;
  std::vector<std::string> process_names;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X") ++complete;
    if (event["name"] == "process_name") {
      process_names.push_back(event["args"]["name"].get<std::string>());
      continue;
    }
    tids.insert(event["tid"].get<int64_t>());
  }
  // exp + all-reduce on the class track, the all-reduce on the ICI and the DCN tracks.
  EXPECT_EQ(complete, 4);
  EXPECT_THAT(process_names, ::testing::ElementsAre(::testing::HasSubstr("simulated step on 4")));
  EXPECT_EQ(tids.size(), r.classes.size() + 2);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tessel::mesh
