// `tessel propagate HLO [--num-partitions N] [--json] [--explain]`: prints the module with every
// instruction's propagated sharding. --json prints one object: {"module", "num_partitions",
// "values": [{"name", "opcode", "shape", "sharding"}, ...] (the entry computation's
// instructions in order; "sharding" null when none), "hlo": the module text}. `--explain` prints
// instead, per instruction of the entry computation, its sharding and the rule chain that
// produced it (partitioner::FormatShardingExplanation), with the input's line numbers.
// `tessel partition HLO [--num-partitions N] [--topology CONFIG] [--stats] [--json] [--explain]`:
// prints the per-device (SPMD) program as HLO text: local shapes, all-reduce / all-gather /
// collective-permute with replica groups in global device ids. `--stats` prints the number and
// bytes of collectives per kind. `--explain` prints instead why: each value's sharding and its rule
// chain, each dot's strategy against the candidates it beat (seconds), and each collective with
// the value it moves, the reason and its cost (partitioner::FormatPartitionExplanation).
// `--topology` costs the partitioner's choices on that machine's
// links (mesh/cost); without it, on partitioner::DefaultCostModel. With a topology and no
// --num-partitions, the device count is the topology's. --json prints one object: {"module",
// "num_partitions", "hlo", "collectives": {KIND: {"count", "bytes_per_device"}}, "loops":
// [{"loop", "trip_count" (null when unknown), "per_iteration": {KIND: ...}}], "executed":
// {"collectives": {KIND: ...}, "unknown_trip_count"}} (docs/cli.md); with --explain too, the object
// also has "explanation": {"values" (each with its rule chain), "dots" (each dot's candidates and
// their seconds), "collectives" (each with its instruction, reason, bytes and seconds)}.
//
//   $ tessel partition tests/golden/partitioner/mlp_megatron.hlo --num-partitions 4 --stats
//
// The input is HLO text with sharding={...} attributes, as XLA and JAX dump it (docs/hlo.md).
// When --num-partitions is omitted it is the largest device id in the module's shardings + 1.
// Exit codes (tools/command.h): 0 success; 1 the file is missing, does not parse or cannot be
// partitioned (one line on stderr); 2 bad arguments.
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tessel/core/command_line.h"
#include "tessel/core/hlo_text.h"
#include "tessel/mesh/cost/cost_model.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/propagation.h"
#include "tessel/spmd/sharding.h"
#include "tools/command.h"
#include "tools/flag_parsing.h"

namespace tessel::tools {
namespace {

struct PartitionOptions {
  std::string path;
  int64_t num_partitions = 0;
  std::string topology;
  bool stats = false;
  bool json = false;
  bool explain = false;
};

using json = nlohmann::ordered_json;

int Fail(const std::string& command, const absl::Status& status) {
  std::cerr << "tessel " << command << ": " << status.message() << "\n";
  return 1;
}

}  // namespace

namespace {

// The entry computation's instructions with their shardings: one entry per value, so that
// per-value fields have a place to go. With `explanation` (--explain), each value also gets
// "explanation": its steps, each {"step": the text --explain prints, "sharding", "phase",
// "round"}.
// One value of the entry computation: {"name", "opcode", "shape", "sharding" (null when
// empty)}, plus "explanation" when `steps` is given.
json ValueJson(const Node& node, const std::string& sharding,
               const std::vector<partitioner::ShardingStep>* steps,
               const absl::flat_hash_map<std::string, int>& line_of) {
  json value = {{"name", node.name()},
                {"opcode", OpcodeName(node.opcode())},
                {"shape", node.shape().ToString()},
                {"sharding", sharding.empty() ? json(nullptr) : json(sharding)}};
  if (steps != nullptr) {
    json out = json::array();
    for (const partitioner::ShardingStep& step : *steps) {
      out.push_back({{"step", partitioner::DescribeShardingStep(node, step, line_of)},
                     {"sharding", step.sharding.ToString()},
                     {"phase", step.phase},
                     {"round", step.round}});
    }
    value["explanation"] = std::move(out);
  }
  return value;
}

json PropagateJson(const Graph& graph, int64_t num_partitions,
                   const partitioner::ShardingExplanation* explanation,
                   const absl::flat_hash_map<std::string, int>& line_of) {
  json values = json::array();
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    const Node* node = graph.nodes()[i];
    values.push_back(ValueJson(*node, node->sharding(),
                               explanation != nullptr ? &explanation->steps[i] : nullptr, line_of));
  }
  return {{"module", graph.name()},
          {"num_partitions", num_partitions},
          {"values", values},
          {"hlo", PrintHloModule(graph)}};
}

}  // namespace

CommandFn AddPropagateCommand(CLI::App& app) {
  auto options = std::make_shared<PartitionOptions>();
  CLI::App* cmd = app.add_subcommand("propagate", "Print the module with propagated shardings");
  cmd->add_option("HLO", options->path, "HLO text file with sharding annotations")->required();
  cmd->add_option("--num-partitions", options->num_partitions, "number of devices")
      ->check(Positive());
  cmd->add_flag("--json", options->json, "print one JSON object (docs/cli.md)");
  cmd->add_flag("--explain", options->explain,
                "print each value's sharding and the rules that produced it");
  return [options]() {
    absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloFile(options->path);
    if (!graph.ok()) return Fail("propagate", graph.status());
    int64_t n = options->num_partitions > 0 ? options->num_partitions
                                            : partitioner::InferNumPartitions(**graph);
    if (options->explain && !options->json) {
      partitioner::ShardingExplanation explanation;
      absl::StatusOr<std::vector<spmd::Sharding>> shardings =
          partitioner::ComputeShardings(**graph, n, &explanation);
      if (!shardings.ok()) return Fail("propagate", WithHloLine(options->path, shardings.status()));
      std::cout << "// why each sharding (" << n << " devices):\n"
                << partitioner::FormatShardingExplanation(**graph, *shardings, explanation,
                                                          EntryLines(options->path));
      return 0;
    }
    partitioner::ShardingExplanation explanation;
    absl::Status status =
        partitioner::PropagateShardings(**graph, n, options->explain ? &explanation : nullptr);
    if (!status.ok()) return Fail("propagate", WithHloLine(options->path, status));
    if (options->json) {
      std::cout << PropagateJson(**graph, n, options->explain ? &explanation : nullptr,
                                 options->explain ? EntryLines(options->path)
                                                  : absl::flat_hash_map<std::string, int>())
                       .dump(2)
                << "\n";
      return 0;
    }
    std::cout << PrintHloModule(**graph);
    return 0;
  };
}

namespace {

// "//   all-gather: 2 (4096 bytes)" per kind, or "//   none".
void PrintCounts(const std::map<std::string, partitioner::CollectiveCount>& counts) {
  if (counts.empty()) std::cout << "//   none\n";
  for (const auto& [kind, c] : counts) {
    std::cout << "//   " << kind << ": " << c.count << " (" << c.result_bytes << " bytes)\n";
  }
}

json CountsJson(const std::map<std::string, partitioner::CollectiveCount>& counts) {
  json out = json::object();
  for (const auto& [kind, c] : counts) {
    out[kind] = {{"count", c.count}, {"bytes_per_device", c.result_bytes}};
  }
  return out;
}

json PartitionJson(const Graph& global, const Graph& program, int64_t num_partitions) {
  json loops = json::array();
  for (const partitioner::LoopCollectives& loop : partitioner::ListLoopCollectives(program)) {
    loops.push_back(
        {{"loop", loop.loop},
         {"trip_count", loop.trip_count.has_value() ? json(*loop.trip_count) : json(nullptr)},
         {"per_iteration", CountsJson(loop.per_iteration)}});
  }
  const partitioner::ExecutedCollectives executed = partitioner::CountExecutedCollectives(program);
  return {{"module", global.name()},
          {"num_partitions", num_partitions},
          {"hlo", PrintHloModule(program)},
          {"collectives", CountsJson(partitioner::CountCollectives(program))},
          {"loops", loops},
          {"executed",
           {{"collectives", CountsJson(executed.counts)},
            {"unknown_trip_count", executed.unknown_trip_count}}}};
}

// `partition --explain --json`: the "explanation" object. "values": the entry's values with their
// propagated shardings and rule chains (as `propagate --explain --json`); "dots": each dot's
// strategy, {"computation", "instruction", "chosen", "candidates": [{"name", "space",
// "seconds"}]} in the order the dot rule weighed them; "collectives": each collective of the
// program with the instruction that emitted it and why, {"computation", "name", "kind",
// "instruction", "opcode", "reason", "bytes", "seconds"}.
json ExplanationJson(const Graph& graph, const std::vector<spmd::Sharding>& shardings,
                     const partitioner::PartitionExplanation& explanation,
                     const absl::flat_hash_map<std::string, int>& line_of) {
  json values = json::array();
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    const bool known = i < static_cast<int64_t>(shardings.size());
    const bool explained = i < static_cast<int64_t>(explanation.propagation.steps.size());
    values.push_back(ValueJson(*graph.nodes()[i], known ? shardings[i].ToString() : std::string(),
                               explained ? &explanation.propagation.steps[i] : nullptr, line_of));
  }
  json dots = json::array();
  for (const partitioner::PartitionExplanation::DotChoice& dot : explanation.dots) {
    json candidates = json::array();
    for (size_t i = 0; i < dot.candidates.size(); ++i) {
      candidates.push_back({{"name", dot.candidates[i]},
                            {"space", dot.spaces[i].ToString()},
                            {"seconds", dot.seconds[i]}});
    }
    dots.push_back({{"computation", dot.computation},
                    {"instruction", dot.instruction},
                    {"chosen", dot.candidates[dot.chosen]},
                    {"candidates", std::move(candidates)}});
  }
  json collectives = json::array();
  for (const partitioner::PartitionExplanation::Collective& c : explanation.collectives) {
    collectives.push_back({{"computation", c.computation},
                           {"name", c.name},
                           {"kind", c.kind},
                           {"instruction", c.instruction},
                           {"opcode", c.opcode},
                           {"reason", c.reason},
                           {"bytes", c.bytes},
                           {"seconds", c.seconds}});
  }
  return {{"values", std::move(values)},
          {"dots", std::move(dots)},
          {"collectives", std::move(collectives)}};
}

}  // namespace

CommandFn AddPartitionCommand(CLI::App& app) {
  auto options = std::make_shared<PartitionOptions>();
  CLI::App* cmd = app.add_subcommand("partition", "Print the per-device SPMD program");
  cmd->add_option("HLO", options->path, "HLO text file with sharding annotations")->required();
  cmd->add_option("--num-partitions", options->num_partitions, "number of devices")
      ->check(Positive());
  cmd->add_option("--topology", options->topology,
                  "topology JSON (configs/) whose links cost the partitioner's choices");
  cmd->add_flag("--stats", options->stats, "print collective counts and bytes per kind");
  cmd->add_flag("--json", options->json,
                "print one JSON object: the program and its collectives (docs/cli.md)");
  cmd->add_flag(
      "--explain", options->explain,
      "print why: each sharding's rules, each dot's strategy and each collective's reason");
  return [options]() {
    absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloFile(options->path);
    if (!graph.ok()) return Fail("partition", graph.status());
    std::optional<mesh::CostModel> cost;
    if (!options->topology.empty()) {
      absl::StatusOr<mesh::Topology> topology = mesh::LoadTopology(options->topology);
      if (!topology.ok()) return Fail("partition", topology.status());
      absl::StatusOr<mesh::CostModel> model = mesh::CostModel::Create(*topology);
      if (!model.ok()) return Fail("partition", model.status());
      cost = *std::move(model);
    }
    int64_t n = options->num_partitions > 0 ? options->num_partitions
                : cost.has_value()          ? cost->topology().num_devices()
                                            : partitioner::InferNumPartitions(**graph);
    partitioner::PartitionOptions partition_options;
    if (cost.has_value()) partition_options.cost_model = &*cost;
    partitioner::PartitionExplanation explanation;
    std::vector<spmd::Sharding> shardings;
    if (options->explain) {
      partition_options.explain = &explanation;
      partition_options.shardings = &shardings;
    }
    absl::StatusOr<partitioner::SpmdProgram> program =
        partitioner::Partition(**graph, n, partition_options);
    if (!program.ok()) return Fail("partition", WithHloLine(options->path, program.status()));
    if (options->json) {
      json out = PartitionJson(**graph, *program->program, n);
      if (options->explain) {
        out["explanation"] =
            ExplanationJson(**graph, shardings, explanation, EntryLines(options->path));
      }
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    if (options->explain) {
      std::cout << partitioner::FormatPartitionExplanation(**graph, shardings, explanation,
                                                           EntryLines(options->path));
      return 0;
    }
    std::cout << PrintHloModule(*program->program);
    if (options->stats) {
      std::cout << "\n// collectives on " << n << " devices (bytes of each device's result):\n";
      auto counts = partitioner::CountCollectives(*program->program);
      PrintCounts(counts);
      // Collectives in a loop body appear once in the text and run once per iteration.
      std::vector<partitioner::LoopCollectives> loops =
          partitioner::ListLoopCollectives(*program->program);
      partitioner::ExecutedCollectives executed =
          partitioner::CountExecutedCollectives(*program->program);
      bool same = executed.counts.size() == counts.size();
      for (const auto& [kind, c] : counts) {
        auto it = executed.counts.find(kind);
        same = same && it != executed.counts.end() && it->second.count == c.count &&
               it->second.result_bytes == c.result_bytes;
      }
      if (loops.empty() && same) return 0;  // no control flow that changes the counts
      for (const partitioner::LoopCollectives& loop : loops) {
        std::cout << "// in while %" << loop.loop << " ("
                  << (loop.trip_count.has_value() ? absl::StrCat(*loop.trip_count, " iterations")
                                                  : std::string("unknown trip count"))
                  << "), per iteration:\n";
        PrintCounts(loop.per_iteration);
      }
      std::cout << "// executed per step (loop bodies x trip count"
                << (executed.unknown_trip_count ? ", unknown trip counts taken as 1" : "")
                << "; a conditional's costliest branch):\n";
      PrintCounts(executed.counts);
    }
    return 0;
  };
}

}  // namespace tessel::tools
