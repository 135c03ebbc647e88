// `tessel shard`: what a partition spec means. Builds a Mesh, translates the spec as
// mark_sharding does, and prints the XLA sharding string, a table of which devices hold which
// block, and per device its global index ranges, padded local shape and replica id
// (docs/sharding.md).
//
//   $ tessel shard --mesh-shape 2,4 --axis-names x,y --shape 8,10 --spec "x,None"
//   $ tessel shard --mesh-shape 1,2,4 --axis-names r,b,m --shape 8,8 --spec "None,(r,m)" --json
//
//   $ tessel shard --mesh-shape 2,4 --axis-names x,y --shape 8,10 --spec "x,y" --html out.html
//
// --html FILE also writes one self-contained page (tools/html_view.h): the mesh and the tensor's
// tiles coloured by device, as jax.debug.visualize_array_sharding draws them.
// JSON: {"sharding": "...", "shards": [{"device": 0, "index": [[0,4],[0,10]],
// "local_shape": [4,10], "replica_id": 0}, ...]} with one entry per device, ascending.
// Exit codes (tools/command.h): 0 printed; 1 the --html file cannot be written; 2 bad arguments
// (one line on stderr: `tessel shard: ...`), including specs that do not fit the mesh or the
// shape.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tessel/core/command_line.h"
#include "tessel/core/shape.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"
#include "tessel/spmd/sharded_tensor.h"
#include "tessel/spmd/sharding.h"
#include "tessel/spmd/visualize.h"
#include "tools/command.h"
#include "tools/flag_parsing.h"
#include "tools/html_view.h"

namespace tessel::tools {
namespace {

using json = nlohmann::ordered_json;

struct ShardOptions {
  std::string mesh_shape;
  std::string device_ids;
  std::string axis_names;
  std::string shape;
  std::string spec;
  bool spec_given = false;
  bool json_output = false;
  std::string html;
};

int Usage(const std::string& message) {
  std::cerr << "tessel shard: " << message << "\n";
  return kExitUsage;
}

std::string RangeText(const spmd::Shard& shard) {
  std::vector<std::string> parts;
  for (const auto& [start, limit] : shard.index) parts.push_back(absl::StrCat(start, ":", limit));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

int RunShard(const ShardOptions& options) {
  if (options.mesh_shape.empty()) return Usage("--mesh-shape is required");
  if (!options.spec_given) return Usage("--spec is required (e.g. --spec \"x,None\")");
  absl::StatusOr<std::vector<int64_t>> mesh_shape = ParseInts(options.mesh_shape, "--mesh-shape");
  if (!mesh_shape.ok()) return Usage(std::string(mesh_shape.status().message()));
  absl::StatusOr<std::vector<int64_t>> ids = ParseInts(options.device_ids, "--device-ids");
  if (!ids.ok()) return Usage(std::string(ids.status().message()));
  absl::StatusOr<std::vector<int64_t>> dims = ParseInts(options.shape, "--shape");
  if (!dims.ok()) return Usage(std::string(dims.status().message()));
  for (int64_t d : *dims) {
    if (d < 0) return Usage(absl::StrCat("--shape: negative dim ", d));
  }
  if (ids->empty()) {
    absl::StatusOr<std::vector<int64_t>> listed = DefaultDeviceIds(*mesh_shape, "--mesh-shape");
    if (!listed.ok()) return Usage(std::string(listed.status().message()));
    ids = std::move(listed);
  }
  absl::StatusOr<spmd::Mesh> mesh =
      spmd::Mesh::Create(*ids, *mesh_shape, ParseNames(options.axis_names));
  if (!mesh.ok()) return Usage(std::string(mesh.status().message()));
  absl::StatusOr<spmd::PartitionSpec> spec = spmd::PartitionSpec::Parse(options.spec);
  if (!spec.ok()) return Usage(std::string(spec.status().message()));
  const Shape shape(DType::kF32, *dims);
  absl::StatusOr<spmd::Sharding> sharding =
      spmd::ShardingFromPartitionSpec(*mesh, shape.rank(), *spec);
  if (!sharding.ok()) return Usage(std::string(sharding.status().message()));
  absl::StatusOr<spmd::ShardedTensor> tensor =
      spmd::ShardedTensor::Create(shape, *sharding, mesh->size());
  if (!tensor.ok()) return Usage(std::string(tensor.status().message()));
  if (!options.html.empty()) {
    HtmlPage page;
    page.title = "tessel shard";
    page.subtitle =
        absl::StrCat("partition_spec (", spec->ToString(), ") on mesh ", mesh->ToString());
    page.mesh = {mesh->axis_names(), mesh->mesh_shape(), mesh->device_ids()};
    page.num_devices = mesh->size();
    page.tensors.push_back({"tensor", shape, *sharding, ""});
    absl::Status written = WriteHtmlPage(page, options.html);
    if (!written.ok()) {
      std::cerr << "tessel shard: " << written.message() << "\n";
      return kExitFailed;
    }
  }

  if (options.json_output) {
    // Written one shard at a time: a document of every shard held at once took 19.6 GB for
    // 2^24 devices.
    std::cout << R"({"sharding":)" << json(sharding->ToString()).dump() << R"(,"shards":[)";
    const json local_shape = tensor->local_shape().dims();
    bool first = true;
    for (const spmd::Shard& shard : tensor->shards()) {
      json index = json::array();
      for (const auto& [start, limit] : shard.index) index.push_back({start, limit});
      json entry = {{"device", shard.device_id},
                    {"index", std::move(index)},
                    {"local_shape", local_shape},
                    {"replica_id", shard.replica_id}};
      std::cout << (first ? "" : ",") << entry.dump();
      first = false;
    }
    std::cout << "]}\n";
    return 0;
  }

  std::cout << "mesh: " << mesh->ToString() << "\n";
  std::cout << "partition_spec: (" << spec->ToString() << ") on shape ["
            << absl::StrJoin(*dims, ",") << "]\n";
  std::cout << "sharding: " << sharding->ToString() << "\n";
  absl::StatusOr<std::string> table = spmd::VisualizeSharding(shape, *sharding, mesh->size());
  if (table.ok()) {
    std::cout << *table;
  } else {
    std::cout << "(no table: " << table.status().message() << ")\n";
  }
  const std::string local =
      absl::StrCat("[", absl::StrJoin(tensor->local_shape().dims(), ","), "]");
  size_t index_width = 5;
  for (const spmd::Shard& shard : tensor->shards()) {
    index_width = std::max(index_width, RangeText(shard).size());
  }
  std::cout << absl::StrFormat("%-6s  %-*s  %-11s  %s\n", "device", index_width, "index",
                               "local_shape", "replica_id");
  for (const spmd::Shard& shard : tensor->shards()) {
    std::cout << absl::StrFormat("%-6d  %-*s  %-11s  %d\n", shard.device_id, index_width,
                                 RangeText(shard), local, shard.replica_id);
  }
  return 0;
}

}  // namespace

CommandFn AddShardCommand(CLI::App& app) {
  auto options = std::make_shared<ShardOptions>();
  CLI::App* command = app.add_subcommand(
      "shard", "Show the sharding a partition spec gives a tensor on a mesh (mark_sharding)");
  command->add_option("--mesh-shape", options->mesh_shape, "mesh shape, e.g. 2,4")->required();
  command->add_option("--device-ids", options->device_ids,
                      "the raveled device ids of the mesh (default 0,1,...,n-1)");
  command->add_option("--axis-names", options->axis_names, "one name per mesh axis, e.g. x,y");
  command->add_option("--shape", options->shape, "global tensor shape, e.g. 8,10 (\"\" for 0-d)")
      ->required();
  command
      ->add_option_function<std::string>(
          "--spec",
          [options](const std::string& spec) {
            options->spec = spec;
            options->spec_given = true;
          },
          "partition spec, one entry per dim: axis index, axis name, None, or a tuple (x,y); "
          "e.g. \"x,None\" or \"None,(r,m)\"")
      ->required();
  command->add_flag("--json", options->json_output, "print one JSON object instead of text");
  command
      ->add_option("--html", options->html,
                   "also write a self-contained HTML page: the mesh and the tiles by device")
      ->check(NonEmpty());
  return [options]() { return RunShard(*options); };
}

}  // namespace tessel::tools
