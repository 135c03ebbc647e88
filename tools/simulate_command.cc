// `tessel simulate CONFIG --model gpt|llama [model flags] [mesh flags] --recipe R [--overlap]
//     [--remat POLICY] [--attention flash|dot_product] [--matmul-dtype bf16|int8|fp8]
//     [--require-fit] [--trace out.json] [--html out.html] [--json]`: builds one training step of a
//     decoder
// transformer (nn/transformer.h), shards it with a named recipe on a HybridMesh of the topology
// CONFIG, partitions it and simulates the step (mesh/sim/simulator.h), then adds what the graph
// does not hold: remat recompute and the flash-attention kernel (mesh/sim/training_step.h).
// `--model-config FILE.json` (nn/model_config.h; presets in configs/models/) describes the model
// instead of, or under, the model flags: a flag given explicitly overrides the file.
// `tessel simulate CONFIG --hlo FILE.hlo [...]`: the same for an HLO module with shardings.
//
//   $ tessel simulate configs/v5p-128.json --model llama --layers 2 --d-model 1024
//       --heads 8 --ffn 4096 --vocab 32000 --seq-len 2048 --batch 64
//       --ici-mesh-shape 1,16,4 --axis-names data,fsdp,tensor --recipe fsdp_tp
//
// Output: step time (in order and overlapped), compute / ICI / DCN / exposed communication,
// MFU (6 * params * tokens / (step time * peak bf16 of all devices); for --hlo the program's own
// flops), tokens per second, per-device peak memory, bytes per link class, the top 10 ops and
// collectives. --json prints one object instead (keys in docs/simulator.md). --html FILE also
// writes one self-contained page (tools/html_view.h): the mesh, the parameters' and the largest
// activations' tiles coloured by device, and the step's breakdown.
// A progress line goes to stderr after each phase that took over 2 s (building, partitioning).
// Memory (--model): parameters, gradients, optimizer state, activations under the remat policy
// and temporaries per device; a step that does not fit is a warning in the report and
// `"fits": false` in --json, not a failure.
// Host offload (--remat minimal_offloaded | qkv_proj_offloaded): the offloaded activations on a
// `host_offloaded` memory line (memory.host_offloaded_bytes, outside the HBM total) and the
// device <-> host copies on a `host offload` line (host_offload in --json).
// MaxText mesh axes (`--ici-data`, `--ici-stage`, `--ici-fsdp`, `--ici-fsdp-transpose`,
// `--ici-sequence`, `--ici-tensor`, `--ici-expert` and their `--dcn-*` counterparts, as
// MaxText's ici_*_parallelism / dcn_*_parallelism; -1 fills one axis with what the others leave)
// build the mesh instead of --ici-mesh-shape / --dcn-mesh-shape / --axis-names: a "sequence"
// axis is context parallelism (needs --attention flash), a "stage" axis pipeline parallelism
// over --microbatches with --pipeline-schedule gpipe|1f1b (mesh/sim/training_step.h); without
// a "stage" axis --microbatches is gradient accumulation (one microbatch's activations live).
// `--remat-replay` (PyTorch's checkpoint re-runs the whole layer forward) and
// `--attention-dropout P` (unfused dropout kernels under --fusion eager|none) model how
// Megatron-LM runs a layer (mesh/sim/training_step.h); `--flash-block N` and
// `--flash-split-backward` how a block flash kernel (MaxText's splash attention) runs one.
// `--num-slices N` simulates N copies of CONFIG's one slice joined by its DCN.
// `--sequence-parallel` splits the residual-stream activations over the tensor axis in the
// memory report (Megatron sequence parallelism; MaxText's activation_embed -> tensor).
// Exit codes (tools/command.h): 0 success, fitting or not; 2 bad arguments (unknown model,
// recipe, remat policy, attention or matmul dtype, sizes, a mesh whose product is not the
// device count, unknown axis names, a matmul dtype the device has no peak for); 1 failures
// (missing or invalid files, partitioning errors); 3 with --require-fit when the step does not
// fit in HBM (the report is still printed, and one line goes to stderr).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
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
#include "tessel/core/format.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/status_macros.h"
#include "tessel/mesh/sim/model_step.h"
#include "tessel/mesh/sim/simulator.h"
#include "tessel/mesh/sim/training_step.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/transformer.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/propagation.h"
#include "tessel/spmd/mesh.h"
#include "tools/command.h"
#include "tools/flag_parsing.h"
#include "tools/html_view.h"
#include "tools/model_flags.h"

namespace tessel::tools {
namespace {

struct SimulateFlags : TransformerFlags {
  CLI::App* command = nullptr;  // to tell flags given explicitly from defaults
  std::string config;
  std::string hlo;
  int64_t assume_trip_count = 0;  // 0: unknown trip counts are an error
  std::string remat;              // "" : the model file's, else none
  std::string remat_device;       // --remat custom: names kept in HBM ("" : the file's)
  std::string remat_offload;      // --remat custom: names kept in host memory
  std::string attention;          // "" : the model file's, else dot_product
  std::string matmul_dtype;       // "" : the model file's, else bf16
  std::string fusion = "xla";     // mesh::FusionMode: xla, eager (PyTorch eager + Megatron), none
  bool require_fit = false;
  bool sequence_parallel = false;
  bool remat_replay = false;
  double attention_dropout = 0;
  int64_t flash_block = 0;
  std::string flash_blocks;  // "q,kv,q_dkv,kv_dkv,q_dq,kv_dq"
  std::string moe_dispatch = "gather";
  bool flash_split_backward = false;
  int64_t layers_per_virtual_stage = 0;  // 0: no interleaving
  bool blocking_p2p = false;
  bool scatter_gather_p2p = false;

  bool given(const std::string& flag) const { return command && command->count(flag) > 0; }
  // MaxText's axes (kMaxTextAxes order); 1 = unused, -1 = the rest of the devices.
  std::vector<int64_t> ici_axes = std::vector<int64_t>(7, 1);
  std::vector<int64_t> dcn_axes = std::vector<int64_t>(7, 1);
  int64_t num_slices = 1;    // copies of CONFIG's one slice, joined by its DCN
  int64_t microbatches = 0;  // 0: as many as stages
  std::string pipeline_schedule = "1f1b";
  std::string ici_mesh_shape;
  std::string dcn_mesh_shape;
  std::string axis_names = "data,fsdp,tensor";
  std::string recipe = "fsdp_tp";
  bool overlap = false;
  bool extrapolate_layers = false;  // simulate stages of 1 and 2 layers (mesh/sim/model_step.h)
  std::string trace;
  std::string html;
  bool json = false;
};

// A generated transformer step (--model or --model-config), not an --hlo module.
bool IsModel(const SimulateFlags& f) { return !f.model.empty() || !f.model_config.empty(); }

using mesh::kMaxTextAxes;
using mesh::kNumMaxTextAxes;
using mesh::MeshShape;
using mesh::Throughput;

// The flag of MaxText's axis `axis` (mesh/sim/model_step.h): --ici-fsdp-transpose.
std::string AxisFlag(const std::string& prefix, std::string_view axis) {
  std::string flag = absl::StrCat("--", prefix, "-", std::string(axis));
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

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

// A progress line on stderr for a phase that took long enough for a user to wonder.
void Progress(double seconds, const char* what) {
  if (seconds >= 2.0)
    std::cerr << absl::StrFormat("tessel simulate: %s in %.1f s\n", what, seconds);
}

std::string Seconds(double s) {
  if (s >= 1) return absl::StrFormat("%.3f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.3f ms", s * 1e3);
  return absl::StrFormat("%.3f us", s * 1e6);
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

// The global graph to simulate, built from --model flags (every field, mesh/sim/model_step.h)
// or read from --hlo (the graph only).
struct GlobalStep : mesh::ModelStep {
  std::string model_name;  // --model only: the arch, or the model file's name
};

// One of --ici-* / --dcn-* as MaxText fills it: at most one -1, set to what the others leave of
// `total` devices (per slice) or slices.
absl::StatusOr<std::vector<int64_t>> FillAxes(std::vector<int64_t> sizes, int64_t total,
                                              const std::string& prefix, const char* what) {
  int64_t product = 1;
  int fill = -1;
  for (int i = 0; i < kNumMaxTextAxes; ++i) {
    if (sizes[i] == -1 && fill < 0) {
      fill = i;
    } else if (sizes[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(AxisFlag(prefix, kMaxTextAxes[i]), " ", sizes[i],
                       ": expected a size >= 1, or -1 (once per --", prefix, "-* set)"));
    } else if (product > std::numeric_limits<int64_t>::max() / sizes[i]) {
      // Checked before multiplying: sizes of 2^32 would wrap the product around to 0.
      return absl::InvalidArgumentError(
          absl::StrCat(AxisFlag(prefix, kMaxTextAxes[i]), " ", sizes[i], ": the --", prefix,
                       "-* axes multiply to more than ", std::numeric_limits<int64_t>::max(),
                       " but there are ", total, " ", what));
    } else {
      product *= sizes[i];
    }
  }
  if (fill >= 0 && total % product == 0) sizes[fill] = total / product;
  if (fill >= 0 ? total % product != 0 : product != total) {
    return absl::InvalidArgumentError(absl::StrCat("the --", prefix, "-* axes multiply to ",
                                                   product, " but there are ", total, " ", what));
  }
  return sizes;
}

absl::StatusOr<MeshShape> MeshShapeOf(const SimulateFlags& f, const mesh::Topology& topology) {
  const int64_t num_devices = topology.num_devices();
  MeshShape shape;
  bool maxtext = false;
  for (std::string_view axis : kMaxTextAxes) {
    maxtext = maxtext || f.given(AxisFlag("ici", axis)) || f.given(AxisFlag("dcn", axis));
  }
  if (maxtext) {
    for (const char* flag : {"--ici-mesh-shape", "--dcn-mesh-shape", "--axis-names"}) {
      if (f.given(flag)) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag, " and the MaxText axis flags (--ici-*, --dcn-*) exclude each other"));
      }
    }
    TESSEL_ASSIGN_OR_RETURN(shape.ici, FillAxes(f.ici_axes, num_devices / topology.num_slices(),
                                                "ici", "devices per slice"));
    TESSEL_ASSIGN_OR_RETURN(shape.dcn,
                            FillAxes(f.dcn_axes, topology.num_slices(), "dcn", "slices"));
    return mesh::MaxTextMeshShape(shape.ici, shape.dcn);
  }
  // Without mesh flags: one "data" axis over each slice's devices, slices over DCN.
  shape.names = ParseNames(f.axis_names);
  if (f.ici_mesh_shape.empty()) {
    shape.ici = {num_devices / topology.num_slices()};
    if (shape.names.size() != 1) shape.names = {"data"};
  } else {
    TESSEL_ASSIGN_OR_RETURN(shape.ici, ParseInts(f.ici_mesh_shape, "--ici-mesh-shape"));
  }
  if (f.dcn_mesh_shape.empty()) {
    shape.dcn.assign(shape.ici.size(), 1);
    if (topology.num_slices() > 1) shape.dcn[0] = topology.num_slices();
  } else {
    TESSEL_ASSIGN_OR_RETURN(shape.dcn, ParseInts(f.dcn_mesh_shape, "--dcn-mesh-shape"));
  }
  return shape;
}

// Builds one training step of the model, sharded with --recipe on the HybridMesh of the mesh
// flags over `topology` (mesh::BuildModelStep). Every error is a bad flag (kInvalidArgument).
// `plan_out` receives the plan; `stage_layers` > 0 builds a stage of that many layers.
absl::StatusOr<GlobalStep> BuildModelStep(const SimulateFlags& f, const nn::ModelFile* file,
                                          const mesh::Topology& topology, mesh::ModelPlan* plan_out,
                                          int64_t stage_layers) {
  const int64_t num_devices = topology.num_devices();
  mesh::ModelPlan plan;
  TESSEL_ASSIGN_OR_RETURN(plan.recipe, nn::ParseShardingRecipe(f.recipe));
  TESSEL_ASSIGN_OR_RETURN(nn::TransformerConfig config,
                          TransformerConfigOf(f, *f.command, file, num_devices));
  const RunSetting remat = RunSettingOf("--remat", f.remat, file, "remat", file ? file->remat : "");
  const RunSetting attention =
      RunSettingOf("--attention", f.attention, file, "attention", file ? file->attention : "");
  TESSEL_ASSIGN_OR_RETURN(plan.remat, ParseRunSetting(remat, "none", [](const std::string& s) {
                            return mesh::ParseRematPolicy(s);
                          }));
  // remat custom's lists: a flag over the model file's key, each list whole.
  auto add_custom = [&](const char* flag, const std::string& flag_value, const char* key,
                        const std::string& file_value, std::string_view where) -> absl::Status {
    const RunSetting names = RunSettingOf(flag, flag_value, file, key, file_value);
    if (names.value.empty()) return absl::OkStatus();
    if (plan.remat != mesh::RematPolicy::kCustom) {
      return absl::InvalidArgumentError(
          absl::StrCat(names.origin, " applies to --remat custom, not ",
                       std::string(mesh::RematPolicyName(plan.remat))));
    }
    return mesh::AddCustomRematNames(names.value, where, names.origin, &plan.custom_remat);
  };
  TESSEL_RETURN_IF_ERROR(add_custom("--remat-device", f.remat_device, "remat_device",
                                    file ? file->remat_device : "", "device"));
  TESSEL_RETURN_IF_ERROR(add_custom("--remat-offload", f.remat_offload, "remat_offload",
                                    file ? file->remat_offload : "", "offload"));
  TESSEL_ASSIGN_OR_RETURN(plan.attention,
                          ParseRunSetting(attention, "dot_product", [](const std::string& s) {
                            return mesh::ParseAttentionKernel(s);
                          }));
  TESSEL_ASSIGN_OR_RETURN(plan.mesh, MeshShapeOf(f, topology));
  TESSEL_ASSIGN_OR_RETURN(plan.pipeline_schedule, mesh::ParsePipelineSchedule(f.pipeline_schedule));
  plan.microbatches = f.microbatches;
  plan.sequence_parallel = f.sequence_parallel;
  plan.remat_replay = f.remat_replay;
  plan.attention_dropout = f.attention_dropout;
  plan.flash_block = f.flash_block;
  absl::StatusOr<mesh::MoeDispatch> dispatch = mesh::ParseMoeDispatch(f.moe_dispatch);
  if (!dispatch.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--moe-dispatch: ", dispatch.status().message()));
  }
  plan.moe_dispatch = *dispatch;
  if (f.given("--moe-dispatch") && config.experts == 0) {
    return absl::InvalidArgumentError("--moe-dispatch applies to a mixture of experts (--experts)");
  }
  if (!f.flash_blocks.empty()) {
    TESSEL_ASSIGN_OR_RETURN(plan.flash_blocks,
                            mesh::ParseFlashBlocks(f.flash_blocks, "--flash-blocks"));
  }
  plan.flash_split_backward = f.flash_split_backward;
  plan.layers_per_virtual_stage = f.layers_per_virtual_stage;
  plan.blocking_transfers = f.blocking_p2p;
  plan.scatter_gather = f.scatter_gather_p2p;
  GlobalStep step;
  TESSEL_ASSIGN_OR_RETURN(static_cast<mesh::ModelStep&>(step),
                          mesh::BuildModelStep(topology, config, plan, stage_layers));
  *plan_out = plan;
  if (step.shards.stage == 1) {
    // Without stages --microbatches is gradient accumulation; a schedule has nothing to order.
    for (const char* flag : {"--pipeline-schedule", "--blocking-p2p", "--scatter-gather-p2p"}) {
      if (f.given(flag)) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " needs a \"stage\" axis (--ici-stage or --dcn-stage > 1)"));
      }
    }
  }
  step.model_name = file && !file->name.empty() && !f.given("--model")
                        ? file->name
                        : std::string(nn::TransformerArchName(step.config.arch));
  return step;
}

// Model-level figures derived from the report: MFU, tokens per second and the model's size
// (mesh::ModelThroughput); for --hlo the MFU of the program's own flops.
Throughput ThroughputOf(const SimulateFlags& f, const GlobalStep& step,
                        const mesh::Simulator& simulator, const mesh::SimulationReport& r) {
  if (IsModel(f)) return mesh::ModelThroughput(step.config, simulator.cost_model(), r);
  const double num_devices = static_cast<double>(r.num_devices);
  const double peak_flops = simulator.cost_model().PeakFlopsPerSecond(DType::kBF16) * num_devices;
  Throughput t;
  if (r.step_seconds <= 0) return t;
  t.mfu = r.flops_per_device * num_devices / (r.step_seconds * peak_flops);
  return t;
}

// Sizes of the graphs and the wall time of each phase, for the report.
struct RunInfo {
  int64_t global_nodes = 0;
  int64_t local_nodes = 0;
  double build_s = 0;
  double partition_s = 0;
  double simulate_s = 0;
  int64_t live_buffer_peak_bytes = 0;  // the program's live-buffer peak (no remat, dense)
  std::optional<mesh::TrainingStepEstimate> training;  // --model only
  mesh::PipelineEstimate pipeline;                     // --model only
};

// The --model parts of the JSON report: the model description, remat and attention, and the
// memory breakdown.
nlohmann::json TrainingJson(const GlobalStep& step, const mesh::TrainingStepEstimate& e) {
  const nn::TransformerConfig& c = step.config;
  nlohmann::json kept = nlohmann::json::array(), recomputed = nlohmann::json::array();
  for (mesh::LayerValue v : e.remat.kept) kept.push_back(std::string(mesh::LayerValueName(v)));
  for (mesh::LayerOp op : e.remat.recomputed) {
    recomputed.push_back(std::string(mesh::LayerOpName(op)));
  }
  nlohmann::json offloaded = nlohmann::json::array();
  for (mesh::LayerValue v : e.remat.offloaded) {
    offloaded.push_back(std::string(mesh::LayerValueName(v)));
  }
  return {
      {"model_config",
       {{"arch", std::string(nn::TransformerArchName(c.arch))},
        {"layers", c.layers},
        {"d_model", c.d_model},
        {"heads", c.heads},
        {"kv_heads", c.num_kv_heads()},
        {"head_dim", c.head_dim()},
        {"ffn", c.ffn},
        {"vocab", c.vocab},
        {"seq_len", c.seq_len},
        {"batch", c.batch},
        {"positions", c.rotary() ? "rotary" : "learned"},
        {"tie_embeddings", c.tie_embeddings},
        {"parallel_block", c.parallel_block},
        {"sliding_window", c.sliding_window},
        {"experts", c.experts},
        {"top_k", c.top_k},
        {"capacity_factor", c.capacity_factor}}},
      {"moe",
       {{"flops_per_device", e.moe_flops},
        {"compute_s", e.moe_seconds},
        {"all_to_all_ici_s", e.moe_ici_seconds},
        {"all_to_all_dcn_s", e.moe_dcn_seconds},
        {"dispatch",
         step.training.moe_dispatch == mesh::MoeDispatch::kEinsum ? "einsum" : "gather"},
        {"dispatch_flops_per_device", e.moe_dispatch_flops},
        {"expert_group_size", step.training.expert_group.size()}}},
      {"sequence_parallel", step.training.sequence_parallel},
      {"quantize", {{"bytes_per_device", e.quantize_bytes}, {"quantize_s", e.quantize_seconds}}},
      {"remat",
       {{"policy", std::string(mesh::RematPolicyName(step.training.remat))},
        {"kept", kept},
        {"offloaded", offloaded},
        {"recomputed", recomputed},
        {"replay", step.training.remat_replay},
        {"recompute_flops_per_device", e.recompute_flops},
        {"recompute_bytes_per_device", e.recompute_bytes},
        {"recompute_s", e.recompute_seconds}}},
      {"attention",
       {{"kernel", std::string(mesh::AttentionKernelName(step.training.attention))},
        {"flash_flops_per_device", e.attention_flops},
        {"flash_bytes_per_device", e.attention_bytes},
        {"flash_s", e.attention_seconds},
        {"flash_block", step.training.flash_block},
        {"flash_blocks",
         {step.training.flash_blocks.q, step.training.flash_blocks.kv,
          step.training.flash_blocks.q_dkv, step.training.flash_blocks.kv_dkv,
          step.training.flash_blocks.q_dq, step.training.flash_blocks.kv_dq}},
        {"flash_split_backward", step.training.flash_split_backward},
        {"dropout", step.training.attention_dropout},
        {"dropout_bytes_per_device", e.dropout_bytes},
        {"dropout_s", e.dropout_seconds}}},
      {"memory",
       {{"parameter_bytes", e.memory.parameter_bytes},
        {"gradient_bytes", e.memory.gradient_bytes},
        {"optimizer_bytes", e.memory.optimizer_bytes},
        {"activation_bytes", e.memory.activation_bytes},
        {"temporary_bytes", e.memory.temporary_bytes},
        {"total_bytes", e.memory.total_bytes()},
        {"host_offloaded_bytes", e.memory.host_offloaded_bytes}}},
  };
}

// The --model context- and pipeline-parallel terms of the JSON report.
nlohmann::json ParallelJson(const GlobalStep& step, const mesh::TrainingStepEstimate& e,
                            const mesh::PipelineEstimate& p, double compute_s) {
  return {
      {"context_parallel",
       {{"sequence_shards", step.shards.sequence},
        {"kv_collectives_ici_s", e.cp_ici_seconds},
        {"kv_collectives_dcn_s", e.cp_dcn_seconds}}},
      {"pipeline",
       {{"stages", p.stages},
        {"layers_per_stage", step.stage_config.layers},
        {"microbatches", p.microbatches},
        {"schedule", std::string(mesh::PipelineScheduleName(p.schedule))},
        {"virtual_stages", p.virtual_stages},
        {"blocking_transfers", step.pipeline.blocking_transfers},
        {"scatter_gather", step.pipeline.scatter_gather},
        {"bubble_fraction", p.bubble_fraction},
        {"bubble_s", p.stages > 1 ? compute_s * static_cast<double>(p.stages - 1) /
                                        static_cast<double>(p.microbatches * p.virtual_stages)
                                  : 0.0},
        {"transfer_bytes", p.transfer_bytes},
        {"transfer_s", p.transfer_seconds},
        {"exposed_transfer_s", p.exposed_ici_seconds + p.exposed_dcn_seconds}}},
  };
}

// The host offload terms of the JSON report (mesh/sim/training_step.h, "Host offload").
nlohmann::json OffloadJson(const mesh::TrainingStepEstimate& e, double compute_s, bool overlap) {
  return {{"host_offload",
           {{"bytes_each_way", e.offload_bytes},
            {"seconds_each_way", e.offload_seconds},
            {"exposed_s", mesh::HostOffloadExposedSeconds(e, compute_s, overlap)}}}};
}

nlohmann::json ReportJson(const SimulateFlags& f, const mesh::Topology& topology,
                          const GlobalStep& step, const mesh::SimulationReport& r,
                          const Throughput& t, const RunInfo& info) {
  nlohmann::json out = {
      {"topology", topology.name()},
      {"device", r.device_name},
      {"num_devices", r.num_devices},
      {"num_slices", topology.num_slices()},
      {"mesh", step.mesh_text},
      {"recipe", IsModel(f) ? f.recipe : ""},
      {"model", IsModel(f) ? step.model_name : "hlo"},
      {"matmul_dtype", f.matmul_dtype.empty() ? "bf16" : f.matmul_dtype},
      {"fusion", f.fusion},
      {"params", t.params},
      {"active_params", t.active_params},
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
      {"mfu_basis", IsModel(f) ? "6 * params * tokens" : "program flops"},
      {"tokens_per_s", t.tokens_per_s},
      {"flops_per_device", r.flops_per_device},
      {"peak_memory_bytes", r.peak_memory_bytes},
      {"parameter_bytes", r.parameter_bytes},
      {"hbm_bytes", r.hbm_bytes},
      {"exceeds_hbm", r.exceeds_hbm},
      {"fits", !r.exceeds_hbm},
      {"live_buffer_peak_bytes", info.live_buffer_peak_bytes},
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
  if (info.training) {
    out.update(TrainingJson(step, *info.training));
    out.update(ParallelJson(step, *info.training, info.pipeline, r.compute_seconds));
    out.update(OffloadJson(*info.training, r.compute_seconds, f.overlap));
  }
  return out;
}

// The memory lines of the text report: the --model breakdown, or the live-buffer peak (--hlo).
void PrintMemory(const mesh::SimulationReport& r, const RunInfo& info) {
  auto bytes = [](int64_t b) { return FormatBytes(static_cast<double>(b)); };
  if (!info.training) {
    std::cout << absl::StrFormat("peak memory    %s per device (HBM %s; parameters and state %s)\n",
                                 bytes(r.peak_memory_bytes), bytes(r.hbm_bytes),
                                 bytes(r.parameter_bytes));
    return;
  }
  const mesh::TrainingMemory& m = info.training->memory;
  std::cout << absl::StrFormat("memory         %s per device of %s HBM: %s\n",
                               bytes(m.total_bytes()), bytes(r.hbm_bytes),
                               r.exceeds_hbm ? "does NOT fit" : "fits");
  std::cout << absl::StrFormat(
      "  parameters %s, gradients %s, optimizer %s, activations %s, temporaries %s\n",
      bytes(m.parameter_bytes), bytes(m.gradient_bytes), bytes(m.optimizer_bytes),
      bytes(m.activation_bytes), bytes(m.temporary_bytes));
  if (m.host_offloaded_bytes > 0) {
    std::cout << absl::StrFormat("  host_offloaded %s per device in host memory (not in HBM)\n",
                                 bytes(m.host_offloaded_bytes));
  }
  std::cout << absl::StrFormat("  (live-buffer peak of the program without remat: %s)\n",
                               bytes(info.live_buffer_peak_bytes));
}

// The context- and pipeline-parallel lines of the text report (none without those axes).
void PrintParallel(const GlobalStep& step, const mesh::TrainingStepEstimate& e,
                   const mesh::PipelineEstimate& p) {
  if (step.shards.sequence > 1) {
    std::cout << absl::StrFormat(
        "context        %d sequence shards of %d tokens: K/V all-gathers and dK/dV "
        "reduce-scatters %s\n",
        step.shards.sequence, step.graph_config.seq_len,
        Seconds(e.cp_ici_seconds + e.cp_dcn_seconds));
  }
  if (p.stages == 1 && p.microbatches > 1) {
    std::cout << absl::StrFormat(
        "accumulation   %d microbatches of %d sequences: activations and working set of one\n",
        p.microbatches,
        (step.config.batch + step.shards.batch - 1) / step.shards.batch / p.microbatches);
  }
  if (p.stages > 1) {
    std::cout << absl::StrFormat(
        "pipeline       %d stages of %d layers, %d microbatches, %s%s: bubble %.1f %%, "
        "transfers %s each%s, %s exposed\n",
        p.stages, step.stage_config.layers, p.microbatches, mesh::PipelineScheduleName(p.schedule),
        p.virtual_stages > 1 ? absl::StrFormat(" interleaved x %d", p.virtual_stages) : "",
        100 * p.bubble_fraction, Seconds(p.transfer_seconds),
        step.pipeline.blocking_transfers ? " (blocking)" : "",
        Seconds(p.exposed_ici_seconds + p.exposed_dcn_seconds));
  }
}

void PrintReport(const SimulateFlags& f, const mesh::Topology& topology, const GlobalStep& step,
                 const mesh::SimulationReport& r, const Throughput& t, const RunInfo& info) {
  std::cout << absl::StrFormat("topology       %s: %d devices (%s), %d slices\n", topology.name(),
                               r.num_devices, r.device_name, topology.num_slices());
  if (IsModel(f)) {
    const nn::TransformerConfig& config = step.config;
    std::cout << absl::StrFormat(
        "model          %s, %d layers, d_model %d, heads %d/%d x %d, ffn %d, vocab %d, seq %d, "
        "batch %d: %.4g parameters\n",
        step.model_name, config.layers, config.d_model, config.heads, config.num_kv_heads(),
        config.head_dim(), config.ffn, config.vocab, config.seq_len, config.batch, t.params);
    std::cout << "mesh           " << step.mesh_text << ", recipe " << f.recipe
              << (step.training.sequence_parallel ? ", sequence parallel" : "") << "\n";
    if (config.experts > 0 && info.training) {
      const mesh::TrainingStepEstimate& e = *info.training;
      std::cout << absl::StrFormat(
          "experts        %d, top %d, capacity factor %g: %.4g active parameters; experts and "
          "router %s%s, all-to-all %s\n",
          config.experts, config.top_k, config.capacity_factor, t.active_params,
          Seconds(e.moe_seconds),
          e.moe_dispatch_flops > 0
              ? absl::StrFormat(" (einsum dispatch %.4g flops per device)", e.moe_dispatch_flops)
              : std::string(),
          Seconds(e.moe_ici_seconds + e.moe_dcn_seconds));
    }
    if (info.training) {
      const mesh::TrainingStepEstimate& e = *info.training;
      std::cout << absl::StrFormat(
          "remat          %s%s: recompute %s (%.4g flops per device); attention %s%s%s\n",
          step.training.remat == mesh::RematPolicy::kCustom
              ? absl::StrCat("custom (", mesh::CustomRematToString(step.training.custom_remat), ")")
              : std::string(mesh::RematPolicyName(step.training.remat)),
          step.training.remat_replay ? " (replayed)" : "", Seconds(e.recompute_seconds),
          e.recompute_flops, mesh::AttentionKernelName(step.training.attention),
          step.training.attention == mesh::AttentionKernel::kFlash
              ? absl::StrFormat(" %s (%.4g flops per device)", Seconds(e.attention_seconds),
                                e.attention_flops)
              : std::string(),
          step.training.attention_dropout > 0
              ? absl::StrFormat(", dropout %g %s", step.training.attention_dropout,
                                Seconds(e.dropout_seconds))
              : std::string());
      if (e.quantize_bytes > 0) {
        std::cout << absl::StrFormat(
            "quantize       matmul operands: %s per device through HBM, %s\n",
            FormatBytes(static_cast<double>(e.quantize_bytes)), Seconds(e.quantize_seconds));
      }
      if (e.offload_bytes > 0) {
        std::cout << absl::StrFormat(
            "host offload   %s each way per device: %s each way, %s exposed\n",
            FormatBytes(static_cast<double>(e.offload_bytes)), Seconds(e.offload_seconds),
            Seconds(mesh::HostOffloadExposedSeconds(e, r.compute_seconds, f.overlap)));
      }
    }
  }
  if (IsModel(f) && info.training) PrintParallel(step, *info.training, info.pipeline);
  std::cout << absl::StrFormat("step time      %s (%s; in order %s, overlapped %s)\n",
                               Seconds(r.step_seconds), f.overlap ? "overlapped" : "in order",
                               Seconds(r.in_order_seconds), Seconds(r.overlapped_seconds));
  std::cout << absl::StrFormat("compute        %s\n", Seconds(r.compute_seconds));
  std::cout << absl::StrFormat("ICI            %s\n", Seconds(r.ici_seconds));
  std::cout << absl::StrFormat("DCN            %s\n", Seconds(r.dcn_seconds));
  std::cout << absl::StrFormat("exposed comm   %s\n", Seconds(r.exposed_comm_seconds));
  std::cout << absl::StrFormat("MFU            %.1f %% (%s)\n", 100 * t.mfu,
                               IsModel(f) ? "6 * params * tokens" : "program flops");
  if (IsModel(f)) {
    std::cout << absl::StrFormat("tokens/s       %.4g\n", t.tokens_per_s);
  }
  PrintMemory(r, info);
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
  // Problems ("error: ..." from the live-buffer check of --hlo, "warning: ..." from the
  // training-step estimate) as they are; assumptions as notes.
  for (const std::string& w : r.warnings) {
    const bool problem = w.rfind("error:", 0) == 0 || w.rfind("warning:", 0) == 0;
    std::cout << (problem ? "" : "note: ") << w << "\n";
  }
}

// The tensors the --html page draws: the entry's parameters (largest first, at most 16) and its
// 6 largest other values, with the shardings propagation gives them.
absl::StatusOr<std::vector<HtmlTensor>> HtmlTensorsOf(const Graph& graph, int64_t num_devices) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<spmd::Sharding> shardings,
                          partitioner::ComputeShardings(graph, num_devices));
  std::vector<std::pair<const Node*, size_t>> params, values;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node* node = graph.nodes()[i];
    if (node->shape().is_tuple() || node->opcode() == Opcode::kConstant) continue;
    (node->opcode() == Opcode::kParameter ? params : values).emplace_back(node, i);
  }
  auto larger = [](const auto& a, const auto& b) {
    return a.first->shape().num_elements() > b.first->shape().num_elements();
  };
  std::stable_sort(params.begin(), params.end(), larger);
  std::stable_sort(values.begin(), values.end(), larger);
  std::vector<HtmlTensor> tensors;
  auto add = [&](const std::vector<std::pair<const Node*, size_t>>& list, size_t limit,
                 const char* kind) {
    for (size_t k = 0; k < list.size() && k < limit; ++k) {
      const auto& [node, i] = list[k];
      tensors.push_back({absl::StrCat("%", node->name()), node->shape(), shardings[i],
                         absl::StrCat(kind, " (", OpcodeName(node->opcode()), ")")});
    }
    if (list.size() > limit) {
      tensors.back().note +=
          absl::StrCat("; ", list.size() - limit, " smaller ", kind, "s not drawn");
    }
  };
  add(params, 16, "parameter");
  add(values, 6, "activation");
  return tensors;
}

// The --html page's mesh: the HybridMesh (--model), else the topology's devices as slices x
// devices per slice (an HLO module names device ids, not a mesh).
HtmlMesh HtmlMeshOf(const GlobalStep& step, const mesh::Topology& topology) {
  if (!step.mesh_text.empty()) {
    return {step.mesh.axis_names(), step.mesh.mesh_shape(), step.mesh.device_ids()};
  }
  HtmlMesh m;
  m.axis_names = {"slice", "device"};
  m.shape = {topology.num_slices(), topology.num_devices() / topology.num_slices()};
  for (int64_t d = 0; d < topology.num_devices(); ++d) m.device_ids.push_back(d);
  return m;
}

HtmlStep HtmlStepOf(const mesh::SimulationReport& r, const Throughput& t, const RunInfo& info) {
  HtmlStep step;
  step.step_seconds = r.step_seconds;
  step.bars = {{"step", r.step_seconds},
               {"compute", r.compute_seconds},
               {"ICI", r.ici_seconds},
               {"DCN", r.dcn_seconds},
               {"exposed comm", r.exposed_comm_seconds}};
  step.memory_bytes = info.training ? info.training->memory.total_bytes() : r.peak_memory_bytes;
  step.hbm_bytes = r.hbm_bytes;
  step.facts = {{"device", absl::StrCat(r.num_devices, " x ", r.device_name)},
                {"in order / overlapped",
                 absl::StrCat(Seconds(r.in_order_seconds), " / ", Seconds(r.overlapped_seconds))},
                {"MFU", absl::StrFormat("%.1f %%", 100 * t.mfu)},
                {"ICI bytes per device", FormatBytes(static_cast<double>(r.ici_bytes_per_device))},
                {"DCN bytes per device", FormatBytes(static_cast<double>(r.dcn_bytes_per_device))},
                {"fits in HBM", r.exceeds_hbm ? "no" : "yes"}};
  step.table.push_back({"time", "opcode", "shape", "name"});
  for (const std::vector<mesh::OpEntry>* ops : {&r.top_ops, &r.top_collectives}) {
    for (const mesh::OpEntry& e : *ops) {
      step.table.push_back({Seconds(e.seconds), e.opcode, e.shape, e.name});
    }
  }
  return step;
}

// Checks the flags that only --model takes and the matmul dtype against the device; fills the
// simulator's options. Returns the usage message, or "" when the flags are fine.
std::string CheckRunFlags(const SimulateFlags& f, const nn::ModelFile* file,
                          const mesh::Topology& topology, mesh::SimulatorOptions& options) {
  if (!IsModel(f)) {
    for (const char* flag : {"--remat",
                             "--remat-device",
                             "--remat-offload",
                             "--attention",
                             "--head-dim",
                             "--positions",
                             "--tie-embeddings",
                             "--parallel-block",
                             "--sliding-window",
                             "--experts",
                             "--top-k",
                             "--capacity-factor",
                             "--moe-dispatch",
                             "--microbatches",
                             "--pipeline-schedule",
                             "--sequence-parallel",
                             "--remat-replay",
                             "--attention-dropout",
                             "--layers-per-virtual-stage",
                             "--blocking-p2p",
                             "--scatter-gather-p2p"}) {
      if (f.given(flag)) return absl::StrCat(flag, " applies to --model / --model-config only");
    }
    // The flash kernel's shape (mesh/sim/training_step.h), also --model only.
    for (const char* flag : {"--flash-block", "--flash-blocks", "--flash-split-backward"}) {
      if (f.given(flag)) return absl::StrCat(flag, " applies to --model / --model-config only");
    }
  }
  const RunSetting matmul = RunSettingOf("--matmul-dtype", f.matmul_dtype, file, "matmul_dtype",
                                         file ? file->matmul_dtype : "");
  absl::StatusOr<std::string> peak_dtype = MatmulPeakDType(matmul.value);
  if (!peak_dtype.ok()) return absl::StrCat(matmul.origin, ": ", peak_dtype.status().message());
  if (!peak_dtype->empty() && !topology.device_spec().PeakTflops(*peak_dtype)) {
    return absl::StrCat(matmul.origin, " ", matmul.value, ": the device spec of ",
                        topology.device_spec().name, " gives no peak for ", *peak_dtype);
  }
  options.cost.matmul_dtype = *peak_dtype;
  absl::StatusOr<mesh::FusionMode> fusion = mesh::ParseFusionMode(f.fusion);
  if (!fusion.ok()) return absl::StrCat("--fusion: ", fusion.status().message());
  options.cost.fusion = *fusion;
  options.overlap = f.overlap;
  options.record_trace = !f.trace.empty();
  return "";
}

// The terms the graph does not hold (remat, flash, MoE, context and pipeline parallelism,
// mesh/sim/model_step.h), added to `report`; the estimates go to `info`.
absl::Status AddTrainingStep(const GlobalStep& step, const mesh::Simulator& simulator,
                             const partitioner::SpmdProgram& program,
                             mesh::SimulationReport& report, RunInfo& info) {
  TESSEL_ASSIGN_OR_RETURN(mesh::ModelEstimates estimates,
                          mesh::AddTrainingStep(step, simulator, program, report));
  info.training = std::move(estimates.training);
  info.pipeline = estimates.pipeline;
  return absl::OkStatus();
}

// Prints the report (text or --json); the exit code of --require-fit.
int Output(const SimulateFlags& f, const mesh::Topology& topology, const GlobalStep& step,
           const mesh::SimulationReport& r, const Throughput& throughput, const RunInfo& info) {
  if (f.json) {
    std::cout << ReportJson(f, topology, step, r, throughput, info).dump(2) << "\n";
  } else {
    PrintReport(f, topology, step, r, throughput, info);
  }
  if (r.exceeds_hbm && f.require_fit) {
    std::cerr << absl::StrFormat(
        "tessel simulate: --require-fit: the step does not fit: %s per device exceeds the HBM "
        "of %s (%s)\n",
        FormatBytes(static_cast<double>(r.peak_memory_bytes)), r.device_name,
        FormatBytes(static_cast<double>(r.hbm_bytes)));
    return kExitDoesNotFit;
  }
  return 0;
}

// --extrapolate-layers: mesh::SimulateModelPlan on stages of 1 and 2 layers, extrapolated to
// the model's (`step` was built with one layer a stage, to check the flags cheaply).
int RunExtrapolated(const SimulateFlags& f, const mesh::Topology& topology,
                    const mesh::ModelPlan& plan, const mesh::SimulatorOptions& sim_options,
                    GlobalStep step, RunInfo info) {
  auto t_simulate = std::chrono::steady_clock::now();
  mesh::ModelSimulationOptions options;
  options.simulator = sim_options;
  options.extrapolate_layers = true;
  absl::StatusOr<mesh::ModelSimulation> sim =
      mesh::SimulateModelPlan(topology, step.config, plan, options);
  if (!sim.ok()) {
    return sim.status().code() == absl::StatusCode::kInvalidArgument
               ? Usage(std::string(sim.status().message()))
               : Fail(std::string(sim.status().message()));
  }
  const std::string model_name = step.model_name;
  static_cast<mesh::ModelStep&>(step) = std::move(sim->step);
  step.model_name = model_name;
  info.global_nodes = sim->global_nodes;
  info.local_nodes = sim->local_nodes;
  info.live_buffer_peak_bytes = sim->live_buffer_peak_bytes;
  info.training = sim->estimates.training;
  info.pipeline = sim->estimates.pipeline;
  info.simulate_s = Since(t_simulate);
  return Output(f, topology, step, sim->report, sim->throughput, info);
}

int Run(const SimulateFlags& f) {
  if (IsModel(f) == !f.hlo.empty()) {
    return Usage("give exactly one of --model gpt|llama (or --model-config FILE) and --hlo FILE");
  }
  absl::StatusOr<mesh::Topology> topology = LoadSlices(f.config, f.num_slices);
  if (!topology.ok()) return Fail(std::string(topology.status().message()));
  absl::StatusOr<std::optional<nn::ModelFile>> file = LoadModelFile(f);
  if (!file.ok()) return Fail(std::string(file.status().message()));
  const nn::ModelFile* model_file = file->has_value() ? &file->value() : nullptr;
  mesh::SimulatorOptions sim_options;
  if (std::string bad = CheckRunFlags(f, model_file, *topology, sim_options); !bad.empty()) {
    return Usage(bad);
  }
  if (f.assume_trip_count > 0) sim_options.assumed_trip_count = f.assume_trip_count;

  if (f.extrapolate_layers && (!IsModel(f) || !f.html.empty() || !f.trace.empty())) {
    return Usage(
        "--extrapolate-layers applies to --model / --model-config, without --html and "
        "--trace (they need the whole graph)");
  }
  RunInfo info;
  auto t_build = std::chrono::steady_clock::now();
  GlobalStep step;
  if (IsModel(f)) {
    mesh::ModelPlan plan;
    absl::StatusOr<GlobalStep> built =
        BuildModelStep(f, model_file, *topology, &plan, f.extrapolate_layers ? 1 : 0);
    if (!built.ok()) return Usage(std::string(built.status().message()));
    step = *std::move(built);
    if (f.extrapolate_layers) {
      step.graph.reset();
      info.build_s = Since(t_build);
      return RunExtrapolated(f, *topology, plan, sim_options, std::move(step), std::move(info));
    }
    sim_options = mesh::ModelSimulatorOptions(step, std::move(sim_options));
  } else {
    absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloFile(f.hlo);
    if (!graph.ok()) return Fail(std::string(graph.status().message()));
    step.graph = *std::move(graph);
  }
  Progress(info.build_s = Since(t_build), "built the step");
  info.global_nodes = step.graph->num_nodes();
  absl::StatusOr<mesh::Simulator> simulator = mesh::Simulator::Create(*topology, sim_options);
  if (!simulator.ok()) return Fail(std::string(simulator.status().message()));

  auto t_partition = std::chrono::steady_clock::now();
  // The partitioner costs its choices on this topology's links, with the simulator's model.
  partitioner::PartitionOptions partition_options;
  partition_options.cost_model = &simulator->cost_model();
  absl::StatusOr<partitioner::SpmdProgram> program =
      partitioner::Partition(*step.graph, topology->num_devices(), partition_options);
  if (!program.ok()) {
    // With --hlo, an error about one of the file's instructions points at its line.
    return Fail(std::string(
        (f.hlo.empty() ? program.status() : WithHloLine(f.hlo, program.status())).message()));
  }
  Progress(info.partition_s = Since(t_partition), "partitioned");
  std::vector<HtmlTensor> html_tensors;
  if (!f.html.empty()) {
    absl::StatusOr<std::vector<HtmlTensor>> tensors =
        HtmlTensorsOf(*step.graph, topology->num_devices());
    if (!tensors.ok()) return Fail(std::string(tensors.status().message()));
    html_tensors = *std::move(tensors);
  }
  step.graph.reset();  // the global graph is not needed past partitioning; free it early
  info.local_nodes = program->program->num_nodes();

  auto t_simulate = std::chrono::steady_clock::now();
  absl::StatusOr<mesh::SimulationReport> report = simulator->Run(*program);
  if (!report.ok()) return Fail(std::string(report.status().message()));
  info.live_buffer_peak_bytes = report->peak_memory_bytes;
  if (IsModel(f)) {
    if (absl::Status added = AddTrainingStep(step, *simulator, *program, *report, info);
        !added.ok()) {
      return added.code() == absl::StatusCode::kInvalidArgument
                 ? Usage(std::string(added.message()))
                 : Fail(std::string(added.message()));
    }
  }
  info.simulate_s = Since(t_simulate);
  const mesh::SimulationReport& r = *report;
  const Throughput throughput = ThroughputOf(f, step, *simulator, r);

  if (!f.trace.empty()) {
    absl::Status written = mesh::WriteChromeTrace(r, f.trace);
    if (!written.ok()) return Fail(std::string(written.message()));
  }
  if (!f.html.empty()) {
    HtmlPage page;
    page.title = "tessel simulate";
    page.subtitle = absl::StrCat(IsModel(f) ? step.model_name : f.hlo, " on ", topology->name(),
                                 IsModel(f) ? absl::StrCat(", recipe ", f.recipe) : "");
    page.mesh = HtmlMeshOf(step, *topology);
    page.num_devices = topology->num_devices();
    page.tensors = std::move(html_tensors);
    page.step = HtmlStepOf(r, throughput, info);
    absl::Status written = WriteHtmlPage(page, f.html);
    if (!written.ok()) return Fail(std::string(written.message()));
  }
  return Output(f, *topology, step, r, throughput, info);
}

}  // namespace

CommandFn AddSimulateCommand(CLI::App& app) {
  auto f = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Predict the step time and memory of a model or an HLO module on a topology");
  f->command = cmd;
  cmd->add_option("CONFIG", f->config, "topology JSON (configs/)")->required();
  cmd->add_option("--hlo", f->hlo, "HLO text file with shardings instead of --model")
      ->check(NonEmpty());
  AddTransformerFlags(cmd, f.get());
  cmd->add_option(
      "--remat", f->remat,
      "none (default), minimal, minimal_with_context, "
      "save_dot_with_context_except_mlp, save_dot_except_mlpwi, save_dot_except_mlp, "
      "save_qkv_proj, save_out_proj, minimal_offloaded, qkv_proj_offloaded (minimal's / "
      "save_qkv_proj's saved values offloaded to host memory over the device's host "
      "link: host_bandwidth_gbytes_per_s in the device spec), selective, full, custom "
      "(--remat-device / --remat-offload)");
  cmd->add_option("--remat-device", f->remat_device,
                  "--remat custom: MaxText names kept in HBM, comma-separated "
                  "(decoder_layer_input, query_proj, key_proj, value_proj, qkv_proj, context, "
                  "out_proj, mlpwi, mlpwi_0, mlpwi_1, mlpwo); every other value is recomputed")
      ->check(NonEmpty());
  cmd->add_option("--remat-offload", f->remat_offload,
                  "--remat custom: MaxText names kept in host memory (as --remat-device)")
      ->check(NonEmpty());
  cmd->add_option("--attention", f->attention,
                  "dot_product (default) or flash (fused: no S x S scores in HBM)");
  cmd->add_option("--flash-block", f->flash_block,
                  "flash attention as a block kernel: the mask applied per N x N tile of "
                  "(query, key), partly masked tiles computed whole (MaxText splash attention "
                  "sa_block_*; default 0: per element)")
      ->check(NonEmpty());
  cmd->add_option("--moe-dispatch", f->moe_dispatch,
                  "how tokens reach the experts: gather (default: a sort and gather, megablox, "
                  "Megatron) or einsum (GShard's one-hot dispatch and combine einsums, MaxText's "
                  "dense dropping path)")
      ->check(NonEmpty());
  cmd->add_option("--flash-blocks", f->flash_blocks,
                  "flash attention tiles per kernel, q,kv,q_dkv,kv_dkv,q_dq,kv_dq (MaxText "
                  "sa_block_q, sa_block_kv, sa_block_q_dkv, sa_block_kv_dkv, sa_block_q_dq, "
                  "sa_block_kv_dq): the forward's, the dK/dV (and fused) backward's, the dQ "
                  "kernel's")
      ->check(NonEmpty());
  cmd->add_flag("--flash-split-backward", f->flash_split_backward,
                "flash backward as two kernels, dK/dV and dQ, each recomputing Q.K^T (splash "
                "attention use_fused_bwd_kernel=False): 3.5x the forward's matmuls, not 2.5x");
  cmd->add_flag("--remat-replay", f->remat_replay,
                "remat re-runs the whole forward of each checkpointed layer, as "
                "torch.utils.checkpoint and Megatron-LM do (default: only what the backward "
                "reads, as JAX)");
  cmd->add_option("--attention-dropout", f->attention_dropout,
                  "dropout probability on the attention probabilities (Megatron-LM "
                  "attention_dropout): its own kernels under --fusion eager|none");
  cmd->add_option("--fusion", f->fusion,
                  "which ops share a kernel: xla (default: XLA's fusion), eager (PyTorch eager "
                  "with Megatron-LM's fused kernels: no producer fusion into matmuls), none");
  cmd->add_option("--matmul-dtype", f->matmul_dtype,
                  "bf16 (default), int8 or fp8: the peak the matmuls run at");
  cmd->add_flag("--sequence-parallel", f->sequence_parallel,
                "residual-stream activations split over the tensor axis (Megatron "
                "--sequence-parallel, MaxText activation_embed -> tensor): memory only");
  cmd->add_flag("--require-fit", f->require_fit,
                "exit 3 when the step does not fit in HBM (default: a warning, exit 0)");
  for (int i = 0; i < kNumMaxTextAxes; ++i) {
    const std::string axis(kMaxTextAxes[i]);
    cmd->add_option(AxisFlag("ici", axis), f->ici_axes[i],
                    absl::StrCat("MaxText ici_", axis, "_parallelism: \"", axis,
                                 "\" axis size in a slice (-1: the rest)"));
    cmd->add_option(AxisFlag("dcn", axis), f->dcn_axes[i],
                    absl::StrCat("MaxText dcn_", axis, "_parallelism: \"", axis,
                                 "\" axis size across slices (-1: the rest)"));
  }
  cmd->add_option("--num-slices", f->num_slices,
                  "copies of CONFIG's one slice joined by DCN (MaxText num_slices; default 1)")
      ->check(Positive());
  cmd->add_option("--microbatches", f->microbatches,
                  "pipeline microbatches per step (default: the \"stage\" axis size); "
                  "without a \"stage\" axis, gradient-accumulation microbatches")
      ->check(NonNegative());
  cmd->add_option("--pipeline-schedule", f->pipeline_schedule,
                  "gpipe or 1f1b (default): the pipeline's activation memory");
  cmd->add_option("--layers-per-virtual-stage", f->layers_per_virtual_stage,
                  "interleaved 1F1B: layers per model chunk (Megatron-LM "
                  "num_layers_per_virtual_pipeline_stage); the bubble shrinks by the chunks "
                  "per stage")
      ->check(Positive());
  cmd->add_flag("--blocking-p2p", f->blocking_p2p,
                "every stage-to-stage transfer waits (Megatron-LM's p2p_communication without "
                "overlap_p2p_comm): all of them exposed");
  cmd->add_flag("--scatter-gather-p2p", f->scatter_gather_p2p,
                "each tensor rank sends 1/t of a stage transfer, all-gathered after (Megatron-LM "
                "scatter_gather_tensors_in_pipeline)");
  cmd->add_option("--ici-mesh-shape", f->ici_mesh_shape, "per-slice mesh, e.g. 1,64,4");
  cmd->add_option("--dcn-mesh-shape", f->dcn_mesh_shape, "across slices, e.g. 2,1,1");
  cmd->add_option("--axis-names", f->axis_names, "mesh axis names (default data,fsdp,tensor)");
  cmd->add_option("--recipe", f->recipe, "dp, fsdp, tp, fsdp_tp (default), multislice_dp");
  cmd->add_option("--assume-trip-count", f->assume_trip_count,
                  "trip count of --hlo while loops whose count is not known statically")
      ->check(Positive());
  cmd->add_flag("--overlap", f->overlap, "report the overlapped (latency-hiding) schedule");
  cmd->add_flag("--extrapolate-layers", f->extrapolate_layers,
                "--model: simulate stages of 1 and 2 layers and extrapolate (layers are "
                "identical; mesh/sim/model_step.h): faster for deep models");
  cmd->add_option("--trace", f->trace, "write a Chrome trace (Perfetto) to this file")
      ->check(NonEmpty());
  cmd->add_option(
         "--html", f->html,
         "write a self-contained HTML page: mesh, tensors' tiles by device, step breakdown")
      ->check(NonEmpty());
  cmd->add_flag("--json", f->json, "print one JSON object (docs/simulator.md)");
  return [f]() { return Run(*f); };
}

}  // namespace tessel::tools
