// "Simulate this transformer on this topology with this plan": one training step of
// nn/transformer.h, sharded by a plan (mesh shape over MaxText's axes, recipe, remat, attention
// kernel, microbatches), partitioned on the topology's links and simulated, with the terms the
// graph does not hold (remat, flash attention, MoE, context and pipeline parallelism:
// mesh/sim/training_step.h) added. `tessel simulate --model`, the Python binding and
// `tessel autoshard` all go through these functions.
//
//   mesh::ModelPlan plan;
//   plan.mesh = mesh::MaxTextMeshShape({1, 1, 16, 1, 1, 4, 1}, {2, 1, 1, 1, 1, 1, 1});
//   plan.recipe = nn::ShardingRecipe::kFsdpTp;
//   plan.remat = mesh::RematPolicy::kFull;
//   TESSEL_ASSIGN_OR_RETURN(mesh::ModelSimulation s,
//                           mesh::SimulateModelPlan(topology, config, plan, {}));
//   s.report.step_seconds; s.training.memory.total_bytes(); s.throughput.mfu;
//
// Layer extrapolation (ModelSimulationOptions::extrapolate_layers): the decoder layers of a stage
// are identical, so every additive figure of the step (times, flops, bytes, memory) is
// a + b * layers. Building, partitioning and simulating a stage of 1 and of 2 layers gives a
// and b; the figures of L layers are then f(1) + (L - 1) * (f(2) - f(1)). Exact for the in-order
// schedule, the collective bytes and the memory accounting (each is a sum over the program's
// ops or the layers); the overlapped schedule is a max-plus recurrence whose per-layer
// increment is constant once the pipeline of a layer's collectives is in steady state. Its
// list scheduler (mesh/sim/simulator.h) may not be in steady state from one layer to two on a
// small model: model_step_test's 12-layer d_model 256 Llama is 0.27 % off the full graph (the
// test allows 0.5 %); simulate_bench's 96-layer GPT matches it to 6 digits. The top-op lists
// are those of the 2-layer graph; node counts are extrapolated like the other figures.
#ifndef TESSEL_MESH_SIM_MODEL_STEP_H_
#define TESSEL_MESH_SIM_MODEL_STEP_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/mesh/sim/simulator.h"
#include "tessel/mesh/sim/training_step.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/nn/transformer.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/spmd/mesh.h"

namespace tessel::mesh {

// MaxText's mesh axes, in its mesh_axes order (outermost first): ici_<axis>_parallelism and
// dcn_<axis>_parallelism (MaxText configs/base.yml).
inline constexpr int kNumMaxTextAxes = 7;
inline constexpr std::array<std::string_view, kNumMaxTextAxes> kMaxTextAxes = {
    "data", "stage", "fsdp", "fsdp_transpose", "sequence", "tensor", "expert"};

// A HybridMesh's shape: per-slice (ICI) sizes, across-slice (DCN) sizes and the axis names, one
// entry per axis (spmd::HybridMesh::Create's arguments).
struct MeshShape {
  std::vector<int64_t> ici, dcn;
  std::vector<std::string> names;
};

// The mesh of MaxText's ici_*/dcn_* sizes, in kMaxTextAxes order (each size >= 1; no -1).
[[nodiscard]] MeshShape MaxTextMeshShape(const std::vector<int64_t>& ici_axes,
                                         const std::vector<int64_t>& dcn_axes);

// How one training step is sharded and run.
struct ModelPlan {
  MeshShape mesh;
  nn::ShardingRecipe recipe = nn::ShardingRecipe::kFsdpTp;
  RematPolicy remat = RematPolicy::kNone;
  CustomRemat custom_remat;  // remat == kCustom: its lists (TrainingStepOptions::custom_remat)
  AttentionKernel attention = AttentionKernel::kDotProduct;
  // Pipeline microbatches, or without a "stage" axis gradient-accumulation microbatches
  // (training_step.h); 0: as many as stages.
  int64_t microbatches = 0;
  PipelineSchedule pipeline_schedule = PipelineSchedule::kOneForwardOneBackward;
  bool sequence_parallel = false;                   // memory only (training_step.h)
  bool remat_replay = false;                        // TrainingStepOptions::remat_replay
  double attention_dropout = 0;                     // TrainingStepOptions::attention_dropout
  int64_t flash_block = 0;                          // TrainingStepOptions::flash_block
  FlashBlocks flash_blocks;                         // TrainingStepOptions::flash_blocks
  MoeDispatch moe_dispatch = MoeDispatch::kGather;  // TrainingStepOptions::moe_dispatch
  bool flash_split_backward = false;                // TrainingStepOptions::flash_split_backward
  // Interleaved 1F1B: layers per model chunk (Megatron-LM
  // --num-layers-per-virtual-pipeline-stage); 0: no interleaving. Must divide a stage's layers.
  int64_t layers_per_virtual_stage = 0;
  bool blocking_transfers = false;  // PipelineOptions::blocking_transfers
  bool scatter_gather = false;      // PipelineOptions::scatter_gather
};

// A built (global, unpartitioned) training step and what the estimates need about it.
struct ModelStep {
  std::unique_ptr<Graph> graph;  // global shapes, the plan's shardings
  nn::TransformerConfig config;  // the whole model
  // One pipeline stage (config with layers / stages) and the graph built for it (context
  // parallelism: batch x sequence shards sequences of seq_len / sequence shards).
  nn::TransformerConfig stage_config;
  nn::TransformerConfig graph_config;
  PipelineOptions pipeline;
  TrainingStepOptions training;
  spmd::Mesh mesh;        // the HybridMesh of the plan
  std::string mesh_text;  // the HybridMesh's axes (HybridMesh::AxesToString)
  nn::RecipeShards shards;
  std::vector<int64_t> weight_parameters;
  std::vector<int64_t> moment_parameters;
};

// The device ids of the mesh axis `name` through the mesh's first device (row-major ids, as
// spmd::Mesh orders them); empty when the mesh has no such axis.
[[nodiscard]] std::vector<int64_t> AxisGroupOfDevice0(const spmd::Mesh& mesh,
                                                      const std::string& name);

// Builds one training step of `config` (validated by the caller) sharded by `plan` on the
// HybridMesh of plan.mesh over `topology`. With `stage_layers` > 0 the stage holds that many
// layers instead of config.layers / stages (layer extrapolation).
// Errors (all kInvalidArgument, naming the value): a mesh that does not fit the topology, a
// recipe axis the mesh lacks, remat_replay with a JAX-only remat policy, an attention dropout
// outside [0, 1), layers not a multiple of the "stage" axis, a "sequence" axis
// without flash attention or not dividing seq_len, experts not a multiple of the "expert" axis,
// the builder's own errors.
[[nodiscard]] absl::StatusOr<ModelStep> BuildModelStep(const Topology& topology,
                                                       const nn::TransformerConfig& config,
                                                       const ModelPlan& plan,
                                                       int64_t stage_layers = 0);

// The simulator's options for a plan: flash attention's dense S x S nodes costed by the kernel
// model instead (DenseAttentionFilter), on top of `base`.
[[nodiscard]] SimulatorOptions ModelSimulatorOptions(const ModelStep& step, SimulatorOptions base);

// The estimates added to a simulated model step.
struct ModelEstimates {
  TrainingStepEstimate training;
  PipelineEstimate pipeline;
};

// Adds to `report` (the simulation of the partitioned `program` of `step`) the remat, flash,
// MoE, context- and pipeline-parallel terms (EstimateTrainingStep, then FinishTrainingStep).
// Errors: those of EstimateTrainingStep (kUnimplemented) and EstimatePipeline (kInvalidArgument:
// microbatches not dividing a stage's sequences).
[[nodiscard]] absl::StatusOr<ModelEstimates> AddTrainingStep(
    const ModelStep& step, const Simulator& simulator, const partitioner::SpmdProgram& program,
    SimulationReport& report);

// The second half of AddTrainingStep, given the stage's training-step estimate: EstimatePipeline
// (which scales its memory to the schedule), ApplyTrainingStep and ApplyPipeline on `report`.
// Errors: those of EstimatePipeline.
[[nodiscard]] absl::StatusOr<ModelEstimates> FinishTrainingStep(const ModelStep& step,
                                                                const CostModel& cost_model,
                                                                TrainingStepEstimate training,
                                                                SimulationReport& report);

// Model-level figures of a simulated step.
struct Throughput {
  double mfu = 0;  // 6 * active params * tokens / (step seconds * bf16 peak of all devices)
  double tokens_per_s = 0;
  double params = 0;         // every parameter (all experts)
  double active_params = 0;  // those one token uses (MoE: top_k experts)
  double tokens = 0;         // tokens per step
};
[[nodiscard]] Throughput ModelThroughput(const nn::TransformerConfig& config,
                                         const CostModel& cost_model,
                                         const SimulationReport& report);

struct ModelSimulationOptions {
  SimulatorOptions simulator;
  // Simulate stages of 1 and 2 layers and extrapolate (file comment) instead of the full graph.
  // Used when the stage has more than 2 layers.
  bool extrapolate_layers = false;
};

// A simulated plan.
struct ModelSimulation {
  ModelStep step;  // graph released
  SimulationReport report;
  ModelEstimates estimates;
  Throughput throughput;
  int64_t live_buffer_peak_bytes = 0;  // the program's live-buffer peak (no remat, dense)
  int64_t global_nodes = 0;
  int64_t local_nodes = 0;
  bool extrapolated = false;  // whether layer extrapolation was used
};

// Builds, partitions (costing choices with the simulator's cost model) and simulates `plan`.
// Errors: those of BuildModelStep, Simulator::Create, partitioner::Partition, Simulator::Run and
// AddTrainingStep.
[[nodiscard]] absl::StatusOr<ModelSimulation> SimulateModelPlan(
    const Topology& topology, const nn::TransformerConfig& config, const ModelPlan& plan,
    const ModelSimulationOptions& options);

// What a plan may change without changing the graph: the remat policy, the microbatches and
// sequence parallelism only change the estimates added to the simulated program.
struct PlanVariant {
  RematPolicy remat = RematPolicy::kNone;
  int64_t microbatches = 0;  // 0: as many as stages
  bool sequence_parallel = false;
};

// SimulateModelPlan for each of `variants` of `plan` (which give its remat, microbatches and
// sequence_parallel), building, partitioning and simulating the graph once: one result per
// variant, in order; a variant the estimates reject (microbatches not dividing a stage's
// sequences) is its Status in the list. Errors: those of SimulateModelPlan for the graph.
[[nodiscard]] absl::StatusOr<std::vector<absl::StatusOr<ModelSimulation>>>
SimulateModelPlanVariants(const Topology& topology, const nn::TransformerConfig& config,
                          const ModelPlan& plan, const std::vector<PlanVariant>& variants,
                          const ModelSimulationOptions& options);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_SIM_MODEL_STEP_H_
