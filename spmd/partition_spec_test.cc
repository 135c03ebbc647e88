#include "tessel/spmd/partition_spec.h"

#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::spmd {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), int64_t{0});
  return ids;
}

Mesh MakeMesh(std::vector<int64_t> shape, std::vector<std::string> names = {},
              std::vector<int64_t> ids = {}) {
  if (ids.empty()) ids = Iota(Product(shape));
  absl::StatusOr<Mesh> mesh = Mesh::Create(ids, shape, names);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *mesh;
}

std::string Translate(const Mesh& mesh, int64_t rank, const PartitionSpec& spec) {
  absl::StatusOr<Sharding> s = ShardingFromPartitionSpec(mesh, rank, spec);
  EXPECT_TRUE(s.ok()) << spec.ToString() << ": " << s.status();
  return s.ok() ? s->ToString() : "";
}

absl::Status TranslateError(const Mesh& mesh, int64_t rank, const PartitionSpec& spec) {
  absl::StatusOr<Sharding> s = ShardingFromPartitionSpec(mesh, rank, spec);
  EXPECT_FALSE(s.ok()) << spec.ToString() << " gave " << s->ToString();
  return s.status();
}

// ----------------------------------------------------------------------------------------------
// Worked examples from torch_xla's documentation and tests.

TEST(ShardingFromPartitionSpecTest, TorchXlaDocExamples) {
  // mesh (2, 4), spec (0, None): 2-way sharded, replicated over the 4 devices of each row.
  EXPECT_EQ(Translate(MakeMesh({2, 4}), 2, {0, kNone}),
            "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  // mesh (1, 2, 4) axes (r, b, m), spec (None, (r, m)).
  EXPECT_EQ(Translate(MakeMesh({1, 2, 4}, {"r", "b", "m"}), 2, {kNone, Axes{"r", "m"}}),
            "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
  // mark_sharding docstring: mesh (4, 2) ('x', 'y'): input (0, None), linear.weight (None, 1).
  Mesh mesh42 = MakeMesh({4, 2}, {"x", "y"});
  EXPECT_EQ(Translate(mesh42, 2, {0, kNone}),
            "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  EXPECT_EQ(Translate(mesh42, 2, {kNone, 1}),
            "{devices=[1,2,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}");
  EXPECT_EQ(Translate(mesh42, 2, {"x", kNone}), Translate(mesh42, 2, {0, kNone}));
}

TEST(ShardingFromPartitionSpecTest, FullTiling) {
  Mesh mesh = MakeMesh({2, 4});
  EXPECT_EQ(Translate(mesh, 2, {0, 1}), "{devices=[2,4]0,1,2,3,4,5,6,7}");
  // The tile assignment is the transposed logical mesh.
  EXPECT_EQ(Translate(mesh, 2, {1, 0}), "{devices=[4,2]0,4,1,5,2,6,3,7}");
  // torch_xla test_named_partition_spec: mesh (1, n) ('data', 'model'), spec ('model', 'data').
  EXPECT_EQ(Translate(MakeMesh({1, 8}, {"data", "model"}), 2, {"model", "data"}),
            "{devices=[8,1]0,1,2,3,4,5,6,7}");
  // A tuple over both axes of a 2x2 mesh, minor axis first.
  EXPECT_EQ(Translate(MakeMesh({2, 2}), 1, {Axes{1, 0}}), "{devices=[4]0,2,1,3}");
  EXPECT_EQ(Translate(MakeMesh({2, 2}), 1, {Axes{0, 1}}), "{devices=[4]0,1,2,3}");
  // Tuples and single axes together.
  EXPECT_EQ(Translate(MakeMesh({2, 2, 2}), 2, {Axes{2, 0}, 1}), "{devices=[4,2]0,2,4,6,1,3,5,7}");
}

TEST(ShardingFromPartitionSpecTest, PartialReplication) {
  // torch_xla test_mark_sharding_partial_2d: mesh (2, 4, 1), spec (2, 1).
  EXPECT_EQ(Translate(MakeMesh({2, 4, 1}), 2, {2, 1}),
            "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
  // A tensor of lower rank than the mesh.
  EXPECT_EQ(Translate(MakeMesh({2, 4}), 1, {0}),
            "{devices=[2,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  EXPECT_EQ(Translate(MakeMesh({2, 4}), 1, {1}),
            "{devices=[4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
  // Two unused axes form one group, in mesh order.
  EXPECT_EQ(Translate(MakeMesh({2, 2, 2}), 2, {kNone, 1}),
            "{devices=[1,2,4]0,1,4,5,2,3,6,7 last_tile_dim_replicate}");
}

TEST(ShardingFromPartitionSpecTest, GroupsAreSorted) {
  // Device ids in a custom (reversed) order: each replication group is stored sorted.
  Mesh reversed = MakeMesh({2, 4}, {}, {7, 6, 5, 4, 3, 2, 1, 0});
  EXPECT_EQ(Translate(reversed, 2, {0, kNone}),
            "{devices=[2,1,4]4,5,6,7,0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(Translate(reversed, 2, {kNone, 1}),
            "{devices=[1,4,2]3,7,2,6,1,5,0,4 last_tile_dim_replicate}");
  // Full tiling keeps the mesh order.
  EXPECT_EQ(Translate(reversed, 2, {0, 1}), "{devices=[2,4]7,6,5,4,3,2,1,0}");
}

TEST(ShardingFromPartitionSpecTest, TrailingGroupOfOneCollapses) {
  // Every axis used but a None dim: replication groups of 1 collapse to plain tiling.
  EXPECT_EQ(Translate(MakeMesh({2, 4}), 3, {0, kNone, 1}), "{devices=[2,1,4]0,1,2,3,4,5,6,7}");
  // An unused axis of size 1 too.
  EXPECT_EQ(Translate(MakeMesh({2, 1}), 2, {0, kNone}), "{devices=[2,1]0,1}");
  EXPECT_EQ(Translate(MakeMesh({4, 1}), 1, {0}), "{devices=[4]0,1,2,3}");
}

TEST(ShardingFromPartitionSpecTest, ReplicatedCases) {
  Mesh mesh = MakeMesh({2, 4});
  EXPECT_EQ(Translate(mesh, 2, {kNone, kNone}), "{replicated}");
  EXPECT_EQ(Translate(mesh, 1, {kNone}), "{replicated}");
  EXPECT_EQ(Translate(mesh, 3, {kNone, kNone, kNone}), "{replicated}");
  EXPECT_EQ(Translate(mesh, 0, {}), "{replicated}");  // 0-d tensor
  // One device: always replicated (torch_xla: MAXIMAL -> Replicate()).
  EXPECT_EQ(Translate(MakeMesh({1}), 1, {0}), "{replicated}");
  EXPECT_EQ(Translate(MakeMesh({1, 1}), 2, {0, 1}), "{replicated}");
  EXPECT_EQ(Translate(MakeMesh({1, 1, 1}), 2, {2, 1}), "{replicated}");
  // Tiled only over axes of size 1 while the rest replicates: every device in one group.
  EXPECT_EQ(Translate(MakeMesh({1, 4}), 1, {0}), "{replicated}");
}

TEST(ShardingFromPartitionSpecTest, Errors) {
  Mesh mesh = MakeMesh({2, 4}, {"data", "model"});
  absl::Status twice = TranslateError(mesh, 2, {0, 0});
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.message(), HasSubstr("mesh axis 0 is used twice in partition_spec (0,0)"));
  EXPECT_THAT(TranslateError(mesh, 2, {Axes{"data", "model"}, "model"}).message(),
              HasSubstr("mesh axis model is used twice"));
  EXPECT_THAT(TranslateError(mesh, 1, {Axes{0, 0}}).message(), HasSubstr("used twice"));
  EXPECT_EQ(TranslateError(mesh, 2, {"z", kNone}).message(),
            "unknown mesh axis \"z\" in partition_spec[0]; mesh has axes [\"data\"=2, "
            "\"model\"=4]");
  EXPECT_THAT(TranslateError(MakeMesh({2, 4}), 1, {"data"}).message(),
              HasSubstr("mesh has axes [0=2, 1=4]"));
  EXPECT_THAT(TranslateError(mesh, 2, {2, kNone}).message(),
              HasSubstr("refers to mesh axis 2, outside the mesh of 2 axes"));
  EXPECT_THAT(TranslateError(mesh, 2, {-1, kNone}).message(), HasSubstr("mesh axis -1"));
  EXPECT_EQ(TranslateError(mesh, 2, {0}).message(),
            "partition_spec (0) has 1 entries for a rank-2 tensor; it needs one entry per dim");
  EXPECT_THAT(TranslateError(mesh, 1, {0, kNone}).message(),
              HasSubstr("has 2 entries for a rank-1 tensor"));
  EXPECT_THAT(TranslateError(mesh, 0, {kNone}).message(), HasSubstr("rank-0"));
  EXPECT_THAT(TranslateError(mesh, 1, {Axes(std::vector<AxisRef>{})}).message(),
              HasSubstr("empty tuple"));
  EXPECT_THAT(TranslateError(mesh, -1, {}).message(), HasSubstr("negative tensor rank"));
}

// ----------------------------------------------------------------------------------------------
// The command-line form.

TEST(PartitionSpecTest, ParseAndPrint) {
  auto parse = [](const std::string& text) {
    absl::StatusOr<PartitionSpec> spec = PartitionSpec::Parse(text);
    EXPECT_TRUE(spec.ok()) << text << ": " << spec.status();
    return spec.ok() ? *spec : PartitionSpec();
  };
  EXPECT_EQ(parse("x,None"), (PartitionSpec{"x", kNone}));
  EXPECT_EQ(parse(" 0 , none "), (PartitionSpec{0, kNone}));
  EXPECT_EQ(parse("None,(r,m)"), (PartitionSpec{kNone, Axes{"r", "m"}}));
  EXPECT_EQ(parse("( 0 , 2 ),_"), (PartitionSpec{Axes{0, 2}, kNone}));
  EXPECT_EQ(parse("(x,y)"), (PartitionSpec{Axes{"x", "y"}}));
  EXPECT_EQ(parse("(x,y),"), (PartitionSpec{Axes{"x", "y"}}));
  EXPECT_EQ(parse("x,,y"), (PartitionSpec{"x", kNone, "y"}));
  EXPECT_EQ(parse("'data',\"model\""), (PartitionSpec{"data", "model"}));
  EXPECT_EQ(parse(""), PartitionSpec());
  EXPECT_EQ(parse("x").size(), 1);
  EXPECT_TRUE(parse("None")[0].is_none());
  EXPECT_TRUE(parse("(a,b)")[0].is_tuple());
  EXPECT_EQ((PartitionSpec{"x", kNone, Axes{0, "m"}}).ToString(), "x,None,(0,m)");
  for (const std::string text : {"x,None", "None,(r,m)", "0,1,None", "(a,b,c)"}) {
    EXPECT_EQ(parse(text).ToString(), text);
  }
}

// Names Parse reads only in quotes print in quotes, so ToString always reads back (the
// partition_spec fuzzer found a quoted '\x85' printed bare, which then did not parse).
TEST(PartitionSpecTest, NamesThatNeedQuotesPrintQuoted) {
  const PartitionSpec odd{"\x85", "0", "-x", "a b", "it's", Axes{"dcn-data", "x.y", "_z"}};
  EXPECT_EQ(odd.ToString(), "'\x85','0','-x','a b',\"it's\",(dcn-data,x.y,_z)");
  absl::StatusOr<PartitionSpec> back = PartitionSpec::Parse(odd.ToString());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, odd);
  absl::StatusOr<PartitionSpec> fuzzed = PartitionSpec::Parse("('\x85',\"b\"),None,c");
  ASSERT_TRUE(fuzzed.ok()) << fuzzed.status();
  absl::StatusOr<PartitionSpec> again = PartitionSpec::Parse(fuzzed->ToString());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *fuzzed);
}

TEST(PartitionSpecTest, ParseErrors) {
  auto error = [](const std::string& text) {
    absl::StatusOr<PartitionSpec> spec = PartitionSpec::Parse(text);
    EXPECT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(spec.status().message());
  };
  EXPECT_EQ(error("x,(y"), "bad partition_spec \"x,(y\": missing ')'");
  EXPECT_THAT(error("()"), HasSubstr("empty tuple"));
  EXPECT_THAT(error("(0,None)"), HasSubstr("None inside a tuple"));
  EXPECT_THAT(error("x y"), HasSubstr("unexpected 'y'"));
  EXPECT_THAT(error("x)"), HasSubstr("unexpected ')'"));
  EXPECT_THAT(error("(x,(y))"), HasSubstr("expected an axis"));
  EXPECT_THAT(error("-"), HasSubstr("bad axis index"));
  EXPECT_THAT(error("'x"), HasSubstr("unterminated quote"));
  EXPECT_THAT(error("''"), HasSubstr("empty axis name"));
}

TEST(ShardingSpecTest, DeferredSpec) {
  ShardingSpec spec(MakeMesh({2, 4}), {0, kNone}, /*minibatch=*/true);
  EXPECT_TRUE(spec.minibatch());
  EXPECT_TRUE(spec.CanApply(Shape(DType::kF32, {8, 3})));
  EXPECT_FALSE(spec.CanApply(Shape(DType::kF32, {8})));
  ASSERT_TRUE(spec.sharding().ok());
  EXPECT_EQ(spec.sharding()->ToString(),
            "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  EXPECT_FALSE(ShardingSpec(MakeMesh({2, 4}), {5}).sharding().ok());
}

}  // namespace
}  // namespace tessel::spmd
