#include "tessel/core/trace_events.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessel {
namespace {

TEST(TraceEventWriterTest, NamesTracksThenListsCompleteEvents) {
  TraceEventWriter trace;
  trace.AddProcess(1, "host 1");
  trace.AddThread(1, 5, "device 5");
  trace.AddComplete({.pid = 1,
                     .tid = 5,
                     .name = "dot.3",
                     .category = "execute",
                     .start_us = 2.5,
                     .duration_us = 10,
                     .args = {{"bytes", int64_t{4096}}, {"op", std::string("dot")}}});
  trace.AddComplete(
      {.pid = 1, .tid = 5, .name = "all-reduce.1", .category = "collective", .args = {}});
  nlohmann::json j = nlohmann::json::parse(trace.ToJson());
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  const nlohmann::json& events = j["traceEvents"];
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["ph"], "M");
  EXPECT_EQ(events[0]["name"], "process_name");
  EXPECT_EQ(events[0]["pid"], 1);
  EXPECT_FALSE(events[0].contains("tid"));
  EXPECT_EQ(events[0]["args"]["name"], "host 1");
  EXPECT_EQ(events[1]["name"], "thread_name");
  EXPECT_EQ(events[1]["tid"], 5);
  EXPECT_EQ(events[1]["args"]["name"], "device 5");
  EXPECT_EQ(events[2]["ph"], "X");
  EXPECT_EQ(events[2]["name"], "dot.3");
  EXPECT_EQ(events[2]["cat"], "execute");
  EXPECT_DOUBLE_EQ(events[2]["ts"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(events[2]["dur"].get<double>(), 10);
  EXPECT_EQ(events[2]["args"]["bytes"], 4096);
  EXPECT_EQ(events[2]["args"]["op"], "dot");
  EXPECT_FALSE(events[3].contains("args"));
  EXPECT_EQ(trace.num_events(), 2);
}

TEST(TraceEventWriterTest, WriteFileReplacesTheFileWhole) {
  const std::string dir = ::testing::TempDir() + "/tessel_trace_events_test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/trace.json";
  { std::ofstream(path) << "an older, longer file that must not survive in part"; }
  TraceEventWriter trace;
  trace.AddProcess(0, "step");
  ASSERT_TRUE(trace.WriteFile(path).ok());
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["traceEvents"].size(), 1u);
  // Nothing but the trace is left in the folder (no temporary file).
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
  std::filesystem::remove_all(dir);
}

TEST(TraceEventWriterTest, WriteFileNamesAnUnwritablePath) {
  TraceEventWriter trace;
  absl::Status s = trace.WriteFile("/nonexistent-folder/trace.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("/nonexistent-folder/trace.json"));
}

}  // namespace
}  // namespace tessel
