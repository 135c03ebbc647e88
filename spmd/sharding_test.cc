#include "tessel/spmd/sharding.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::spmd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Sharding Parse(const std::string& text) {
  absl::StatusOr<Sharding> s = ParseSharding(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.status();
  return s.ok() ? *s : Sharding();
}

std::string ParseError(const std::string& text) {
  absl::StatusOr<Sharding> s = ParseSharding(text);
  EXPECT_FALSE(s.ok()) << text << " parsed as " << *s;
  if (s.ok()) return "";
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.status().message());
}

// ----------------------------------------------------------------------------------------------
// Printing: XLA's exact strings.

TEST(ShardingTest, PrintsEachKind) {
  EXPECT_EQ(Sharding::Replicate().ToString(), "{replicated}");
  EXPECT_EQ(Sharding().ToString(), "{replicated}");
  EXPECT_EQ(Sharding::Manual().ToString(), "{manual}");
  EXPECT_EQ(Sharding::Unreduced().ToString(), "{unreduced}");
  EXPECT_EQ(Sharding::AssignDevice(3).ToString(), "{maximal device=3}");
  EXPECT_EQ(Sharding::Tile(DeviceArray({2, 2}, {0, 1, 2, 3})).ToString(), "{devices=[2,2]0,1,2,3}");
  EXPECT_EQ(Sharding::PartialTile(DeviceArray::Iota({2, 1, 4})).ToString(),
            "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  EXPECT_EQ(Sharding::Subgroup(DeviceArray::Iota({2, 2}), {SubgroupType::kManual}).ToString(),
            "{devices=[2,2]0,1,2,3 last_tile_dims={manual}}");
  EXPECT_EQ(
      Sharding::Tuple({Sharding::Replicate(), Sharding::Tile(DeviceArray::Iota({2}))}).ToString(),
      "{{replicated}, {devices=[2]0,1}}");
}

TEST(ShardingTest, TupleOfSixPrintsIndexComment) {
  std::vector<Sharding> elements(6, Sharding::Replicate());
  elements[5] = Sharding::Manual();
  const std::string text = Sharding::Tuple(elements).ToString();
  EXPECT_EQ(text,
            "{{replicated}, {replicated}, {replicated}, {replicated}, {replicated}, "
            "/*index=5*/{manual}}");
  EXPECT_EQ(Parse(text), Sharding::Tuple(elements));
  EXPECT_EQ(Sharding::Tuple({}).ToString(), "{}");
  EXPECT_EQ(Parse("{}"), Sharding::Tuple({}));
}

// ----------------------------------------------------------------------------------------------
// Parsing and equality of meaning.

TEST(ShardingTest, ParsesXlaStrings) {
  for (const std::string text : {
           "{replicated}",
           "{manual}",
           "{unreduced}",
           "{maximal device=3}",
           "{devices=[2,2]0,1,2,3}",
           "{devices=[4,2]0,4,1,5,2,6,3,7}",
           "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}",
           "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}",
           "{devices=[2,1,2]0,1,2,3 last_tile_dims={unreduced}}",
           "{devices=[2,2,2]0,2,1,3,4,6,5,7 last_tile_dims={manual, replicated}}",
           "{devices=[2,2,2]0,1,2,3,4,5,6,7 last_tile_dims={unreduced, replicated}}",
           "{{replicated}, {devices=[2]0,1}}",
       }) {
    EXPECT_EQ(Parse(text).ToString(), text);
  }
}

TEST(ShardingTest, WhitespaceAndCommentsAreFree) {
  EXPECT_EQ(Parse("  { devices = [ 2 , 2 ] 0 , 1 , 2 , 3   last_tile_dim_replicate } "),
            Parse("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"));
  EXPECT_EQ(Parse("{maximal /*x*/ device=1}"), Sharding::AssignDevice(1));
}

TEST(ShardingTest, IotaFormEqualsExplicitList) {
  EXPECT_EQ(Parse("{devices=[4,2]<=[2,4]T(1,0)}"), Parse("{devices=[4,2]0,4,1,5,2,6,3,7}"));
  EXPECT_EQ(Parse("{devices=[8]<=[8]}"), Parse("{devices=[8]0,1,2,3,4,5,6,7}"));
  EXPECT_EQ(Parse("{devices=[2,2]<=[4]}"), Parse("{devices=[2,2]0,1,2,3}"));
  // XLA's classic example: [2,2,2]<=[2,2,2]T(2,1,0).
  EXPECT_EQ(Parse("{devices=[2,2,2]<=[2,2,2]T(2,1,0)}"), Parse("{devices=[2,2,2]0,4,2,6,1,5,3,7}"));
  EXPECT_EQ(Parse("{devices=[2,1,4]<=[8] last_tile_dim_replicate}").ToString(),
            "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  // Printing always gives the explicit list.
  EXPECT_EQ(Parse("{devices=[4,2]<=[2,4]T(1,0)}").ToString(), "{devices=[4,2]0,4,1,5,2,6,3,7}");
}

TEST(ShardingTest, PartialReplicationNormalizes) {
  // Every device in the replicated dim: {replicated}.
  EXPECT_EQ(Parse("{devices=[1,1,4]0,1,2,3 last_tile_dim_replicate}"), Sharding::Replicate());
  EXPECT_EQ(Parse("{devices=[4]3,2,1,0 last_tile_dim_replicate}"), Sharding::Replicate());
  // A trailing group of 1 collapses.
  EXPECT_EQ(Parse("{devices=[2,1]0,1 last_tile_dim_replicate}"), Parse("{devices=[2]0,1}"));
  EXPECT_EQ(Parse("{devices=[2,1]0,1 last_tile_dim_replicate}").ToString(), "{devices=[2]0,1}");
  // Groups are sorted.
  EXPECT_EQ(Parse("{devices=[2,2]1,0,3,2 last_tile_dim_replicate}").ToString(),
            "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(Parse("{devices=[2,2]1,0,3,2 last_tile_dim_replicate}"),
            Parse("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"));
  // Either spelling of one replicated subgroup.
  EXPECT_EQ(Parse("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dims={replicated}}"),
            Parse("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"));
  // Order of tiles still matters for plain tiling.
  EXPECT_NE(Parse("{devices=[2]0,1}"), Parse("{devices=[2]1,0}"));
  EXPECT_NE(Parse("{devices=[2]0,1}"), Parse("{devices=[2,1]0,1}"));
}

TEST(ShardingTest, SubgroupsNormalize) {
  // Only manual subgroups and no data tiling: {manual}; likewise unreduced and replicated.
  EXPECT_EQ(Parse("{devices=[1,4]0,1,2,3 last_tile_dims={manual}}"), Sharding::Manual());
  EXPECT_EQ(Parse("{devices=[1,1,4]0,1,2,3 last_tile_dims={unreduced}}"), Sharding::Unreduced());
  EXPECT_EQ(Parse("{devices=[1,4]0,1,2,3 last_tile_dims={replicated}}"), Sharding::Replicate());
  // Types reorder to manual, unreduced, replicated.
  EXPECT_EQ(
      Parse("{devices=[2,2,2]0,1,2,3,4,5,6,7 last_tile_dims={replicated, manual}}").ToString(),
      "{devices=[2,2,2]0,2,1,3,4,6,5,7 last_tile_dims={manual, replicated}}");
  // Dims of size 1 are dropped; a lone replicated dim becomes last_tile_dim_replicate.
  EXPECT_EQ(Parse("{devices=[2,1,2]0,1,2,3 last_tile_dims={manual, replicated}}").ToString(),
            "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(Parse("{devices=[2,2,1]0,1,2,3 last_tile_dims={unreduced, manual}}").ToString(),
            "{devices=[2,2]0,1,2,3 last_tile_dims={unreduced}}");
  // Two dims of one type merge.
  EXPECT_EQ(Parse("{devices=[2,2,2]0,1,2,3,4,5,6,7 last_tile_dims={manual, manual}}").ToString(),
            "{devices=[2,4]0,1,2,3,4,5,6,7 last_tile_dims={manual}}");
  // The replicated group is sorted when it is last.
  EXPECT_EQ(
      Parse("{devices=[2,2,2]1,0,3,2,5,4,7,6 last_tile_dims={unreduced, replicated}}").ToString(),
      "{devices=[2,2,2]0,1,2,3,4,5,6,7 last_tile_dims={unreduced, replicated}}");
}

TEST(ShardingTest, ParseErrorsQuoteTheText) {
  EXPECT_EQ(ParseError("{devices=[2,2]0,1,2}"),
            "bad sharding \"{devices=[2,2]0,1,2}\": 3 device ids for 4 tiles");
  EXPECT_THAT(ParseError("{devices=[2,2]0,1,2,2}"), HasSubstr("device id 2 appears twice"));
  EXPECT_THAT(ParseError("{devices=[2]0,-1}"), HasSubstr("negative device id -1"));
  EXPECT_THAT(ParseError("{devices=[2,0]}"), HasSubstr("tile dim 0 is < 1"));
  EXPECT_THAT(ParseError("{devices=[]0}"), HasSubstr("no dims"));
  EXPECT_THAT(ParseError("{replicated"), HasSubstr("missing '}'"));
  EXPECT_THAT(ParseError("replicated"), HasSubstr("expected '{'"));
  EXPECT_THAT(ParseError("{replicated} x"), HasSubstr("unexpected text"));
  EXPECT_THAT(ParseError("{}x"), HasSubstr("unexpected text"));
  EXPECT_THAT(ParseError("{tiled}"), HasSubstr("unknown or unsupported attribute \"tiled\""));
  EXPECT_THAT(ParseError("{replicated manual}"), HasSubstr("more than one sharding kind"));
  EXPECT_THAT(ParseError("{maximal}"), HasSubstr("maximal needs device=N"));
  EXPECT_THAT(ParseError("{maximal device=-2}"), HasSubstr("negative device id"));
  EXPECT_THAT(ParseError("{device=2}"), HasSubstr("no sharding kind"));
  EXPECT_THAT(ParseError("{replicated device=2}"), HasSubstr("only valid with maximal"));
  EXPECT_THAT(ParseError("{last_tile_dim_replicate}"), HasSubstr("need devices"));
  EXPECT_THAT(ParseError("{devices=[2,2]0,1,2,3 last_tile_dim_replicate last_tile_dims={manual}}"),
              HasSubstr("both"));
  EXPECT_THAT(ParseError("{devices=[2]0,1 last_tile_dims={sideways}}"),
              HasSubstr("unknown subgroup type \"sideways\""));
  EXPECT_THAT(ParseError("{devices=[2]0,1 last_tile_dims={manual, manual}}"),
              HasSubstr("2 subgroup types for 1 tile dims"));
  EXPECT_THAT(ParseError("{devices=[4,2]<=[2,2]}"), HasSubstr("iota reshape dims [2,2] hold 4"));
  EXPECT_THAT(ParseError("{devices=[4,2]<=[2,4]T(0,0)}"), HasSubstr("not a permutation"));
  EXPECT_THAT(ParseError("{devices=[2,2]0,1,x,3}"), HasSubstr("expected an integer"));
  EXPECT_THAT(ParseError("{{replicated}, manual}"), HasSubstr("expected '{' starting a tuple"));
  EXPECT_THAT(ParseError("{{{replicated}}}"), HasSubstr("expected an attribute"));
  EXPECT_THAT(ParseError(""), HasSubstr("expected '{'"));
  EXPECT_THAT(ParseError("{devices=[99999999999999999999]0}"), HasSubstr("too large"));
  EXPECT_THAT(ParseError("{devices=[1048576,1048576]<=[1099511627776]}"),
              HasSubstr("more than 16777216 tiles"));
}

// ----------------------------------------------------------------------------------------------
// Queries.

TEST(ShardingTest, TiledQueries) {
  Sharding s = Parse("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  EXPECT_TRUE(s.IsTiled());
  EXPECT_FALSE(s.IsTileMaximal());
  EXPECT_TRUE(s.ReplicateOnLastTileDim());
  EXPECT_TRUE(s.HasPartialReplication());
  EXPECT_EQ(s.TiledDataRank(), 2);
  EXPECT_EQ(s.NumSubgroupDims(), 1);
  EXPECT_EQ(s.num_tiles(0), 2);
  EXPECT_EQ(s.num_tiles(1), 1);
  EXPECT_EQ(s.num_tiles(5), 1);
  EXPECT_EQ(s.NumTiles(), 2);
  EXPECT_THAT(s.tile_assignment_dims(), ElementsAre(2, 1, 4));
  EXPECT_THAT(s.device_list(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(*s.TileIndexOf(6), ElementsAre(1, 0));
  EXPECT_THAT(*s.TileAssignmentIndexOf(6), ElementsAre(1, 0, 2));
  EXPECT_FALSE(s.TileIndexOf(8).has_value());
  EXPECT_THAT(s.DevicesForTile({1, 0}), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(s.ReplicationGroups(8),
              ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(4, 5, 6, 7)));
  EXPECT_THAT(s.UnreducedGroups(8),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2), ElementsAre(3),
                          ElementsAre(4), ElementsAre(5), ElementsAre(6), ElementsAre(7)));
  EXPECT_EQ(s.SubgroupDim(SubgroupType::kReplicated), 2);
  EXPECT_EQ(s.SubgroupDim(SubgroupType::kManual), -1);
  EXPECT_TRUE(s.UsesDevice(7));
  EXPECT_FALSE(s.UsesDevice(8));
}

TEST(ShardingTest, TransposedTilingQueries) {
  Sharding s = Parse("{devices=[4,2]0,4,1,5,2,6,3,7}");
  EXPECT_EQ(s.TiledDataRank(), 2);
  EXPECT_FALSE(s.HasPartialReplication());
  EXPECT_THAT(*s.TileIndexOf(5), ElementsAre(1, 1));
  EXPECT_THAT(s.DevicesForTile({2, 1}), ElementsAre(6));
  EXPECT_EQ(s.ReplicationGroups(8).size(), 8u);
  EXPECT_THAT(s.ReplicationGroups(8)[1], ElementsAre(4));
}

TEST(ShardingTest, SubgroupQueries) {
  Sharding s = Parse("{devices=[2,2,2]0,1,2,3,4,5,6,7 last_tile_dims={unreduced, replicated}}");
  EXPECT_EQ(s.TiledDataRank(), 1);
  EXPECT_EQ(s.SubgroupDim(SubgroupType::kUnreduced), 1);
  EXPECT_EQ(s.SubgroupDim(SubgroupType::kReplicated), 2);
  EXPECT_THAT(s.DevicesForTile({1}), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(s.ReplicationGroups(8), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3),
                                                  ElementsAre(4, 5), ElementsAre(6, 7)));
  EXPECT_THAT(s.UnreducedGroups(8), ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3),
                                                ElementsAre(4, 6), ElementsAre(5, 7)));
}

TEST(ShardingTest, TileMaximalQueries) {
  Sharding r = Sharding::Replicate();
  EXPECT_TRUE(r.IsReplicated());
  EXPECT_TRUE(r.IsTileMaximal());
  EXPECT_EQ(r.TiledDataRank(), 0);
  EXPECT_EQ(r.num_tiles(0), 1);
  EXPECT_FALSE(r.TileIndexOf(0).has_value());
  EXPECT_TRUE(r.UsesDevice(123));
  EXPECT_THAT(r.ReplicationGroups(4), ElementsAre(ElementsAre(0, 1, 2, 3)));

  Sharding m = Sharding::AssignDevice(2);
  EXPECT_TRUE(m.IsTileMaximal());
  EXPECT_TRUE(m.IsMaximal());
  EXPECT_EQ(*m.unique_device(), 2);
  EXPECT_TRUE(m.UsesDevice(2));
  EXPECT_FALSE(m.UsesDevice(1));
  EXPECT_THAT(m.ReplicationGroups(4), ElementsAre(ElementsAre(2)));

  Sharding u = Sharding::Unreduced();
  EXPECT_FALSE(u.IsTileMaximal());
  EXPECT_THAT(u.UnreducedGroups(3), ElementsAre(ElementsAre(0, 1, 2)));
  EXPECT_THAT(u.ReplicationGroups(2), ElementsAre(ElementsAre(0), ElementsAre(1)));

  Sharding t = Parse("{{replicated}, {replicated}}");
  EXPECT_TRUE(t.IsTuple());
  EXPECT_TRUE(t.IsReplicated());
  EXPECT_FALSE(Parse("{{replicated}, {manual}}").IsReplicated());
  EXPECT_TRUE(Parse("{{maximal device=1}, {manual}}").UsesDevice(1));
}

TEST(ShardingTest, ValidateAgainstShape) {
  Sharding s = Parse("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  EXPECT_TRUE(s.Validate(Shape(DType::kF32, {8, 10}), 8).ok());
  absl::Status rank = s.Validate(Shape(DType::kF32, {8}), 8);
  EXPECT_EQ(rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rank.message(), HasSubstr("tiles 2 dims but shape f32[8] has rank 1"));
  absl::Status range = s.Validate(Shape(DType::kF32, {8, 10}), 4);
  EXPECT_EQ(range.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(range.message(), HasSubstr("uses device 4 but there are 4 devices"));
  EXPECT_TRUE(Sharding::Replicate().Validate(Shape(DType::kF32, {3}), 1).ok());
  EXPECT_EQ(Sharding::AssignDevice(5).Validate(Shape(DType::kF32, {3}), 4).code(),
            absl::StatusCode::kOutOfRange);

  Shape tuple = Shape::Tuple({Shape(DType::kF32, {4}), Shape(DType::kS32, {})});
  EXPECT_TRUE(Parse("{{devices=[2]0,1}, {replicated}}").Validate(tuple, 2).ok());
  EXPECT_FALSE(Parse("{{devices=[2]0,1}}").Validate(tuple, 2).ok());
  EXPECT_FALSE(Parse("{{replicated}, {devices=[2]0,1}}").Validate(tuple, 2).ok());
  EXPECT_FALSE(Parse("{{replicated}}").Validate(Shape(DType::kF32, {4}), 2).ok());
  EXPECT_FALSE(Parse("{devices=[2]0,1}").Validate(tuple, 2).ok());
}

TEST(ShardingTest, ValidateTileAssignmentReportsProblems) {
  EXPECT_TRUE(Sharding::ValidateTileAssignment(DeviceArray::Iota({2, 2})).ok());
  EXPECT_FALSE(Sharding::ValidateTileAssignment(DeviceArray({2}, {1, 1})).ok());
  EXPECT_FALSE(Sharding::ValidateTileAssignment(DeviceArray({2}, {-1, 1})).ok());
  EXPECT_FALSE(Sharding::ValidateTileAssignment(DeviceArray({}, {0})).ok());
  EXPECT_FALSE(Sharding::ValidateTileAssignment(DeviceArray({0}, {})).ok());
}

// ----------------------------------------------------------------------------------------------
// Round trip on random shardings.

Sharding RandomLeaf(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, 9);
  switch (kind(rng)) {
    case 0:
      return Sharding::Replicate();
    case 1:
      return Sharding::Manual();
    case 2:
      return Sharding::Unreduced();
    case 3:
      return Sharding::AssignDevice(std::uniform_int_distribution<int64_t>(0, 63)(rng));
    default:
      break;
  }
  std::uniform_int_distribution<int64_t> rank_dist(1, 4), dim_dist(1, 3);
  std::vector<int64_t> dims(rank_dist(rng));
  for (int64_t& d : dims) d = dim_dist(rng);
  std::vector<int64_t> ids(Product(dims));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  std::shuffle(ids.begin(), ids.end(), rng);
  // Sometimes leave gaps in the ids (a sharding over a subset of devices).
  if (rng() % 3 == 0) {
    for (int64_t& id : ids) id = id * 2 + 1;
  }
  DeviceArray tiles(dims, ids);
  switch (rng() % 3) {
    case 0:
      return Sharding::Tile(tiles);
    case 1:
      return Sharding::PartialTile(tiles);
    default: {
      std::vector<SubgroupType> types(std::uniform_int_distribution<int64_t>(0, tiles.rank())(rng));
      for (SubgroupType& t : types) t = static_cast<SubgroupType>(rng() % 3);
      return Sharding::Subgroup(tiles, types);
    }
  }
}

TEST(ShardingTest, RandomRoundTrip) {
  std::mt19937_64 rng(1234);
  for (int iteration = 0; iteration < 3000; ++iteration) {
    Sharding s;
    if (rng() % 8 == 0) {
      std::vector<Sharding> elements(rng() % 7);
      for (Sharding& e : elements) e = RandomLeaf(rng);
      s = Sharding::Tuple(elements);
    } else {
      s = RandomLeaf(rng);
    }
    const std::string text = s.ToString();
    absl::StatusOr<Sharding> parsed = ParseSharding(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, s) << text << " vs " << parsed->ToString();
    EXPECT_EQ(parsed->ToString(), text);
    EXPECT_EQ(absl::HashOf(*parsed), absl::HashOf(s));
    // XLA's iota spelling reads back to the same sharding.
    const std::string iota_text = s.ToString(Sharding::DeviceListFormat::kIota);
    absl::StatusOr<Sharding> from_iota = ParseSharding(iota_text);
    ASSERT_TRUE(from_iota.ok()) << iota_text << ": " << from_iota.status();
    EXPECT_EQ(*from_iota, s) << iota_text;
  }
}

TEST(ShardingTest, IotaSpellingIsXlas) {
  using Format = Sharding::DeviceListFormat;
  EXPECT_EQ(Parse("{devices=[4,2]0,4,1,5,2,6,3,7}").ToString(Format::kIota),
            "{devices=[4,2]<=[2,4]T(1,0)}");
  EXPECT_EQ(
      Parse("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}").ToString(Format::kIota),
      "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
  // No compact form: the explicit list.
  EXPECT_EQ(Parse("{devices=[4]0,3,1,2}").ToString(Format::kIota), "{devices=[4]0,3,1,2}");
  EXPECT_EQ(Parse("{{replicated}, {devices=[2]0,1}}").ToString(Format::kIota),
            "{{replicated}, {devices=[2]<=[2]}}");
  // 8192 devices: O(rank) text.
  Sharding big = Parse("{devices=[2048,4]<=[4,2048]T(1,0)}");
  EXPECT_EQ(big.ToString(Format::kIota), "{devices=[2048,4]<=[4,2048]T(1,0)}");
  EXPECT_EQ(big.tile_assignment().at({2047, 3}), 8191);
}

// The iota form against an independent computation of its meaning.
TEST(ShardingTest, RandomIotaFormMatchesDefinition) {
  std::mt19937_64 rng(99);
  for (int iteration = 0; iteration < 500; ++iteration) {
    std::vector<int64_t> reshape(std::uniform_int_distribution<int>(1, 4)(rng));
    for (int64_t& d : reshape) d = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    std::vector<int64_t> perm(reshape.size());
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t n = Product(reshape);
    // Transposed element i: unravel i in the permuted dims, map back through perm, ravel.
    std::vector<int64_t> permuted(reshape.size());
    for (size_t i = 0; i < perm.size(); ++i) permuted[i] = reshape[perm[i]];
    std::vector<int64_t> expected;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> out_index(permuted.size());
      int64_t rest = i;
      for (int64_t k = static_cast<int64_t>(permuted.size()) - 1; k >= 0; --k) {
        out_index[k] = rest % permuted[k];
        rest /= permuted[k];
      }
      std::vector<int64_t> in_index(reshape.size());
      for (size_t k = 0; k < perm.size(); ++k) in_index[perm[k]] = out_index[k];
      int64_t linear = 0;
      for (size_t k = 0; k < reshape.size(); ++k) linear = linear * reshape[k] + in_index[k];
      expected.push_back(linear);
    }
    const std::string tile_dims = absl::StrCat("[", n, "]");
    const std::string text =
        absl::StrCat("{devices=", tile_dims, "<=[", absl::StrJoin(reshape, ","), "]T(",
                     absl::StrJoin(perm, ","), ")}");
    Sharding s = Parse(text);
    EXPECT_EQ(s.device_list(), expected) << text;
  }
}

}  // namespace
}  // namespace tessel::spmd
