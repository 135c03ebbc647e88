// The `--html` views of `tessel shard` and `tessel simulate`: one self-contained HTML page (inline
// CSS and SVG, no script, nothing fetched) that shows the device mesh, each tensor's tiles
// coloured by the device that holds them (as jax.debug.visualize_array_sharding draws one array,
// here for a whole program), and, for a simulation, the step's time and memory breakdown.
//
//   HtmlPage page;
//   page.title = "tessel shard";
//   page.mesh = {{"x", "y"}, {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}};
//   page.tensors.push_back({"f32[8,10]", Shape(DType::kF32, {8, 10}), *sharding, ""});
//   TESSEL_RETURN_IF_ERROR(WriteHtmlPage(page, "out.html"));
//
// Device d is drawn in DeviceColor(d) everywhere on the page (mesh cell, tiles), so a tile's
// colour says where it lives. Tensors of rank > 2 are drawn on two of their dims (the first two
// split ones, else the last two); the others are named under the drawing, and the tiles drawn are
// those at the start of the dims not drawn.
// Source: jax.debug.visualize_array_sharding (jax/_src/debugging.py) for the tile view.
#ifndef TESSEL_TOOLS_HTML_VIEW_H_
#define TESSEL_TOOLS_HTML_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tessel/core/shape.h"
#include "tessel/spmd/sharding.h"

namespace tessel::tools {

// The logical device mesh: axis names and sizes, and the device ids raveled row-major.
struct HtmlMesh {
  std::vector<std::string> axis_names;
  std::vector<int64_t> shape;
  std::vector<int64_t> device_ids;
};

// One tensor: its name, global (unpartitioned) shape and sharding; `note` is shown under it.
struct HtmlTensor {
  std::string name;
  Shape global_shape;
  spmd::Sharding sharding;
  std::string note;
};

// One bar of the step breakdown: a label and a duration in seconds.
struct HtmlBar {
  std::string label;
  double seconds = 0;
};

// The simulated step: bars drawn against `step_seconds`, memory against HBM, facts as
// label/value lines and a table (first row the header).
struct HtmlStep {
  double step_seconds = 0;
  std::vector<HtmlBar> bars;
  int64_t memory_bytes = 0;  // per device
  int64_t hbm_bytes = 0;     // per device; 0 when unknown
  std::vector<std::pair<std::string, std::string>> facts;
  std::vector<std::vector<std::string>> table;
};

struct HtmlPage {
  std::string title;
  std::string subtitle;
  HtmlMesh mesh;
  int64_t num_devices = 0;  // device ids of the shardings are < num_devices
  std::vector<HtmlTensor> tensors;
  std::optional<HtmlStep> step;
};

// The colour of device `device_id` as "#rrggbb": the 20 colours of matplotlib's tab20 palette
// (tab10's first) for ids 0..19, then golden-angle hues. Precondition: device_id >= 0.
std::string DeviceColor(int64_t device_id);

// The page as HTML text. A tensor whose sharding does not fit its shape or the device count is
// drawn as a line naming the problem, not an error.
std::string RenderHtmlPage(const HtmlPage& page);

// Writes RenderHtmlPage(page) to `path`. Errors: kInvalidArgument naming the path when it cannot
// be written.
[[nodiscard]] absl::Status WriteHtmlPage(const HtmlPage& page, const std::string& path);

}  // namespace tessel::tools

#endif  // TESSEL_TOOLS_HTML_VIEW_H_
