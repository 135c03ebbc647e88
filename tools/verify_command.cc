// `tessel verify HLO --num-partitions N [--seed S] [--rtol R] [--atol A] [--json]`: checks
// numerically that the partitioned module computes what the module computes, like XLA's
// `run_hlo_module` compares a test backend with a reference. Random inputs of the entry's
// parameter shapes (deterministic in --seed), one run of the module on one device, one run of
// `tessel partition`'s program on N in-process devices (threads, reference collectives), every
// output assembled from the devices' pieces by its sharding and compared with the single-device
// value (partitioner/verify.h: input ranges, start indices, the tolerance rule and its defaults
// per dtype; --rtol / --atol replace them for every output).
//
//   $ tessel verify tests/golden/partitioner/mlp_megatron.hlo --num-partitions 4
//   verify mlp_megatron: 4 devices against 1, seed 0
//   output  dtype  shape   local shape  max abs   max rel   rtol   atol   ok   sharding
//   0       f32    [8,16]  [4,16]       9.54e-07  3.87e-06  1e-05  1e-05  yes  {devices=[2,1,2]...
//   collectives per device (count, bytes of its results):
//     all-reduce: 1 (256 bytes)
//   verify: OK
//
// (the sharding, cut here, is {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}).
// A failing output adds a line with its count of bad elements and the first one's index, and
// the last line is `verify: MISMATCH in output K` (K the first failing output). --json prints one
// object instead: module, file, num_devices, seed, ok, first_mismatch (null when ok), outputs
// (index, dtype, shape, local_shape, sharding, max_abs_error, max_rel_error, rtol, atol, scale,
// mismatched_elements, first_mismatch_index, ok; a non-finite error is null) and collectives
// (kind -> count, bytes_per_device).
// Exit codes (tools/command.h): 0 every output matches; 1 a mismatch, or the file is missing,
// does not parse (an unsupported op is named), cannot be partitioned or fails to run (one line
// on stderr); 2 bad arguments.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tessel/core/command_line.h"
#include "tessel/core/hlo_text.h"
#include "tessel/partitioner/verify.h"
#include "tools/command.h"
#include "tools/flag_parsing.h"

namespace tessel::tools {
namespace {

struct VerifyFlags {
  std::string path;
  int64_t num_partitions = 0;
  uint64_t seed = 0;
  double rtol = -1;  // < 0: the default of each output's dtype
  double atol = -1;
  double timeout_s = 600;  // each run's bound (VerifyOptions::run_timeout)
  bool json = false;
};

std::string Dims(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape.dims(), ","), "]");
}

std::string Number(double value) { return absl::StrFormat("%.3g", value); }

// The multi-index of row-major element `linear` of `shape`.
std::vector<int64_t> MultiIndex(const Shape& shape, int64_t linear) {
  std::vector<int64_t> index(shape.rank());
  for (int64_t d = shape.rank() - 1; d >= 0; --d) {
    index[d] = shape.dim(d) == 0 ? 0 : linear % shape.dim(d);
    linear = shape.dim(d) == 0 ? 0 : linear / shape.dim(d);
  }
  return index;
}

// Rows of cells, columns padded to their widest cell (the last one left ragged).
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += c + 1 == row.size() ? row[c] : absl::StrFormat("%-*s  ", widths[c], row[c]);
    }
    std::cout << line << "\n";
  }
}

void PrintReport(const VerifyFlags& flags, const Graph& graph,
                 const partitioner::VerifyReport& report) {
  std::cout << "verify " << graph.name() << ": " << report.num_devices
            << " devices against 1, seed " << flags.seed << "\n";
  std::vector<std::vector<std::string>> rows = {{"output", "dtype", "shape", "local shape",
                                                 "max abs", "max rel", "rtol", "atol", "ok",
                                                 "sharding"}};
  for (const partitioner::OutputCheck& o : report.outputs) {
    rows.push_back({absl::StrCat(o.index), DTypeName(o.global_shape.dtype()), Dims(o.global_shape),
                    Dims(o.local_shape), Number(o.max_abs_error), Number(o.max_rel_error),
                    Number(o.tolerance.rtol), Number(o.tolerance.atol), o.ok ? "yes" : "NO",
                    o.sharding.ToString()});
  }
  PrintTable(rows);
  for (const partitioner::OutputCheck& o : report.outputs) {
    if (o.ok) continue;
    std::cout << "output " << o.index << ": " << o.mismatched_elements << " of "
              << o.global_shape.num_elements() << " elements outside |got - expected| <= atol * "
              << Number(o.scale) << " + rtol * |expected|; the first at ["
              << absl::StrJoin(MultiIndex(o.global_shape, o.first_mismatch_element), ",") << "]\n";
  }
  std::cout << "collectives per device (count, bytes of its results):\n";
  if (report.collectives.empty()) std::cout << "  none\n";
  for (const auto& [kind, c] : report.collectives) {
    std::cout << "  " << kind << ": " << c.count << " (" << c.result_bytes << " bytes)\n";
  }
  std::optional<int64_t> mismatch = report.first_mismatch();
  if (mismatch.has_value()) {
    std::cout << "verify: MISMATCH in output " << *mismatch << "\n";
  } else {
    std::cout << "verify: OK\n";
  }
}

nlohmann::json ReportJson(const VerifyFlags& flags, const Graph& graph,
                          const partitioner::VerifyReport& report) {
  nlohmann::json outputs = nlohmann::json::array();
  for (const partitioner::OutputCheck& o : report.outputs) {
    nlohmann::json first = nullptr;
    if (o.first_mismatch_element >= 0) first = MultiIndex(o.global_shape, o.first_mismatch_element);
    // nlohmann writes a non-finite double as null.
    outputs.push_back({{"index", o.index},
                       {"dtype", DTypeName(o.global_shape.dtype())},
                       {"shape", o.global_shape.dims()},
                       {"local_shape", o.local_shape.dims()},
                       {"sharding", o.sharding.ToString()},
                       {"max_abs_error", o.max_abs_error},
                       {"max_rel_error", o.max_rel_error},
                       {"rtol", o.tolerance.rtol},
                       {"atol", o.tolerance.atol},
                       {"scale", o.scale},
                       {"mismatched_elements", o.mismatched_elements},
                       {"first_mismatch_index", first},
                       {"ok", o.ok}});
  }
  nlohmann::json collectives = nlohmann::json::object();
  for (const auto& [kind, c] : report.collectives) {
    collectives[kind] = {{"count", c.count}, {"bytes_per_device", c.result_bytes}};
  }
  std::optional<int64_t> mismatch = report.first_mismatch();
  return {{"module", graph.name()},
          {"file", flags.path},
          {"num_devices", report.num_devices},
          {"seed", flags.seed},
          {"ok", report.ok()},
          {"first_mismatch", mismatch.has_value() ? nlohmann::json(*mismatch) : nullptr},
          {"outputs", outputs},
          {"collectives", collectives}};
}

int Run(const VerifyFlags& flags) {
  auto fail = [](const absl::Status& status) {
    std::cerr << "tessel verify: " << status.message() << "\n";
    return 1;
  };
  absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloFile(flags.path);
  if (!graph.ok()) return fail(graph.status());
  partitioner::VerifyOptions options;
  options.seed = flags.seed;
  if (flags.rtol >= 0) options.rtol = flags.rtol;
  if (flags.atol >= 0) options.atol = flags.atol;
  options.run_timeout = std::chrono::milliseconds(std::llround(flags.timeout_s * 1000));
  absl::StatusOr<partitioner::VerifyReport> report =
      partitioner::VerifyPartitioning(**graph, flags.num_partitions, options);
  if (!report.ok()) return fail(WithHloLine(flags.path, report.status()));
  if (flags.json) {
    std::cout << ReportJson(flags, **graph, *report).dump(2) << "\n";
  } else {
    PrintReport(flags, **graph, *report);
  }
  return report->ok() ? 0 : 1;
}

}  // namespace

CommandFn AddVerifyCommand(CLI::App& app) {
  auto flags = std::make_shared<VerifyFlags>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Compare the partitioned module with the unpartitioned one on random inputs");
  cmd->add_option("HLO", flags->path, "HLO text file with sharding annotations")->required();
  cmd->add_option("--num-partitions", flags->num_partitions, "number of devices")
      ->required()
      ->check(Positive());
  cmd->add_option("--seed", flags->seed, "seed of the random inputs (default 0)")
      ->check(NonNegative());
  cmd->add_option("--rtol", flags->rtol, "relative tolerance for every output (default per dtype)")
      ->check(NonNegative());
  cmd->add_option("--atol", flags->atol,
                  "absolute tolerance, in units of max(1, max |expected|), for every output "
                  "(default per dtype)")
      ->check(NonNegative());
  cmd->add_option("--timeout-s", flags->timeout_s,
                  "bound on each run, the reference and the partitioned one, in seconds: a while "
                  "loop still running then fails (default 600)")
      ->check(Positive())
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_flag("--json", flags->json, "print one JSON object");
  return [flags]() { return Run(*flags); };
}

}  // namespace tessel::tools
