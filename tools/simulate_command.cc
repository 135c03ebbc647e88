// `tessel simulate CONFIG --model gpt|llama [model flags] [mesh flags] --recipe R [--overlap]
//     [--trace out.json] [--json]`: builds one training step of a decoder transformer
// (nn/transformer.h), shards it with a named recipe on a HybridMesh of the topology CONFIG,
// partitions it and simulates the step (mesh/sim/simulator.h).
// `tessel simulate CONFIG --hlo FILE.hlo [...]`: the same for an HLO module with shardings.
//
//   $ tessel simulate configs/v5p-128.json --model llama --layers 2 --d-model 1024
//       --heads 8 --ffn 4096 --vocab 32000 --seq-len 2048 --batch 64
//       --ici-mesh-shape 1,16,4 --axis-names data,fsdp,tensor --recipe fsdp_tp
//
// Output: step time (in order and overlapped), compute / ICI / DCN / exposed communication,
// MFU (6 * params * tokens / (step time * peak bf16 of all devices); for --hlo the program's own
// flops), tokens per second, per-device peak memory, bytes per link class, the top 10 ops and
// collectives. --json prints one object instead (keys in docs/simulator.md).
// Exit codes (tools/command.h): 0 success; 2 bad arguments (unknown model or recipe, sizes,
// a mesh whose product is not the device count, unknown axis names); 1 failures (missing or
// invalid files, partitioning errors, a model that does not fit in HBM: the report is still
// printed, and the error line goes to stderr).
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/format.h"
#include "core/hlo_text.h"
#include "core/status_macros.h"
#include "mesh/sim/simulator.h"
#include "mesh/topology/topology.h"
#include "nlohmann/json.hpp"
#include "nn/transformer.h"
#include "partitioner/partitioner.h"
#include "spmd/mesh.h"
#include "tools/command.h"
#include "tools/flag_parsing.h"

namespace tessel::tools {
namespace {

struct SimulateFlags {
  std::string config;
  std::string model;
  std::string hlo;
  int64_t assume_trip_count = 0;  // 0: unknown trip counts are an error
  int64_t layers = 2;
  int64_t d_model = 512;
  int64_t heads = 8;
  int64_t kv_heads = 0;
  int64_t ffn = 0;  // 0: 4 * d_model
  int64_t vocab = 32000;
  int64_t seq_len = 1024;
  int64_t batch = 0;  // 0: one sequence per device
  std::string dtype = "bf16";
  std::string param_dtype = "f32";
  std::string ici_mesh_shape;
  std::string dcn_mesh_shape;
  std::string axis_names = "data,fsdp,tensor";
  std::string recipe = "fsdp_tp";
  bool overlap = false;
  std::string trace;
  bool json = false;
};

int Usage(const std::string& message) {
  std::cerr << "tessel simulate: " << message << "\n";
  return kExitUsage;
}

int Fail(const std::string& message) {
  std::cerr << "tessel simulate: " << message << "\n";
  return 1;
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Seconds(double s) {
  if (s >= 1) return absl::StrFormat("%.3f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.3f ms", s * 1e3);
  return absl::StrFormat("%.3f us", s * 1e6);
}

absl::StatusOr<DType> ParseFloatDType(const std::string& name, const std::string& flag) {
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  if (name == "f32") return DType::kF32;
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": unknown dtype \"", name, "\"; expected bf16, f16 or f32"));
}

nlohmann::json OpsJson(const std::vector<mesh::OpEntry>& ops) {
  nlohmann::json out = nlohmann::json::array();
  for (const mesh::OpEntry& e : ops) {
    out.push_back({{"name", e.name},
                   {"opcode", e.opcode},
                   {"shape", e.shape},
                   {"seconds", e.seconds},
                   {"flops", e.flops},
                   {"bytes", e.bytes}});
  }
  return out;
}

void PrintOps(const std::string& title, const std::vector<mesh::OpEntry>& ops) {
  std::cout << title << "\n";
  for (const mesh::OpEntry& e : ops) {
    std::cout << absl::StrFormat("  %12s  %-18s %-28s %s\n", Seconds(e.seconds), e.opcode, e.shape,
                                 e.name);
  }
}

// The global graph to simulate, built from --model flags or read from --hlo.
struct GlobalStep {
  std::unique_ptr<Graph> graph;
  nn::TransformerConfig config;  // --model only
  std::string mesh_text;         // --model only: the HybridMesh's axes
};

// Builds one training step of the --model transformer, sharded with --recipe on the HybridMesh
// of the mesh flags over `topology`. Every error is a bad flag (kInvalidArgument).
absl::StatusOr<GlobalStep> BuildModelStep(const SimulateFlags& f, const mesh::Topology& topology) {
  const int64_t num_devices = topology.num_devices();
  TESSEL_ASSIGN_OR_RETURN(nn::TransformerArch arch, nn::ParseTransformerArch(f.model));
  TESSEL_ASSIGN_OR_RETURN(nn::ShardingRecipe recipe, nn::ParseShardingRecipe(f.recipe));
  TESSEL_ASSIGN_OR_RETURN(DType dtype, ParseFloatDType(f.dtype, "--dtype"));
  TESSEL_ASSIGN_OR_RETURN(DType param_dtype, ParseFloatDType(f.param_dtype, "--param-dtype"));
  GlobalStep step;
  nn::TransformerConfig& config = step.config;
  config.arch = arch;
  config.layers = f.layers;
  config.d_model = f.d_model;
  config.heads = f.heads;
  config.kv_heads = f.kv_heads;
  config.ffn = f.ffn > 0 ? f.ffn : 4 * f.d_model;
  config.vocab = f.vocab;
  config.seq_len = f.seq_len;
  config.batch = f.batch > 0 ? f.batch : num_devices;
  config.dtype = dtype;
  config.param_dtype = param_dtype;
  TESSEL_RETURN_IF_ERROR(nn::ValidateTransformerConfig(config));

  // Without mesh flags: one "data" axis over each slice's devices, slices over DCN.
  std::vector<std::string> names = ParseNames(f.axis_names);
  std::vector<int64_t> ici, dcn;
  if (f.ici_mesh_shape.empty()) {
    ici = {num_devices / topology.num_slices()};
    if (names.size() != 1) names = {"data"};
  } else {
    TESSEL_ASSIGN_OR_RETURN(ici, ParseInts(f.ici_mesh_shape, "--ici-mesh-shape"));
  }
  if (f.dcn_mesh_shape.empty()) {
    dcn.assign(ici.size(), 1);
    if (topology.num_slices() > 1) dcn[0] = topology.num_slices();
  } else {
    TESSEL_ASSIGN_OR_RETURN(dcn, ParseInts(f.dcn_mesh_shape, "--dcn-mesh-shape"));
  }
  TESSEL_ASSIGN_OR_RETURN(spmd::HybridMesh mesh,
                          spmd::HybridMesh::Create(ici, dcn, names, topology));
  step.mesh_text = mesh.AxesToString();
  TESSEL_ASSIGN_OR_RETURN(nn::TransformerStep built,
                          nn::BuildTransformerStep(config, mesh, recipe));
  step.graph = std::move(built.graph);
  return step;
}

// Model-level figures derived from the report: MFU, tokens per second and the model's size.
struct Throughput {
  double mfu = 0;
  double tokens_per_s = 0;
  double params = 0;  // --model only
  double tokens = 0;  // --model only: tokens per step
};

Throughput ThroughputOf(const SimulateFlags& f, const GlobalStep& step,
                        const mesh::Simulator& simulator, const mesh::SimulationReport& r) {
  const double num_devices = static_cast<double>(r.num_devices);
  const double peak_flops = simulator.cost_model().PeakFlopsPerSecond(DType::kBF16) * num_devices;
  Throughput t;
  if (!f.model.empty()) {
    t.params = static_cast<double>(nn::TransformerParameterCount(step.config));
    t.tokens = static_cast<double>(step.config.tokens());
  }
  if (r.step_seconds <= 0) return t;
  if (!f.model.empty()) {
    // MFU as the PaLM paper defines it: 6 * parameters * tokens of model flops per step.
    t.mfu = 6 * t.params * t.tokens / (r.step_seconds * peak_flops);
    t.tokens_per_s = t.tokens / r.step_seconds;
  } else {
    t.mfu = r.flops_per_device * num_devices / (r.step_seconds * peak_flops);
  }
  return t;
}

// Sizes of the graphs and the wall time of each phase, for the report.
struct RunInfo {
  int64_t global_nodes = 0;
  int64_t local_nodes = 0;
  double build_s = 0;
  double partition_s = 0;
  double simulate_s = 0;
};

nlohmann::json ReportJson(const SimulateFlags& f, const mesh::Topology& topology,
                          const GlobalStep& step, const mesh::SimulationReport& r,
                          const Throughput& t, const RunInfo& info) {
  return {
      {"topology", topology.name()},
      {"device", r.device_name},
      {"num_devices", r.num_devices},
      {"num_slices", topology.num_slices()},
      {"mesh", step.mesh_text},
      {"recipe", f.model.empty() ? "" : f.recipe},
      {"model", f.model.empty() ? "hlo" : f.model},
      {"params", t.params},
      {"tokens_per_step", t.tokens},
      {"overlap", f.overlap},
      {"step_time_s", r.step_seconds},
      {"in_order_step_time_s", r.in_order_seconds},
      {"overlapped_step_time_s", r.overlapped_seconds},
      {"compute_s", r.compute_seconds},
      {"ici_s", r.ici_seconds},
      {"dcn_s", r.dcn_seconds},
      {"exposed_comm_s", r.exposed_comm_seconds},
      {"mfu", t.mfu},
      {"mfu_basis", f.model.empty() ? "program flops" : "6 * params * tokens"},
      {"tokens_per_s", t.tokens_per_s},
      {"flops_per_device", r.flops_per_device},
      {"peak_memory_bytes", r.peak_memory_bytes},
      {"parameter_bytes", r.parameter_bytes},
      {"hbm_bytes", r.hbm_bytes},
      {"exceeds_hbm", r.exceeds_hbm},
      {"ici_bytes_per_device", r.ici_bytes_per_device},
      {"dcn_bytes_per_device", r.dcn_bytes_per_device},
      {"ici_bytes_total", r.ici_bytes_total},
      {"dcn_bytes_total", r.dcn_bytes_total},
      {"device_classes", r.classes.size()},
      {"global_nodes", info.global_nodes},
      {"local_nodes", info.local_nodes},
      {"top_ops", OpsJson(r.top_ops)},
      {"top_collectives", OpsJson(r.top_collectives)},
      {"warnings", r.warnings},
      {"wall_s",
       {{"build", info.build_s}, {"partition", info.partition_s}, {"simulate", info.simulate_s}}},
  };
}

void PrintReport(const SimulateFlags& f, const mesh::Topology& topology, const GlobalStep& step,
                 const mesh::SimulationReport& r, const Throughput& t, const RunInfo& info) {
  std::cout << absl::StrFormat("topology       %s: %d devices (%s), %d slices\n", topology.name(),
                               r.num_devices, r.device_name, topology.num_slices());
  if (!f.model.empty()) {
    const nn::TransformerConfig& config = step.config;
    std::cout << absl::StrFormat(
        "model          %s, %d layers, d_model %d, heads %d/%d, ffn %d, vocab %d, seq %d, "
        "batch %d: %.4g parameters\n",
        f.model, config.layers, config.d_model, config.heads, config.num_kv_heads(), config.ffn,
        config.vocab, config.seq_len, config.batch, t.params);
    std::cout << "mesh           " << step.mesh_text << ", recipe " << f.recipe << "\n";
  }
  std::cout << absl::StrFormat("step time      %s (%s; in order %s, overlapped %s)\n",
                               Seconds(r.step_seconds), f.overlap ? "overlapped" : "in order",
                               Seconds(r.in_order_seconds), Seconds(r.overlapped_seconds));
  std::cout << absl::StrFormat("compute        %s\n", Seconds(r.compute_seconds));
  std::cout << absl::StrFormat("ICI            %s\n", Seconds(r.ici_seconds));
  std::cout << absl::StrFormat("DCN            %s\n", Seconds(r.dcn_seconds));
  std::cout << absl::StrFormat("exposed comm   %s\n", Seconds(r.exposed_comm_seconds));
  std::cout << absl::StrFormat("MFU            %.1f %% (%s)\n", 100 * t.mfu,
                               f.model.empty() ? "program flops" : "6 * params * tokens");
  if (!f.model.empty()) {
    std::cout << absl::StrFormat("tokens/s       %.4g\n", t.tokens_per_s);
  }
  std::cout << absl::StrFormat("peak memory    %s per device (HBM %s; parameters and state %s)\n",
                               FormatBytes(static_cast<double>(r.peak_memory_bytes)),
                               FormatBytes(static_cast<double>(r.hbm_bytes)),
                               FormatBytes(static_cast<double>(r.parameter_bytes)));
  std::cout << absl::StrFormat("ICI bytes      %s per device, %s in all\n",
                               FormatBytes(static_cast<double>(r.ici_bytes_per_device)),
                               FormatBytes(static_cast<double>(r.ici_bytes_total)));
  std::cout << absl::StrFormat("DCN bytes      %s per device, %s in all\n",
                               FormatBytes(static_cast<double>(r.dcn_bytes_per_device)),
                               FormatBytes(static_cast<double>(r.dcn_bytes_total)));
  std::cout << absl::StrFormat("device classes %d; %d global nodes, %d local nodes\n",
                               r.classes.size(), info.global_nodes, info.local_nodes);
  PrintOps("top ops:", r.top_ops);
  PrintOps("top collectives:", r.top_collectives);
  for (const std::string& w : r.warnings) {
    if (w.rfind("error:", 0) != 0) std::cout << "note: " << w << "\n";
  }
}

int Run(const SimulateFlags& f) {
  if (f.model.empty() == f.hlo.empty()) {
    return Usage("give exactly one of --model gpt|llama and --hlo FILE");
  }
  absl::StatusOr<mesh::Topology> topology = mesh::LoadTopology(f.config);
  if (!topology.ok()) return Fail(std::string(topology.status().message()));

  mesh::SimulatorOptions sim_options;
  sim_options.overlap = f.overlap;
  sim_options.record_trace = !f.trace.empty();
  if (f.assume_trip_count > 0) sim_options.assumed_trip_count = f.assume_trip_count;
  absl::StatusOr<mesh::Simulator> simulator = mesh::Simulator::Create(*topology, sim_options);
  if (!simulator.ok()) return Fail(std::string(simulator.status().message()));

  RunInfo info;
  auto t_build = std::chrono::steady_clock::now();
  GlobalStep step;
  if (!f.model.empty()) {
    absl::StatusOr<GlobalStep> built = BuildModelStep(f, *topology);
    if (!built.ok()) return Usage(std::string(built.status().message()));
    step = *std::move(built);
  } else {
    absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloFile(f.hlo);
    if (!graph.ok()) return Fail(std::string(graph.status().message()));
    step.graph = *std::move(graph);
  }
  info.build_s = Since(t_build);
  info.global_nodes = step.graph->num_nodes();

  auto t_partition = std::chrono::steady_clock::now();
  absl::StatusOr<partitioner::SpmdProgram> program =
      partitioner::Partition(*step.graph, topology->num_devices());
  if (!program.ok()) return Fail(std::string(program.status().message()));
  step.graph.reset();  // the global graph is not needed past partitioning; free it early
  info.partition_s = Since(t_partition);
  info.local_nodes = program->program->num_nodes();

  auto t_simulate = std::chrono::steady_clock::now();
  absl::StatusOr<mesh::SimulationReport> report = simulator->Run(*program);
  if (!report.ok()) return Fail(std::string(report.status().message()));
  info.simulate_s = Since(t_simulate);
  const mesh::SimulationReport& r = *report;
  const Throughput throughput = ThroughputOf(f, step, *simulator, r);

  if (!f.trace.empty()) {
    absl::Status written = mesh::WriteChromeTrace(r, f.trace);
    if (!written.ok()) return Fail(std::string(written.message()));
  }
  if (f.json) {
    std::cout << ReportJson(f, *topology, step, r, throughput, info).dump(2) << "\n";
  } else {
    PrintReport(f, *topology, step, r, throughput, info);
  }
  if (r.exceeds_hbm) {
    return Fail(absl::StrFormat(
        "the model does not fit: peak memory %s per device exceeds the HBM of %s (%s)",
        FormatBytes(static_cast<double>(r.peak_memory_bytes)), r.device_name,
        FormatBytes(static_cast<double>(r.hbm_bytes))));
  }
  return 0;
}

}  // namespace

CommandFn AddSimulateCommand(CLI::App& app) {
  auto f = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand("simulate", "predict the step time and memory of a model");
  cmd->add_option("config", f->config, "topology JSON (configs/)")->required();
  cmd->add_option("--model", f->model, "gpt or llama (a generated training step)");
  cmd->add_option("--hlo", f->hlo, "HLO text file with shardings instead of --model");
  cmd->add_option("--layers", f->layers, "decoder layers")->check(CLI::PositiveNumber);
  cmd->add_option("--d-model", f->d_model, "model width")->check(CLI::PositiveNumber);
  cmd->add_option("--heads", f->heads, "attention heads")->check(CLI::PositiveNumber);
  cmd->add_option("--kv-heads", f->kv_heads, "key/value heads (GQA; default = heads)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ffn", f->ffn, "MLP hidden size (default 4 * d_model)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--vocab", f->vocab, "vocabulary size")->check(CLI::PositiveNumber);
  cmd->add_option("--seq-len", f->seq_len, "sequence length")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", f->batch, "global batch in sequences (default: one per device)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", f->dtype, "activation dtype: bf16 (default), f16, f32");
  cmd->add_option("--param-dtype", f->param_dtype, "parameter / optimizer dtype (default f32)");
  cmd->add_option("--ici-mesh-shape", f->ici_mesh_shape, "per-slice mesh, e.g. 1,64,4");
  cmd->add_option("--dcn-mesh-shape", f->dcn_mesh_shape, "across slices, e.g. 2,1,1");
  cmd->add_option("--axis-names", f->axis_names, "mesh axis names (default data,fsdp,tensor)");
  cmd->add_option("--recipe", f->recipe, "dp, fsdp, tp, fsdp_tp (default), multislice_dp");
  cmd->add_option("--assume-trip-count", f->assume_trip_count,
                  "trip count of --hlo while loops whose count is not known statically")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--overlap", f->overlap, "report the overlapped (latency-hiding) schedule");
  cmd->add_option("--trace", f->trace, "write a Chrome trace (Perfetto) to this file");
  cmd->add_flag("--json", f->json, "print one JSON object");
  return [f]() { return Run(*f); };
}

}  // namespace tessel::tools
