#include "tools/html_view.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tessel/core/format.h"
#include "tessel/spmd/sharded_tensor.h"

namespace tessel::tools {
namespace {

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// "0-3" for a run of consecutive ids, "0,2,4" otherwise; "0-7" for all of eight.
std::string DeviceList(const std::vector<int64_t>& ids) {
  bool consecutive = ids.size() > 2;
  for (size_t i = 1; i < ids.size(); ++i) consecutive = consecutive && ids[i] == ids[i - 1] + 1;
  if (consecutive) return absl::StrCat(ids.front(), "-", ids.back());
  return absl::StrJoin(ids, ",");
}

constexpr char kStyle[] = R"(<style>
body{font-family:sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.sub{color:#555;margin-bottom:16px} .note{color:#555;font-size:12px}
.tensors{display:flex;flex-wrap:wrap;gap:16px}
.tensor{border:1px solid #ddd;padding:8px;max-width:370px}
.tensor .note{overflow-wrap:anywhere}
.tensor .name{font-family:monospace;font-size:12px;margin-bottom:4px;max-width:360px;
  overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ddd;padding:2px 6px;
  text-align:left} td.num{text-align:right;font-family:monospace}
</style>)";

// The mesh as a grid: rows are the raveled leading axes, columns the last axis.
std::string MeshSvg(const HtmlMesh& mesh) {
  const int64_t cols = mesh.shape.empty() ? 1 : mesh.shape.back();
  const int64_t n = static_cast<int64_t>(mesh.device_ids.size());
  const int64_t rows = cols > 0 ? (n + cols - 1) / cols : 0;
  const int cell = n > 256 ? 14 : 44;
  std::string svg =
      absl::StrFormat("<svg width=\"%d\" height=\"%d\">", cols * cell + 2, rows * cell + 2);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = mesh.device_ids[i];
    const int64_t x = (i % cols) * cell + 1, y = (i / cols) * cell + 1;
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
                          "stroke=\"#fff\" stroke-width=\"2\"><title>device %d</title></rect>",
                          x, y, cell, cell, DeviceColor(d), d);
    if (cell >= 30) {
      absl::StrAppendFormat(&svg,
                            "<text x=\"%d\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\" "
                            "dominant-baseline=\"middle\">%d</text>",
                            x + cell / 2, y + cell / 2, d);
    }
  }
  return svg + "</svg>";
}

// The two dims drawn: the first two split ones, else the last two (one or none for rank < 2).
std::vector<int64_t> DrawnDims(const Shape& shape, const spmd::ShardedTensor& tensor) {
  std::vector<int64_t> split;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    std::set<int64_t> starts;
    for (const spmd::Shard& s : tensor.shards()) starts.insert(s.index[d].first);
    if (starts.size() > 1) split.push_back(d);
  }
  std::vector<int64_t> dims = split;
  for (int64_t d = shape.rank() - 1; d >= 0 && dims.size() < 2; --d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
  }
  if (dims.size() > 2) dims.resize(2);
  std::sort(dims.begin(), dims.end());
  return dims;
}

struct Tile {
  std::vector<std::pair<int64_t, int64_t>> index;
  std::vector<int64_t> devices;
};

// One tensor as jax.debug.visualize_array_sharding draws it: a box per tile, in its holder's
// colour, labelled with the devices that hold it.
std::string TensorHtml(const HtmlTensor& t, int64_t num_devices) {
  std::string html = absl::StrCat("<div class=\"tensor\"><div class=\"name\">", Escape(t.name), " ",
                                  Escape(t.global_shape.ToString()), "</div>");
  absl::StatusOr<spmd::ShardedTensor> tensor =
      spmd::ShardedTensor::Create(t.global_shape, t.sharding, num_devices);
  if (!tensor.ok()) {
    return absl::StrCat(html, "<div class=\"note\">not drawn: ",
                        Escape(std::string(tensor.status().message())), "</div></div>");
  }
  const std::vector<int64_t> dims = DrawnDims(t.global_shape, *tensor);
  // Tiles at the start of every dim not drawn, merged over the devices holding the same data.
  std::map<std::vector<std::pair<int64_t, int64_t>>, std::vector<int64_t>> tiles;
  for (const spmd::Shard& s : tensor->shards()) {
    bool first_slice = true;
    for (int64_t d = 0; d < t.global_shape.rank(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
        first_slice = first_slice && s.index[d].first == 0;
      }
    }
    if (!first_slice) continue;
    std::vector<std::pair<int64_t, int64_t>> key;
    for (int64_t d : dims) key.push_back(s.index[d]);
    tiles[key].push_back(s.device_id);
  }
  const int64_t rows_extent = dims.size() == 2 ? t.global_shape.dim(dims[0]) : 1;
  const int64_t cols_extent = dims.empty() ? 1 : t.global_shape.dim(dims.back());
  // A box of at most 360 x 180 px keeping the aspect ratio within 1:4.
  double aspect = static_cast<double>(std::max<int64_t>(rows_extent, 1)) /
                  static_cast<double>(std::max<int64_t>(cols_extent, 1));
  aspect = std::clamp(aspect, 0.25, 1.0);
  const double width = 360, height = std::max(40.0, std::min(180.0, width * aspect));
  absl::StrAppendFormat(&html,
                        "<svg width=\"%d\" "
                        "height=\"%d\">",
                        static_cast<int>(width) + 2, static_cast<int>(height) + 2);
  for (const auto& [key, devices] : tiles) {
    const std::pair<int64_t, int64_t> row =
        dims.size() == 2 ? key[0] : std::pair<int64_t, int64_t>{0, 1};
    const std::pair<int64_t, int64_t> col =
        dims.empty() ? std::pair<int64_t, int64_t>{0, 1} : key.back();
    if (row.second <= row.first || col.second <= col.first) continue;  // padding only
    const double x = 1 + width * static_cast<double>(col.first) / static_cast<double>(cols_extent);
    const double w = width * static_cast<double>(col.second - col.first) / cols_extent;
    const double y = 1 + height * static_cast<double>(row.first) / static_cast<double>(rows_extent);
    const double h = height * static_cast<double>(row.second - row.first) / rows_extent;
    const std::string label = devices.size() == static_cast<size_t>(num_devices) && num_devices > 1
                                  ? "all"
                                  : DeviceList(devices);
    absl::StrAppendFormat(
        &html,
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"#fff\" "
        "stroke-width=\"2\"><title>devices %s</title></rect>",
        x, y, w, h, DeviceColor(devices.front()), DeviceList(devices));
    if (w >= 18 && h >= 14) {
      absl::StrAppendFormat(&html,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
                            "dominant-baseline=\"middle\">%s</text>",
                            x + w / 2, y + h / 2, Escape(label));
    }
  }
  html += "</svg>";
  std::string drawn = dims.empty() ? "scalar" : absl::StrCat("dims ", absl::StrJoin(dims, ","));
  if (t.global_shape.rank() > static_cast<int64_t>(dims.size()) && !dims.empty()) {
    absl::StrAppend(&drawn, " drawn (tiles at index 0 of the others)");
  }
  return absl::StrCat(html, "<div class=\"note\">", Escape(t.sharding.ToString()), "<br>", drawn,
                      t.note.empty() ? "" : absl::StrCat("<br>", Escape(t.note)), "</div></div>");
}

std::string Seconds(double s) {
  if (s >= 1) return absl::StrFormat("%.3f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.3f ms", s * 1e3);
  return absl::StrFormat("%.3f us", s * 1e6);
}

std::string StepHtml(const HtmlStep& step) {
  std::string html = "<h2>Simulated step</h2><svg ";
  const int bar_width = 420, row = 22;
  const int rows = static_cast<int>(step.bars.size()) + (step.hbm_bytes > 0 ? 1 : 0);
  absl::StrAppendFormat(&html, "width=\"%d\" height=\"%d\">", 140 + bar_width + 220, rows * row);
  int y = 0;
  auto bar = [&](const std::string& label, double fraction, const std::string& value,
                 const char* color) {
    fraction = std::clamp(fraction, 0.0, 1.0);
    absl::StrAppendFormat(&html,
                          "<text x=\"0\" y=\"%d\" font-size=\"12\">%s</text>"
                          "<rect x=\"140\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#eee\"/>"
                          "<rect x=\"140\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>"
                          "<text x=\"%d\" y=\"%d\" font-size=\"12\">%s</text>",
                          y + 15, Escape(label), y + 4, bar_width, row - 6, y + 4,
                          fraction * bar_width, row - 6, color, 140 + bar_width + 6, y + 15,
                          Escape(value));
    y += row;
  };
  for (const HtmlBar& b : step.bars) {
    bar(b.label, step.step_seconds > 0 ? b.seconds / step.step_seconds : 0, Seconds(b.seconds),
        "#4c72b0");
  }
  if (step.hbm_bytes > 0) {
    const double fraction =
        static_cast<double>(step.memory_bytes) / static_cast<double>(step.hbm_bytes);
    bar("memory / HBM", fraction,
        absl::StrFormat("%s of %s", FormatBytes(static_cast<double>(step.memory_bytes)),
                        FormatBytes(static_cast<double>(step.hbm_bytes))),
        fraction > 1 ? "#c44e52" : "#55a868");
  }
  html += "</svg><table>";
  for (const auto& [label, value] : step.facts) {
    absl::StrAppend(&html, "<tr><th>", Escape(label), "</th><td>", Escape(value), "</td></tr>");
  }
  html += "</table>";
  if (!step.table.empty()) {
    html += "<h2>Top ops</h2><table>";
    for (size_t r = 0; r < step.table.size(); ++r) {
      html += "<tr>";
      for (const std::string& cell : step.table[r]) {
        absl::StrAppend(&html, r == 0 ? "<th>" : "<td>", Escape(cell), r == 0 ? "</th>" : "</td>");
      }
      html += "</tr>";
    }
    html += "</table>";
  }
  return html;
}

}  // namespace

std::string DeviceColor(int64_t device_id) {
  static constexpr const char* kTab20[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                           "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
                                           "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"};
  if (device_id >= 0 && device_id < 20) return kTab20[device_id];
  // Golden-angle hues, HSL(h, 0.55, 0.6) converted to RGB.
  const double h = std::fmod(static_cast<double>(device_id) * 137.508, 360.0) / 60.0;
  const double c = (1 - std::fabs(2 * 0.6 - 1)) * 0.55;
  const double x = c * (1 - std::fabs(std::fmod(h, 2.0) - 1));
  const double m = 0.6 - c / 2;
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(h)) {
    case 0:
      r = c, g = x;
      break;
    case 1:
      r = x, g = c;
      break;
    case 2:
      g = c, b = x;
      break;
    case 3:
      g = x, b = c;
      break;
    case 4:
      r = x, b = c;
      break;
    default:
      r = c, b = x;
      break;
  }
  auto byte = [m](double v) { return static_cast<int>(std::lround((v + m) * 255)); };
  return absl::StrFormat("#%02x%02x%02x", byte(r), byte(g), byte(b));
}

std::string RenderHtmlPage(const HtmlPage& page) {
  std::string html =
      absl::StrCat("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>",
                   Escape(page.title), "</title>", kStyle, "</head><body><h1>", Escape(page.title),
                   "</h1><div class=\"sub\">", Escape(page.subtitle), "</div>");
  std::vector<std::string> axes;
  for (size_t a = 0; a < page.mesh.shape.size(); ++a) {
    axes.push_back(absl::StrCat(a < page.mesh.axis_names.size() ? page.mesh.axis_names[a] : "", "=",
                                page.mesh.shape[a]));
  }
  absl::StrAppend(&html, "<h2>Device mesh</h2><div class=\"note\">axes ",
                  Escape(absl::StrJoin(axes, ", ")),
                  "; rows: the leading axes, columns: the last</div>", MeshSvg(page.mesh));
  if (!page.tensors.empty()) {
    html +=
        "<h2>Tensors</h2><div class=\"note\">each tile in the colour of the first device "
        "that holds it, labelled with all that do</div><div class=\"tensors\">";
    for (const HtmlTensor& t : page.tensors) html += TensorHtml(t, page.num_devices);
    html += "</div>";
  }
  if (page.step.has_value()) html += StepHtml(*page.step);
  return html + "</body></html>\n";
}

absl::Status WriteHtmlPage(const HtmlPage& page, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("--html ", path, ": cannot open"));
  out << RenderHtmlPage(page);
  out.close();
  if (!out) return absl::InvalidArgumentError(absl::StrCat("--html ", path, ": cannot write"));
  return absl::OkStatus();
}

}  // namespace tessel::tools
