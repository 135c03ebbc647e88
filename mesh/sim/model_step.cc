#include "tessel/mesh/sim/model_step.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel::mesh {
namespace {

// step.stage_config and step.graph_config from step.config and step.shards, and the pipeline's
// microbatches and schedule. The messages name the `tessel simulate` flags a user sets.
absl::Status StageAndGraphConfigs(const ModelPlan& plan, int64_t stage_layers, ModelStep& step) {
  const nn::RecipeShards& shards = step.shards;
  step.stage_config = step.config;
  if (shards.stage > 1) {
    if (step.config.layers % shards.stage != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("layers ", step.config.layers,
                       " (--layers or the model file's \"layers\") must be a multiple of the "
                       "\"stage\" axis (",
                       shards.stage, ")"));
    }
    step.stage_config.layers = step.config.layers / shards.stage;
  }
  if (plan.layers_per_virtual_stage > 0) {
    if (shards.stage <= 1 || step.stage_config.layers % plan.layers_per_virtual_stage != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--layers-per-virtual-stage ", plan.layers_per_virtual_stage,
                       " needs a \"stage\" axis and must divide the ", step.stage_config.layers,
                       " layers of a stage"));
    }
    step.pipeline.virtual_stages = step.stage_config.layers / plan.layers_per_virtual_stage;
  }
  if (stage_layers > 0) step.stage_config.layers = stage_layers;
  step.pipeline.microbatches = plan.microbatches > 0 ? plan.microbatches : shards.stage;
  step.pipeline.schedule = plan.pipeline_schedule;
  step.pipeline.blocking_transfers = plan.blocking_transfers;
  step.pipeline.scatter_gather = plan.scatter_gather;
  step.graph_config = step.stage_config;
  if (shards.sequence > 1) {
    if (step.training.attention != AttentionKernel::kFlash) {
      return absl::InvalidArgumentError(
          "a \"sequence\" axis (context parallelism) needs --attention flash: the dense "
          "attention of the graph would see only a device's part of the sequence");
    }
    const int64_t local_seq = step.config.seq_len / shards.sequence;
    if (step.config.seq_len % shards.sequence != 0 || local_seq == step.config.head_dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "seq_len ", step.config.seq_len,
          " (--seq-len or the model file's \"seq_len\") must be a multiple of the \"sequence\" "
          "axis (",
          shards.sequence, "), and the local length must differ from head_dim"));
    }
    step.graph_config.batch = step.config.batch * shards.sequence;
    step.graph_config.seq_len = local_seq;
  }
  return absl::OkStatus();
}

// f(1) + (layers - 1) * (f(2) - f(1)): the figure of `layers` identical layers from those of one
// and two (header comment).
template <typename T>
T Extrapolate(T one, T two, int64_t layers) {
  return one + static_cast<T>(layers - 1) * (two - one);
}

// The simulator's report of `layers` layers from those of stages of one and two layers. The
// classes, top lists and warnings are the two-layer report's.
SimulationReport ExtrapolateReport(const SimulationReport& one, SimulationReport two,
                                   int64_t layers) {
  SimulationReport& r = two;
  auto x = [&](auto member) { r.*member = Extrapolate(one.*member, two.*member, layers); };
  x(&SimulationReport::step_seconds);
  x(&SimulationReport::in_order_seconds);
  x(&SimulationReport::overlapped_seconds);
  x(&SimulationReport::compute_seconds);
  x(&SimulationReport::ici_seconds);
  x(&SimulationReport::dcn_seconds);
  x(&SimulationReport::exposed_comm_seconds);
  x(&SimulationReport::flops_per_device);
  x(&SimulationReport::ici_bytes_per_device);
  x(&SimulationReport::dcn_bytes_per_device);
  x(&SimulationReport::ici_bytes_total);
  x(&SimulationReport::dcn_bytes_total);
  x(&SimulationReport::peak_memory_bytes);
  x(&SimulationReport::parameter_bytes);
  r.exceeds_hbm = r.peak_memory_bytes > r.hbm_bytes;
  return r;
}

TrainingStepEstimate ExtrapolateEstimate(const TrainingStepEstimate& one, TrainingStepEstimate two,
                                         int64_t layers) {
  TrainingStepEstimate& e = two;
  auto x = [&](auto member) { e.*member = Extrapolate(one.*member, two.*member, layers); };
  x(&TrainingStepEstimate::recompute_flops);
  x(&TrainingStepEstimate::recompute_seconds);
  x(&TrainingStepEstimate::recompute_bytes);
  x(&TrainingStepEstimate::dropout_bytes);
  x(&TrainingStepEstimate::dropout_seconds);
  x(&TrainingStepEstimate::quantize_bytes);
  x(&TrainingStepEstimate::quantize_seconds);
  x(&TrainingStepEstimate::quantize_weight_bytes);
  x(&TrainingStepEstimate::attention_flops);
  x(&TrainingStepEstimate::attention_bytes);
  x(&TrainingStepEstimate::attention_seconds);
  x(&TrainingStepEstimate::moe_flops);
  x(&TrainingStepEstimate::moe_seconds);
  x(&TrainingStepEstimate::moe_ici_seconds);
  x(&TrainingStepEstimate::moe_dcn_seconds);
  x(&TrainingStepEstimate::moe_ici_bytes);
  x(&TrainingStepEstimate::moe_dcn_bytes);
  x(&TrainingStepEstimate::cp_ici_seconds);
  x(&TrainingStepEstimate::cp_dcn_seconds);
  x(&TrainingStepEstimate::cp_ici_bytes);
  x(&TrainingStepEstimate::cp_dcn_bytes);
  x(&TrainingStepEstimate::gathered_weight_bytes);
  TrainingMemory& m = e.memory;
  m.parameter_bytes = Extrapolate(one.memory.parameter_bytes, m.parameter_bytes, layers);
  m.gradient_bytes = Extrapolate(one.memory.gradient_bytes, m.gradient_bytes, layers);
  m.optimizer_bytes = Extrapolate(one.memory.optimizer_bytes, m.optimizer_bytes, layers);
  m.activation_bytes = Extrapolate(one.memory.activation_bytes, m.activation_bytes, layers);
  m.temporary_bytes = Extrapolate(one.memory.temporary_bytes, m.temporary_bytes, layers);
  e.fits = m.total_bytes() <= e.hbm_bytes;
  return e;
}

// One stage of `stage_layers` layers, partitioned and simulated.
struct StagePass {
  ModelStep step;
  partitioner::SpmdProgram program;
  SimulationReport report;
  int64_t global_nodes = 0;
  int64_t local_nodes = 0;
};

absl::StatusOr<StagePass> SimulateStage(const Topology& topology,
                                        const nn::TransformerConfig& config, const ModelPlan& plan,
                                        const SimulatorOptions& base, int64_t stage_layers) {
  StagePass pass;
  TESSEL_ASSIGN_OR_RETURN(pass.step, BuildModelStep(topology, config, plan, stage_layers));
  pass.global_nodes = pass.step.graph->num_nodes();
  TESSEL_ASSIGN_OR_RETURN(Simulator simulator,
                          Simulator::Create(topology, ModelSimulatorOptions(pass.step, base)));
  partitioner::PartitionOptions partition_options;
  partition_options.cost_model = &simulator.cost_model();
  TESSEL_ASSIGN_OR_RETURN(
      pass.program,
      partitioner::Partition(*pass.step.graph, topology.num_devices(), partition_options));
  pass.step.graph.reset();
  pass.local_nodes = pass.program.program->num_nodes();
  TESSEL_ASSIGN_OR_RETURN(pass.report, simulator.Run(pass.program));
  return pass;
}

// The raw (pre-pipeline) training-step estimate of `pass` under `variant`.
absl::StatusOr<TrainingStepEstimate> EstimateVariant(const StagePass& pass,
                                                     const PlanVariant& variant,
                                                     const CostModel& cost_model) {
  const ModelStep& s = pass.step;
  TrainingStepOptions training = s.training;
  training.remat = variant.remat;
  training.sequence_parallel = variant.sequence_parallel;
  return EstimateTrainingStep(s.stage_config, s.shards, training, cost_model, pass.program,
                              s.weight_parameters, s.moment_parameters);
}

}  // namespace

MeshShape MaxTextMeshShape(const std::vector<int64_t>& ici_axes,
                           const std::vector<int64_t>& dcn_axes) {
  MeshShape shape;
  shape.ici = ici_axes;
  shape.dcn = dcn_axes;
  for (std::string_view axis : kMaxTextAxes) shape.names.emplace_back(axis);
  return shape;
}

std::vector<int64_t> AxisGroupOfDevice0(const spmd::Mesh& mesh, const std::string& name) {
  std::vector<int64_t> group;
  for (int64_t a = 0; a < mesh.rank(); ++a) {
    if (mesh.axis_names()[a] != name) continue;
    int64_t stride = 1;
    for (int64_t b = a + 1; b < mesh.rank(); ++b) stride *= mesh.axis_size(b);
    for (int64_t k = 0; k < mesh.axis_size(a); ++k) group.push_back(mesh.device_ids()[k * stride]);
  }
  return group;
}

absl::StatusOr<ModelStep> BuildModelStep(const Topology& topology,
                                         const nn::TransformerConfig& config, const ModelPlan& plan,
                                         int64_t stage_layers) {
  ModelStep step;
  step.config = config;
  step.training.remat = plan.remat;
  step.training.custom_remat = plan.custom_remat;
  step.training.attention = plan.attention;
  TESSEL_ASSIGN_OR_RETURN(
      spmd::HybridMesh mesh,
      spmd::HybridMesh::Create(plan.mesh.ici, plan.mesh.dcn, plan.mesh.names, topology));
  step.mesh_text = mesh.AxesToString();
  step.mesh = mesh;
  TESSEL_ASSIGN_OR_RETURN(step.shards, nn::ShardsOf(mesh, plan.recipe));
  step.training.sequence_parallel = plan.sequence_parallel;
  step.training.remat_replay = plan.remat_replay;
  step.training.attention_dropout = plan.attention_dropout;
  step.training.flash_block = plan.flash_block;
  step.training.flash_split_backward = plan.flash_split_backward;
  step.training.flash_blocks = plan.flash_blocks;
  step.training.moe_dispatch = plan.moe_dispatch;
  if (plan.flash_block < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--flash-block ", plan.flash_block, ": expected a tile size >= 0"));
  }
  const bool blocks = !(plan.flash_blocks == FlashBlocks{});
  if ((plan.flash_block > 0 || blocks || plan.flash_split_backward) &&
      plan.attention != AttentionKernel::kFlash) {
    return absl::InvalidArgumentError(absl::StrCat(plan.flash_block > 0 ? "--flash-block"
                                                   : blocks             ? "--flash-blocks"
                                                                        : "--flash-split-backward",
                                                   " applies to --attention flash"));
  }
  if (plan.flash_block > 0 && blocks) {
    return absl::InvalidArgumentError("--flash-block and --flash-blocks: give one of them");
  }
  if (plan.remat_replay && plan.remat != RematPolicy::kNone && plan.remat != RematPolicy::kFull &&
      plan.remat != RematPolicy::kSelective) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--remat-replay applies to the remat policies of PyTorch frameworks (full, selective), "
        "not to \"",
        std::string(RematPolicyName(plan.remat)), "\" (a JAX checkpoint policy)"));
  }
  // Written so that NaN fails too.
  if (!(plan.attention_dropout >= 0 && plan.attention_dropout < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--attention-dropout ", plan.attention_dropout,
                                                   ": expected a probability in [0, 1)"));
  }
  step.training.expert_group = AxisGroupOfDevice0(mesh, "expert");
  step.training.sequence_group = AxisGroupOfDevice0(mesh, "sequence");
  step.pipeline.stage_group = AxisGroupOfDevice0(mesh, "stage");
  step.pipeline.tensor_group = AxisGroupOfDevice0(mesh, "tensor");
  TESSEL_RETURN_IF_ERROR(StageAndGraphConfigs(plan, stage_layers, step));
  if (step.config.experts > 0 && step.config.experts % step.shards.expert != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("experts ", step.config.experts,
                     " (--experts or the model file's \"experts\") must be a multiple of the "
                     "\"expert\" axis (",
                     step.shards.expert, ")"));
  }
  TESSEL_ASSIGN_OR_RETURN(nn::TransformerStep built,
                          nn::BuildTransformerStep(step.graph_config, mesh, plan.recipe));
  step.graph = std::move(built.graph);
  step.weight_parameters = std::move(built.weight_parameters);
  step.moment_parameters = std::move(built.moment_parameters);
  return step;
}

SimulatorOptions ModelSimulatorOptions(const ModelStep& step, SimulatorOptions base) {
  // With flash attention the program's dense S x S attention is costed by the kernel model
  // instead (training_step.h); dense, its dots stay at the bf16 peak under quantized matmuls.
  if (step.training.attention == AttentionKernel::kFlash) {
    base.costed_elsewhere = DenseAttentionFilter(step.graph_config);
  } else {
    base.unquantized = DenseAttentionFilter(step.graph_config);
  }
  return base;
}

absl::StatusOr<ModelEstimates> FinishTrainingStep(const ModelStep& step,
                                                  const CostModel& cost_model,
                                                  TrainingStepEstimate training,
                                                  SimulationReport& report) {
  ModelEstimates out;
  TESSEL_ASSIGN_OR_RETURN(out.pipeline, EstimatePipeline(step.stage_config, step.shards,
                                                         step.pipeline, cost_model, training));
  ApplyTrainingStep(training, report);
  ApplyPipeline(out.pipeline, report);
  out.training = std::move(training);
  return out;
}

absl::StatusOr<ModelEstimates> AddTrainingStep(const ModelStep& step, const Simulator& simulator,
                                               const partitioner::SpmdProgram& program,
                                               SimulationReport& report) {
  TESSEL_ASSIGN_OR_RETURN(
      TrainingStepEstimate training,
      EstimateTrainingStep(step.stage_config, step.shards, step.training, simulator.cost_model(),
                           program, step.weight_parameters, step.moment_parameters));
  return FinishTrainingStep(step, simulator.cost_model(), std::move(training), report);
}

Throughput ModelThroughput(const nn::TransformerConfig& config, const CostModel& cost_model,
                           const SimulationReport& r) {
  const double num_devices = static_cast<double>(r.num_devices);
  const double peak_flops = cost_model.PeakFlopsPerSecond(DType::kBF16) * num_devices;
  Throughput t;
  t.params = static_cast<double>(nn::TransformerTotalParameterCount(config));
  t.active_params = static_cast<double>(nn::TransformerActiveParameterCount(config));
  t.tokens = static_cast<double>(config.tokens());
  if (r.step_seconds <= 0) return t;
  // MFU as the PaLM paper defines it: 6 * parameters * tokens of model flops per step, with the
  // parameters a token uses (Switch / Mixtral count active parameters).
  t.mfu = 6 * t.active_params * t.tokens / (r.step_seconds * peak_flops);
  t.tokens_per_s = t.tokens / r.step_seconds;
  return t;
}

absl::StatusOr<std::vector<absl::StatusOr<ModelSimulation>>> SimulateModelPlanVariants(
    const Topology& topology, const nn::TransformerConfig& config, const ModelPlan& plan,
    const std::vector<PlanVariant>& variants, const ModelSimulationOptions& options) {
  const int64_t stages = [&]() -> int64_t {
    int64_t product = 1;
    for (size_t a = 0; a < plan.mesh.names.size(); ++a) {
      if (plan.mesh.names[a] != "stage") continue;
      product *= (a < plan.mesh.ici.size() ? plan.mesh.ici[a] : 1) *
                 (a < plan.mesh.dcn.size() ? plan.mesh.dcn[a] : 1);
    }
    return product;
  }();
  const int64_t layers = stages > 0 && config.layers % stages == 0 ? config.layers / stages : 0;
  // Extrapolate only when it saves work: a stage of more than 2 layers.
  const bool extrapolate = options.extrapolate_layers && layers > 2;
  std::vector<StagePass> passes;
  for (int64_t stage_layers : extrapolate ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{0}) {
    TESSEL_ASSIGN_OR_RETURN(StagePass pass,
                            SimulateStage(topology, config, plan, options.simulator, stage_layers));
    passes.push_back(std::move(pass));
  }
  TESSEL_ASSIGN_OR_RETURN(CostModel cost_model,
                          CostModel::Create(topology, options.simulator.cost));
  const StagePass& last = passes.back();
  std::vector<absl::StatusOr<ModelSimulation>> out;
  for (const PlanVariant& variant : variants) {
    ModelSimulation sim;
    sim.step.config = last.step.config;
    sim.step.stage_config = last.step.stage_config;
    sim.step.graph_config = last.step.graph_config;
    sim.step.pipeline = last.step.pipeline;
    sim.step.pipeline.microbatches = variant.microbatches > 0 ? variant.microbatches : stages;
    sim.step.training = last.step.training;
    sim.step.training.remat = variant.remat;
    sim.step.training.sequence_parallel = variant.sequence_parallel;
    sim.step.mesh = last.step.mesh;
    sim.step.mesh_text = last.step.mesh_text;
    sim.step.shards = last.step.shards;
    sim.step.weight_parameters = last.step.weight_parameters;
    sim.step.moment_parameters = last.step.moment_parameters;
    SimulationReport report = last.report;
    absl::StatusOr<TrainingStepEstimate> training = EstimateVariant(last, variant, cost_model);
    if (!training.ok()) return training.status();
    sim.global_nodes = last.global_nodes;
    sim.local_nodes = last.local_nodes;
    if (extrapolate) {
      absl::StatusOr<TrainingStepEstimate> one = EstimateVariant(passes[0], variant, cost_model);
      if (!one.ok()) return one.status();
      report = ExtrapolateReport(passes[0].report, std::move(report), layers);
      training = ExtrapolateEstimate(*one, *std::move(training), layers);
      sim.global_nodes = Extrapolate(passes[0].global_nodes, sim.global_nodes, layers);
      sim.local_nodes = Extrapolate(passes[0].local_nodes, sim.local_nodes, layers);
      sim.step.stage_config.layers = sim.step.graph_config.layers = layers;
      sim.extrapolated = true;
    }
    sim.live_buffer_peak_bytes = report.peak_memory_bytes;
    absl::StatusOr<ModelEstimates> estimates =
        FinishTrainingStep(sim.step, cost_model, *std::move(training), report);
    if (!estimates.ok()) {
      out.push_back(estimates.status());
      continue;
    }
    sim.estimates = *std::move(estimates);
    sim.throughput = ModelThroughput(config, cost_model, report);
    sim.report = std::move(report);
    out.push_back(std::move(sim));
  }
  return out;
}

absl::StatusOr<ModelSimulation> SimulateModelPlan(const Topology& topology,
                                                  const nn::TransformerConfig& config,
                                                  const ModelPlan& plan,
                                                  const ModelSimulationOptions& options) {
  const PlanVariant variant{plan.remat, plan.microbatches, plan.sequence_parallel};
  TESSEL_ASSIGN_OR_RETURN(std::vector<absl::StatusOr<ModelSimulation>> sims,
                          SimulateModelPlanVariants(topology, config, plan, {variant}, options));
  return std::move(sims[0]);
}

}  // namespace tessel::mesh
