#include "tessel/core/command_line.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Parsed {
  int code = 0;     // ParseCommandLine's result
  std::string err;  // what it wrote on stderr
  int64_t count = 7;
  std::string name;
};

// Parses `args` (after the program name) into an app with --count (>= 0) and --name.
Parsed Parse(std::vector<std::string> args) {
  Parsed p;
  CLI::App app{"a test program", "prog"};
  app.add_option("--count", p.count, "a count")->check(NonNegative());
  app.add_option("--name", p.name, "a name");
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  p.code = ParseCommandLine(app, static_cast<int>(argv.size()), argv.data());
  p.err = ::testing::internal::GetCapturedStderr();
  return p;
}

TEST(CommandLineTest, GoesOnWithBothFlagForms) {
  Parsed p = Parse({"--count=3", "--name", "x"});
  EXPECT_EQ(p.code, -1);
  EXPECT_EQ(p.count, 3);
  EXPECT_EQ(p.name, "x");
  EXPECT_EQ(p.err, "");
  EXPECT_EQ(Parse({}).count, 7);
}

TEST(CommandLineTest, BadFlagsAreOneLineAndExitTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--bogus=1"}, {"--count=-1"}, {"--count=x"}, {"--count"}, {"positional"}}) {
    Parsed p = Parse(args);
    EXPECT_EQ(p.code, kExitBadFlags) << args[0];
    EXPECT_THAT(p.err, StartsWith("prog: ")) << args[0];
    EXPECT_THAT(p.err, HasSubstr("(see --help)\n")) << args[0];
    EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << p.err;
  }
  EXPECT_THAT(Parse({"--bogus=1"}).err, HasSubstr("--bogus"));
  EXPECT_THAT(Parse({"--count=-1"}).err, HasSubstr("--count: must be a number >= 0, got \"-1\""));
}

TEST(CommandLineTest, PositiveRefusesZeroNegativeAndNonFiniteValues) {
  for (const char* value : {"0", "-2", "nan", "inf", "1e99999", "3x"}) {
    double x = 1;
    CLI::App app{"a test program", "prog"};
    app.add_option("--x", x, "a number")->check(Positive());
    std::string arg = std::string("--x=") + value;
    std::vector<char*> argv = {const_cast<char*>("prog"), arg.data()};
    ::testing::internal::CaptureStderr();
    int code = ParseCommandLine(app, 2, argv.data());
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, kExitBadFlags) << value;
    EXPECT_THAT(err, HasSubstr(std::string("--x: must be a number > 0, got \"") + value + "\""))
        << err;
  }
  // An integer beyond int64 is refused rather than clamped by CLI11's conversion.
  EXPECT_THAT(Parse({"--count=9223372036854775808"}).err,
              HasSubstr("--count: must be at most 9223372036854775807, got "
                        "\"9223372036854775808\""));
  EXPECT_EQ(Parse({"--count=9223372036854775807"}).count, 9223372036854775807);
  double x = 0;
  CLI::App app{"a test program", "prog"};
  app.add_option("--x", x, "a number")->check(Positive());
  std::string arg = "--x=2.5e-3";
  std::vector<char*> argv = {const_cast<char*>("prog"), arg.data()};
  EXPECT_EQ(ParseCommandLine(app, 2, argv.data()), -1);
  EXPECT_EQ(x, 2.5e-3);
}

}  // namespace
}  // namespace tessel
