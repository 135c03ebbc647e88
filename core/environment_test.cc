#include "tessel/core/environment.h"

#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(ParseBoolTest, AcceptsTheDocumentedWordsInAnyCase) {
  for (const char* yes : {"1", "true", "TRUE", "True", "yes", "Yes", "on", "ON", " on "}) {
    absl::StatusOr<bool> v = ParseBool(yes, "X");
    ASSERT_TRUE(v.ok()) << yes << ": " << v.status();
    EXPECT_TRUE(*v) << yes;
  }
  for (const char* no : {"0", "false", "FALSE", "no", "No", "off", "OFF"}) {
    absl::StatusOr<bool> v = ParseBool(no, "X");
    ASSERT_TRUE(v.ok()) << no << ": " << v.status();
    EXPECT_FALSE(*v) << no;
  }
}

TEST(ParseBoolTest, RejectsEverythingElseNamingTheSource) {
  for (const char* bad : {"", "2", "y", "enable", "truee", "-1", "0x1"}) {
    absl::StatusOr<bool> v = ParseBool(bad, "TESSEL_CURVE");
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(v.status().message()),
                ::testing::HasSubstr(std::string("TESSEL_CURVE=\"") + bad + "\""));
  }
}

TEST(GetBoolEnvTest, UnsetIsNulloptAndSetIsParsed) {
  unsetenv("TESSEL_ENVIRONMENT_TEST_FLAG");
  absl::StatusOr<std::optional<bool>> v = GetBoolEnv("TESSEL_ENVIRONMENT_TEST_FLAG");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  setenv("TESSEL_ENVIRONMENT_TEST_FLAG", "Off", 1);
  v = GetBoolEnv("TESSEL_ENVIRONMENT_TEST_FLAG");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, std::optional<bool>(false));
  setenv("TESSEL_ENVIRONMENT_TEST_FLAG", "sometimes", 1);
  v = GetBoolEnv("TESSEL_ENVIRONMENT_TEST_FLAG");
  EXPECT_FALSE(v.ok());
  unsetenv("TESSEL_ENVIRONMENT_TEST_FLAG");
}

TEST(ParseInt64Test, DigitsWithASignInRange) {
  EXPECT_EQ(ParseInt64("42", "X", 0, 100).value(), 42);
  EXPECT_EQ(ParseInt64(" -7\t", "X", -10, 10).value(), -7);
  EXPECT_EQ(ParseInt64("+9223372036854775807", "X", 0, std::numeric_limits<int64_t>::max()).value(),
            std::numeric_limits<int64_t>::max());
  // Not a decimal integer, out of [min, max], or past int64: one message naming the source.
  for (const char* bad : {"", " ", "-", "0x10", "1e3", "12abc", "1.5", "1 2", "101", "-1",
                          "9223372036854775808", "-99999999999999999999"}) {
    absl::StatusOr<int64_t> v = ParseInt64(bad, "TESSEL_X", 0, 100, "a note");
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(v.status().message(),
              absl::StrCat("TESSEL_X=\"", bad, "\": expected an integer in [0, 100] (a note)"));
  }
  EXPECT_EQ(ParseInt64("x", "Y", 1, 2).status().message(),
            "Y=\"x\": expected an integer in [1, 2]");
}

}  // namespace
}  // namespace tessel
