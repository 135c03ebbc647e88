// The --html page (tools/html_view.h): colours per device, tiles per sharding, escaping, and
// the self-containment the page promises. Rendering it in a browser is tests/cli/html.test.
#include "tools/html_view.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/spmd/sharding.h"

namespace tessel::tools {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

int Count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

HtmlPage MeshPage() {
  HtmlPage page;
  page.title = "t";
  page.mesh = {{"x", "y"}, {2, 2}, {0, 1, 2, 3}};
  page.num_devices = 4;
  return page;
}

TEST(HtmlViewTest, DeviceColorsAreTab20ThenDistinctHues) {
  EXPECT_EQ(DeviceColor(0), "#1f77b4");
  EXPECT_EQ(DeviceColor(1), "#ff7f0e");
  EXPECT_EQ(DeviceColor(19), "#9edae5");
  std::set<std::string> seen;
  for (int64_t d = 0; d < 64; ++d) {
    const std::string color = DeviceColor(d);
    ASSERT_EQ(color.size(), 7u) << d;
    EXPECT_EQ(color[0], '#');
    seen.insert(color);
  }
  EXPECT_EQ(seen.size(), 64u);
}

TEST(HtmlViewTest, TiledTensorHasOneTilePerDeviceInItsColour) {
  HtmlPage page = MeshPage();
  page.tensors.push_back(
      {"w", Shape(DType::kF32, {4, 6}), *spmd::ParseSharding("{devices=[2,2]0,1,2,3}"), ""});
  const std::string html = RenderHtmlPage(page);
  for (int64_t d = 0; d < 4; ++d) {
    // The mesh cell and the tile of device d.
    EXPECT_EQ(Count(html, "fill=\"" + DeviceColor(d) + "\""), 2) << d;
  }
  EXPECT_THAT(html, HasSubstr("axes x=2, y=2"));
  EXPECT_THAT(html, HasSubstr("{devices=[2,2]0,1,2,3}"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("http")));
}

TEST(HtmlViewTest, ReplicatedTensorIsOneTileHeldByAll) {
  HtmlPage page = MeshPage();
  page.tensors.push_back({"b", Shape(DType::kF32, {6}), spmd::Sharding::Replicate(), ""});
  const std::string html = RenderHtmlPage(page);
  EXPECT_THAT(html, HasSubstr("<title>devices 0-3</title>"));
  EXPECT_THAT(html, HasSubstr(">all</text>"));
}

TEST(HtmlViewTest, RankThreeIsDrawnOnItsSplitDims) {
  HtmlPage page = MeshPage();
  page.tensors.push_back(
      {"a", Shape(DType::kF32, {3, 8, 8}), *spmd::ParseSharding("{devices=[1,2,2]0,1,2,3}"), ""});
  const std::string html = RenderHtmlPage(page);
  EXPECT_THAT(html, HasSubstr("dims 1,2 drawn (tiles at index 0 of the others)"));
}

TEST(HtmlViewTest, NamesAreEscapedAndBadShardingsAreNotes) {
  HtmlPage page = MeshPage();
  page.tensors.push_back({"<x&y>", Shape(DType::kF32, {4}),
                          *spmd::ParseSharding("{devices=[8]0,1,2,3,4,5,6,7}"), "a \"note\""});
  const std::string html = RenderHtmlPage(page);
  EXPECT_THAT(html, HasSubstr("&lt;x&amp;y&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("<x&y>")));
  EXPECT_THAT(html, HasSubstr("not drawn: "));
}

TEST(HtmlViewTest, StepBreakdownHasBarsFactsAndTable) {
  HtmlPage page = MeshPage();
  HtmlStep step;
  step.step_seconds = 2e-3;
  step.bars = {{"step", 2e-3}, {"compute", 1.5e-3}};
  step.memory_bytes = 3 << 20;
  step.hbm_bytes = 1 << 20;  // does not fit: the bar turns red
  step.facts = {{"MFU", "12.0 %"}};
  step.table = {{"time", "opcode"}, {"1.000 ms", "dot"}};
  page.step = step;
  const std::string html = RenderHtmlPage(page);
  EXPECT_THAT(html, HasSubstr(">compute</text>"));
  EXPECT_THAT(html, HasSubstr("1.500 ms"));
  EXPECT_THAT(html, HasSubstr("fill=\"#c44e52\""));
  EXPECT_THAT(html, HasSubstr("<th>MFU</th><td>12.0 %</td>"));
  EXPECT_THAT(html, HasSubstr("<td>dot</td>"));
}

TEST(HtmlViewTest, UnwritablePathIsInvalidArgument) {
  absl::Status status = WriteHtmlPage(MeshPage(), "/nonexistent-folder/x.html");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("/nonexistent-folder/x.html"));
}

}  // namespace
}  // namespace tessel::tools
