#include "tessel/nn/xla_model.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tessel/core/file_util.h"
#include "tessel/core/status_macros.h"

namespace tessel::nn {

namespace {

// Groups as given, or one group of every device of the global mesh (torch_xla groups=None).
absl::StatusOr<CollectiveDeviceList> GroupsOrAll(CollectiveDeviceList groups, const char* op) {
  if (!groups.empty()) return groups;
  std::optional<spmd::Mesh> mesh = spmd::get_global_mesh();
  if (!mesh.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": no replica groups given and no global mesh set (spmd::set_global_mesh)"));
  }
  std::vector<int64_t> all = mesh->device_ids();
  std::sort(all.begin(), all.end());
  return CollectiveDeviceList({all});
}

// x * scale in x's dtype; scale 1 records nothing, so an unscaled collective stays one op.
Tensor Scaled(const Tensor& x, double scale, const char* op) {
  if (scale == 1.0 || !x.status().ok()) return x;
  if (!IsFloating(x.dtype())) {
    return Tensor::Error(absl::InvalidArgumentError(absl::StrCat(
        op, ": scale ", scale, " needs a floating tensor, got ", x.shape().ToString())));
  }
  return x * scale;
}

absl::Status CheckGroupSize(const CollectiveDeviceList& groups, int64_t count, const char* op,
                            const char* what) {
  if (static_cast<int64_t>(groups[0].size()) != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", what, " ", count, " differs from the group size ", groups[0].size()));
  }
  return absl::OkStatus();
}

// safetensors dtype names (github.com/huggingface/safetensors, "dtype" of the header).
const std::map<DType, std::string>& SafetensorsNames() {
  static const auto* names = new std::map<DType, std::string>{
      {DType::kPred, "BOOL"}, {DType::kU8, "U8"},   {DType::kS32, "I32"}, {DType::kS64, "I64"},
      {DType::kBF16, "BF16"}, {DType::kF16, "F16"}, {DType::kF32, "F32"}, {DType::kF64, "F64"},
      {DType::kU32, "U32"},   {DType::kU64, "U64"}};
  return *names;
}

absl::Status LoadError(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("cannot load ", path, ": ", what));
}

// One header entry of a safetensors file as a host literal cut from `data`.
absl::StatusOr<Literal> EntryLiteral(const std::string& path, const std::string& name,
                                     const nlohmann::ordered_json& entry, std::string_view data) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    return LoadError(path, absl::StrCat("tensor \"", name,
                                        "\" needs \"dtype\", \"shape\" and \"data_offsets\""));
  }
  std::optional<DType> dtype;
  for (const auto& [d, text] : SafetensorsNames()) {
    if (entry["dtype"] == text) dtype = d;
  }
  if (!dtype.has_value()) {
    return LoadError(path, absl::StrCat("tensor \"", name, "\" has dtype ", entry["dtype"].dump(),
                                        ", which Tessel does not have"));
  }
  std::vector<int64_t> dims = entry["shape"].get<std::vector<int64_t>>();
  std::vector<int64_t> offsets = entry["data_offsets"].get<std::vector<int64_t>>();
  for (int64_t d : dims) {
    if (d < 0) return LoadError(path, absl::StrCat("tensor \"", name, "\" has a negative dim"));
  }
  const Shape shape(*dtype, dims);
  absl::StatusOr<int64_t> bytes = CheckedByteSize(shape);
  if (!bytes.ok() || offsets.size() != 2 || offsets[0] < 0 || offsets[1] < offsets[0] ||
      offsets[1] > static_cast<int64_t>(data.size()) || offsets[1] - offsets[0] != *bytes) {
    return LoadError(path, absl::StrCat("tensor \"", name, "\" ", shape.ToString(),
                                        " has data_offsets ", entry["data_offsets"].dump(),
                                        " in a data section of ", data.size(), " bytes"));
  }
  Literal value(shape);
  if (*bytes > 0) std::memcpy(value.raw_data(), data.data() + offsets[0], *bytes);
  return value;
}

}  // namespace

absl::StatusOr<CollectiveDeviceList> replica_groups(const spmd::Mesh& mesh,
                                                    const std::vector<std::string>& axes) {
  std::vector<int64_t> in_group;  // mesh axis indices, in the caller's order
  for (const std::string& name : axes) {
    TESSEL_ASSIGN_OR_RETURN(int64_t axis, mesh.AxisIndex(name));
    if (std::find(in_group.begin(), in_group.end(), axis) != in_group.end()) {
      return absl::InvalidArgumentError(absl::StrCat("replica_groups: axis \"", name,
                                                     "\" is named twice; mesh has axes ",
                                                     mesh.AxesToString()));
    }
    in_group.push_back(axis);
  }
  std::vector<int64_t> across;  // the other axes: one group per coordinate of these
  for (int64_t a = 0; a < mesh.rank(); ++a) {
    if (std::find(in_group.begin(), in_group.end(), a) == in_group.end()) across.push_back(a);
  }
  // Row-major walk over `across`, then over `in_group` for each group's members.
  auto walk = [&mesh](const std::vector<int64_t>& axes_to_walk, std::vector<int64_t>& coordinate,
                      const std::function<void()>& visit) {
    std::function<void(size_t)> rec = [&](size_t i) {
      if (i == axes_to_walk.size()) return visit();
      for (int64_t c = 0; c < mesh.axis_size(axes_to_walk[i]); ++c) {
        coordinate[axes_to_walk[i]] = c;
        rec(i + 1);
      }
    };
    rec(0);
  };
  CollectiveDeviceList::Groups groups;
  std::vector<int64_t> coordinate(mesh.rank(), 0);
  walk(across, coordinate, [&] {
    std::vector<int64_t> group;
    walk(in_group, coordinate, [&] { group.push_back(mesh.DeviceAt(coordinate)); });
    groups.push_back(std::move(group));
  });
  return CollectiveDeviceList(std::move(groups));
}

std::vector<Tensor> all_reduce(ReduceKind reduce_type, absl::Span<const Tensor> tensors,
                               double scale, CollectiveDeviceList groups) {
  absl::StatusOr<CollectiveDeviceList> g = GroupsOrAll(std::move(groups), "all_reduce");
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    out.push_back(g.ok() ? Scaled(AllReduce(t, *g, reduce_type), scale, "all_reduce")
                         : Tensor::Error(g.status()));
  }
  return out;
}

Tensor all_gather(const Tensor& value, int64_t dim, CollectiveDeviceList groups) {
  absl::StatusOr<CollectiveDeviceList> g = GroupsOrAll(std::move(groups), "all_gather");
  if (!g.ok()) return Tensor::Error(g.status());
  return AllGather(value, dim, *std::move(g));
}

Tensor reduce_scatter(ReduceKind reduce_type, const Tensor& input, double scale,
                      int64_t scatter_dim, int64_t shard_count, CollectiveDeviceList groups) {
  absl::StatusOr<CollectiveDeviceList> g = GroupsOrAll(std::move(groups), "reduce_scatter");
  if (!g.ok()) return Tensor::Error(g.status());
  absl::Status size = CheckGroupSize(*g, shard_count, "reduce_scatter", "shard_count");
  if (!size.ok()) return Tensor::Error(size);
  return Scaled(ReduceScatter(input, scatter_dim, *std::move(g), reduce_type), scale,
                "reduce_scatter");
}

Tensor all_to_all(const Tensor& value, int64_t split_dimension, int64_t concat_dimension,
                  int64_t split_count, CollectiveDeviceList groups) {
  if (!value.status().ok()) return value;
  absl::StatusOr<CollectiveDeviceList> g = GroupsOrAll(std::move(groups), "all_to_all");
  if (!g.ok()) return Tensor::Error(g.status());
  absl::Status size = CheckGroupSize(*g, split_count, "all_to_all", "split_count");
  if (!size.ok()) return Tensor::Error(size);
  const int64_t rank = value.rank(), n = split_count;
  for (int64_t d : {split_dimension, concat_dimension}) {
    if (d < 0 || d >= rank) {
      return Tensor::Error(absl::InvalidArgumentError(absl::StrCat(
          "all_to_all: dimension ", d, " is out of range for ", value.shape().ToString())));
    }
  }
  if (value.dim(split_dimension) % n != 0) {
    return Tensor::Error(absl::InvalidArgumentError(
        absl::StrCat("all_to_all: split dimension ", split_dimension, " of ",
                     value.shape().ToString(), " is not divisible by split_count ", n)));
  }
  // [..., S, ...] -> [..., n, S/n, ...] -> [n, ..., S/n, ...]: piece i on the leading dim, so
  // XLA's array all-to-all over dim 0 sends piece i to the group's i-th device and stacks what
  // arrives in group order.
  std::vector<int64_t> split = value.shape().dims();
  split[split_dimension] /= n;
  split.insert(split.begin() + split_dimension, n);
  std::vector<int64_t> to_front(rank + 1);
  to_front[0] = split_dimension;
  for (int64_t i = 0, j = 1; i <= rank; ++i) {
    if (i != split_dimension) to_front[j++] = i;
  }
  Tensor stacked = Transpose(Reshape(value, split), to_front);
  Tensor exchanged = AllToAll(stacked, 0, *std::move(g));
  // Back: the leading dim goes just before the concat dim, and the two merge (group order major).
  std::vector<int64_t> rest(exchanged.shape().dims().begin() + 1, exchanged.shape().dims().end());
  std::vector<int64_t> before_concat;
  for (int64_t i = 0; i < rank; ++i) {
    if (i == concat_dimension) before_concat.push_back(0);
    before_concat.push_back(i + 1);
  }
  std::vector<int64_t> merged = rest;
  merged[concat_dimension] *= n;
  return Reshape(Transpose(exchanged, before_concat), merged);
}

absl::StatusOr<Tensor> optimizer_step(Optimizer& optimizer, absl::Span<Tensor* const> params,
                                      absl::Span<const Tensor> grads,
                                      const OptimizerStepOptions& options) {
  std::vector<Tensor> reduced(grads.begin(), grads.end());
  if (!options.groups.empty()) {
    const double scale = 1.0 / static_cast<double>(options.groups[0].size());
    reduced = all_reduce(ReduceKind::kAdd, reduced, scale, options.groups);
  }
  for (const Tensor& g : reduced) TESSEL_RETURN_IF_ERROR(g.status());
  Tensor norm;
  if (options.max_grad_norm > 0) {
    ClippedGradients clipped = ClipGradNorm(reduced, options.max_grad_norm);
    TESSEL_RETURN_IF_ERROR(clipped.total_norm.status());
    reduced = std::move(clipped.grads);
    norm = std::move(clipped.total_norm);
  }
  TESSEL_RETURN_IF_ERROR(optimizer.Step(params, reduced));
  return norm;
}

void add_step_closure(std::function<absl::Status()> closure) { AddStepClosure(std::move(closure)); }

absl::Status save(const StateDict& state_dict, const std::string& path, bool write) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<Literal> values;
  int64_t offset = 0;
  for (const auto& [name, tensor] : state_dict) {
    if (name.empty() || name == "__metadata__" || header.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat("save ", path, ": tensor name \"", name,
                                                     "\" is empty, reserved or repeated"));
    }
    // Every host reads every value, so the gathers of sharded values stay in step.
    absl::StatusOr<Literal> value = tensor.ToLiteral();
    if (!value.ok()) {
      return absl::Status(value.status().code(), absl::StrCat("save ", path, ": tensor \"", name,
                                                              "\": ", value.status().message()));
    }
    const int64_t bytes = value->byte_size();
    header[name] = {{"dtype", SafetensorsNames().at(value->shape().dtype())},
                    {"shape", value->shape().dims()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    values.push_back(*std::move(value));
  }
  if (!write) return absl::OkStatus();
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // data 8-byte aligned, as the spec
  std::string contents(8, '\0');
  uint64_t header_bytes = header_text.size();
  for (int i = 0; i < 8; ++i) contents[i] = static_cast<char>((header_bytes >> (8 * i)) & 0xff);
  contents += header_text;
  for (const Literal& v : values) {
    contents.append(reinterpret_cast<const char*>(v.raw_data()), v.byte_size());
  }
  return WriteFileAtomically(path, contents, "state dict");
}

absl::StatusOr<StateDict> load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot load ", path, ": no such file"));
  const std::string contents((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (contents.size() < 8) return LoadError(path, "shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) {
    header_bytes |= static_cast<uint64_t>(static_cast<unsigned char>(contents[i])) << (8 * i);
  }
  if (header_bytes > contents.size() - 8) {
    return LoadError(path, absl::StrCat("header of ", header_bytes, " bytes in a file of ",
                                        contents.size(), " bytes"));
  }
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(contents.substr(8, header_bytes));
  } catch (const nlohmann::json::exception& e) {
    return LoadError(path, absl::StrCat("header is not JSON: ", e.what()));
  }
  if (!header.is_object()) return LoadError(path, "header is not a JSON object");
  const std::string_view data = std::string_view(contents).substr(8 + header_bytes);
  StateDict out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    absl::StatusOr<Literal> value;
    try {
      value = EntryLiteral(path, name, entry, data);
    } catch (const nlohmann::json::exception& e) {
      return LoadError(path, absl::StrCat("tensor \"", name, "\": ", e.what()));
    }
    if (!value.ok()) return value.status();
    out.emplace_back(name, Tensor::FromLiteral(*std::move(value)));
  }
  return out;
}

}  // namespace tessel::nn
