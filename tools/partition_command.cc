// `tessel propagate FILE.hlo [--num-partitions N]`: prints the module with every instruction's
// propagated sharding.
// `tessel partition FILE.hlo [--num-partitions N] [--stats]`: prints the per-device (SPMD)
// program as HLO text: local shapes, all-reduce / all-gather / collective-permute with replica
// groups in global device ids. `--stats` prints the number and bytes of collectives per kind.
//
//   $ tessel partition tests/golden/partitioner/mlp_megatron.hlo --num-partitions 4 --stats
//
// The input is HLO text with sharding={...} attributes, as XLA and JAX dump it (docs/hlo.md).
// When --num-partitions is omitted it is the largest device id in the module's shardings + 1.
// Exit codes (tools/command.h): 0 success; 1 the file is missing, does not parse or cannot be
// partitioned (one line on stderr); 2 bad arguments.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "core/hlo_text.h"
#include "partitioner/partitioner.h"
#include "partitioner/propagation.h"
#include "spmd/sharding.h"
#include "tools/command.h"

namespace tessel::tools {
namespace {

struct PartitionOptions {
  std::string path;
  int64_t num_partitions = 0;
  bool stats = false;
};

int Fail(const std::string& command, const absl::Status& status) {
  std::cerr << "tessel " << command << ": " << status.message() << "\n";
  return 1;
}

}  // namespace

CommandFn AddPropagateCommand(CLI::App& app) {
  auto options = std::make_shared<PartitionOptions>();
  CLI::App* cmd = app.add_subcommand("propagate", "print the module with propagated shardings");
  cmd->add_option("file", options->path, "HLO text file with sharding annotations")->required();
  cmd->add_option("--num-partitions", options->num_partitions, "number of devices")
      ->check(CLI::PositiveNumber);
  return [options]() {
    absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloFile(options->path);
    if (!graph.ok()) return Fail("propagate", graph.status());
    int64_t n = options->num_partitions > 0 ? options->num_partitions
                                            : partitioner::InferNumPartitions(**graph);
    absl::Status status = partitioner::PropagateShardings(**graph, n);
    if (!status.ok()) return Fail("propagate", status);
    std::cout << PrintHloModule(**graph);
    return 0;
  };
}

CommandFn AddPartitionCommand(CLI::App& app) {
  auto options = std::make_shared<PartitionOptions>();
  CLI::App* cmd = app.add_subcommand("partition", "print the per-device SPMD program");
  cmd->add_option("file", options->path, "HLO text file with sharding annotations")->required();
  cmd->add_option("--num-partitions", options->num_partitions, "number of devices")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--stats", options->stats, "print collective counts and bytes per kind");
  return [options]() {
    absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloFile(options->path);
    if (!graph.ok()) return Fail("partition", graph.status());
    int64_t n = options->num_partitions > 0 ? options->num_partitions
                                            : partitioner::InferNumPartitions(**graph);
    absl::StatusOr<partitioner::SpmdProgram> program = partitioner::Partition(**graph, n);
    if (!program.ok()) return Fail("partition", program.status());
    std::cout << PrintHloModule(*program->program);
    if (options->stats) {
      std::cout << "\n// collectives on " << n << " devices (bytes of each device's result):\n";
      auto counts = partitioner::CountCollectives(*program->program);
      if (counts.empty()) std::cout << "//   none\n";
      for (const auto& [kind, c] : counts) {
        std::cout << "//   " << kind << ": " << c.count << " (" << c.result_bytes << " bytes)\n";
      }
    }
    return 0;
  };
}

}  // namespace tessel::tools
