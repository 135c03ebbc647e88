// `tessel topology CONFIG [--json]`: validates a topology JSON file (docs/topology.md) and
// prints a summary: slices with their shapes and wraparound, hosts, devices per host, the
// device spec, ICI and DCN links, total peak FLOP/s per dtype and total HBM.
//
//   $ tessel topology configs/v4-8.json
//   $ tessel topology configs/v5p-128.json --json | jq .total_peak_tflops
//
// Exit codes (tools/command.h): 0 valid; 1 the file is missing or does not validate (one line
// on stderr: `tessel topology: <error>`); 2 bad arguments.
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tessel/core/format.h"
#include "tessel/mesh/topology/topology.h"
#include "tools/command.h"

namespace tessel::tools {
namespace {

using json = nlohmann::json;

struct TopologyOptions {
  std::string config_path;
  bool json_output = false;
};

// Hosts listed one per line in the text summary; larger topologies print the first ones only.
constexpr int64_t kMaxHostsListed = 16;

// "2x2x1" for shape {2, 2, 1}.
std::string FormatShape(const std::vector<int64_t>& shape) { return absl::StrJoin(shape, "x"); }

// A number without trailing zeros: 275, 137.5, 0.25.
std::string FormatNumber(double value) { return absl::StrFormat("%.6g", value); }

// 10^12 op/s as TFLOP/s, PFLOP/s or EFLOP/s, whichever keeps the number readable.
std::string FormatTflops(double tflops) {
  if (tflops >= 1e6) return absl::StrCat(FormatNumber(tflops / 1e6), " EFLOP/s");
  if (tflops >= 1e3) return absl::StrCat(FormatNumber(tflops / 1e3), " PFLOP/s");
  return absl::StrCat(FormatNumber(tflops), " TFLOP/s");
}

// Bytes in binary units with the exact count: "32.00 GiB (34359738368 bytes)".
std::string FormatBytesExactly(int64_t bytes) {
  return absl::StrCat(FormatBytes(static_cast<double>(bytes)), " (", bytes, " bytes)");
}

std::string FormatPeaks(const std::map<std::string, double>& peaks) {
  std::vector<std::string> parts;
  for (const auto& [dtype, tflops] : peaks)
    parts.push_back(absl::StrCat(dtype, " ", FormatTflops(tflops)));
  return absl::StrJoin(parts, ", ");
}

// "0-3" for consecutive ids, else "0,2,5".
std::string FormatIds(const std::vector<int64_t>& ids) {
  if (ids.empty()) return "none";
  bool consecutive = true;
  for (size_t i = 1; i < ids.size(); ++i) consecutive &= ids[i] == ids[i - 1] + 1;
  if (consecutive && ids.size() > 2) return absl::StrCat(ids.front(), "-", ids.back());
  return absl::StrJoin(ids, ",");
}

void PrintText(const std::string& path, const mesh::Topology& topology) {
  std::cout << "topology: " << (topology.name().empty() ? "(unnamed)" : topology.name()) << " ("
            << path << ")\n";
  if (!topology.description().empty()) std::cout << "  " << topology.description() << "\n";
  std::cout << "slices: " << topology.num_slices() << ", hosts: " << topology.num_hosts()
            << ", devices: " << topology.num_devices() << "\n";

  const mesh::DeviceSpec& spec = topology.device_spec();
  std::cout << "device: " << (spec.name.empty() ? "(unnamed)" : spec.name) << ": peak "
            << FormatPeaks(spec.peak_tflops) << "; HBM " << FormatBytesExactly(spec.hbm_bytes)
            << " at " << FormatNumber(spec.hbm_bandwidth_gbytes_per_s) << " GB/s\n";
  const mesh::IciSpec& ici = topology.ici();
  std::cout << "ici: " << mesh::IciKindName(ici.kind) << ", " << FormatNumber(ici.bandwidth_gbps)
            << (ici.kind == mesh::IciKind::kTorus ? " Gbps per link per direction"
                                                  : " Gbps per device port per direction")
            << ", latency " << FormatNumber(ici.latency_us) << " us\n";
  if (topology.dcn().has_value()) {
    std::cout << "dcn: " << FormatNumber(topology.dcn()->bandwidth_gbps)
              << " Gbps per host per direction, latency "
              << FormatNumber(topology.dcn()->latency_us) << " us\n";
  } else {
    std::cout << "dcn: none (single slice)\n";
  }

  for (const mesh::Slice& slice : topology.slices()) {
    std::vector<std::string> wrap;
    for (bool w : slice.wraparound) wrap.push_back(w ? "yes" : "no");
    std::cout << "slice " << slice.index << ": shape " << FormatShape(slice.shape)
              << ", wraparound [" << absl::StrJoin(wrap, ",") << "], " << slice.num_hosts
              << (slice.num_hosts == 1 ? " host" : " hosts") << " x " << slice.devices_per_host
              << (slice.devices_per_host == 1 ? " device" : " devices");
    if (!slice.host_shape.empty())
      std::cout << " (host block " << FormatShape(slice.host_shape) << ")";
    int64_t links = topology.NumIciLinks(slice.index);
    std::cout << ", " << links
              << (ici.kind == mesh::IciKind::kTorus ? " ICI links" : " switch ports")
              << ", devices " << FormatIds(slice.device_ids) << "\n";
  }
  std::cout << "hosts:\n";
  for (const mesh::Host& host : topology.hosts()) {
    if (host.index >= kMaxHostsListed) {
      std::cout << "  ... " << topology.num_hosts() - kMaxHostsListed << " more\n";
      break;
    }
    std::cout << "  host " << host.index << ": slice " << host.slice << ", devices "
              << FormatIds(host.device_ids) << "\n";
  }
  std::cout << "total: " << topology.num_devices() << " devices, peak "
            << FormatPeaks(topology.TotalPeakTflops()) << "; HBM "
            << FormatBytesExactly(topology.TotalHbmBytes()) << "\n";
  if (!topology.sources().empty()) {
    std::cout << "sources:\n";
    for (const std::string& source : topology.sources()) std::cout << "  - " << source << "\n";
  }
}

json ToJson(const std::string& path, const mesh::Topology& topology) {
  const mesh::DeviceSpec& spec = topology.device_spec();
  json out = {{"config", path},
              {"name", topology.name()},
              {"description", topology.description()},
              {"num_slices", topology.num_slices()},
              {"num_hosts", topology.num_hosts()},
              {"num_devices", topology.num_devices()},
              {"device_spec",
               {{"name", spec.name},
                {"peak_tflops", spec.peak_tflops},
                {"hbm_bytes", spec.hbm_bytes},
                {"hbm_bandwidth_gbytes_per_s", spec.hbm_bandwidth_gbytes_per_s}}},
              {"ici",
               {{"kind", std::string(mesh::IciKindName(topology.ici().kind))},
                {"bandwidth_gbps", topology.ici().bandwidth_gbps},
                {"latency_us", topology.ici().latency_us}}},
              {"dcn", nullptr},
              {"slices", json::array()},
              {"hosts", json::array()},
              {"total_peak_tflops", topology.TotalPeakTflops()},
              {"total_hbm_bytes", topology.TotalHbmBytes()},
              {"sources", topology.sources()}};
  if (topology.dcn().has_value()) {
    out["dcn"] = {{"bandwidth_gbps", topology.dcn()->bandwidth_gbps},
                  {"latency_us", topology.dcn()->latency_us}};
  }
  for (const mesh::Slice& slice : topology.slices()) {
    out["slices"].push_back({{"index", slice.index},
                             {"shape", slice.shape},
                             {"wraparound", slice.wraparound},
                             {"num_hosts", slice.num_hosts},
                             {"devices_per_host", slice.devices_per_host},
                             {"host_shape", slice.host_shape},
                             {"num_devices", slice.num_devices()},
                             {"num_ici_links", topology.NumIciLinks(slice.index)},
                             {"host_indices", slice.host_indices},
                             {"device_ids", slice.device_ids}});
  }
  for (const mesh::Host& host : topology.hosts()) {
    out["hosts"].push_back({{"index", host.index},
                            {"slice", host.slice},
                            {"index_in_slice", host.index_in_slice},
                            {"num_devices", host.num_devices()},
                            {"device_ids", host.device_ids}});
  }
  return out;
}

int RunTopology(const TopologyOptions& options) {
  absl::StatusOr<mesh::Topology> topology = mesh::LoadTopology(options.config_path);
  if (!topology.ok()) {
    std::cerr << "tessel topology: " << topology.status().message() << "\n";
    return 1;
  }
  if (options.json_output) {
    std::cout << ToJson(options.config_path, *topology)
                     .dump(2, ' ', false, json::error_handler_t::replace)
              << "\n";
  } else {
    PrintText(options.config_path, *topology);
  }
  return 0;
}

}  // namespace

CommandFn AddTopologyCommand(CLI::App& app) {
  auto options = std::make_shared<TopologyOptions>();
  CLI::App* command = app.add_subcommand(
      "topology", "Validate a topology JSON file (docs/topology.md) and summarise it");
  command->add_option("CONFIG", options->config_path, "topology JSON file, e.g. configs/v4-8.json")
      ->required();
  command->add_flag("--json", options->json_output,
                    "print one JSON object (keys carry their units) instead of text");
  return [options]() { return RunTopology(*options); };
}

}  // namespace tessel::tools
