// `tessel mesh`: prints the logical device mesh of a HybridMesh built on a topology, or of a
// plain Mesh (docs/sharding.md).
//
//   $ tessel mesh configs/two_slices_2x2hosts.json --ici-mesh-shape 1,4,1 --dcn-mesh-shape 2,1,1
//         --axis-names data,fsdp,tensor
//   $ tessel mesh --mesh-shape 4,2 --device-ids 7,6,5,4,3,2,1,0 --axis-names x,y --json
//
// JSON: {"mesh_shape": [...], "axis_names": [...], "logical_mesh": nested lists of device ids}
// (axis_names is [] for an unnamed mesh).
// Exit codes (tools/command.h): 0 printed; 1 the topology file is missing or does not validate;
// 2 bad arguments, including a mesh that does not fit (one line on stderr: `tessel mesh: ...`).
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tessel/mesh/topology/topology.h"
#include "tessel/spmd/mesh.h"
#include "tools/command.h"
#include "tools/flag_parsing.h"

namespace tessel::tools {
namespace {

using json = nlohmann::ordered_json;

struct MeshOptions {
  std::string config_path;
  std::string ici_mesh_shape;
  std::string dcn_mesh_shape;
  std::string mesh_shape;
  std::string device_ids;
  std::string axis_names;
  bool json_output = false;
};

int Usage(const std::string& message) {
  std::cerr << "tessel mesh: " << message << "\n";
  return kExitUsage;
}

// Nested JSON lists of the array's ids.
json Nested(const spmd::DeviceArray& array, int64_t dim, int64_t offset) {
  if (dim == array.rank()) return array.device_ids()[offset];
  json list = json::array();
  const int64_t stride = array.strides()[dim];
  for (int64_t i = 0; i < array.dim(dim); ++i) {
    list.push_back(Nested(array, dim + 1, offset + i * stride));
  }
  return list;
}

// numpy-style text, a line per row of the innermost dim:
//   [[[0],
//     [2]],
//    [[4],
//     [6]]]
std::string Pretty(const spmd::DeviceArray& array, int64_t dim, int64_t offset) {
  if (dim == array.rank()) return absl::StrCat(array.device_ids()[offset]);
  const int64_t stride = array.strides()[dim];
  std::vector<std::string> parts;
  for (int64_t i = 0; i < array.dim(dim); ++i) {
    parts.push_back(Pretty(array, dim + 1, offset + i * stride));
  }
  const std::string separator =
      array.rank() - dim >= 2 ? absl::StrCat(",\n", std::string(dim + 1, ' ')) : ", ";
  return absl::StrCat("[", absl::StrJoin(parts, separator), "]");
}

int RunMesh(const MeshOptions& options) {
  const bool hybrid = !options.ici_mesh_shape.empty();
  const bool plain = !options.mesh_shape.empty();
  if (hybrid == plain) {
    return Usage("give either CONFIG --ici-mesh-shape (a HybridMesh) or --mesh-shape (a Mesh)");
  }
  const std::vector<std::string> names = ParseNames(options.axis_names);
  std::optional<spmd::Mesh> mesh;
  std::string title = "Mesh";
  if (hybrid) {
    if (!options.device_ids.empty()) return Usage("--device-ids goes with --mesh-shape");
    if (options.config_path.empty()) return Usage("--ici-mesh-shape needs a topology CONFIG");
    absl::StatusOr<std::vector<int64_t>> ici =
        ParseInts(options.ici_mesh_shape, "--ici-mesh-shape");
    if (!ici.ok()) return Usage(std::string(ici.status().message()));
    absl::StatusOr<std::vector<int64_t>> dcn =
        ParseInts(options.dcn_mesh_shape, "--dcn-mesh-shape");
    if (!dcn.ok()) return Usage(std::string(dcn.status().message()));
    absl::StatusOr<mesh::Topology> topology = mesh::LoadTopology(options.config_path);
    if (!topology.ok()) {
      std::cerr << "tessel mesh: " << topology.status().message() << "\n";
      return 1;
    }
    absl::StatusOr<spmd::HybridMesh> hybrid_mesh =
        spmd::HybridMesh::Create(*ici, *dcn, names, *topology);
    if (!hybrid_mesh.ok()) return Usage(std::string(hybrid_mesh.status().message()));
    title = absl::StrCat("HybridMesh ici_mesh_shape [",
                         absl::StrJoin(hybrid_mesh->ici_mesh_shape(), ","), "] dcn_mesh_shape [",
                         absl::StrJoin(hybrid_mesh->dcn_mesh_shape(), ","), "] on ",
                         options.config_path, " (", topology->num_devices(), " devices, ",
                         topology->num_slices(), " slices)");
    mesh = *std::move(hybrid_mesh);
  } else {
    if (!options.config_path.empty()) return Usage("CONFIG goes with --ici-mesh-shape");
    if (!options.dcn_mesh_shape.empty()) {
      return Usage("--dcn-mesh-shape goes with --ici-mesh-shape");
    }
    absl::StatusOr<std::vector<int64_t>> shape = ParseInts(options.mesh_shape, "--mesh-shape");
    if (!shape.ok()) return Usage(std::string(shape.status().message()));
    absl::StatusOr<std::vector<int64_t>> ids = ParseInts(options.device_ids, "--device-ids");
    if (!ids.ok()) return Usage(std::string(ids.status().message()));
    if (ids->empty()) {
      absl::StatusOr<std::vector<int64_t>> listed = DefaultDeviceIds(*shape, "--mesh-shape");
      if (!listed.ok()) return Usage(std::string(listed.status().message()));
      ids = std::move(listed);
    }
    absl::StatusOr<spmd::Mesh> plain_mesh = spmd::Mesh::Create(*ids, *shape, names);
    if (!plain_mesh.ok()) return Usage(std::string(plain_mesh.status().message()));
    mesh = *std::move(plain_mesh);
  }

  if (options.json_output) {
    json out;
    out["mesh_shape"] = mesh->mesh_shape();
    out["axis_names"] = mesh->axis_names();
    out["logical_mesh"] = Nested(mesh->logical_mesh(), 0, 0);
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::cout << title << "\n";
  std::cout << "axes: " << mesh->AxesToString() << "\n";
  std::cout << "logical_mesh:\n" << Pretty(mesh->logical_mesh(), 0, 0) << "\n";
  return 0;
}

}  // namespace

CommandFn AddMeshCommand(CLI::App& app) {
  auto options = std::make_shared<MeshOptions>();
  CLI::App* command = app.add_subcommand(
      "mesh",
      "Print the logical device mesh of a HybridMesh (CONFIG --ici-mesh-shape) or a "
      "Mesh (--mesh-shape)");
  command->add_option("CONFIG", options->config_path,
                      "topology JSON file (for --ici-mesh-shape), e.g. configs/v4-8.json");
  command->add_option("--ici-mesh-shape", options->ici_mesh_shape,
                      "HybridMesh: logical mesh inside each slice, e.g. 1,4,1");
  command->add_option("--dcn-mesh-shape", options->dcn_mesh_shape,
                      "HybridMesh: mesh of the slices over DCN, e.g. 2,1,1 (default all 1)");
  command->add_option("--mesh-shape", options->mesh_shape, "plain Mesh: its shape, e.g. 4,2");
  command->add_option("--device-ids", options->device_ids,
                      "plain Mesh: the raveled device ids (default 0,1,...,n-1)");
  command->add_option("--axis-names", options->axis_names, "one name per axis, e.g. data,model");
  command->add_flag("--json", options->json_output, "print one JSON object instead of text");
  return [options]() { return RunMesh(*options); };
}

}  // namespace tessel::tools
