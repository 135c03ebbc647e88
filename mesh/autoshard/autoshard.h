// Auto-sharding of a transformer training step: the mesh (MaxText's ici_* / dcn_* axis sizes),
// remat policy and pipeline microbatches that minimize the predicted step time of
// mesh/sim/model_step.h while the step fits in the devices' HBM (`tessel autoshard`).
//
//   mesh::AutoshardOptions options;
//   options.top_k = 5;
//   TESSEL_ASSIGN_OR_RETURN(mesh::AutoshardResult r,
//                           mesh::Autoshard(topology, config, options));
//   r.candidates[r.best].plan.mesh;      // ici / dcn sizes over kMaxTextAxes
//   r.candidates[r.best].step_seconds;
//
// The search is exhaustive over a pruned space, in a fixed order (deterministic: no hash order,
// no threads; the same inputs give the same result on every host):
//   - meshes: every ordered factorization of the devices of a slice over the ICI axes and of the
//     slices over the DCN axes (kMaxTextAxes), with the sharding recipe fsdp_tp (nn/transformer.h:
//     batch over data, fsdp, fsdp_transpose and expert; weights' embed dim over fsdp,
//     fsdp_transpose and sequence; Megatron dims over tensor; stage = pipeline), which expresses
//     the per-class specs of every named recipe (dp: data only; fsdp: fsdp only; tp: tensor;
//     multislice_dp: dcn data x ici fsdp). Pruned, each with its count in AutoshardResult::pruned:
//       fsdp_transpose > 1 (the recipe gives it fsdp's roles: the same plan as fsdp, in another
//         device order), sequence > 1 without flash attention (context parallelism needs it),
//         expert > 1 for a dense model or not dividing the experts, tensor not dividing the
//         heads, kv_heads or ffn, stage not dividing the layers, the batch axes' product not
//         dividing the global batch, tensor / sequence / expert over DCN (a per-layer
//         collective on the slowest links), and a memory lower bound over HBM: a stage's
//         parameters, gradients and two Adam moments (4 x param_dtype bytes per parameter of
//         total / stages) split at most stage x fsdp x fsdp_transpose x sequence x tensor x
//         expert ways (no tensor is split more), so no remat policy can make such a mesh fit;
//   - per mesh, with the graph simulated once (remat and microbatches do not change it): every
//     remat policy of AutoshardOptions::remat_policies, and with a stage axis every microbatch
//     count that is a multiple of the stages and divides a rank's batch (or only the multiples
//     AutoshardOptions::microbatch_factors names).
// Each mesh costs two small simulations (stages of 1 and 2 layers, extrapolated: model_step.h).
// Objective: the predicted step time (in order, or overlapped with AutoshardOptions::overlap);
// constraint: per-device memory <= HBM (or AutoshardOptions::hbm_bytes); ties (equal to the
// nanosecond) toward fewer DCN bytes per device, then the enumeration order (fewer DCN slices on
// inner axes first). Method: exhaustive enumeration of the pruned space, not an ILP over per-op
// strategies (Alpa, Zheng et al. 2022; XLA's auto-sharding): MaxText's axes and the recipe fix each
// op's strategy once the axis sizes are chosen, so the space is small enough to simulate every plan
// in it. Source of the axes and the remat policies: MaxText configs/base.yml (ici_*_parallelism,
// dcn_*_parallelism, remat_policy).
#ifndef TESSEL_MESH_AUTOSHARD_AUTOSHARD_H_
#define TESSEL_MESH_AUTOSHARD_AUTOSHARD_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/mesh/sim/model_step.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/nn/transformer.h"
#include "tessel/spmd/partition_spec.h"

namespace tessel::mesh {

struct AutoshardOptions {
  // Stop evaluating meshes after this much wall time (0: no limit); the result then says
  // complete = false, and which plans were evaluated depends on the machine's speed.
  double budget_seconds = 0;
  int64_t top_k = 5;     // runner-up plans kept in AutoshardResult::ranking (besides the best)
  bool overlap = false;  // rank by the overlapped schedule (SimulatorOptions::overlap)
  std::vector<RematPolicy> remat_policies = {RematPolicy::kNone, RematPolicy::kMinimal,
                                             RematPolicy::kSaveDotExceptMlp, RematPolicy::kFull};
  // With a stage axis, microbatches = factor x stages for each factor here whose count divides a
  // data-parallel rank's batch; empty (the default): every such multiple of the stages (the
  // microbatch counts of Megatron-LM's published layouts, e.g. 6 x stages, are in the space).
  std::vector<int64_t> microbatch_factors;
  // The axes a mesh may use (names of kMaxTextAxes); the others stay size 1, each mesh using
  // one pruned as "axis outside the allowed axes (--axes)". Empty (the default): all seven. E.g.
  // {"data", "fsdp", "tensor"}: the plans a runtime without pipeline or context parallelism
  // executes (the `tessel run --example gpt` job).
  std::vector<std::string> axes;
  // The per-device memory limit in bytes that a plan must fit under (0: the device's HBM, from
  // the topology's device_spec). A lower limit keeps headroom; a higher one asks what would fit
  // with more memory (scripts/autoshard_published.py: the space a hand plan over HBM is in).
  int64_t hbm_bytes = 0;
  // The attention kernel (a model setting, not searched).
  AttentionKernel attention = AttentionKernel::kDotProduct;
  std::string matmul_dtype;  // CostModelOptions::matmul_dtype ("" : bf16)
  // Residual-stream activations split over the tensor axis (TrainingStepOptions; memory only).
  bool sequence_parallel = false;
  // Meshes simulated at once (0: the machine's hardware threads). Results are gathered in the
  // enumeration order, so the thread count changes only the search time.
  int threads = 0;
};

// One evaluated plan.
struct AutoshardCandidate {
  ModelPlan plan;                           // plan.mesh: MaxTextMeshShape(ici, dcn)
  std::vector<int64_t> ici_axes, dcn_axes;  // in kMaxTextAxes order
  double step_seconds = 0;
  double compute_seconds = 0, ici_seconds = 0, dcn_seconds = 0, exposed_comm_seconds = 0;
  int64_t dcn_bytes_per_device = 0;
  int64_t ici_bytes_per_device = 0;
  TrainingMemory memory;
  int64_t hbm_bytes = 0;  // the limit the plan was held to (AutoshardOptions::hbm_bytes)
  bool fits = false;
  double mfu = 0;
  int64_t order = 0;  // enumeration index (the last tie-break)
};

// Why the best plan won, per choice: the best feasible plan that differs from it in that choice.
struct AutoshardExplanation {
  std::string choice;        // "ici_fsdp", "dcn_data", "remat", "microbatches"
  std::string best_value;    // the winner's value, e.g. "16", "full"
  int64_t alternative = -1;  // index into AutoshardResult::candidates; -1: none evaluated
  std::string alternative_value;
};

struct AutoshardResult {
  std::vector<AutoshardCandidate> candidates;  // every evaluated plan, in enumeration order
  int64_t best = -1;                           // index of the best fitting plan; -1: none fits
  std::vector<int64_t> ranking;  // best first: the best and up to top_k runners-up that fit
  int64_t smallest_memory = -1;  // the candidate with the least memory (for "nothing fits")
  // The least memory lower bound of the prune (parameters, gradients, moments) over every mesh
  // enumerated, bytes per device: when it exceeds HBM, no plan can fit.
  double state_bytes_lower_bound = 0;
  // Coverage: meshes enumerated (every factorization), pruned (by reason), simulated; plans
  // (mesh x remat x microbatches) evaluated.
  int64_t meshes_enumerated = 0;
  std::map<std::string, int64_t> pruned;  // reason -> meshes (std::map: a stable order)
  int64_t meshes_simulated = 0;
  int64_t meshes_failed = 0;  // rejected by the builder or the partitioner
  std::string first_failure;  // the first such rejection's message ("" when none)
  int64_t plans_evaluated = 0;
  bool complete = true;  // false when the budget stopped the search
  double search_seconds = 0;
  std::vector<AutoshardExplanation> explanations;
};

// The ordered factorizations of `n` into `parts` factors (each >= 1), in lexicographic order.
[[nodiscard]] std::vector<std::vector<int64_t>> Factorizations(int64_t n, int parts);

// Searches plans for `config` on `topology` (file comment).
// Errors: kInvalidArgument when the config is invalid, the topology's slices differ in size, or
// AutoshardOptions::axes names an axis not in kMaxTextAxes;
// those of CostModel::Create. No plan fitting is not an error: best = -1.
[[nodiscard]] absl::StatusOr<AutoshardResult> Autoshard(const Topology& topology,
                                                        const nn::TransformerConfig& config,
                                                        const AutoshardOptions& options);

// One parameter class of nn/transformer.h (nn::WeightKind) and its partition spec under a plan.
struct ParameterClassSpec {
  std::string parameter_class;  // "column", "row", "embedding", "head", "position", "vector"
  std::string parameters;       // which parameters have it, e.g. "wq, wk, wv, w_gate, w_up"
  int64_t rank = 2;
  spmd::PartitionSpec spec;  // over the mesh's axis names (torch_xla partition_spec)
};

// The partition spec of each parameter class of `config` under `plan`'s mesh and recipe (axes of
// size 1 dropped: they split nothing). Errors: those of HybridMesh::Create and
// nn::RecipeLayoutFor (kInvalidArgument).
[[nodiscard]] absl::StatusOr<std::vector<ParameterClassSpec>> ParameterClassSpecs(
    const Topology& topology, const nn::TransformerConfig& config, const ModelPlan& plan);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_AUTOSHARD_AUTOSHARD_H_
