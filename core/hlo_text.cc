// The HLO text printer. The parser is in core/internal/hlo_parser.cc; the syntax both follow is
// specified in docs/hlo.md.
#include "tessel/core/hlo_text.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessel/core/collective_device_list.h"
#include "tessel/core/file_util.h"
#include "tessel/core/window.h"

namespace tessel {
namespace {

std::string IntList(const std::vector<int64_t>& values) {
  return absl::StrCat("{", absl::StrJoin(values, ","), "}");
}

// XLA's iota form "[2,2]<=[4]" when the groups have one (as XLA prints the groups its SPMD
// partitioner makes), else the explicit "{{0,1},{2,3}}".
std::string GroupsToString(const std::vector<std::vector<int64_t>>& groups) {
  if (std::optional<IotaReplicaGroups> iota = FindIotaReplicaGroups(groups)) {
    return iota->ToString();
  }
  std::vector<std::string> parts;
  for (const std::vector<int64_t>& group : groups) parts.push_back(IntList(group));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string PairsToString(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::vector<std::string> parts;
  for (const auto& [source, target] : pairs)
    parts.push_back(absl::StrCat("{", source, ",", target, "}"));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

// Ops whose `to_apply` is a reduction computation.
bool HasToApply(Opcode opcode) {
  return opcode == Opcode::kReduce || opcode == Opcode::kAllReduce ||
         opcode == Opcode::kReduceScatter || opcode == Opcode::kScatter ||
         opcode == Opcode::kReduceWindow || opcode == Opcode::kSelectAndScatter ||
         opcode == Opcode::kSort;
}

// sort's comparator: "compare_lt_f32_s32" (direction, then each operand's element type).
std::string SortComparatorName(const Node& node) {
  std::string name = node.attrs().sort_descending ? "compare_gt" : "compare_lt";
  for (const Node* operand : node.operands()) {
    absl::StrAppend(&name, "_", DTypeName(operand->shape().dtype()));
  }
  return name;
}

// Two parameters per operand (lhs, rhs); the root orders operand 0 (TOTALORDER for floats, as
// JAX writes it; Tessel's sort is NaN-last whatever the type says).
std::string PrintSortComparator(const Node& node) {
  std::vector<std::string> signature;
  std::string body;
  for (int64_t i = 0; i < node.operand_count(); ++i) {
    const std::string scalar = absl::StrCat(DTypeName(node.operand(i)->shape().dtype()), "[]");
    for (int64_t side = 0; side < 2; ++side) {
      const int64_t p = 2 * i + side;
      signature.push_back(absl::StrCat("p", p, ": ", scalar));
      absl::StrAppend(&body, "  %p", p, " = ", scalar, " parameter(", p, ")\n");
    }
  }
  const bool floating = IsFloating(node.operand(0)->shape().dtype());
  absl::StrAppend(&body, "  ROOT %compare = pred[] compare(%p0, %p1), direction=",
                  node.attrs().sort_descending ? "GT" : "LT", floating ? ", type=TOTALORDER" : "",
                  "\n");
  return absl::StrCat("%", SortComparatorName(node), " (", absl::StrJoin(signature, ", "),
                      ") -> pred[] {\n", body, "}\n");
}

// The element type a to_apply computation works on.
DType ReduceDType(const Node& node) {
  if (node.operand_count() > 0 && !node.operand(0)->shape().is_tuple()) {
    return node.operand(0)->shape().dtype();
  }
  return node.shape().dtype();
}

std::string ReduceComputationName(ReduceKind kind, DType dtype) {
  return absl::StrCat(ReduceKindName(kind), "_", DTypeName(dtype));
}

// The to_apply computation of `node`: "%add_f32", or "%assign_f32" for a scatter that
// overwrites (its root is parameter(1)).
std::string ToApplyName(const Node& node) {
  if (node.opcode() == Opcode::kSort) return SortComparatorName(node);
  if (node.opcode() == Opcode::kScatter && node.attrs().scatter_overwrite) {
    return absl::StrCat("assign_", DTypeName(ReduceDType(node)));
  }
  return ReduceComputationName(node.attrs().reduce_kind, ReduceDType(node));
}

std::string PrintToApplyComputation(const Node& node) {
  if (node.opcode() == Opcode::kSort) return PrintSortComparator(node);
  std::string scalar = absl::StrCat(DTypeName(ReduceDType(node)), "[]");
  std::string out = absl::StrCat("%", ToApplyName(node), " (x: ", scalar, ", y: ", scalar, ") -> ",
                                 scalar, " {\n", "  %x = ", scalar, " parameter(0)\n");
  if (node.opcode() == Opcode::kScatter && node.attrs().scatter_overwrite) {
    return absl::StrCat(out, "  ROOT %y = ", scalar, " parameter(1)\n}\n");
  }
  const std::string& kind = ReduceKindName(node.attrs().reduce_kind);
  return absl::StrCat(out, "  %y = ", scalar, " parameter(1)\n", "  ROOT %", kind, " = ", scalar,
                      " ", kind, "(%x, %y)\n", "}\n");
}

// select-and-scatter's `select` computation: "%select_GE_f32".
std::string SelectName(const Node& node) {
  return absl::StrCat("select_", ComparisonDirectionName(node.attrs().comparison_direction), "_",
                      DTypeName(ReduceDType(node)));
}

std::string PrintSelectComputation(const Node& node) {
  std::string scalar = absl::StrCat(DTypeName(ReduceDType(node)), "[]");
  return absl::StrCat("%", SelectName(node), " (x: ", scalar, ", y: ", scalar, ") -> pred[] {\n",
                      "  %x = ", scalar, " parameter(0)\n", "  %y = ", scalar, " parameter(1)\n",
                      "  ROOT %compare = pred[] compare(%x, %y), direction=",
                      ComparisonDirectionName(node.attrs().comparison_direction), "\n}\n");
}

void AppendIntLists(absl::Span<const std::pair<const char*, const std::vector<int64_t>*>> lists,
                    bool skip_empty, std::vector<std::string>& attrs) {
  for (const auto& [name, dims] : lists) {
    if (!skip_empty || !dims->empty()) attrs.push_back(absl::StrCat(name, "=", IntList(*dims)));
  }
}

// gather's attributes in XLA's order; the batching dims only when not empty.
void GatherAttributes(const GatherDimensionNumbers& g, std::vector<std::string>& attrs) {
  AppendIntLists({{"offset_dims", &g.offset_dims},
                  {"collapsed_slice_dims", &g.collapsed_slice_dims},
                  {"start_index_map", &g.start_index_map}},
                 false, attrs);
  AppendIntLists({{"operand_batching_dims", &g.operand_batching_dims},
                  {"start_indices_batching_dims", &g.start_indices_batching_dims}},
                 true, attrs);
  attrs.push_back(absl::StrCat("index_vector_dim=", g.index_vector_dim));
  attrs.push_back(absl::StrCat("slice_sizes=", IntList(g.slice_sizes)));
  if (g.indices_are_sorted) attrs.push_back("indices_are_sorted=true");
}

// scatter's attributes in XLA's order; the batching dims only when not empty.
void ScatterAttributes(const Node& node, std::vector<std::string>& attrs) {
  const ScatterDimensionNumbers& s = node.attrs().scatter;
  AppendIntLists({{"update_window_dims", &s.update_window_dims},
                  {"inserted_window_dims", &s.inserted_window_dims},
                  {"scatter_dims_to_operand_dims", &s.scatter_dims_to_operand_dims}},
                 false, attrs);
  AppendIntLists({{"input_batching_dims", &s.input_batching_dims},
                  {"scatter_indices_batching_dims", &s.scatter_indices_batching_dims}},
                 true, attrs);
  attrs.push_back(absl::StrCat("index_vector_dim=", s.index_vector_dim));
  if (s.indices_are_sorted) attrs.push_back("indices_are_sorted=true");
  if (s.unique_indices) attrs.push_back("unique_indices=true");
  attrs.push_back(absl::StrCat("to_apply=%", ToApplyName(node)));
}

std::string PaddingToString(const std::vector<PadDim>& padding) {
  std::vector<std::string> dims;
  for (const PadDim& p : padding) {
    if (p.interior != 0) {
      dims.push_back(absl::StrCat(p.low, "_", p.high, "_", p.interior));
    } else {
      dims.push_back(absl::StrCat(p.low, "_", p.high));
    }
  }
  return absl::StrJoin(dims, "x");
}

std::string SliceToString(const std::vector<SliceDim>& slice) {
  std::vector<std::string> dims;
  for (const SliceDim& s : slice) {
    if (s.stride != 1) {
      dims.push_back(absl::StrCat("[", s.start, ":", s.limit, ":", s.stride, "]"));
    } else {
      dims.push_back(absl::StrCat("[", s.start, ":", s.limit, "]"));
    }
  }
  return absl::StrCat("{", absl::StrJoin(dims, ", "), "}");
}

// Printed names of the called computations (core/graph.h OpAttributes::called_computations).
using ComputationNames = absl::flat_hash_map<const Graph*, std::string>;

// condition=/body= of a while, true_computation=/false_computation= of a predicated conditional,
// branch_computations={...} of an indexed one (XLA's spellings).
void CalledComputationAttributes(const Node& node, const ComputationNames& names,
                                 std::vector<std::string>& attrs) {
  const auto& called = node.attrs().called_computations;
  auto name = [&](size_t i) {
    auto it = i < called.size() ? names.find(called[i].get()) : names.end();
    return absl::StrCat("%", it == names.end() ? std::string("<missing>") : it->second);
  };
  if (node.opcode() == Opcode::kWhile) {
    attrs.push_back(absl::StrCat("condition=", name(0)));
    attrs.push_back(absl::StrCat("body=", name(1)));
    if (node.attrs().known_trip_count >= 0) {
      attrs.push_back(absl::StrCat("backend_config={\"known_trip_count\":{\"n\":\"",
                                   node.attrs().known_trip_count, "\"}}"));
    }
    return;
  }
  const bool is_pred = node.operand_count() > 0 && !node.operand(0)->shape().is_tuple() &&
                       node.operand(0)->shape().dtype() == DType::kPred;
  if (is_pred && called.size() == 2) {
    attrs.push_back(absl::StrCat("true_computation=", name(0)));
    attrs.push_back(absl::StrCat("false_computation=", name(1)));
    return;
  }
  std::vector<std::string> branches;
  for (size_t i = 0; i < called.size(); ++i) branches.push_back(name(i));
  attrs.push_back(absl::StrCat("branch_computations={", absl::StrJoin(branches, ", "), "}"));
}

// The `, attr=value` list of `node` (op attributes, then sharding).
std::string AttributesToString(const Node& node, const ComputationNames& names) {
  const OpAttributes& a = node.attrs();
  std::vector<std::string> attrs;
  switch (node.opcode()) {
    case Opcode::kIota:
      attrs.push_back(absl::StrCat("iota_dimension=", a.iota_dimension));
      break;
    case Opcode::kRng:
      attrs.push_back(absl::StrCat("distribution=", a.rng_distribution == RngDistribution::kNormal
                                                        ? "rng_normal"
                                                        : "rng_uniform"));
      attrs.push_back(absl::StrCat("rng_seed=", a.rng_seed));
      break;
    case Opcode::kCompare:
      attrs.push_back(absl::StrCat("direction=", ComparisonDirectionName(a.comparison_direction)));
      break;
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
    case Opcode::kConcatenate:
      attrs.push_back(absl::StrCat("dimensions=", IntList(a.dimensions)));
      break;
    case Opcode::kSlice:
      attrs.push_back(absl::StrCat("slice=", SliceToString(a.slice)));
      break;
    case Opcode::kPad:
      if (!a.padding.empty()) attrs.push_back(absl::StrCat("padding=", PaddingToString(a.padding)));
      break;
    case Opcode::kDynamicSlice:
      attrs.push_back(absl::StrCat("dynamic_slice_sizes=", IntList(a.dynamic_slice_sizes)));
      break;
    case Opcode::kGather:
      GatherAttributes(a.gather, attrs);
      break;
    case Opcode::kScatter:
      ScatterAttributes(node, attrs);
      break;
    case Opcode::kReduce:
      attrs.push_back(absl::StrCat("dimensions=", IntList(a.dimensions)));
      attrs.push_back(
          absl::StrCat("to_apply=%", ReduceComputationName(a.reduce_kind, ReduceDType(node))));
      break;
    case Opcode::kReverse:
      attrs.push_back(absl::StrCat("dimensions=", IntList(a.dimensions)));
      break;
    case Opcode::kConvolution:
      attrs.push_back(absl::StrCat("window={", WindowToString(a.window), "}"));
      attrs.push_back(absl::StrCat("dim_labels=", DimLabelsToString(a.convolution)));
      if (a.feature_group_count != 1) {
        attrs.push_back(absl::StrCat("feature_group_count=", a.feature_group_count));
      }
      if (a.batch_group_count != 1) {
        attrs.push_back(absl::StrCat("batch_group_count=", a.batch_group_count));
      }
      break;
    case Opcode::kReduceWindow:
      attrs.push_back(absl::StrCat("window={", WindowToString(a.window), "}"));
      attrs.push_back(absl::StrCat("to_apply=%", ToApplyName(node)));
      break;
    case Opcode::kSelectAndScatter:
      attrs.push_back(absl::StrCat("window={", WindowToString(a.window), "}"));
      attrs.push_back(absl::StrCat("select=%", SelectName(node)));
      attrs.push_back(absl::StrCat("scatter=%", ToApplyName(node)));
      break;
    case Opcode::kDot: {
      const DotDimensionNumbers& d = a.dot;
      const std::pair<const char*, const std::vector<int64_t>*> lists[] = {
          {"lhs_batch_dims", &d.lhs_batch_dims},
          {"lhs_contracting_dims", &d.lhs_contracting_dims},
          {"rhs_batch_dims", &d.rhs_batch_dims},
          {"rhs_contracting_dims", &d.rhs_contracting_dims}};
      for (const auto& [name, dims] : lists) {
        if (!dims->empty()) attrs.push_back(absl::StrCat(name, "=", IntList(*dims)));
      }
      break;
    }
    case Opcode::kGetTupleElement:
      attrs.push_back(absl::StrCat("index=", a.tuple_index));
      break;
    case Opcode::kWhile:
    case Opcode::kConditional:
      CalledComputationAttributes(node, names, attrs);
      break;
    case Opcode::kAllReduce:
    case Opcode::kAllGather:
    case Opcode::kAllToAll:
    case Opcode::kReduceScatter:
      // XLA's order: channel_id, replica_groups, dimensions, use_global_device_ids, to_apply.
      if (a.channel_id != 0) attrs.push_back(absl::StrCat("channel_id=", a.channel_id));
      attrs.push_back(absl::StrCat("replica_groups=", GroupsToString(a.replica_groups)));
      if (node.opcode() != Opcode::kAllReduce) {
        attrs.push_back(absl::StrCat("dimensions=", IntList(a.dimensions)));
      }
      if (a.use_global_device_ids) attrs.push_back("use_global_device_ids=true");
      if (node.opcode() == Opcode::kAllReduce || node.opcode() == Opcode::kReduceScatter) {
        attrs.push_back(
            absl::StrCat("to_apply=%", ReduceComputationName(a.reduce_kind, ReduceDType(node))));
      }
      break;
    case Opcode::kCollectivePermute:
      if (a.channel_id != 0) attrs.push_back(absl::StrCat("channel_id=", a.channel_id));
      attrs.push_back(absl::StrCat("source_target_pairs=", PairsToString(a.source_target_pairs)));
      break;
    case Opcode::kCustomCall:
      attrs.push_back(absl::StrCat("custom_call_target=\"", a.custom_call_target, "\""));
      break;
    case Opcode::kSort:
      attrs.push_back(absl::StrCat("dimensions=", IntList(a.dimensions)));
      if (a.is_stable) attrs.push_back("is_stable=true");
      attrs.push_back(absl::StrCat("to_apply=%", ToApplyName(node)));
      break;
    case Opcode::kReducePrecision:
      attrs.push_back(absl::StrCat("exponent_bits=", a.exponent_bits));
      attrs.push_back(absl::StrCat("mantissa_bits=", a.mantissa_bits));
      break;
    case Opcode::kTopK:
      attrs.push_back(absl::StrCat("k=", a.topk_k));
      attrs.push_back(absl::StrCat("largest=", a.topk_largest ? "true" : "false"));
      break;
    default:
      break;
  }
  if (!node.sharding().empty()) attrs.push_back(absl::StrCat("sharding=", node.sharding()));
  if (attrs.empty()) return "";
  return absl::StrCat(", ", absl::StrJoin(attrs, ", "));
}

std::string PrintInstruction(const Node& node, bool is_root, const ComputationNames& names) {
  std::string out = absl::StrCat("  ", is_root ? "ROOT " : "", "%", node.name(), " = ",
                                 node.shape().ToString(), " ", OpcodeName(node.opcode()), "(");
  if (node.opcode() == Opcode::kParameter) {
    absl::StrAppend(&out, node.attrs().parameter_number);
  } else if (node.opcode() == Opcode::kConstant) {
    if (node.attrs().literal != nullptr) absl::StrAppend(&out, node.literal().ValuesToString());
  } else {
    std::vector<std::string> operands;
    for (const Node* operand : node.operands()) {
      operands.push_back(absl::StrCat("%", operand != nullptr ? operand->name() : "<null>"));
    }
    absl::StrAppend(&out, absl::StrJoin(operands, ", "));
  }
  absl::StrAppend(&out, ")", AttributesToString(node, names), "\n");
  return out;
}

// Every computation `graph` calls, directly or through its called computations, callees before
// their callers (the order XLA prints them in), each once.
void CollectCalled(const Graph& graph, std::vector<const Graph*>& order,
                   absl::flat_hash_set<const Graph*>& seen) {
  for (const Node* node : graph.nodes()) {
    for (const auto& called : node->attrs().called_computations) {
      if (called == nullptr || !seen.insert(called.get()).second) continue;
      CollectCalled(*called, order, seen);
      order.push_back(called.get());
    }
  }
}

// One computation: "%name (params) -> shape {" ... "}" (ENTRY for the entry).
std::string PrintComputation(const Graph& graph, const std::string& name, bool is_entry,
                             const ComputationNames& names) {
  std::vector<std::string> params;
  for (const Node* param : graph.parameters()) {
    params.push_back(absl::StrCat(param->name(), ": ", param->shape().ToString()));
  }
  const Node* root = graph.root();
  std::string out =
      absl::StrCat(is_entry ? "ENTRY " : "", "%", name, " (", absl::StrJoin(params, ", "), ") -> ",
                   root != nullptr ? root->shape().ToString() : "()", " {\n");
  for (const Node* node : graph.nodes()) {
    absl::StrAppend(&out, PrintInstruction(*node, node == root, names));
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

}  // namespace

std::string PrintHloModule(const Graph& graph) {
  std::string out = absl::StrCat("HloModule ", graph.name(), "\n\n");
  std::vector<const Graph*> called;
  absl::flat_hash_set<const Graph*> seen;
  CollectCalled(graph, called, seen);

  // One to_apply computation per (kind, dtype), in order of first use (reduce, all-reduce,
  // reduce-scatter, scatter), over every computation of the module.
  std::vector<std::string> computations;
  std::vector<const Graph*> all = called;
  all.push_back(&graph);
  for (const Graph* g : all) {
    for (const Node* node : g->nodes()) {
      if (!HasToApply(node->opcode())) continue;
      std::string name = ToApplyName(*node);
      if (std::find(computations.begin(), computations.end(), name) == computations.end()) {
        computations.push_back(name);
        absl::StrAppend(&out, PrintToApplyComputation(*node), "\n");
      }
      if (node->opcode() != Opcode::kSelectAndScatter) continue;
      std::string select = SelectName(*node);
      if (std::find(computations.begin(), computations.end(), select) == computations.end()) {
        computations.push_back(select);
        absl::StrAppend(&out, PrintSelectComputation(*node), "\n");
      }
    }
  }

  // Called computations keep their graph's name; one that is taken (by a reduction, the entry's
  // %main or another graph of the same name) gets a ".N" suffix.
  ComputationNames names;
  absl::flat_hash_set<std::string> taken(computations.begin(), computations.end());
  taken.insert("main");
  for (const Graph* g : called) {
    std::string name = g->name();
    for (int64_t suffix = 1; taken.contains(name); ++suffix) {
      name = absl::StrCat(g->name(), ".", suffix);
    }
    taken.insert(name);
    names[g] = name;
    absl::StrAppend(&out, PrintComputation(*g, name, /*is_entry=*/false, names), "\n");
  }
  absl::StrAppend(&out, PrintComputation(graph, "main", /*is_entry=*/true, names));
  return out;
}

absl::StatusOr<std::unique_ptr<Graph>> ParseHloFile(const std::string& path) {
  // Large real modules are tens of MB; the lexer needs about 25 bytes a token on top.
  constexpr int64_t kMaxHloFileBytes = int64_t{1} << 30;
  absl::StatusOr<std::string> text = ReadInputFile(path, "an HLO file", kMaxHloFileBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open the file"));
  }
  if (!text.ok()) return text.status();
  absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloModule(*text);
  if (!graph.ok()) {
    return absl::Status(graph.status().code(), absl::StrCat(path, ": ", graph.status().message()));
  }
  return graph;
}

}  // namespace tessel
