#include "tessel/mesh/cost/cost_model.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::mesh {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;

// A one-or-more-slice torus topology: 1 TFLOP/s bf16 (and f32 unless `bf16_only`), HBM
// 1000 GB/s, ICI `ici_gbps` per link direction, latency `ici_us`; DCN `dcn_gbps` per host.
std::string TopologyJson(const std::string& slice_shape, const std::string& wraparound, int slices,
                         int hosts, int devices_per_host, double ici_gbps = 400, double ici_us = 1,
                         double dcn_gbps = 200, double dcn_us = 10,
                         const std::string& extra_spec = "", bool bf16_only = false,
                         const std::string& ici_kind = "torus") {
  std::string slice =
      absl::StrCat("{\"shape\": ", slice_shape, ", \"wraparound\": ", wraparound,
                   ", \"hosts\": ", hosts, ", \"devices_per_host\": ", devices_per_host, "}");
  std::string slice_list = slice;
  for (int i = 1; i < slices; ++i) slice_list += ", " + slice;
  return absl::StrCat("{\"device_spec\": {\"name\": \"test\", \"peak_tflops\": {",
                      bf16_only ? "\"bf16\": 1" : "\"bf16\": 1, \"f32\": 1",
                      "}, \"hbm_bytes\": 1073741824, \"hbm_bandwidth_gbytes_per_s\": 1000",
                      extra_spec, "}, \"ici\": {\"kind\": \"", ici_kind,
                      "\", \"bandwidth_gbps\": ", ici_gbps, ", \"latency_us\": ", ici_us,
                      "}, \"dcn\": {\"bandwidth_gbps\": ", dcn_gbps, ", \"latency_us\": ", dcn_us,
                      "}, \"slices\": [", slice_list, "]}");
}

CostModel Model(const std::string& json) {
  absl::StatusOr<Topology> topology = ParseTopology(json, "<test>");
  EXPECT_TRUE(topology.ok()) << topology.status();
  absl::StatusOr<CostModel> model = CostModel::Create(*topology);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

TEST(CostModelTest, DotIsComputeBound) {
  CostModel model = Model(TopologyJson("[4]", "[true]", 1, 1, 4));
  Graph g("dot");
  Node* a = g.AddParameter(0, Shape(DType::kF32, {64, 128})).value();
  Node* b = g.AddParameter(1, Shape(DType::kF32, {128, 256})).value();
  OpAttributes attrs;
  attrs.dot.lhs_contracting_dims = {1};
  attrs.dot.rhs_contracting_dims = {0};
  Node* dot = g.AddNode(Opcode::kDot, {a, b}, attrs).value();
  NodeCost c = model.Cost(*dot, 0);
  // flops = 2 * 64 * 256 * 128; 1e12 flop/s.
  EXPECT_DOUBLE_EQ(c.flops, 4194304.0);
  EXPECT_DOUBLE_EQ(c.compute_seconds, 4194304.0 / 1e12);
  // bytes = (64*128 + 128*256 + 64*256) * 4 at 1e12 bytes/s.
  EXPECT_EQ(c.bytes_accessed, 229376);
  EXPECT_DOUBLE_EQ(c.memory_seconds, 229376.0 / 1e12);
  EXPECT_DOUBLE_EQ(c.seconds, c.compute_seconds);
  EXPECT_EQ(c.ici_seconds, 0);
}

// Tile quantization by hand: a 128-wide MXU runs bf16[64,100] x bf16[100,200] as if K were 128
// and N 256: 2 * 64 * 128 * 256 = 4194304 flops of MXU time for 2 * 64 * 100 * 200 = 2560000
// useful ones. A batched dot pads per batch; sizes already multiples of the tile cost nothing.
TEST(CostModelTest, DotTileQuantizationPadsContractingAndRhsSizes) {
  CostModel model =
      Model(TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10, ", \"matmul_tile\": 128"));
  EXPECT_EQ(model.topology().device_spec().matmul_tile, 128);
  Graph g("dot");
  Node* a = g.AddParameter(0, Shape(DType::kBF16, {64, 100})).value();
  Node* b = g.AddParameter(1, Shape(DType::kBF16, {100, 200})).value();
  OpAttributes attrs;
  attrs.dot.lhs_contracting_dims = {1};
  attrs.dot.rhs_contracting_dims = {0};
  Node* dot = g.AddNode(Opcode::kDot, {a, b}, attrs).value();
  NodeCost c = model.Cost(*dot, 0);
  EXPECT_DOUBLE_EQ(c.flops, 2560000.0);  // the useful count is unchanged
  EXPECT_DOUBLE_EQ(CostModel::TiledDotFlops(*dot, 128), 4194304.0);
  EXPECT_DOUBLE_EQ(c.compute_seconds, 4194304.0 / 1e12);
  EXPECT_DOUBLE_EQ(CostModel::TiledDotFlops(*dot, 0), 2560000.0);

  // bf16[3,64,256] x bf16[3,256,128] (batch 3): K and N whole tiles, so no padding.
  Node* x = g.AddParameter(2, Shape(DType::kBF16, {3, 64, 256})).value();
  Node* y = g.AddParameter(3, Shape(DType::kBF16, {3, 256, 128})).value();
  OpAttributes batched;
  batched.dot.lhs_batch_dims = {0};
  batched.dot.rhs_batch_dims = {0};
  batched.dot.lhs_contracting_dims = {2};
  batched.dot.rhs_contracting_dims = {1};
  Node* bdot = g.AddNode(Opcode::kDot, {x, y}, batched).value();
  EXPECT_DOUBLE_EQ(CostModel::TiledDotFlops(*bdot, 128), CostModel::Flops(*bdot));
  // With a 256 tile N = 128 pads to 256: twice the MXU time.
  EXPECT_DOUBLE_EQ(CostModel::TiledDotFlops(*bdot, 256), 2 * CostModel::Flops(*bdot));
}

TEST(CostModelTest, MatmulTileMustBeAPositiveInteger) {
  for (const char* bad : {"0", "-128", "1.5", "\"128\"", "100000"}) {
    absl::StatusOr<Topology> topology =
        ParseTopology(TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10,
                                   absl::StrCat(", \"matmul_tile\": ", bad)),
                      "<test>");
    ASSERT_FALSE(topology.ok()) << bad;
    EXPECT_THAT(std::string(topology.status().message()), HasSubstr("matmul_tile")) << bad;
  }
}

TEST(CostModelTest, ElementwiseIsMemoryBoundAndFusesChains) {
  CostModel model = Model(TopologyJson("[4]", "[true]", 1, 1, 4));
  Graph g("add");
  Node* a = g.AddParameter(0, Shape(DType::kF32, {1000})).value();
  Node* b = g.AddParameter(1, Shape(DType::kF32, {1000})).value();
  Node* sum = g.AddNode(Opcode::kAdd, {a, b}).value();
  Node* e = g.AddNode(Opcode::kExp, {sum}).value();
  Node* r = g.AddNode(Opcode::kTuple, {e}).value();
  g.set_root(r);
  // add: reads 2 x 4000 bytes, its result stays on chip (its only user, exp, is fusible).
  NodeCost c = model.Cost(*sum, 0);
  EXPECT_DOUBLE_EQ(c.flops, 1000);
  EXPECT_EQ(c.bytes_accessed, 8000);
  EXPECT_DOUBLE_EQ(c.seconds, 8000 / 1e12);
  // exp: reads nothing from HBM (fused), writes 4000 bytes for the tuple.
  EXPECT_EQ(model.Cost(*e, 0).bytes_accessed, 4000);
  // Without the fusion approximation: 3 buffers each.
  CostModelOptions unfused;
  unfused.fusion = FusionMode::kNone;
  CostModel plain = *CostModel::Create(model.topology(), unfused);
  EXPECT_EQ(plain.Cost(*sum, 0).bytes_accessed, 12000);
}

// The MLP chain dot -> bias add -> activation -> dot, by hand, under each FusionMode. Sizes
// (f32): x [16,32] 2048 B, w1 [32,64] 8192 B, bias [64] 256 B, h / y / t / g [16,64] 4096 B
// each, w2 [64,8] 2048 B, out [16,8] 512 B.
TEST(CostModelTest, FusionModesXlaEagerAndNoneOnAnMlpChain) {
  absl::StatusOr<Topology> topology =
      ParseTopology(TopologyJson("[4]", "[true]", 1, 1, 4), "<test>");
  ASSERT_TRUE(topology.ok()) << topology.status();
  Graph g("mlp");
  Node* x = g.AddParameter(0, Shape(DType::kF32, {16, 32})).value();
  Node* w1 = g.AddParameter(1, Shape(DType::kF32, {32, 64})).value();
  Node* bias = g.AddParameter(2, Shape(DType::kF32, {64})).value();
  Node* w2 = g.AddParameter(3, Shape(DType::kF32, {64, 8})).value();
  OpAttributes dot_attrs;
  dot_attrs.dot.lhs_contracting_dims = {1};
  dot_attrs.dot.rhs_contracting_dims = {0};
  Node* h = g.AddNode(Opcode::kDot, {x, w1}, dot_attrs).value();
  OpAttributes bcast;
  bcast.dimensions = {1};
  Node* bb = g.AddNode(Opcode::kBroadcast, Shape(DType::kF32, {16, 64}), {bias}, bcast).value();
  Node* y = g.AddNode(Opcode::kAdd, {h, bb}).value();
  Node* t = g.AddNode(Opcode::kTanh, {y}).value();
  Node* act = g.AddNode(Opcode::kMultiply, {y, t}).value();
  Node* out = g.AddNode(Opcode::kDot, {act, w2}, dot_attrs).value();
  g.set_root(g.AddNode(Opcode::kTuple, {out}).value());
  const std::vector<const Node*> chain = {h, bb, y, t, act, out};
  auto bytes = [&](FusionMode mode) {
    CostModelOptions options;
    options.fusion = mode;
    CostModel model = *CostModel::Create(*topology, options);
    std::vector<int64_t> per_node;
    for (const Node* node : chain) per_node.push_back(model.Cost(*node, 0).bytes_accessed);
    return per_node;
  };
  // XLA: the bias add, activation and multiply are one loop fusion, itself fused into the
  // second dot (producer fusion): only h, bias, the weights and out touch HBM.
  EXPECT_THAT(bytes(FusionMode::kXla),
              ::testing::ElementsAre(2048 + 8192 + 4096, 256, 4096, 0, 0, 512 + 2048));
  // Eager (Megatron's fused bias + GeLU): the same kernel, but it writes its result g (4096)
  // and the GEMM reads it back: 8192 bytes more than XLA. The fused kernel itself (broadcast,
  // add, tanh, multiply) reads h and the bias once and writes g once: 4096 + 256 + 4096.
  const std::vector<int64_t> eager = bytes(FusionMode::kEager);
  EXPECT_THAT(eager,
              ::testing::ElementsAre(2048 + 8192 + 4096, 256, 4096, 0, 4096, 512 + 4096 + 2048));
  EXPECT_EQ(eager[1] + eager[2] + eager[3] + eager[4], 4096 + 256 + 4096);
  // None (a kernel per op, as eager PyTorch without Megatron's fused kernels): every op
  // reads its operands and writes its result.
  EXPECT_THAT(bytes(FusionMode::kNone),
              ::testing::ElementsAre(2048 + 8192 + 4096, 256 + 4096, 3 * 4096, 2 * 4096, 3 * 4096,
                                     512 + 4096 + 2048));
  // Totals: 21248 (xla) < 29440 (eager) < 58112 (none).
  int64_t total_eager = 0;
  for (int64_t b : eager) total_eager += b;
  EXPECT_EQ(total_eager, 29440);
}

TEST(CostModelTest, FusionModeNames) {
  for (FusionMode mode : {FusionMode::kXla, FusionMode::kEager, FusionMode::kNone}) {
    absl::StatusOr<FusionMode> parsed = ParseFusionMode(FusionModeName(mode));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, mode);
  }
  absl::StatusOr<FusionMode> bad = ParseFusionMode("torch");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"torch\""));
}

TEST(CostModelTest, EfficiencyFromTheDeviceSpecAndF32Fallback) {
  CostModel model = Model(TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10,
                                       ", \"efficiency\": {\"dot\": 0.5}", /*bf16_only=*/true));
  EXPECT_DOUBLE_EQ(model.Efficiency(OpClass::kDot), 0.5);
  EXPECT_DOUBLE_EQ(model.Efficiency(OpClass::kElementwise), 1.0);
  EXPECT_DOUBLE_EQ(model.PeakFlopsPerSecond(DType::kF32), 1e12);
  EXPECT_THAT(
      model.notes(),
      ::testing::Contains(HasSubstr("f32 has no peak in the device spec of test; using the bf16")));
  Graph g("dot");
  Node* a = g.AddParameter(0, Shape(DType::kBF16, {64, 128})).value();
  Node* b = g.AddParameter(1, Shape(DType::kBF16, {128, 256})).value();
  OpAttributes attrs;
  attrs.dot.lhs_contracting_dims = {1};
  attrs.dot.rhs_contracting_dims = {0};
  Node* dot = g.AddNode(Opcode::kDot, {a, b}, attrs).value();
  EXPECT_DOUBLE_EQ(model.Cost(*dot, 0).compute_seconds, 4194304.0 / (0.5 * 1e12));

  absl::StatusOr<Topology> bad = ParseTopology(
      TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10, ", \"efficiency\": {\"dot\": 1.5}"),
      "<test>");
  EXPECT_THAT(bad.status().message(), HasSubstr("/device_spec/efficiency/dot"));
  bad = ParseTopology(
      TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10, ", \"efficiency\": {\"mxu\": 0.5}"),
      "<test>");
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown op class \"mxu\""));
}

TEST(CostModelTest, FlashAttentionEfficiencyDefaultsToTheDotFactor) {
  CostModel dot_only = Model(
      TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10, ", \"efficiency\": {\"dot\": 0.5}"));
  EXPECT_DOUBLE_EQ(dot_only.FlashAttentionEfficiency(), 0.5);
  CostModel both =
      Model(TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10,
                         ", \"efficiency\": {\"dot\": 0.5, \"flash_attention\": 0.25}"));
  EXPECT_DOUBLE_EQ(both.FlashAttentionEfficiency(), 0.25);
  EXPECT_DOUBLE_EQ(both.Efficiency(OpClass::kDot), 0.5);
  EXPECT_DOUBLE_EQ(
      Model(TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10)).FlashAttentionEfficiency(),
      1.0);
  absl::StatusOr<Topology> bad =
      ParseTopology(TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10,
                                 ", \"efficiency\": {\"flash_attention\": 0}"),
                    "<test>");
  EXPECT_THAT(bad.status().message(), HasSubstr("/device_spec/efficiency/flash_attention"));
}

TEST(CostModelTest, MatmulDtypeCostsEveryDotAtItsPeak) {
  // The test device with an int8 peak twice the bf16 one and a dot efficiency of 0.5.
  std::string json =
      TopologyJson("[4]", "[true]", 1, 1, 4, 400, 1, 200, 10, ", \"efficiency\": {\"dot\": 0.5}");
  json.replace(json.find("\"bf16\": 1"), 9, "\"bf16\": 1, \"s8\": 2");
  Topology topology = *ParseTopology(json, "<test>");
  CostModelOptions int8;
  int8.matmul_dtype = "s8";
  CostModel model = *CostModel::Create(topology, int8);
  Graph g("dot");
  Node* a = g.AddParameter(0, Shape(DType::kBF16, {64, 128})).value();
  Node* b = g.AddParameter(1, Shape(DType::kBF16, {128, 256})).value();
  OpAttributes attrs;
  attrs.dot.lhs_contracting_dims = {1};
  attrs.dot.rhs_contracting_dims = {0};
  Node* dot = g.AddNode(Opcode::kDot, {a, b}, attrs).value();
  // 2 * 64 * 256 * 128 flops at 2e12 op/s x 0.5; bytes stay the bf16 ones.
  EXPECT_DOUBLE_EQ(model.Cost(*dot, 0).compute_seconds, 4194304.0 / (2e12 * 0.5));
  EXPECT_EQ(model.Cost(*dot, 0).bytes_accessed, 114688);
  // Unquantized (attention's dots): at the bf16 peak.
  EXPECT_DOUBLE_EQ(model.Cost(*dot, 0, false).compute_seconds, 4194304.0 / (1e12 * 0.5));
  EXPECT_DOUBLE_EQ(model.MatmulPeakFlopsPerSecond(DType::kBF16), 2e12);
  EXPECT_DOUBLE_EQ(model.PeakFlopsPerSecond(DType::kBF16), 1e12);
  // A dtype without a peak is an error, not a silent bf16 fallback.
  CostModelOptions fp8;
  fp8.matmul_dtype = "f8e4m3fn";
  absl::StatusOr<CostModel> missing = CostModel::Create(topology, fp8);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("gives no peak_tflops for matmul dtype \"f8e4m3fn\""));
}

TEST(CostModelTest, RingAllReduceOnAClosedRingOfFour) {
  // 400 Gbps = 50e9 B/s per direction; closed ring: 2 directions; hops floor(4/2) = 2.
  CostModel model = Model(TopologyJson("[4]", "[true]", 1, 1, 4));
  const double v = 4e6;
  NodeCost c = model.CollectiveCost(Opcode::kAllReduce, {0, 1, 2, 3}, 4000000, 1);
  EXPECT_NEAR(c.ici_seconds, 2 * 0.75 * v / 100e9 + 2 * 2 * 1e-6, 1e-15);
  EXPECT_EQ(c.ici_bytes, 6000000);
  EXPECT_EQ(c.dcn_seconds, 0);
  EXPECT_DOUBLE_EQ(c.seconds, c.ici_seconds);
  // The same 4 chips as a line (no wraparound): one direction's bandwidth, 3 hops.
  CostModel line = Model(TopologyJson("[4]", "[false]", 1, 1, 4));
  NodeCost l = line.CollectiveCost(Opcode::kAllReduce, {0, 1, 2, 3}, 4000000, 1);
  EXPECT_NEAR(l.ici_seconds, 2 * 0.75 * v / 50e9 + 2 * 3 * 1e-6, 1e-15);
  // All-gather and reduce-scatter are one phase.
  NodeCost ag = model.CollectiveCost(Opcode::kAllGather, {0, 1, 2, 3}, 4000000, 1);
  EXPECT_NEAR(ag.ici_seconds, 0.75 * v / 100e9 + 2 * 1e-6, 1e-15);
}

TEST(CostModelTest, TwoDimensionalTorusUsesBothAxes) {
  CostModel model = Model(TopologyJson("[4, 4]", "[true, true]", 1, 4, 4));
  std::vector<int64_t> all(16);
  for (int i = 0; i < 16; ++i) all[i] = i;
  NodeCost c = model.CollectiveCost(Opcode::kAllGather, all, 16000000, 0);
  // 2 closed rings x 2 directions x 50e9; hops 2 + 2.
  EXPECT_NEAR(c.ici_seconds, 15.0 / 16 * 16e6 / 200e9 + 4 * 1e-6, 1e-15);
  // A group along x only (devices 0..3 are x = 0..3 at y = 0).
  NodeCost x = model.CollectiveCost(Opcode::kAllGather, {0, 1, 2, 3}, 16000000, 0);
  EXPECT_NEAR(x.ici_seconds, 0.75 * 16e6 / 100e9 + 2 * 1e-6, 1e-15);
  // collective-permute to (2, 2): 4 hops.
  NodeCost p = model.CollectiveCost(Opcode::kCollectivePermute, {0, 10}, 1000000, 0);
  EXPECT_NEAR(p.ici_seconds, 1e6 / 50e9 + 4 * 1e-6, 1e-15);
  // all-to-all over the x ring: V * k / (8B) + hops * alpha.
  NodeCost a2a = model.CollectiveCost(Opcode::kAllToAll, {0, 1, 2, 3}, 8000000, 0);
  EXPECT_NEAR(a2a.ici_seconds, 8e6 * 4 / (8 * 50e9) + 2 * 1e-6, 1e-15);
}

TEST(CostModelTest, HierarchicalAllReduceAcrossSlices) {
  // 2 slices of 2 chips (line), 1 host each: DCN 200 Gbps per host shared by 2 devices.
  CostModel model = Model(TopologyJson("[2]", "[false]", 2, 1, 2));
  const double v = 8e6;
  NodeCost c = model.CollectiveCost(Opcode::kAllReduce, {0, 1, 2, 3}, 8000000, 0);
  EXPECT_NEAR(c.ici_seconds, 2 * 0.5 * v / 50e9 + 2 * 1 * 1e-6, 1e-15);
  const double dcn_per_device = 200e9 / 8 / 2;
  EXPECT_NEAR(c.dcn_seconds, 2 * 0.5 * (v / 2) / dcn_per_device + 2 * 1 * 10e-6, 1e-15);
  EXPECT_EQ(c.dcn_bytes, 4000000);
  EXPECT_DOUBLE_EQ(c.seconds, c.ici_seconds + c.dcn_seconds);
  // A pure DCN group (one device per slice): no ICI phase.
  NodeCost d = model.CollectiveCost(Opcode::kAllReduce, {0, 2}, 8000000, 0);
  EXPECT_EQ(d.ici_seconds, 0);
  EXPECT_NEAR(d.dcn_seconds, 2 * 0.5 * v / dcn_per_device + 2 * 10e-6, 1e-15);
}

TEST(CostModelTest, CollectiveEfficiencyScalesIciLinksButNotDcn) {
  // The hierarchical all-reduce above with a collective efficiency of 0.8: the ICI phase runs
  // at 0.8 x 50e9 B/s, the DCN phase keeps the NIC's 200 Gbps shared by 2 devices, latencies
  // unchanged.
  CostModel model = Model(TopologyJson("[2]", "[false]", 2, 1, 2, 400, 1, 200, 10,
                                       ", \"efficiency\": {\"collective\": 0.8}"));
  const double v = 8e6;
  NodeCost c = model.CollectiveCost(Opcode::kAllReduce, {0, 1, 2, 3}, 8000000, 0);
  EXPECT_NEAR(c.ici_seconds, 2 * 0.5 * v / (0.8 * 50e9) + 2 * 1 * 1e-6, 1e-15);
  EXPECT_NEAR(c.dcn_seconds, 2 * 0.5 * (v / 2) / (200e9 / 8 / 2) + 2 * 1 * 10e-6, 1e-15);
  // A permute inside the slice takes the efficiency, one across slices does not.
  NodeCost in_slice = model.CollectiveCost(Opcode::kCollectivePermute, {0, 1}, 1000000, 0);
  EXPECT_NEAR(in_slice.ici_seconds, 1e6 / (0.8 * 50e9) + 1e-6, 1e-15);
  NodeCost across = model.CollectiveCost(Opcode::kCollectivePermute, {0, 2}, 1000000, 0);
  EXPECT_NEAR(across.dcn_seconds, 1e6 / (200e9 / 8 / 2) + 10e-6, 1e-15);
}

TEST(CostModelTest, TheMostCrowdedHostSetsTheDcnBandwidth) {
  // Slice 0: 2 hosts of 2 chips; slice 1: 1 host of 4 chips. Every device of slice 1 shares one
  // NIC with 3 others, and a cross-slice collective waits for them.
  const std::string two_hosts = TopologyJson("[4]", "[false]", 1, 2, 2);
  const std::string one_host = TopologyJson("[4]", "[false]", 1, 1, 4);
  const std::string first = two_hosts.substr(two_hosts.find("\"slices\": [") + 11);
  const std::string second = one_host.substr(one_host.find("\"slices\": [") + 11);
  const std::string mixed = two_hosts.substr(0, two_hosts.find("\"slices\": [") + 11) +
                            first.substr(0, first.size() - 2) + ", " + second;
  CostModel model = Model(mixed);
  const double v = 8e6;
  NodeCost d = model.CollectiveCost(Opcode::kAllReduce, {0, 4}, 8000000, 0);
  EXPECT_NEAR(d.dcn_seconds, 2 * 0.5 * v / (200e9 / 8 / 4) + 2 * 10e-6, 1e-15);
}

TEST(CostModelTest, DoublingDcnBandwidthHalvesTheDcnTerm) {
  CostModel slow = Model(TopologyJson("[2]", "[false]", 2, 1, 2, 400, 1, 200, /*dcn_us=*/0));
  CostModel fast = Model(TopologyJson("[2]", "[false]", 2, 1, 2, 400, 1, 400, /*dcn_us=*/0));
  for (Opcode op :
       {Opcode::kAllReduce, Opcode::kAllGather, Opcode::kReduceScatter, Opcode::kAllToAll}) {
    NodeCost s = slow.CollectiveCost(op, {0, 1, 2, 3}, 8000000, 0);
    NodeCost f = fast.CollectiveCost(op, {0, 1, 2, 3}, 8000000, 0);
    ASSERT_GT(s.dcn_seconds, 0) << OpcodeName(op);
    EXPECT_DOUBLE_EQ(f.dcn_seconds, s.dcn_seconds / 2) << OpcodeName(op);
    EXPECT_DOUBLE_EQ(f.ici_seconds, s.ici_seconds) << OpcodeName(op);
  }
}

TEST(CostModelTest, DcnEfficiencyScalesOnlyTheDcnTerm) {
  // A "dcn" efficiency of 0.5 is half the NICs' bandwidth: the DCN term of every collective
  // across slices doubles (no latency here), the ICI phase stays; "collective" does not touch DCN.
  CostModel full = Model(TopologyJson("[2]", "[false]", 2, 1, 2, 400, 1, 200, /*dcn_us=*/0));
  CostModel half = Model(TopologyJson("[2]", "[false]", 2, 1, 2, 400, 1, 200, /*dcn_us=*/0,
                                      ", \"efficiency\": {\"dcn\": 0.5}"));
  for (Opcode op :
       {Opcode::kAllReduce, Opcode::kAllGather, Opcode::kReduceScatter, Opcode::kAllToAll}) {
    NodeCost f = full.CollectiveCost(op, {0, 1, 2, 3}, 8000000, 0);
    NodeCost h = half.CollectiveCost(op, {0, 1, 2, 3}, 8000000, 0);
    ASSERT_GT(f.dcn_seconds, 0) << OpcodeName(op);
    EXPECT_DOUBLE_EQ(h.dcn_seconds, 2 * f.dcn_seconds) << OpcodeName(op);
    EXPECT_DOUBLE_EQ(h.ici_seconds, f.ici_seconds) << OpcodeName(op);
  }
  // The hierarchical all-reduce by hand: 2 slices of 2, 8 MB, DCN 200 Gbps x 0.5 over 2 devices.
  NodeCost c = half.CollectiveCost(Opcode::kAllReduce, {0, 1, 2, 3}, 8000000, 0);
  EXPECT_NEAR(c.dcn_seconds, 2 * 0.5 * (8e6 / 2) / (200e9 / 8 * 0.5 / 2), 1e-15);
}

TEST(CostModelTest, SwitchUsesNcclRing) {
  CostModel model =
      Model(TopologyJson("[8]", "[false]", 1, 1, 8, 3600, 1, 200, 10, "", false, "switch"));
  std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  NodeCost c = model.CollectiveCost(Opcode::kAllReduce, all, 8000000, 3);
  EXPECT_NEAR(c.ici_seconds, 2 * 7.0 / 8 * 8e6 / 450e9 + 14 * 1e-6, 1e-15);
}

// XLA:TPU runs a reduce-scatter as an all-reduce of its operand (cost_model.h): under XLA's
// fusion on a torus a reduce-scatter node costs the all-reduce of the same V on the same group;
// on a switch (NCCL) or under kEager it keeps the reduce-scatter formula. A ring of 4 (closed,
// 2 x 50e9 B/s), V = 4000 B: all-reduce 2 * 0.75 * 4000 / 100e9 + 2 * 2 * 1 us = 4.06 us,
// reduce-scatter 0.75 * 4000 / 100e9 + 2 * 1 us = 2.03 us. The switch: one 400 Gbps port,
// 0.75 * 4000 / 50e9 + 3 * 1 us = 3.06 us.
TEST(CostModelTest, ReduceScatterCostsAsXlaTpuRunsIt) {
  Graph g("rs");
  Node* p = g.AddParameter(0, Shape(DType::kF32, {1000})).value();
  OpAttributes attrs;
  attrs.replica_groups = {{0, 1, 2, 3}};
  attrs.dimensions = {0};
  Node* rs = g.AddNode(Opcode::kReduceScatter, {p}, attrs).value();
  const std::vector<int64_t> all = {0, 1, 2, 3};

  CostModel tpu = Model(TopologyJson("[4]", "[true]", 1, 1, 4));
  EXPECT_TRUE(tpu.ReduceScatterRunsAsAllReduce());
  NodeCost c = tpu.Cost(*rs, 2);
  EXPECT_NEAR(c.seconds, 4.06e-6, 1e-15);
  EXPECT_EQ(c.ici_bytes, 6000);
  EXPECT_DOUBLE_EQ(c.seconds, tpu.CollectiveCost(Opcode::kAllReduce, all, 4000, 2).seconds);
  // CollectiveCost itself still costs what it is asked for.
  EXPECT_NEAR(tpu.CollectiveCost(Opcode::kReduceScatter, all, 4000, 2).seconds, 2.03e-6, 1e-15);

  absl::StatusOr<Topology> torus = ParseTopology(TopologyJson("[4]", "[true]", 1, 1, 4), "<t>");
  ASSERT_TRUE(torus.ok()) << torus.status();
  CostModelOptions eager;
  eager.fusion = FusionMode::kEager;
  CostModel framework = *CostModel::Create(*torus, eager);
  EXPECT_FALSE(framework.ReduceScatterRunsAsAllReduce());
  EXPECT_NEAR(framework.Cost(*rs, 2).seconds, 2.03e-6, 1e-15);

  CostModel gpu =
      Model(TopologyJson("[4]", "[false]", 1, 1, 4, 400, 1, 200, 10, "", false, "switch"));
  EXPECT_FALSE(gpu.ReduceScatterRunsAsAllReduce());
  EXPECT_NEAR(gpu.Cost(*rs, 2).seconds, 3.06e-6, 1e-15);
  EXPECT_EQ(gpu.Cost(*rs, 2).ici_bytes, 3000);
}

TEST(CostModelTest, CollectiveNodesFindTheirGroup) {
  CostModel model = Model(TopologyJson("[4]", "[true]", 1, 1, 4));
  Graph g("ar");
  Node* p = g.AddParameter(0, Shape(DType::kF32, {1000})).value();
  OpAttributes attrs;
  attrs.replica_groups = {{0, 2}, {1, 3}};
  Node* ar = g.AddNode(Opcode::kAllReduce, {p}, attrs).value();
  // {1, 3} spans x = 1 and 3 of a ring of 4: not the whole ring, so a line of 2.
  NodeCost c = model.Cost(*ar, 3);
  EXPECT_NEAR(c.ici_seconds, 2 * 0.5 * 4000 / 50e9 + 2 * 1e-6, 1e-15);
  EXPECT_EQ(model.Cost(*ar, 1).ici_bytes, c.ici_bytes);
}

}  // namespace
}  // namespace tessel::mesh
