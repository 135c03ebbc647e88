#include "tessel/core/config_json.h"

#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

TEST(ConfigJsonTest, ParsesStrictJson) {
  absl::StatusOr<nlohmann::json> j = ParseConfigJson(R"({"a": [1, {"b": "c"}], "d": 2.5})", "f");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"][1]["b"], "c");
  EXPECT_EQ((*j)["d"], 2.5);
}

TEST(ConfigJsonTest, RepeatedKeyIsRefusedWithItsPointer) {
  // The same key in different objects is fine; a repeat inside one object is not, wherever it
  // is nested, and the pointer escapes '/' and '~' (RFC 6901).
  EXPECT_TRUE(ParseConfigJson(R"({"x": [{"k": 1}, {"k": 2}]})", "f").ok());
  absl::StatusOr<nlohmann::json> j =
      ParseConfigJson(R"({"x": [7, {"a/b~": 1, "q": [], "a/b~": 2}]})", "m.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(j.status().message(), "m.json: /x/1/a~1b~0: duplicate key in one object");
  // Escaped spellings of one key are one key.
  EXPECT_FALSE(ParseConfigJson(R"({"k": 1, "\u006b": 2})", "f").ok());
}

TEST(ConfigJsonTest, NestingIsBoundedBeforeParsing) {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_TRUE(ParseConfigJson(nested(kMaxConfigJsonDepth), "f").ok());
  absl::StatusOr<nlohmann::json> j = ParseConfigJson(nested(100000), "deep.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(),
            "deep.json: invalid JSON: nesting deeper than 64 levels at byte offset 64");
  // Brackets inside strings do not count.
  EXPECT_TRUE(ParseConfigJson("[\"" + std::string(200, '[') + "\"]", "f").ok());
}

TEST(ConfigJsonTest, MalformedTextAndCommentsAreRefusedWithTheirOffset) {
  absl::StatusOr<nlohmann::json> j = ParseConfigJson("{\"a\": 1,}", "f.json");
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("f.json: invalid JSON: parse error at line 1"));
  EXPECT_THAT(j.status().message(), HasSubstr("(byte offset 8)"));
  EXPECT_FALSE(ParseConfigJson("{\"a\": 1 // note\n}", "f").ok());
  EXPECT_FALSE(ParseConfigJson("", "f").ok());
}

TEST(ConfigJsonTest, ManyObjectsParse) {
  // 200000 objects: the repeated-key pass keeps one key set per open object (the callback
  // parser it replaces rescanned the array at every object end).
  std::string text = "[";
  for (int i = 0; i < 200000; ++i) text += i ? ",{\"a\":1}" : "{\"a\":1}";
  text += "]";
  absl::StatusOr<nlohmann::json> j = ParseConfigJson(text, "f");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->size(), 200000u);
}

TEST(ConfigJsonTest, MessagesShowAShortValue) {
  EXPECT_EQ(JsonForMessage(nlohmann::json(5)), "5");
  std::string shown = JsonForMessage(nlohmann::json(std::string(500, 'x')));
  EXPECT_EQ(shown.size(), 60u);
  EXPECT_EQ(shown.substr(57), "...");
  EXPECT_EQ(JsonPointerChild("/a", "b/c"), "/a/b~1c");
  EXPECT_EQ(JsonPointerChild("/a", size_t{3}), "/a/3");
}

TEST(ConfigJsonTest, IntegerInRangeTakesJsonIntegersOnly) {
  using nlohmann::json;
  EXPECT_EQ(JsonIntegerInRange(json(5), 0, 10), 5);
  EXPECT_EQ(JsonIntegerInRange(json(-3), -5, 0), -3);
  EXPECT_EQ(JsonIntegerInRange(json(11), 0, 10), std::nullopt);
  EXPECT_EQ(JsonIntegerInRange(json(2.0), 0, 10), std::nullopt);  // a float, not an integer
  EXPECT_EQ(JsonIntegerInRange(json("2"), 0, 10), std::nullopt);
  // 2^64 - 1 is stored unsigned: out of range, not wrapped to -1.
  EXPECT_EQ(JsonIntegerInRange(json::parse("18446744073709551615"), -5,
                               std::numeric_limits<int64_t>::max()),
            std::nullopt);
  EXPECT_EQ(JsonIntegerInRange(json::parse("9223372036854775807"), 0,
                               std::numeric_limits<int64_t>::max()),
            std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace tessel
