// Manual regions (JAX shard_map, torch_xla enable_manual_sharding): the partitioner copies them
// through with their own collectives, and verify's per-device reference computes what they mean.
// Covers the C++ API (spmd::enable_manual_sharding / disable_manual_sharding), the GSPMD and
// Shardy HLO forms, an uneven size, and the errors.
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/tensor.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/verify.h"
#include "tessel/spmd/mark_sharding.h"
#include "tessel/spmd/mesh.h"

namespace tessel::partitioner {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Graph> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloModule(text);
  EXPECT_TRUE(graph.ok()) << graph.status() << "\n" << text;
  return graph.ok() ? *std::move(graph) : std::make_unique<Graph>();
}

int64_t Count(const Graph& program, Opcode opcode) {
  int64_t n = 0;
  for (const Node* node : program.nodes()) n += node->opcode() == opcode;
  return n;
}

// shard_map(psum over "y") through the C++ API on mesh ["x"=2, "y"=4]: x f32[16,8] enters as
// {"x", "y"} (f32[8,2] per device), each device all-reduces its block over its "y" group, and the
// f32[8,2] result leaves as {"x", None}: out[i, j] = sum_k x[i, 2k + j], k = 0..3.
TEST(ManualRegionTest, ApiRegionWithAllReduceComputesTheGroupSum) {
  absl::StatusOr<spmd::Mesh> mesh =
      spmd::Mesh::Create({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4}, {"x", "y"});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  Tensor x = Tensor::Placeholder(Shape(DType::kF32, {16, 8}));
  ASSERT_TRUE(spmd::mark_sharding(x, *mesh, {"x", "y"}).ok());
  absl::StatusOr<Tensor> local = spmd::enable_manual_sharding(x, {"x", "y"}, *mesh);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->shape(), Shape(DType::kF32, {8, 2}));
  EXPECT_EQ(local->sharding(), "{manual}");
  Tensor summed = AllReduce(*local, std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}},
                            ReduceKind::kAdd);
  ASSERT_TRUE(summed.status().ok()) << summed.status();
  absl::StatusOr<Tensor> out =
      spmd::disable_manual_sharding(summed, {"x", spmd::kNone}, {16, 2}, *mesh);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), Shape(DType::kF32, {16, 2}));

  absl::StatusOr<TracedGraph> traced = TraceGraph({*out}, "manual_api");
  ASSERT_TRUE(traced.ok()) << traced.status();
  absl::StatusOr<SpmdProgram> program = Partition(*traced->graph, 8);
  ASSERT_TRUE(program.ok()) << program.status();
  // The region's own all-reduce, once; nothing else crosses devices.
  EXPECT_EQ(Count(*program->program, Opcode::kAllReduce), 1);
  EXPECT_EQ(CountCollectives(*program->program).size(), 1u);

  Literal input(Shape(DType::kF32, {16, 8}));
  for (int64_t i = 0; i < input.num_elements(); ++i) input.SetFromDouble(i, i % 13 - 6.5);
  absl::StatusOr<std::vector<Literal>> got = RunPartitioned(*program, {input});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      double want = 0;
      for (int64_t k = 0; k < 4; ++k) want += input.GetAsDouble(i * 8 + 2 * k + j);
      EXPECT_EQ((*got)[0].GetAsDouble(i * 2 + j), want) << "out[" << i << "," << j << "]";
    }
  }
  // The per-device reference agrees.
  absl::StatusOr<VerifyReport> report = VerifyPartitioning(*traced->graph, 8);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok());
}

// GSPMD form, uneven rows (8 * 3 + 1 = 25 over 8 devices: shards of 4, the last device holds
// only 1 real row): a region without collectives emits none, and verifies.
constexpr const char* kUnevenRegion = R"(HloModule uneven
ENTRY %main (x: f32[25,3]) -> f32[25,3] {
  %x = f32[25,3] parameter(0), sharding={devices=[8,1]<=[8]}
  %s = f32[25,3] custom-call(%x), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
  %local = f32[4,3] custom-call(%s), custom_call_target="SPMDFullToShardShape", sharding={manual}
  %two = f32[] constant(2)
  %b = f32[4,3] broadcast(%two), dimensions={}
  %m = f32[4,3] multiply(%local, %b)
  ROOT %full = f32[25,3] custom-call(%m), custom_call_target="SPMDShardToFullShape", sharding={devices=[8,1]<=[8]}
})";

TEST(ManualRegionTest, UnevenRegionWithoutCollectivesEmitsNone) {
  std::unique_ptr<Graph> graph = Parse(kUnevenRegion);
  absl::StatusOr<SpmdProgram> program = Partition(*graph, 8);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_TRUE(CountCollectives(*program->program).empty());
  EXPECT_EQ(Count(*program->program, Opcode::kCustomCall), 0);
  absl::StatusOr<VerifyReport> report = VerifyProgram(*graph, *program);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok());
}

// Shardy form (as jax.shard_map lowers under Shardy): psum over "model", all_gather over "data",
// ppermute along "model". Each collective of the region appears exactly once; the per-device
// reference catches a program whose psum was dropped.
constexpr const char* kShardyRegion =
    R"(HloModule shardy, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["data"=2, "model"=4]>}}
%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%body (p0: f32[8,8], p1: f32[8,16]) -> (f32[16,16], f32[8,8]) {
  %p0 = f32[8,8] parameter(0)
  %p1 = f32[8,16] parameter(1)
  %d = f32[8,16] dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %psum = f32[8,16] all-reduce(%d), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%sum
  %ag = f32[16,16] all-gather(%psum), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, use_global_device_ids=true
  %pp = f32[8,8] collective-permute(%p0), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}
  ROOT %t = (f32[16,16], f32[8,8]) tuple(%ag, %pp)
}
ENTRY %main (x: f32[16,32], w: f32[32,16]) -> (f32[16,16], f32[16,32]) {
  %x = f32[16,32] parameter(0), sharding={devices=[2,4]<=[8]}
  %w = f32[32,16] parameter(1), sharding={devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}
  %in = (f32[8,8], f32[8,16]) custom-call(%x, %w), custom_call_target="xla.sdy.GlobalToLocalShape", frontend_attributes={xla.sdy.in_shardings="#sdy.sharding_per_value<[<@mesh, [{\"data\"}, {\"model\"}]>, <@mesh, [{\"model\"}, {}]>]>",xla.sdy.manual_axes="#sdy<manual_axes{\"data\", \"model\"}>"}
  %l0 = f32[8,8] get-tuple-element(%in), index=0
  %l1 = f32[8,16] get-tuple-element(%in), index=1
  %c = (f32[16,16], f32[8,8]) call(%l0, %l1), to_apply=%body
  %r0 = f32[16,16] get-tuple-element(%c), index=0
  %r1 = f32[8,8] get-tuple-element(%c), index=1
  %out = (f32[16,16], f32[16,32]) custom-call(%r0, %r1), custom_call_target="xla.sdy.LocalToGlobalShape", frontend_attributes={xla.sdy.manual_axes="#sdy<manual_axes{\"data\", \"model\"}>",xla.sdy.out_shardings="#sdy.sharding_per_value<[<@mesh, [{}, {}]>, <@mesh, [{\"data\"}, {\"model\"}]>]>"}
  %o0 = f32[16,16] get-tuple-element(%out), index=0
  %o1 = f32[16,32] get-tuple-element(%out), index=1
  ROOT %res = (f32[16,16], f32[16,32]) tuple(%o0, %o1), sharding={{replicated}, {devices=[2,4]<=[8]}}
})";

TEST(ManualRegionTest, ShardyRegionKeepsItsCollectivesOnceAndVerifies) {
  std::unique_ptr<Graph> graph = Parse(kShardyRegion);
  absl::StatusOr<SpmdProgram> program = Partition(*graph, 8);
  ASSERT_TRUE(program.ok()) << program.status();
  const Graph& local = *program->program;
  EXPECT_EQ(Count(local, Opcode::kAllReduce), 1);
  EXPECT_EQ(Count(local, Opcode::kAllGather), 1);
  EXPECT_EQ(Count(local, Opcode::kCollectivePermute), 1);
  EXPECT_EQ(Count(local, Opcode::kCustomCall), 0);
  const std::string text = PrintHloModule(local);
  EXPECT_THAT(text, HasSubstr("channel_id=1, replica_groups=[2,4]<=[8], "
                              "use_global_device_ids=true"));
  absl::StatusOr<VerifyReport> report = VerifyProgram(*graph, *program);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok());

  // The same program with the psum's groups swapped for single devices: output 0 is wrong.
  for (Node* node : local.nodes()) {
    if (node->opcode() == Opcode::kAllReduce) {
      node->mutable_attrs().replica_groups =
          std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
    }
  }
  absl::StatusOr<VerifyReport> broken = VerifyProgram(*graph, *program);
  ASSERT_TRUE(broken.ok()) << broken.status();
  EXPECT_EQ(broken->first_mismatch(), 0);
}

TEST(ManualRegionTest, Errors) {
  // A manual value returned without leaving the region.
  std::string open_region = kUnevenRegion;
  open_region = absl::StrReplaceAll(
      open_region,
      {{"ROOT %full = f32[25,3] custom-call(%m), custom_call_target=\"SPMDShardToFullShape\", "
        "sharding={devices=[8,1]<=[8]}",
        "%full = f32[25,3] custom-call(%m), custom_call_target=\"SPMDShardToFullShape\", "
        "sharding={devices=[8,1]<=[8]}\n  ROOT %r = f32[4,3] copy(%m)"},
       {"-> f32[25,3]", "-> f32[4,3]"}});
  absl::StatusOr<SpmdProgram> program = Partition(*Parse(open_region), 8);
  EXPECT_EQ(program.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(program.status().message(), HasSubstr("manual value"));

  // A shard shape that the operand's sharding does not give (shards of 25 rows on 8 devices are
  // 4 rows, not 5).
  std::string five_rows = absl::StrReplaceAll(kUnevenRegion, {{"f32[4,3]", "f32[5,3]"}});
  absl::StatusOr<SpmdProgram> wrong = Partition(*Parse(five_rows), 8);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("%local"));

  // The API checks the local shape it is given back.
  absl::StatusOr<spmd::Mesh> mesh = spmd::Mesh::Create({0, 1, 2, 3}, {4}, {"x"});
  ASSERT_TRUE(mesh.ok());
  Tensor t = Tensor::Placeholder(Shape(DType::kF32, {3, 2}));
  absl::StatusOr<Tensor> full =
      spmd::disable_manual_sharding(t, {"x", spmd::kNone}, {16, 2}, *mesh);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(full.status().message(), HasSubstr("is not a shard of f32[16,2]"));

  // Subgroup manual (a shard_map over some of the mesh axes) is named.
  std::string subgroup = absl::StrReplaceAll(
      kShardyRegion, {{"manual_axes{\\\"data\\\", \\\"model\\\"}", "manual_axes{\\\"model\\\"}"}});
  absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(subgroup);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(parsed.status().message(), HasSubstr("mesh axis \"data\""));

  // Running a real region on one device is refused, naming the node.
  absl::StatusOr<std::vector<Literal>> single =
      Executor().Run(*Parse(kUnevenRegion), {Literal(Shape(DType::kF32, {25, 3}))});
  EXPECT_EQ(single.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(single.status().message(), HasSubstr("%local"));
}

}  // namespace
}  // namespace tessel::partitioner
