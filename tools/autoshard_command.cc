// `tessel autoshard CONFIG (--model gpt|llama [model flags] | --model-config FILE) [--budget S]
//     [--hbm-gib G] [--axes A,B,..] [--top K] [--explain] [--overlap] [--num-slices N] [--json]`:
// searches the mesh (MaxText's ici_* / dcn_* axis sizes), the remat policy and the pipeline
// microbatches that minimize the predicted step time of one training step within HBM
// (mesh/autoshard/autoshard.h), and prints the chosen plan as a user applies it: ici_mesh_shape /
// dcn_mesh_shape / axis names, every parameter class's partition spec as xs.mark_sharding
// (Python) and spmd::mark_sharding (C++) calls, a MaxText config fragment, the predicted step
// time, memory and breakdown, the runners-up, and with --explain the best plan that differs in
// each choice. --hbm-gib holds plans to another memory limit than the device's HBM; --axes
// searches only meshes over the named axes (e.g. data,fsdp,tensor: what `tessel run --example
// gpt` executes).
//
//   $ tessel autoshard configs/v5p-128.json --model-config configs/models/llama2-7b.json
//
// --json prints one object (keys in docs/autoshard.md); it holds no wall time, so two runs
// print the same bytes (the search time goes to stderr). `--hlo FILE` is not implemented (exit
// 1, kUnimplemented): the search needs the model's layer structure.
// Exit codes (tools/command.h): 0 a plan fits; 1 no plan fits (the smallest one is named),
// missing or invalid files, --hlo; 2 bad arguments (an unknown axis in --axes included).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tessel/core/command_line.h"
#include "tessel/core/format.h"
#include "tessel/core/status_macros.h"
#include "tessel/mesh/autoshard/autoshard.h"
#include "tessel/mesh/sim/model_step.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/transformer.h"
#include "tools/command.h"
#include "tools/flag_parsing.h"
#include "tools/model_flags.h"

namespace tessel::tools {
namespace {

// The largest --hbm-gib: 16 TiB, the topology's own bound on a device's HBM (hbm_bytes).
constexpr double kMaxHbmGib = 16384;

struct AutoshardFlags : TransformerFlags {
  CLI::App* command = nullptr;
  std::string config;
  std::string hlo;
  std::string attention;
  std::string remat;  // "" : search the policies; else only this one
  int64_t num_slices = 1;
  double budget_s = 0;
  double hbm_gib = 0;             // 0: the device's HBM
  std::vector<std::string> axes;  // empty: all of MaxText's axes
  int64_t top = 5;
  bool explain = false;
  bool overlap = false;
  bool sequence_parallel = false;
  bool json = false;
  bool given(const std::string& flag) const { return command && command->count(flag) > 0; }
};

int Usage(const std::string& message) {
  std::cerr << "tessel autoshard: " << message << "\n";
  return kExitUsage;
}

int Fail(const std::string& message) {
  std::cerr << "tessel autoshard: " << message << "\n";
  return kExitFailed;
}

std::string Seconds(double s) {
  if (s >= 1) return absl::StrFormat("%.3f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.3f ms", s * 1e3);
  return absl::StrFormat("%.3f us", s * 1e6);
}

std::string Bytes(int64_t b) { return FormatBytes(static_cast<double>(b)); }

std::string AxesText(const std::vector<int64_t>& sizes) {
  std::vector<std::string> parts;
  for (int a = 0; a < mesh::kNumMaxTextAxes; ++a) {
    if (sizes[a] > 1)
      parts.push_back(absl::StrCat(std::string(mesh::kMaxTextAxes[a]), "=", sizes[a]));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

// "ici fsdp=16 tensor=4, dcn data=2, remat full, microbatches 8".
std::string PlanText(const mesh::AutoshardCandidate& c) {
  std::string text = absl::StrCat("ici ", AxesText(c.ici_axes), ", dcn ", AxesText(c.dcn_axes),
                                  ", remat ", std::string(mesh::RematPolicyName(c.plan.remat)));
  if (c.plan.microbatches > 0) absl::StrAppend(&text, ", microbatches ", c.plan.microbatches);
  return text;
}

// A partition spec in torch_xla's Python form: ('fsdp', 'tensor'), (('data', 'fsdp'), None).
std::string PythonSpec(const spmd::PartitionSpec& spec) {
  std::vector<std::string> entries;
  for (const spmd::PartitionSpec::Entry& e : spec.entries()) {
    std::vector<std::string> names;
    for (const spmd::AxisRef& a : e.axes()) names.push_back(absl::StrCat("'", a.ToString(), "'"));
    if (e.is_none()) {
      entries.push_back("None");
    } else if (e.is_tuple()) {
      entries.push_back(absl::StrCat("(", absl::StrJoin(names, ", "), ")"));
    } else {
      entries.push_back(names[0]);
    }
  }
  return absl::StrCat("(", absl::StrJoin(entries, ", "), entries.size() == 1 ? ",)" : ")");
}

// The same in the C++ API's form: {"fsdp", "tensor"}, {spmd::Axes{"data", "fsdp"}, spmd::kNone}.
std::string CppSpec(const spmd::PartitionSpec& spec) {
  std::vector<std::string> entries;
  for (const spmd::PartitionSpec::Entry& e : spec.entries()) {
    std::vector<std::string> names;
    for (const spmd::AxisRef& a : e.axes()) names.push_back(absl::StrCat("\"", a.ToString(), "\""));
    if (e.is_none()) {
      entries.push_back("spmd::kNone");
    } else if (e.is_tuple()) {
      entries.push_back(absl::StrCat("spmd::Axes{", absl::StrJoin(names, ", "), "}"));
    } else {
      entries.push_back(names[0]);
    }
  }
  return absl::StrCat("{", absl::StrJoin(entries, ", "), "}");
}

std::string Tuple(const std::vector<int64_t>& v) {
  return absl::StrCat("(", absl::StrJoin(v, ", "), ")");
}

std::string NamesTuple() {
  std::vector<std::string> names;
  for (std::string_view a : mesh::kMaxTextAxes)
    names.push_back(absl::StrCat("'", std::string(a), "'"));
  return absl::StrCat("(", absl::StrJoin(names, ", "), ")");
}

// MaxText's config lines of a plan (configs/base.yml keys).
std::vector<std::string> MaxTextFragment(const mesh::AutoshardCandidate& c) {
  std::vector<std::string> lines;
  for (int a = 0; a < mesh::kNumMaxTextAxes; ++a) {
    const std::string axis = a == 1 ? "pipeline" : std::string(mesh::kMaxTextAxes[a]);
    lines.push_back(absl::StrCat("dcn_", axis, "_parallelism: ", c.dcn_axes[a]));
  }
  for (int a = 0; a < mesh::kNumMaxTextAxes; ++a) {
    const std::string axis = a == 1 ? "pipeline" : std::string(mesh::kMaxTextAxes[a]);
    lines.push_back(absl::StrCat("ici_", axis, "_parallelism: ", c.ici_axes[a]));
  }
  lines.push_back(absl::StrCat("remat_policy: ", std::string(mesh::RematPolicyName(c.plan.remat))));
  if (c.plan.microbatches > 0) {
    lines.push_back(absl::StrCat("num_pipeline_microbatches: ", c.plan.microbatches));
  }
  return lines;
}

nlohmann::json CandidateJson(const mesh::AutoshardCandidate& c) {
  return {{"ici", c.ici_axes},
          {"dcn", c.dcn_axes},
          {"remat", std::string(mesh::RematPolicyName(c.plan.remat))},
          {"microbatches", c.plan.microbatches},
          {"step_time_s", c.step_seconds},
          {"compute_s", c.compute_seconds},
          {"ici_s", c.ici_seconds},
          {"dcn_s", c.dcn_seconds},
          {"exposed_comm_s", c.exposed_comm_seconds},
          {"mfu", c.mfu},
          {"ici_bytes_per_device", c.ici_bytes_per_device},
          {"dcn_bytes_per_device", c.dcn_bytes_per_device},
          {"memory",
           {{"parameter_bytes", c.memory.parameter_bytes},
            {"gradient_bytes", c.memory.gradient_bytes},
            {"optimizer_bytes", c.memory.optimizer_bytes},
            {"activation_bytes", c.memory.activation_bytes},
            {"temporary_bytes", c.memory.temporary_bytes},
            {"total_bytes", c.memory.total_bytes()}}},
          {"hbm_bytes", c.hbm_bytes},
          {"fits", c.fits}};
}

nlohmann::json SearchJson(const mesh::AutoshardResult& r) {
  nlohmann::json pruned = nlohmann::json::object();
  for (const auto& [reason, count] : r.pruned) pruned[reason] = count;
  return {{"meshes_enumerated", r.meshes_enumerated},    {"pruned", pruned},
          {"meshes_simulated", r.meshes_simulated},      {"meshes_failed", r.meshes_failed},
          {"plans_evaluated", r.plans_evaluated},        {"complete", r.complete},
          {"method", "exhaustive over the pruned space"}};
}

// The chosen plan, its parameters' specs and MaxText lines, as JSON.
nlohmann::json PlanJson(const mesh::AutoshardCandidate& c,
                        const std::vector<mesh::ParameterClassSpec>& specs) {
  nlohmann::json params = nlohmann::json::array();
  for (const mesh::ParameterClassSpec& s : specs) {
    params.push_back({{"class", s.parameter_class},
                      {"parameters", s.parameters},
                      {"partition_spec", PythonSpec(s.spec)},
                      {"cpp", CppSpec(s.spec)}});
  }
  nlohmann::json out = CandidateJson(c);
  out["ici_mesh_shape"] = c.ici_axes;
  out["dcn_mesh_shape"] = c.dcn_axes;
  std::vector<std::string> names(mesh::kMaxTextAxes.begin(), mesh::kMaxTextAxes.end());
  out["axis_names"] = names;
  out["recipe"] = "fsdp_tp";
  out["parameters"] = params;
  out["maxtext"] = MaxTextFragment(c);
  return out;
}

void PrintPlan(const mesh::AutoshardCandidate& c,
               const std::vector<mesh::ParameterClassSpec>& specs) {
  std::cout << "best plan      " << PlanText(c) << "\n";
  std::cout << absl::StrFormat(
      "step time      %s (compute %s, ICI %s, DCN %s, exposed comm %s), MFU %.1f %%\n",
      Seconds(c.step_seconds), Seconds(c.compute_seconds), Seconds(c.ici_seconds),
      Seconds(c.dcn_seconds), Seconds(c.exposed_comm_seconds), 100 * c.mfu);
  std::cout << absl::StrFormat(
      "memory         %s per device of %s HBM (parameters %s, gradients %s, optimizer %s, "
      "activations %s, temporaries %s)\n",
      Bytes(c.memory.total_bytes()), Bytes(c.hbm_bytes), Bytes(c.memory.parameter_bytes),
      Bytes(c.memory.gradient_bytes), Bytes(c.memory.optimizer_bytes),
      Bytes(c.memory.activation_bytes), Bytes(c.memory.temporary_bytes));
  std::cout << absl::StrFormat("DCN bytes      %s per device\n", Bytes(c.dcn_bytes_per_device));
  std::cout << "mesh (torch_xla HybridMesh, Python):\n"
            << "  mesh = xs.HybridMesh(ici_mesh_shape=" << Tuple(c.ici_axes)
            << ", dcn_mesh_shape=" << Tuple(c.dcn_axes) << ",\n"
            << "                       axis_names=" << NamesTuple() << ")\n";
  std::cout << "parameters (recipe fsdp_tp):\n";
  for (const mesh::ParameterClassSpec& s : specs) {
    std::cout << absl::StrFormat("  %-12s %s\n", s.parameter_class, s.parameters);
    std::cout << "    python: xs.mark_sharding(w, mesh, " << PythonSpec(s.spec) << ")\n";
    std::cout << "    c++:    spmd::mark_sharding(w, mesh, " << CppSpec(s.spec) << ")\n";
  }
  std::cout << "MaxText config:\n";
  for (const std::string& line : MaxTextFragment(c)) std::cout << "  " << line << "\n";
}

void PrintSearch(const mesh::AutoshardResult& r) {
  std::cout << absl::StrFormat(
      "searched       %d meshes enumerated, %d simulated, %d rejected by the builder; %d plans "
      "evaluated%s\n",
      r.meshes_enumerated, r.meshes_simulated, r.meshes_failed, r.plans_evaluated,
      r.complete ? "" : " (incomplete: the budget ran out)");
  for (const auto& [reason, count] : r.pruned) {
    std::cout << absl::StrFormat("  pruned %6d: %s\n", count, reason);
  }
}

void PrintAlternatives(const mesh::AutoshardResult& r) {
  if (r.ranking.size() <= 1) return;
  std::cout << "runners-up:\n";
  const double best = r.candidates[r.best].step_seconds;
  for (size_t i = 1; i < r.ranking.size(); ++i) {
    const mesh::AutoshardCandidate& c = r.candidates[r.ranking[i]];
    std::cout << absl::StrFormat("  %d. %s (%+.1f %%), %s: %s\n", i + 1, Seconds(c.step_seconds),
                                 100 * (c.step_seconds / best - 1), Bytes(c.memory.total_bytes()),
                                 PlanText(c));
  }
}

void PrintExplanations(const mesh::AutoshardResult& r) {
  std::cout << "why (the best plan that differs in each choice):\n";
  // After the failures above, so that a refusal is one line on stderr.
  std::cerr << absl::StrFormat("tessel autoshard: searched in %.2f s\n", r.search_seconds);
  const mesh::AutoshardCandidate& best = r.candidates[r.best];
  for (const mesh::AutoshardExplanation& e : r.explanations) {
    if (e.alternative < 0) {
      std::cout << absl::StrFormat("  %-20s %-6s no other value fits or was searched\n", e.choice,
                                   e.best_value);
      continue;
    }
    const mesh::AutoshardCandidate& c = r.candidates[e.alternative];
    std::cout << absl::StrFormat("  %-20s %-6s over %s: %s (%+.1f %%), %s\n", e.choice,
                                 e.best_value, e.alternative_value, Seconds(c.step_seconds),
                                 100 * (c.step_seconds / best.step_seconds - 1),
                                 Bytes(c.memory.total_bytes()));
  }
}

nlohmann::json ExplainJson(const mesh::AutoshardResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const mesh::AutoshardExplanation& e : r.explanations) {
    nlohmann::json item = {{"choice", e.choice}, {"best", e.best_value}};
    if (e.alternative >= 0) {
      item["alternative"] = e.alternative_value;
      item["alternative_plan"] = CandidateJson(r.candidates[e.alternative]);
    }
    out.push_back(item);
  }
  return out;
}

// The options the flags ask for. Returns a usage message, or "".
std::string OptionsOf(const AutoshardFlags& f, const nn::ModelFile* file,
                      mesh::AutoshardOptions& options) {
  options.budget_seconds = f.budget_s;
  // --hbm-gib is checked > 0 on parsing; bounded here so the byte count neither overflows nor
  // rounds to 0 (which means "the device's HBM").
  if (f.hbm_gib != 0 && (f.hbm_gib > kMaxHbmGib || f.hbm_gib * 1024.0 * 1024.0 * 1024.0 < 1)) {
    return absl::StrCat("--hbm-gib ", f.hbm_gib, ": expected at least one byte and at most ",
                        kMaxHbmGib, " GiB");
  }
  options.hbm_bytes = static_cast<int64_t>(std::llround(f.hbm_gib * 1024.0 * 1024.0 * 1024.0));
  options.top_k = f.top;
  options.axes = f.axes;
  for (const std::string& axis : f.axes) {
    if (std::find(mesh::kMaxTextAxes.begin(), mesh::kMaxTextAxes.end(), axis) ==
        mesh::kMaxTextAxes.end()) {
      return absl::StrCat("--axes: \"", axis,
                          "\" is not one of data, stage, fsdp, fsdp_transpose, sequence, tensor, "
                          "expert");
    }
    if (std::count(f.axes.begin(), f.axes.end(), axis) > 1) {
      return absl::StrCat("--axes: \"", axis, "\" is given twice");
    }
  }
  options.overlap = f.overlap;
  options.sequence_parallel = f.sequence_parallel;
  const RunSetting attention =
      RunSettingOf("--attention", f.attention, file, "attention", file ? file->attention : "");
  absl::StatusOr<mesh::AttentionKernel> kernel = ParseRunSetting(
      attention, "dot_product", [](const std::string& s) { return mesh::ParseAttentionKernel(s); });
  if (!kernel.ok()) return std::string(kernel.status().message());
  options.attention = *kernel;
  if (!f.remat.empty()) {
    absl::StatusOr<mesh::RematPolicy> remat = mesh::ParseRematPolicy(f.remat);
    if (!remat.ok()) return absl::StrCat("--remat: ", remat.status().message());
    options.remat_policies = {*remat};
  } else if (file && !file->remat.empty()) {
    // The search tries every policy; the file's is not used, but a bad name is still an error.
    absl::StatusOr<mesh::RematPolicy> remat = mesh::ParseRematPolicy(file->remat);
    if (!remat.ok()) return absl::StrCat(file->source, ": /remat: ", remat.status().message());
  }
  if (file) {
    absl::StatusOr<std::string> peak_dtype = MatmulPeakDType(file->matmul_dtype);
    if (!peak_dtype.ok()) {
      return absl::StrCat(file->source, ": /matmul_dtype: ", peak_dtype.status().message());
    }
    options.matmul_dtype = *peak_dtype;
  }
  return "";
}

int Run(const AutoshardFlags& f) {
  if (!f.hlo.empty()) {
    if (!f.model.empty() || !f.model_config.empty()) {
      return Usage("give one of --model, --model-config and --hlo");
    }
    return Fail(
        "--hlo: not implemented: the search over an HLO module's parameter specs needs the "
        "partitioner in the loop per candidate; use --model or --model-config");
  }
  if (f.model.empty() == f.model_config.empty() && f.model_config.empty()) {
    return Usage("give --model gpt|llama (with model flags) or --model-config FILE");
  }
  absl::StatusOr<mesh::Topology> topology = LoadSlices(f.config, f.num_slices);
  if (!topology.ok()) return Fail(std::string(topology.status().message()));
  absl::StatusOr<std::optional<nn::ModelFile>> file = LoadModelFile(f);
  if (!file.ok()) return Fail(std::string(file.status().message()));
  const nn::ModelFile* model_file = file->has_value() ? &file->value() : nullptr;
  absl::StatusOr<nn::TransformerConfig> config =
      TransformerConfigOf(f, *f.command, model_file, topology->num_devices());
  if (!config.ok()) return Usage(std::string(config.status().message()));
  mesh::AutoshardOptions options;
  if (std::string bad = OptionsOf(f, model_file, options); !bad.empty()) return Usage(bad);

  absl::StatusOr<mesh::AutoshardResult> result = mesh::Autoshard(*topology, *config, options);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  const mesh::AutoshardResult& r = *result;
  const std::string model_name = model_file && !model_file->name.empty()
                                     ? model_file->name
                                     : std::string(nn::TransformerArchName(config->arch));
  if (r.best < 0) {
    const int64_t limit =
        options.hbm_bytes > 0 ? options.hbm_bytes : topology->device_spec().hbm_bytes;
    if (r.smallest_memory < 0 && r.state_bytes_lower_bound > static_cast<double>(limit)) {
      return Fail(absl::StrFormat(
          "no plan fits: %s needs at least %s per device for its parameters, gradients and Adam "
          "moments on any mesh of %d devices and %s has %s of HBM%s",
          model_name, FormatBytes(r.state_bytes_lower_bound), topology->num_devices(),
          topology->device_spec().name, Bytes(limit), options.hbm_bytes > 0 ? " (--hbm-gib)" : ""));
    }
    if (r.smallest_memory < 0) {
      return Fail(absl::StrCat("no plan could be simulated for ", model_name, " on ",
                               topology->name(),
                               !r.complete && f.budget_s > 0
                                   ? absl::StrCat(": --budget ", f.budget_s, " s ran out after ",
                                                  r.plans_evaluated, " plans")
                                   : ""));
    }
    const mesh::AutoshardCandidate& c = r.candidates[r.smallest_memory];
    return Fail(absl::StrFormat(
        "no plan fits: %s needs at least %s per device (plan %s) and %s has %s of HBM%s; %d "
        "plans evaluated",
        model_name, Bytes(c.memory.total_bytes()), PlanText(c), topology->device_spec().name,
        Bytes(c.hbm_bytes), options.hbm_bytes > 0 ? " (--hbm-gib)" : "", r.plans_evaluated));
  }
  const mesh::AutoshardCandidate& best = r.candidates[r.best];
  absl::StatusOr<std::vector<mesh::ParameterClassSpec>> specs =
      mesh::ParameterClassSpecs(*topology, *config, best.plan);
  if (!specs.ok()) return Fail(std::string(specs.status().message()));
  if (f.json) {
    nlohmann::json alternatives = nlohmann::json::array();
    for (size_t i = 1; i < r.ranking.size(); ++i) {
      alternatives.push_back(CandidateJson(r.candidates[r.ranking[i]]));
    }
    nlohmann::json out = {{"topology", topology->name()},
                          {"num_devices", topology->num_devices()},
                          {"num_slices", topology->num_slices()},
                          {"model", model_name},
                          {"attention", std::string(mesh::AttentionKernelName(options.attention))},
                          {"search", SearchJson(r)},
                          {"best", PlanJson(best, *specs)},
                          {"alternatives", alternatives}};
    if (f.explain) out["explain"] = ExplainJson(r);
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << absl::StrFormat("autoshard      %s on %s: %d devices (%s), %d slices\n", model_name,
                               topology->name(), topology->num_devices(),
                               topology->device_spec().name, topology->num_slices());
  PrintSearch(r);
  std::cout << absl::StrFormat("search time    %.2f s\n", r.search_seconds);
  PrintPlan(best, *specs);
  PrintAlternatives(r);
  if (f.explain) PrintExplanations(r);
  return kExitOk;
}

}  // namespace

CommandFn AddAutoshardCommand(CLI::App& app) {
  auto f = std::make_shared<AutoshardFlags>();
  CLI::App* cmd = app.add_subcommand(
      "autoshard", "Search the mesh, remat and microbatches with the least predicted step time");
  f->command = cmd;
  cmd->add_option("CONFIG", f->config, "topology JSON (configs/)")->required();
  cmd->add_option("--hlo", f->hlo, "HLO text file (not implemented: exit 1)")->check(NonEmpty());
  AddTransformerFlags(cmd, f.get());
  cmd->add_option("--attention", f->attention,
                  "dot_product or flash (default: the model file's, else dot_product)");
  cmd->add_option("--remat", f->remat,
                  "search only this remat policy (default: none, minimal, "
                  "save_dot_except_mlp, full)");
  cmd->add_option("--num-slices", f->num_slices,
                  "copies of CONFIG's one slice joined by DCN (MaxText num_slices; default 1)")
      ->check(Positive());
  cmd->add_option("--budget", f->budget_s,
                  "stop simulating new meshes after S seconds (default: no limit)")
      ->check(NonNegative());
  cmd->add_option("--hbm-gib", f->hbm_gib,
                  "per-device memory limit in GiB (default: the device's HBM)")
      ->check(Positive());
  cmd->add_option("--axes", f->axes,
                  "search only meshes over these axes, comma-separated (default: all seven)")
      ->delimiter(',');
  cmd->add_option("--top", f->top, "runners-up to print (default 5)")->check(NonNegative());
  cmd->add_flag("--explain", f->explain, "for each choice, the best plan that differs in it");
  cmd->add_flag("--overlap", f->overlap, "rank by the overlapped (latency-hiding) schedule");
  cmd->add_flag("--sequence-parallel", f->sequence_parallel,
                "residual-stream activations split over the tensor axis (memory only)");
  cmd->add_flag("--json", f->json, "print one JSON object (docs/autoshard.md)");
  return [f]() { return Run(*f); };
}

}  // namespace tessel::tools
