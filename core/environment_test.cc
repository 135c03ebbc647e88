#include "tessel/core/environment.h"

#include <cstdlib>
#include <string>

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

}  // namespace
}  // namespace tessel
