// The text forms of manual regions: Shardy's sdy shardings turned into HloSharding text, the
// custom-calls SPMDFullToShardShape / SPMDShardToFullShape and the collectives' channel_id /
// use_global_device_ids through parse and print, and the errors.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/internal/sdy_sharding.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

internal::SdyMeshes Meshes(std::string_view text) {
  absl::StatusOr<internal::SdyMeshes> meshes = internal::ParseSdyMeshes(text);
  EXPECT_TRUE(meshes.ok()) << meshes.status();
  return meshes.ok() ? *meshes : internal::SdyMeshes();
}

TEST(SdyShardingTest, ConvertsToHloShardingAsXlaDoes) {
  // The fixture's mesh and shardings; XLA's own GSPMD lowering of the same shard_map writes the
  // expected strings (tests/fixtures/jax/shard_map_collectives_gspmd.hlo).
  internal::SdyMeshes meshes = Meshes(R"({mesh = #sdy.mesh<["data"=2, "model"=4]>})");
  ASSERT_EQ(meshes.at("mesh").size(), 2u);
  absl::StatusOr<std::vector<std::string>> s = internal::SdyShardingsToHlo(
      R"(#sdy.sharding_per_value<[<@mesh, [{"data"}, {"model"}]>, <@mesh, [{"model"}, {}]>, <@mesh, [{}, {}]>, <@mesh, [{"model", "data"}]>]>)",
      meshes);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, (std::vector<std::string>{
                    "{devices=[2,4]<=[8]}",
                    "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
                    "{replicated}",
                    "{devices=[8]<=[2,4]T(1,0)}",
                }));
  absl::StatusOr<std::vector<std::string>> one =
      internal::SdyShardingsToHlo(R"(#sdy.sharding<@mesh, [{}, {"data"}]>)", meshes);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<std::string>{"{devices=[1,2,4]<=[8] last_tile_dim_replicate}"});

  absl::StatusOr<std::vector<std::string>> axes =
      internal::ParseSdyManualAxes(R"(#sdy<manual_axes{"data", "model"}>)");
  ASSERT_TRUE(axes.ok()) << axes.status();
  EXPECT_EQ(*axes, (std::vector<std::string>{"data", "model"}));
  absl::StatusOr<std::string> value = internal::FindFrontendAttribute(
      R"({a="x",xla.sdy.in_shardings="#sdy<\"q\">"})", "xla.sdy.in_shardings");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, R"(#sdy<"q">)");
}

TEST(SdyShardingTest, Errors) {
  internal::SdyMeshes meshes = Meshes(R"({mesh = #sdy.mesh<["x"=2, "y"=4]>})");
  auto code = [&](std::string_view text) {
    return internal::SdyShardingsToHlo(text, meshes).status();
  };
  EXPECT_THAT(code(R"(#sdy.sharding<@mesh, [{"z"}]>)").message(),
              HasSubstr(R"(unknown mesh axis "z"; mesh @mesh has axes ["x"=2, "y"=4])"));
  EXPECT_THAT(code(R"(#sdy.sharding<@other, [{"x"}]>)").message(),
              HasSubstr("unknown mesh @other"));
  EXPECT_EQ(code(R"(#sdy.sharding<@mesh, [{"x":(1)2}]>)").code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(code(R"(#sdy.sharding<@mesh, [{"x", ?}]>)").code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(code(R"(#sdy.sharding<@mesh, [{"x"}, {"x"}]>)").message(),
              HasSubstr("used by two dims"));
  EXPECT_EQ(code("garbage").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      internal::ParseSdyMeshes(R"({m = #sdy.mesh<["x"=2], device_ids=[1,0]>})").status().code(),
      absl::StatusCode::kUnimplemented);
  EXPECT_EQ(internal::ParseSdyMeshes(R"({m = #sdy.mesh<["x"=0]>})").status().code(),
            absl::StatusCode::kInvalidArgument);
  // An axis named twice (in a mesh or in one dim), a mesh defined twice, or a device count past
  // 2^24 (which would also wrap the product) is refused, naming what was repeated.
  EXPECT_THAT(code(R"(#sdy.sharding<@mesh, [{"x", "x"}]>)").message(),
              HasSubstr(R"(mesh axis "x" appears twice in one dim)"));
  EXPECT_THAT(internal::ParseSdyMeshes(R"({m = #sdy.mesh<["x"=2, "x"=4]>})").status().message(),
              HasSubstr(R"(mesh m names axis "x" twice)"));
  EXPECT_THAT(internal::ParseSdyMeshes(R"({m = #sdy.mesh<["x"=2]>, m = #sdy.mesh<["y"=2]>})")
                  .status()
                  .message(),
              HasSubstr("mesh m is defined twice"));
  EXPECT_THAT(internal::ParseSdyMeshes(R"({m = #sdy.mesh<["x"=4294967296, "y"=4294967296]>})")
                  .status()
                  .message(),
              HasSubstr("more than 16777216 devices"));
  EXPECT_TRUE(internal::ParseSdyMeshes(R"({m = #sdy.mesh<["x"=4096, "y"=4096]>})").ok());
}

constexpr const char* kRegion = R"(HloModule region

%add_f32 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

ENTRY %main (p: f32[16,8]) -> f32[16,8] {
  %p = f32[16,8] parameter(0), sharding={devices=[2,4]<=[8]}
  %s = f32[16,8] copy(%p), sharding={devices=[2,4]<=[8]}
  %local = f32[8,2] custom-call(%s), custom_call_target="SPMDFullToShardShape", sharding={manual}
  %sum = f32[8,2] all-reduce(%local), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add_f32
  %gather = f32[8,8] all-gather(%sum), channel_id=2, replica_groups=[2,4]<=[8], dimensions={1}, use_global_device_ids=true
  %perm = f32[8,8] collective-permute(%gather), channel_id=3, source_target_pairs={{0,4},{4,0}}
  ROOT %full = f32[16,8] custom-call(%perm), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}
}
)";

TEST(ManualTextTest, CustomCallsAndCollectiveAttributesRoundTrip) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloModule(kRegion);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Node* local = (*graph)->FindNode("local");
  ASSERT_NE(local, nullptr);
  EXPECT_EQ(local->opcode(), Opcode::kCustomCall);
  EXPECT_EQ(local->attrs().custom_call_target, kFullToShardShapeTarget);
  EXPECT_EQ(local->sharding(), "{manual}");
  const Node* sum = (*graph)->FindNode("sum");
  EXPECT_EQ(sum->attrs().channel_id, 1);
  EXPECT_TRUE(sum->attrs().use_global_device_ids);
  EXPECT_EQ(sum->attrs().replica_groups.groups(),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ((*graph)->FindNode("perm")->attrs().channel_id, 3);
  // Printed exactly as written (XLA's attribute order).
  EXPECT_EQ(PrintHloModule(**graph), kRegion);
}

TEST(ManualTextTest, Errors) {
  auto parse = [](std::string_view from, std::string_view to) {
    std::string text = kRegion;
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return ParseHloModule(text).status();
  };
  // A shard larger than the value.
  absl::Status s = parse("%local = f32[8,2]", "%local = f32[8,9]");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("does not fit the global shape f32[16,8]"));
  // ShardToFull without its layout.
  s = parse(", sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}", "");
  EXPECT_THAT(s.message(), HasSubstr("SPMDShardToFullShape\" needs a sharding"));
  // An unknown target is named.
  s = parse("SPMDFullToShardShape", "MyKernel");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("custom-call target \"MyKernel\" is not supported"));
  s = parse("use_global_device_ids=true, to_apply", "use_global_device_ids=maybe, to_apply");
  EXPECT_THAT(s.message(), HasSubstr("expected true or false"));
  s = parse("channel_id=1,", "channel_id=-1,");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // Shardy boundaries need the module's meshes.
  s = ParseHloModule(R"(HloModule m
ENTRY %e (x: f32[8]) -> f32[4] {
  %x = f32[8] parameter(0)
  ROOT %l = f32[4] custom-call(%x), custom_call_target="xla.sdy.GlobalToLocalShape", frontend_attributes={xla.sdy.in_shardings="#sdy.sharding_per_value<[<@mesh, [{\"x\"}]>]>",xla.sdy.manual_axes="#sdy<manual_axes{\"x\"}>"}
})")
          .status();
  EXPECT_THAT(s.message(), HasSubstr("xla.sdy.meshes"));
}

}  // namespace
}  // namespace tessel
