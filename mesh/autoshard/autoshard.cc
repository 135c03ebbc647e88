#include "tessel/mesh/autoshard/autoshard.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tessel/core/dtype.h"
#include "tessel/core/status_macros.h"
#include "tessel/spmd/mesh.h"

namespace tessel::mesh {
namespace {

// Indices into kMaxTextAxes.
constexpr int kData = 0, kStage = 1, kFsdp = 2, kFsdpTranspose = 3, kSequence = 4, kTensor = 5,
              kExpert = 6;

void Factorize(int64_t n, int parts, std::vector<int64_t>& prefix,
               std::vector<std::vector<int64_t>>& out) {
  if (parts == 1) {
    prefix.push_back(n);
    out.push_back(prefix);
    prefix.pop_back();
    return;
  }
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d != 0) continue;
    prefix.push_back(d);
    Factorize(n / d, parts - 1, prefix, out);
    prefix.pop_back();
  }
}

// The header's memory lower bound for a mesh of `size` per axis: no tensor of a stage is split
// more ways than stage x fsdp x fsdp_transpose x sequence x tensor x expert.
double StateBytesLowerBound(const std::vector<int64_t>& size, const nn::TransformerConfig& c) {
  const double splits = static_cast<double>(size[kStage] * size[kFsdp] * size[kFsdpTranspose] *
                                            size[kSequence] * size[kTensor] * size[kExpert]);
  const double state_bytes = 4.0 * static_cast<double>(ByteWidth(c.param_dtype)) *
                             static_cast<double>(nn::TransformerTotalParameterCount(c));
  return state_bytes / splits;
}

// The first reason the mesh (ici x dcn sizes per axis) is pruned, or "" when it is searched.
std::string PruneReason(const std::vector<int64_t>& ici, const std::vector<int64_t>& dcn,
                        const nn::TransformerConfig& c, const AutoshardOptions& options,
                        int64_t hbm_bytes) {
  std::vector<int64_t> size(kNumMaxTextAxes);
  for (int a = 0; a < kNumMaxTextAxes; ++a) size[a] = ici[a] * dcn[a];
  if (!options.axes.empty()) {
    for (int a = 0; a < kNumMaxTextAxes; ++a) {
      if (size[a] > 1 && std::find(options.axes.begin(), options.axes.end(),
                                   std::string(kMaxTextAxes[a])) == options.axes.end()) {
        return "axis outside the allowed axes (--axes)";
      }
    }
  }
  if (dcn[kTensor] > 1 || dcn[kSequence] > 1 || dcn[kExpert] > 1) {
    return "tensor, sequence or expert over DCN (a collective per layer on the slowest links)";
  }
  if (size[kFsdpTranspose] > 1) {
    return "fsdp_transpose > 1 (the recipe gives it fsdp's roles: a plan searched as fsdp)";
  }
  if (size[kSequence] > 1 && options.attention != AttentionKernel::kFlash) {
    return "sequence > 1 without flash attention (context parallelism needs it)";
  }
  if (size[kSequence] > 1 &&
      (c.seq_len % size[kSequence] != 0 || c.seq_len / size[kSequence] == c.head_dim())) {
    return "sequence not dividing seq_len (or leaving head_dim positions)";
  }
  if (size[kExpert] > 1 && (c.experts == 0 || c.experts % size[kExpert] != 0)) {
    return "expert > 1 for a dense model or not dividing the experts";
  }
  if (c.heads % size[kTensor] != 0 || c.num_kv_heads() % size[kTensor] != 0 ||
      c.ffn % size[kTensor] != 0) {
    return "tensor not dividing heads, kv_heads or ffn";
  }
  if (c.layers % size[kStage] != 0) return "stage not dividing the layers";
  const int64_t batch_shards = size[kData] * size[kFsdp] * size[kFsdpTranspose] * size[kExpert];
  if (c.batch % batch_shards != 0) {
    return "data x fsdp x expert not dividing the global batch";
  }
  if (StateBytesLowerBound(size, c) > static_cast<double>(hbm_bytes)) {
    return "parameters, gradients and Adam moments alone exceed HBM (a lower bound)";
  }
  return "";
}

// The microbatch counts searched for a mesh: factor x stages dividing a data-parallel rank's
// sequences; 0 (= stages) without a pipeline.
std::vector<int64_t> MicrobatchChoices(const nn::TransformerConfig& c, int64_t stages,
                                       int64_t batch_shards, const AutoshardOptions& options) {
  if (stages <= 1) return {0};
  std::vector<int64_t> out;
  const int64_t rank_batch = c.batch / batch_shards;
  std::vector<int64_t> factors = options.microbatch_factors;
  if (factors.empty()) {
    for (int64_t factor = 1; factor * stages <= rank_batch; ++factor) factors.push_back(factor);
  }
  for (int64_t factor : factors) {
    const int64_t m = factor * stages;
    if (m > 0 && rank_batch % m == 0 && std::find(out.begin(), out.end(), m) == out.end()) {
      out.push_back(m);
    }
  }
  return out;
}

// "ici fsdp=4, dcn data=2" for messages.
std::string PlanText(const std::vector<int64_t>& ici, const std::vector<int64_t>& dcn) {
  std::string text;
  for (const auto* sizes : {&ici, &dcn}) {
    absl::StrAppend(&text, text.empty() ? "ici" : ", dcn");
    bool any = false;
    for (int a = 0; a < kNumMaxTextAxes; ++a) {
      if ((*sizes)[a] == 1) continue;
      absl::StrAppend(&text, " ", std::string(kMaxTextAxes[a]), "=", (*sizes)[a]);
      any = true;
    }
    if (!any) absl::StrAppend(&text, " -");
  }
  return text;
}

AutoshardCandidate CandidateOf(const ModelSimulation& s, const ModelPlan& plan,
                               const std::vector<int64_t>& ici, const std::vector<int64_t>& dcn,
                               int64_t hbm_bytes) {
  AutoshardCandidate c;
  c.plan = plan;
  c.ici_axes = ici;
  c.dcn_axes = dcn;
  const SimulationReport& r = s.report;
  c.step_seconds = r.step_seconds;
  c.compute_seconds = r.compute_seconds;
  c.ici_seconds = r.ici_seconds;
  c.dcn_seconds = r.dcn_seconds;
  c.exposed_comm_seconds = r.exposed_comm_seconds;
  c.dcn_bytes_per_device = r.dcn_bytes_per_device;
  c.ici_bytes_per_device = r.ici_bytes_per_device;
  c.memory = s.estimates.training.memory;
  // The simulator compares with the device's HBM; the search holds plans to its own limit.
  c.hbm_bytes = hbm_bytes;
  c.fits = r.peak_memory_bytes <= hbm_bytes;
  c.mfu = s.throughput.mfu;
  return c;
}

// The ranking key: step time to the nanosecond, then DCN bytes, then enumeration order.
std::tuple<int64_t, int64_t, int64_t> RankKey(const AutoshardCandidate& c) {
  return {std::llround(c.step_seconds * 1e9), c.dcn_bytes_per_device, c.order};
}

// The values of the choices --explain reports, for candidate `c`.
std::vector<std::pair<std::string, std::string>> ChoicesOf(const AutoshardCandidate& c) {
  std::vector<std::pair<std::string, std::string>> out;
  for (int a = 0; a < kNumMaxTextAxes; ++a) {
    out.emplace_back(absl::StrCat("ici_", std::string(kMaxTextAxes[a])),
                     absl::StrCat(c.ici_axes[a]));
  }
  for (int a = 0; a < kNumMaxTextAxes; ++a) {
    out.emplace_back(absl::StrCat("dcn_", std::string(kMaxTextAxes[a])),
                     absl::StrCat(c.dcn_axes[a]));
  }
  out.emplace_back("remat", std::string(RematPolicyName(c.plan.remat)));
  out.emplace_back("microbatches", absl::StrCat(c.plan.microbatches));
  return out;
}

void Explain(AutoshardResult& result) {
  if (result.best < 0) return;
  const auto best_choices = ChoicesOf(result.candidates[result.best]);
  for (size_t k = 0; k < best_choices.size(); ++k) {
    AutoshardExplanation e;
    e.choice = best_choices[k].first;
    e.best_value = best_choices[k].second;
    for (int64_t i = 0; i < static_cast<int64_t>(result.candidates.size()); ++i) {
      const AutoshardCandidate& c = result.candidates[i];
      if (!c.fits) continue;
      const std::string value = ChoicesOf(c)[k].second;
      if (value == e.best_value) continue;
      if (e.alternative < 0 || RankKey(c) < RankKey(result.candidates[e.alternative])) {
        e.alternative = i;
        e.alternative_value = value;
      }
    }
    result.explanations.push_back(std::move(e));
  }
}

// What one mesh gave: its plans (one per remat x microbatch variant the estimates accept), or
// the builder's or partitioner's rejection.
struct MeshOutcome {
  bool evaluated = false;
  absl::Status status;
  std::vector<AutoshardCandidate> candidates;
};

MeshOutcome EvaluateMesh(const Topology& topology, const nn::TransformerConfig& config,
                         const AutoshardOptions& options, const ModelSimulationOptions& sim_options,
                         const std::vector<int64_t>& ici, const std::vector<int64_t>& dcn,
                         int64_t hbm_bytes) {
  MeshOutcome out;
  out.evaluated = true;
  ModelPlan plan;
  plan.mesh = MaxTextMeshShape(ici, dcn);
  plan.recipe = nn::ShardingRecipe::kFsdpTp;
  plan.attention = options.attention;
  const int64_t stages = ici[kStage] * dcn[kStage];
  const int64_t batch_shards = ici[kData] * dcn[kData] * ici[kFsdp] * dcn[kFsdp] *
                               ici[kFsdpTranspose] * dcn[kFsdpTranspose] * ici[kExpert] *
                               dcn[kExpert];
  std::vector<PlanVariant> variants;
  for (RematPolicy remat : options.remat_policies) {
    for (int64_t m : MicrobatchChoices(config, stages, batch_shards, options)) {
      variants.push_back({remat, m, options.sequence_parallel});
    }
  }
  absl::StatusOr<std::vector<absl::StatusOr<ModelSimulation>>> sims =
      SimulateModelPlanVariants(topology, config, plan, variants, sim_options);
  if (!sims.ok()) {
    out.status = sims.status();
    return out;
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    if (!(*sims)[v].ok()) continue;
    ModelPlan variant_plan = plan;
    variant_plan.remat = variants[v].remat;
    variant_plan.microbatches = variants[v].microbatches;
    variant_plan.sequence_parallel = variants[v].sequence_parallel;
    out.candidates.push_back(CandidateOf(*(*sims)[v], variant_plan, ici, dcn, hbm_bytes));
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> Factorizations(int64_t n, int parts) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> prefix;
  if (n >= 1 && parts >= 1) Factorize(n, parts, prefix, out);
  return out;
}

absl::StatusOr<AutoshardResult> Autoshard(const Topology& topology,
                                          const nn::TransformerConfig& config,
                                          const AutoshardOptions& options) {
  TESSEL_RETURN_IF_ERROR(nn::ValidateTransformerConfig(config));
  const int64_t slices = topology.num_slices();
  if (slices < 1 || topology.num_devices() % slices != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology ", topology.name(), ": ", topology.num_devices(),
                     " devices do not split into ", slices, " equal slices"));
  }
  for (const std::string& axis : options.axes) {
    if (std::find(kMaxTextAxes.begin(), kMaxTextAxes.end(), axis) == kMaxTextAxes.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("autoshard axes: \"", axis,
                       "\" is not one of MaxText's axes (data, stage, "
                       "fsdp, fsdp_transpose, sequence, tensor, expert)"));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  AutoshardResult result;
  const auto ici_choices = Factorizations(topology.num_devices() / slices, kNumMaxTextAxes);
  const auto dcn_choices = Factorizations(slices, kNumMaxTextAxes);
  ModelSimulationOptions sim_options;
  sim_options.extrapolate_layers = true;
  sim_options.simulator.overlap = options.overlap;
  sim_options.simulator.top_k = 0;
  sim_options.simulator.cost.matmul_dtype = options.matmul_dtype;
  // DCN outermost: plans with fewer slices on inner axes come first in the order.
  const int64_t hbm_bytes =
      options.hbm_bytes > 0 ? options.hbm_bytes : topology.device_spec().hbm_bytes;
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> meshes;
  for (const std::vector<int64_t>& dcn : dcn_choices) {
    for (const std::vector<int64_t>& ici : ici_choices) {
      ++result.meshes_enumerated;
      std::vector<int64_t> size(kNumMaxTextAxes);
      for (int a = 0; a < kNumMaxTextAxes; ++a) size[a] = ici[a] * dcn[a];
      const double bound = StateBytesLowerBound(size, config);
      if (result.meshes_enumerated == 1 || bound < result.state_bytes_lower_bound) {
        result.state_bytes_lower_bound = bound;
      }
      std::string reason = PruneReason(ici, dcn, config, options, hbm_bytes);
      if (reason.empty()) {
        meshes.emplace_back(ici, dcn);
      } else {
        ++result.pruned[reason];
      }
    }
  }
  // Each mesh is independent: workers take the next mesh and fill its slot; the slots are read
  // in order afterwards, so the result does not depend on which thread ran what.
  std::vector<MeshOutcome> outcomes(meshes.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < meshes.size(); k = next++) {
      if (options.budget_seconds > 0 && elapsed() > options.budget_seconds) continue;
      outcomes[k] = EvaluateMesh(topology, config, options, sim_options, meshes[k].first,
                                 meshes[k].second, hbm_bytes);
    }
  };
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && static_cast<size_t>(t) < meshes.size(); ++t) {
    pool.emplace_back(work);
  }
  work();
  for (std::thread& t : pool) t.join();
  for (size_t k = 0; k < meshes.size(); ++k) {
    MeshOutcome& o = outcomes[k];
    if (!o.evaluated) {
      result.complete = false;
      ++result.pruned["not evaluated: the budget ran out"];
    } else if (!o.status.ok()) {
      if (result.meshes_failed++ == 0) {
        result.first_failure =
            absl::StrCat(PlanText(meshes[k].first, meshes[k].second), ": ", o.status.message());
      }
    } else {
      ++result.meshes_simulated;
      for (AutoshardCandidate& c : o.candidates) {
        c.order = static_cast<int64_t>(result.candidates.size());
        result.candidates.push_back(std::move(c));
        ++result.plans_evaluated;
      }
    }
  }
  std::vector<int64_t> fitting;
  for (int64_t i = 0; i < static_cast<int64_t>(result.candidates.size()); ++i) {
    const AutoshardCandidate& c = result.candidates[i];
    if (c.fits) fitting.push_back(i);
    if (result.smallest_memory < 0 ||
        c.memory.total_bytes() < result.candidates[result.smallest_memory].memory.total_bytes()) {
      result.smallest_memory = i;
    }
  }
  std::sort(fitting.begin(), fitting.end(), [&](int64_t a, int64_t b) {
    return RankKey(result.candidates[a]) < RankKey(result.candidates[b]);
  });
  if (!fitting.empty()) result.best = fitting[0];
  const size_t keep = static_cast<size_t>(std::max<int64_t>(options.top_k, 0)) + 1;
  fitting.resize(std::min(fitting.size(), keep));
  result.ranking = std::move(fitting);
  Explain(result);
  result.search_seconds = elapsed();
  return result;
}

absl::StatusOr<std::vector<ParameterClassSpec>> ParameterClassSpecs(
    const Topology& topology, const nn::TransformerConfig& config, const ModelPlan& plan) {
  // Axes of size 1 split nothing: the specs name only the axes that shard.
  std::vector<int64_t> ici, dcn;
  std::vector<std::string> names;
  for (size_t a = 0; a < plan.mesh.names.size(); ++a) {
    if (plan.mesh.ici[a] * plan.mesh.dcn[a] == 1) continue;
    ici.push_back(plan.mesh.ici[a]);
    dcn.push_back(plan.mesh.dcn[a]);
    names.push_back(plan.mesh.names[a]);
  }
  if (names.empty() || std::find(names.begin(), names.end(), "tensor") == names.end()) {
    // fsdp_tp names a tensor axis; one of size 1 changes no spec.
    ici.push_back(1);
    dcn.push_back(1);
    names.push_back("tensor");
  }
  TESSEL_ASSIGN_OR_RETURN(spmd::HybridMesh mesh,
                          spmd::HybridMesh::Create(ici, dcn, names, topology));
  TESSEL_ASSIGN_OR_RETURN(nn::RecipeLayout layout, nn::RecipeLayoutFor(mesh, plan.recipe));
  auto drop_unit = [&](spmd::PartitionSpec spec) {
    std::vector<spmd::PartitionSpec::Entry> entries;
    for (const spmd::PartitionSpec::Entry& e : spec.entries()) {
      std::vector<spmd::AxisRef> kept;
      for (const spmd::AxisRef& axis : e.axes()) {
        if (axis.is_index() || axis.name() != "tensor" || mesh.size() == 1) {
          kept.push_back(axis);
          continue;
        }
        for (size_t a = 0; a < names.size(); ++a) {
          if (names[a] == "tensor" && ici[a] * dcn[a] > 1) kept.push_back(axis);
        }
      }
      if (kept.empty()) {
        entries.emplace_back(spmd::kNone);
      } else if (kept.size() == 1) {
        entries.emplace_back(kept[0]);
      } else {
        entries.emplace_back(spmd::Axes(kept));
      }
    }
    return spmd::PartitionSpec(std::move(entries));
  };
  const bool llama = config.arch == nn::TransformerArch::kLlama;
  std::vector<ParameterClassSpec> out;
  auto add = [&](const char* cls, std::string params, nn::WeightKind kind, int64_t rank) {
    out.push_back({cls, std::move(params), rank, drop_unit(nn::WeightPartitionSpec(kind, layout))});
  };
  add("column", llama ? "wq, wk, wv, w_gate, w_up" : "wq, wk, wv, w1", nn::WeightKind::kColumn, 2);
  add("row", llama ? "wo, w_down" : "wo, w2", nn::WeightKind::kRow, 2);
  add("embedding", "embedding table", nn::WeightKind::kEmbedding, 2);
  if (!config.tie_embeddings) add("head", "lm head", nn::WeightKind::kHead, 2);
  if (!config.rotary()) add("position", "position table", nn::WeightKind::kPosition, 2);
  if (!llama) add("column_bias", "biases of wq, wk, wv, w1", nn::WeightKind::kColumnBias, 1);
  add("vector", llama ? "norm scales" : "norm scales and biases, biases of wo and w2",
      nn::WeightKind::kVector, 1);
  return out;
}

}  // namespace tessel::mesh
