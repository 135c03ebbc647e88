#include "examples/gpt/gpt_example.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "tessel/core/status_macros.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/runtime/checkpoint.h"
#include "tessel/nn/gpt.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/text_data.h"
#include "tessel/nn/transformer.h"
#include "tessel/nn/xla_model.h"
#include "tessel/spmd/partition_spec.h"

namespace tessel::examples {
namespace {

constexpr char kProgram[] = "gpt_train";

absl::StatusOr<nn::GptConfig> ConfigOf(const GptFlags& flags) {
  nn::GptConfig c;
  c.layers = flags.layers;
  c.d_model = flags.d_model;
  c.heads = flags.heads;
  c.ffn = flags.ffn;
  c.seq_len = flags.seq_len;
  TESSEL_ASSIGN_OR_RETURN(c.position, nn::ParsePositionEncoding(flags.position));
  TESSEL_ASSIGN_OR_RETURN(c.mlp, nn::ParseMlpActivation(flags.mlp));
  c.tied_head = flags.head == "tied";
  TESSEL_RETURN_IF_ERROR(nn::ValidateGptConfig(c));
  return c;
}

absl::Status CheckCheckpointFlags(const GptFlags& flags) {
  if (flags.checkpoint_dir.empty() && (flags.checkpoint_every > 0 || flags.resume)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.resume ? "--resume" : "--checkpoint-every", " needs --checkpoint-dir"));
  }
  return absl::OkStatus();
}

absl::StatusOr<spmd::HybridMesh> MakeGptMesh(const GptFlags& flags, const mesh::Topology& topology,
                                             const std::string& config_path) {
  TESSEL_ASSIGN_OR_RETURN(spmd::HybridMesh hybrid,
                          MakeHybridMesh(flags.mesh, topology, config_path));
  TESSEL_ASSIGN_OR_RETURN(nn::ShardingRecipe recipe, nn::ParseShardingRecipe(flags.recipe));
  absl::StatusOr<nn::RecipeLayout> layout = nn::RecipeLayoutFor(hybrid, recipe);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--recipe ", flags.recipe, " on --axis-names ",
                                                   absl::StrJoin(flags.mesh.axis_names, ","), ": ",
                                                   layout.status().message()));
  }
  return hybrid;
}

// The run's fixed pieces: corpus, batchers, model, optimizer, layout.
struct Job {
  // Held by pointer: the batchers point into it and the Job is moved.
  std::unique_ptr<nn::TextCorpus> corpus;
  std::unique_ptr<nn::TextBatcher> train;
  std::unique_ptr<nn::TextBatcher> validation;
  std::optional<nn::Gpt> model;
  std::unique_ptr<nn::Adam> adamw;
  nn::RecipeLayout layout;   // empty on one device
  int64_t batch_shards = 1;  // devices the batch dim is split over
};

// Batch `step` of `batcher` as tensors: whole (single device) or this host's rows only, split
// over the layout's batch axes.
absl::StatusOr<std::pair<Tensor, Tensor>> BatchTensors(const Placement& placement, const Job& job,
                                                       const nn::TextBatcher& batcher,
                                                       int64_t step) {
  if (placement.runtime == nullptr) {
    nn::TextBatch b = batcher.GetBatch(step);
    return std::make_pair(Tensor::FromLiteral(std::move(b.tokens)),
                          Tensor::FromLiteral(std::move(b.labels)));
  }
  const Shape shape(DType::kS32, {batcher.options().batch, batcher.options().seq_len});
  TESSEL_ASSIGN_OR_RETURN(
      spmd::Sharding sharding,
      spmd::ShardingFromPartitionSpec(*placement.mesh, 2, nn::BatchPartitionSpec(job.layout, 2)));
  std::pair<Tensor, Tensor> out;
  for (Tensor* t : {&out.first, &out.second}) {
    const bool labels = t == &out.second;
    TESSEL_ASSIGN_OR_RETURN(
        *t, placement.runtime->MakeShardedInput(
                shape, sharding, [&](const spmd::Shard& shard) -> absl::StatusOr<Literal> {
                  nn::TextBatch b =
                      batcher.GetBatchRows(step, shard.index[0].first, shard.index[0].second);
                  return labels ? std::move(b.labels) : std::move(b.tokens);
                }));
  }
  return out;
}

absl::StatusOr<double> ReadScalar(const Tensor& t) {
  TESSEL_ASSIGN_OR_RETURN(Literal value, t.ToLiteral());
  return value.GetAsDouble(0);
}

// Mean validation loss (nats) over the --eval-batches fixed batches (the same windows at every
// evaluation, so the curve compares like with like).
absl::StatusOr<double> Evaluate(const GptFlags& flags, const Placement& placement, const Job& job) {
  double sum = 0;
  for (int64_t i = 0; i < flags.eval_batches; ++i) {
    Tensor loss;
    {
      TESSEL_ASSIGN_OR_RETURN(auto inputs, BatchTensors(placement, job, *job.validation, i));
      loss = job.model->Loss(inputs.first, inputs.second);
    }
    TESSEL_RETURN_IF_ERROR(Sync({loss}));
    TESSEL_ASSIGN_OR_RETURN(double value, ReadScalar(loss));
    sum += value;
  }
  return sum / static_cast<double>(flags.eval_batches);
}

struct StepOutput {
  double loss = 0;
  double grad_norm = 0;
};

// One training step as one graph: forward, Grad, then nn::optimizer_step (clipping by global
// norm and AdamW; the partitioner reduces the gradients of the sharded parameters itself). Only
// the loss and the gradient norm stay alive besides the new parameters and moments, so they are
// the graph's only extra outputs; a step closure reads them once the step has run.
absl::StatusOr<StepOutput> TrainStep(const GptFlags& flags, const Placement& placement, Job& job,
                                     int64_t step) {
  StepOutput out;
  {
    TESSEL_ASSIGN_OR_RETURN(auto inputs, BatchTensors(placement, job, *job.train, step));
    Tensor loss = job.model->Loss(inputs.first, inputs.second);
    std::vector<Tensor*> params = job.model->parameters();
    std::vector<Tensor> wrt;
    for (Tensor* p : params) wrt.push_back(*p);
    TESSEL_ASSIGN_OR_RETURN(Tensor norm,
                            nn::optimizer_step(*job.adamw, params, Grad(loss, wrt),
                                               {.groups = {}, .max_grad_norm = flags.clip}));
    nn::add_step_closure([loss, norm, &out]() -> absl::Status {
      TESSEL_ASSIGN_OR_RETURN(out.loss, ReadScalar(loss));
      TESSEL_ASSIGN_OR_RETURN(out.grad_norm, ReadScalar(norm));
      return absl::OkStatus();
    });
  }
  TESSEL_RETURN_IF_ERROR(Sync());
  return out;
}

// Bytes as text for a terminal: printable ASCII, newlines and tabs as they are, anything else
// as '?'.
std::string Printable(const std::vector<uint8_t>& bytes) {
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back((b >= 32 && b < 127) || b == '\n' || b == '\t' ? static_cast<char>(b) : '?');
  }
  return out;
}

// Index drawn from softmax(logits / temperature), computed in double from one portable uniform.
int64_t SampleIndex(const std::vector<double>& logits, double temperature, std::mt19937_64& rng) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> weights(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    weights[i] = std::exp((logits[i] - max) / temperature);
    total += weights[i];
  }
  double u = nn::UniformDouble(rng, 0, total);
  for (size_t i = 0; i < weights.size(); ++i) {
    if (u < weights[i]) return static_cast<int64_t>(i);
    u -= weights[i];
  }
  return static_cast<int64_t>(weights.size()) - 1;
}

struct Samples {
  std::string greedy;
  std::string sampled;
};

// Generates --generate bytes after --prompt with the trained model, through the same (sharded)
// program family as training: each new byte is one forward pass of a [G, seq_len] batch split
// over the batch axes like the training batch, G = the batch split rounded up to an even count.
// Row 0 decodes greedily, the other rows sample at --temperature (row 1 is reported). Positions
// after a row's end hold byte 0: causal attention never reads them. A context longer than
// seq_len keeps its last seq_len bytes (nanoGPT's crop). Every host runs the loop and draws the
// same numbers (the logits are read whole on every host), so the programs stay in step.
absl::StatusOr<Samples> Generate(const GptFlags& flags, const Placement& placement,
                                 const Job& job) {
  const int64_t s = flags.seq_len, vocab = job.model->config().vocab;
  const int64_t rows = job.batch_shards % 2 == 0 ? job.batch_shards : 2 * job.batch_shards;
  std::vector<std::vector<uint8_t>> text(
      rows, std::vector<uint8_t>(flags.prompt.begin(), flags.prompt.end()));
  if (flags.prompt.empty()) {
    for (auto& t : text) t.push_back('\n');
  }
  std::mt19937_64 rng(flags.seed ^ 0x5eed5eedULL);
  const Shape shape(DType::kS32, {rows, s});
  std::optional<spmd::Sharding> sharding;
  if (placement.runtime != nullptr) {
    TESSEL_ASSIGN_OR_RETURN(
        sharding,
        spmd::ShardingFromPartitionSpec(*placement.mesh, 2, nn::BatchPartitionSpec(job.layout, 2)));
  }
  for (int64_t n = 0; n < flags.generate; ++n) {
    std::vector<int32_t> window(rows * s, 0);
    std::vector<int64_t> last(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t len = static_cast<int64_t>(text[r].size());
      const int64_t begin = std::max<int64_t>(0, len - s);
      for (int64_t i = begin; i < len; ++i) window[r * s + (i - begin)] = text[r][i];
      last[r] = len - begin - 1;
    }
    Literal tokens = Literal::FromVector<int32_t>({rows, s}, window);
    Tensor logits;
    {
      Tensor input;
      if (placement.runtime == nullptr) {
        input = Tensor::FromLiteral(std::move(tokens));
      } else {
        TESSEL_ASSIGN_OR_RETURN(
            input, placement.runtime->MakeShardedInput(
                       shape, *sharding, [&](const spmd::Shard& shard) -> absl::StatusOr<Literal> {
                         const int64_t b = shard.index[0].first, e = shard.index[0].second;
                         return Literal::FromVector<int32_t>(
                             {e - b, s}, absl::MakeConstSpan(window).subspan(b * s, (e - b) * s));
                       }));
      }
      logits = job.model->Logits(input);
    }
    TESSEL_RETURN_IF_ERROR(Sync({logits}));
    TESSEL_ASSIGN_OR_RETURN(Literal values, logits.ToLiteral());
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> row(vocab);
      for (int64_t v = 0; v < vocab; ++v)
        row[v] = values.GetAsDouble((r * s + last[r]) * vocab + v);
      const int64_t next = r == 0 ? std::max_element(row.begin(), row.end()) - row.begin()
                                  : SampleIndex(row, flags.temperature, rng);
      text[r].push_back(static_cast<uint8_t>(next));
    }
  }
  return Samples{Printable(text[0]), Printable(text[1])};
}

// What a checkpoint must match besides its arrays' shapes: the model's description.
nlohmann::json ModelDescription(const GptFlags& flags) {
  return {{"layers", flags.layers}, {"d_model", flags.d_model}, {"heads", flags.heads},
          {"ffn", flags.ffn},       {"seq_len", flags.seq_len}, {"position", flags.position},
          {"mlp", flags.mlp},       {"head", flags.head}};
}

std::string MeshText(const Placement& placement) {
  return placement.runtime != nullptr ? placement.mesh->ToString() : "";
}

// The checkpoint's arrays, in this order per parameter: "param/NAME", "adam_m/NAME",
// "adam_v/NAME" (GPT-2 parameter names).
std::vector<std::string> CheckpointNames(const nn::Gpt& model) {
  std::vector<std::string> names;
  for (const std::string& name : model.parameter_names()) {
    for (const char* kind : {"param/", "adam_m/", "adam_v/"}) names.push_back(kind + name);
  }
  return names;
}

// What a resume loads: every parameter and its two moments in the parameter's sharding.
absl::StatusOr<std::vector<mesh::CheckpointTarget>> CheckpointTargets(nn::Gpt& model) {
  std::vector<mesh::CheckpointTarget> targets;
  const std::vector<std::string> names = CheckpointNames(model);
  std::vector<Tensor*> params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    std::optional<spmd::Sharding> sharding;
    if (!params[i]->sharding().empty()) {
      TESSEL_ASSIGN_OR_RETURN(sharding, spmd::ParseSharding(params[i]->sharding()));
    }
    for (int k = 0; k < 3; ++k) {
      targets.push_back({names[3 * i + k], params[i]->shape(), sharding});
    }
  }
  return targets;
}

// The newest checkpoint in --checkpoint-dir, checked against the model (arrays, shapes and
// description) and the seed. `model` gives the shapes (and, sharded, the target shardings).
absl::StatusOr<mesh::CheckpointMetadata> FindResumable(const GptFlags& flags, nn::Gpt& model,
                                                       std::vector<mesh::CheckpointTarget>* out) {
  TESSEL_ASSIGN_OR_RETURN(std::string step_dir, mesh::LatestCheckpoint(flags.checkpoint_dir));
  TESSEL_ASSIGN_OR_RETURN(mesh::CheckpointMetadata meta, mesh::ReadCheckpointMetadata(step_dir));
  TESSEL_ASSIGN_OR_RETURN(std::vector<mesh::CheckpointTarget> targets, CheckpointTargets(model));
  TESSEL_RETURN_IF_ERROR(mesh::CheckCheckpointFits(meta, targets));
  const nlohmann::json here = ModelDescription(flags);
  if (meta.attributes.value("model", nlohmann::json()) != here) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", step_dir, " was saved from another model (",
        meta.attributes.value("model", nlohmann::json()).dump(), "); this run has ", here.dump()));
  }
  const nlohmann::json seed = meta.attributes.value("seed", nlohmann::json());
  if (seed != nlohmann::json(flags.seed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", step_dir, " was saved with --seed ", seed.dump(),
                     "; this run has --seed ", flags.seed, " (the batches depend on it)"));
  }
  if (meta.step > flags.steps) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", step_dir, " is at step ",
                                                   meta.step, ", past --steps ", flags.steps));
  }
  if (out != nullptr) *out = std::move(targets);
  return meta;
}

// Everything the run measured, for the progress lines, the summary and the plot.
struct History {
  std::vector<std::pair<int64_t, double>> train;       // (step, loss) at each progress line
  std::vector<std::pair<int64_t, double>> validation;  // (step, loss) at each evaluation
  double train_seconds = 0;                            // wall time of training steps only
  double simulated_seconds = 0;                        // the simulator's time of those steps
  int64_t steps = 0;
  transport::CollectiveStats traffic;  // this host's training traffic
};

// A small SVG line chart of the training (blue) and validation (orange) losses in bits per byte
// against the step, with the unigram entropy as a dashed reference line.
absl::Status WriteLossSvg(const std::string& path, const History& h, double unigram_bits) {
  constexpr double kW = 640, kH = 400, kLeft = 60, kRight = 20, kTop = 30, kBottom = 40;
  double max_bits = unigram_bits, max_step = 1;
  for (const auto* series : {&h.train, &h.validation}) {
    for (const auto& [step, loss] : *series) {
      max_bits = std::max(max_bits, loss / std::log(2.0));
      max_step = std::max(max_step, static_cast<double>(step));
    }
  }
  max_bits = std::ceil(max_bits);
  auto x = [&](double step) { return kLeft + (kW - kLeft - kRight) * step / max_step; };
  auto y = [&](double bits) { return kTop + (kH - kTop - kBottom) * (1 - bits / max_bits); };
  auto polyline = [&](const std::vector<std::pair<int64_t, double>>& series, const char* color) {
    std::string points;
    for (const auto& [step, loss] : series) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", x(static_cast<double>(step)),
                            y(loss / std::log(2.0)));
    }
    return absl::StrFormat(
        "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n", color,
        points);
  };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n",
      kW, kH);
  for (int b = 0; b <= static_cast<int>(max_bits); ++b) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n",
                          kLeft, kW - kRight, y(b), y(b), kLeft - 6, y(b) + 4, b);
  }
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"gray\" "
                        "stroke-dasharray=\"6,4\"/>\n",
                        kLeft, kW - kRight, y(unigram_bits), y(unigram_bits));
  svg += polyline(h.train, "#1f77b4") + polyline(h.validation, "#ff7f0e");
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%.1f\" y=\"18\">loss (bits per byte): training (blue), validation (orange), "
      "unigram entropy %.2f (dashed)</text>\n<text x=\"%.1f\" y=\"%.1f\" "
      "text-anchor=\"middle\">step (last %lld)</text>\n</svg>\n",
      kLeft, unigram_bits, (kLeft + kW - kRight) / 2, kH - 10, static_cast<long long>(max_step));
  std::ofstream out(path);
  out << svg;
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write the plot"));
  return absl::OkStatus();
}

void PrintJson(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// The progress line after training step `step` (1-based count), over the steps since the last.
void PrintProgress(const GptFlags& flags, const Placement& placement, int64_t step,
                   const StepOutput& out, double lr, double tokens_per_second,
                   double simulated_step_seconds) {
  if (flags.json) {
    PrintJson({{"step", step},
               {"loss", out.loss},
               {"lr", lr},
               {"grad_norm", out.grad_norm},
               {"tokens_per_second", tokens_per_second},
               {"simulated_step_seconds", simulated_step_seconds}});
    return;
  }
  std::string simulated;
  if (placement.runtime != nullptr && simulated_step_seconds > 0) {
    simulated = absl::StrFormat("  simulated %s step %.3f ms",
                                placement.runtime->topology().device_spec().name,
                                1e3 * simulated_step_seconds);
  }
  std::printf("step %5lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  tokens/s %.0f%s\n",
              static_cast<long long>(step), static_cast<long long>(flags.steps), out.loss, lr,
              out.grad_norm, tokens_per_second, simulated.c_str());
  std::fflush(stdout);
}

void PrintEval(const GptFlags& flags, int64_t step, double val_loss) {
  const double bpb = val_loss / std::log(2.0);
  if (flags.json) {
    PrintJson({{"step", step}, {"val_loss", val_loss}, {"val_bits_per_byte", bpb}});
  } else {
    std::printf("step %5lld  validation loss %.4f nats = %.3f bits/byte\n",
                static_cast<long long>(step), val_loss, bpb);
    std::fflush(stdout);
  }
}

// Loads the corpus, builds the model (sharded on a mesh) and the optimizer.
absl::StatusOr<Job> MakeJob(const GptFlags& flags, const Placement& placement) {
  Job job;
  const std::string dir = flags.data_dir.empty() ? nn::kDefaultFortunesDir : flags.data_dir;
  TESSEL_ASSIGN_OR_RETURN(nn::TextCorpus corpus, nn::LoadTextCorpus(dir));
  job.corpus = std::make_unique<nn::TextCorpus>(std::move(corpus));
  const nn::TextBatcherOptions train_options{flags.batch, flags.seq_len, flags.seed};
  // The validation windows come from a seed of their own and are the same at every evaluation.
  const nn::TextBatcherOptions val_options{flags.batch, flags.seq_len, flags.seed + 1};
  TESSEL_RETURN_IF_ERROR(
      nn::TextBatcher::Check(job.corpus->train, train_options, "training split"));
  TESSEL_RETURN_IF_ERROR(
      nn::TextBatcher::Check(job.corpus->validation, val_options, "validation split"));
  job.train = std::make_unique<nn::TextBatcher>(&job.corpus->train, train_options);
  job.validation = std::make_unique<nn::TextBatcher>(&job.corpus->validation, val_options);
  TESSEL_ASSIGN_OR_RETURN(nn::GptConfig config, ConfigOf(flags));
  TESSEL_ASSIGN_OR_RETURN(job.model, nn::Gpt::Create(config, flags.seed));
  if (placement.runtime != nullptr) {
    TESSEL_ASSIGN_OR_RETURN(nn::ShardingRecipe recipe, nn::ParseShardingRecipe(flags.recipe));
    TESSEL_ASSIGN_OR_RETURN(job.layout, nn::RecipeLayoutFor(*placement.mesh, recipe));
    TESSEL_RETURN_IF_ERROR(job.model->Shard(*placement.mesh, job.layout));
    for (const std::string& axis : job.layout.batch) {
      TESSEL_ASSIGN_OR_RETURN(int64_t index, placement.mesh->AxisIndex(axis));
      job.batch_shards *= placement.mesh->axis_size(index);
    }
  }
  // GPT-2 / nanoGPT AdamW: beta2 0.95, decay on matrices and the embedding only.
  job.adamw = std::make_unique<nn::Adam>(nn::AdamOptions{.lr = flags.lr,
                                                         .beta1 = 0.9,
                                                         .beta2 = 0.95,
                                                         .eps = 1e-8,
                                                         .weight_decay = flags.weight_decay,
                                                         .decoupled_weight_decay = true,
                                                         .decay_mask = job.model->DecayMask()});
  return job;
}

void PrintHeader(const GptFlags& flags, const Placement& placement, const Job& job,
                 double unigram_bits) {
  std::string where = "single device";
  if (placement.runtime != nullptr) {
    where = absl::StrCat(placement.runtime->num_devices(), " devices on ",
                         placement.runtime->num_hosts(), " hosts of ", placement.config_path,
                         ", mesh ", placement.mesh->ToString(), ", recipe ", flags.recipe);
  }
  const nn::GptConfig& c = job.model->config();
  std::printf(
      "byte-level GPT: %lld layers, d_model %lld, %lld heads, ffn %lld, seq_len %lld, %s "
      "positions, %s MLP, %s head: %lld parameters\n"
      "corpus %s: %zu training bytes (%zu files), %zu validation bytes (%zu files); unigram "
      "entropy %.3f bits/byte\n"
      "AdamW lr %g (warmup %lld, cosine to %g), weight decay %g, clip %g, batch %lld x %lld "
      "bytes, %lld steps, %s\n",
      static_cast<long long>(c.layers), static_cast<long long>(c.d_model),
      static_cast<long long>(c.heads), static_cast<long long>(c.ffn_size()),
      static_cast<long long>(c.seq_len), flags.position.c_str(), flags.mlp.c_str(),
      flags.head.c_str(), static_cast<long long>(job.model->num_parameters()),
      job.corpus->dir.c_str(), job.corpus->train.size(), job.corpus->train_files.size(),
      job.corpus->validation.size(), job.corpus->validation_files.size(), unigram_bits, flags.lr,
      static_cast<long long>(flags.warmup), flags.min_lr, flags.weight_decay, flags.clip,
      static_cast<long long>(flags.batch), static_cast<long long>(flags.seq_len),
      static_cast<long long>(flags.steps), where.c_str());
  std::fflush(stdout);
}

// Saves the parameters, AdamW's moments and the run's position after `step` steps.
absl::Status SaveGpt(const GptFlags& flags, const Placement& placement, Job& job, int64_t step) {
  const std::vector<std::string> names = CheckpointNames(*job.model);
  std::vector<Tensor*> params = job.model->parameters();
  std::vector<mesh::CheckpointArray> arrays;
  for (size_t i = 0; i < params.size(); ++i) {
    arrays.push_back({names[3 * i], *params[i]});
    arrays.push_back({names[3 * i + 1], job.adamw->first_moments()[i]});
    arrays.push_back({names[3 * i + 2], job.adamw->second_moments()[i]});
  }
  // The batches, the initialization and sampling are functions of the seed and the step, so the
  // seed is the whole rng state and the step the data loader's position.
  const nlohmann::json attributes = {
      {"step", step},
      {"seed", flags.seed},
      {"model", ModelDescription(flags)},
      {"adam_step_count", job.adamw->step_count()},
      {"rng", {{"seed", flags.seed}}},
      {"data", {{"next_train_batch", step}, {"batch", flags.batch}, {"seed", flags.seed}}}};
  TESSEL_ASSIGN_OR_RETURN(mesh::CheckpointIoStats stats,
                          mesh::SaveCheckpoint(flags.checkpoint_dir, step, arrays, attributes,
                                               placement.runtime.get(), MeshText(placement)));
  if (!placement.printer) return absl::OkStatus();
  if (flags.json) {
    PrintJson(
        {{"checkpoint_saved", step}, {"host0_bytes", stats.bytes}, {"seconds", stats.seconds}});
  } else {
    std::printf("step %5lld  checkpoint saved in %s (host 0 wrote %lld bytes, %.3f s)\n",
                static_cast<long long>(step), flags.checkpoint_dir.c_str(),
                static_cast<long long>(stats.bytes), stats.seconds);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// Loads the newest checkpoint into the model and the optimizer; returns its step.
absl::StatusOr<int64_t> ResumeGpt(const GptFlags& flags, const Placement& placement, Job& job) {
  std::vector<mesh::CheckpointTarget> targets;
  TESSEL_ASSIGN_OR_RETURN(mesh::CheckpointMetadata meta,
                          FindResumable(flags, *job.model, &targets));
  mesh::CheckpointIoStats stats;
  TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> values,
                          mesh::LoadCheckpointArrays(meta, targets, placement.runtime.get(),
                                                     MeshText(placement), &stats));
  std::vector<Tensor*> params = job.model->parameters();
  std::vector<Tensor> m, v;
  for (size_t i = 0; i < params.size(); ++i) {
    *params[i] = values[3 * i];
    m.push_back(values[3 * i + 1]);
    v.push_back(values[3 * i + 2]);
  }
  // Adam's bias correction continues from this count: an integer in [0, step] (an edited file
  // could hold a string, a fraction or a count near 2^63 that Adam's step + 1 would wrap).
  const nlohmann::json count = meta.attributes.value("adam_step_count", nlohmann::json(meta.step));
  if (!count.is_number_integer() || count.get<int64_t>() < 0 || count.get<int64_t>() > meta.step) {
    return absl::DataLossError(absl::StrCat("checkpoint ", meta.step_dir,
                                            ": attributes/adam_step_count: expected an integer "
                                            "in [0, ",
                                            meta.step, "], got ", count.dump()));
  }
  TESSEL_RETURN_IF_ERROR(job.adamw->SetState(std::move(m), std::move(v), count.get<int64_t>()));
  if (placement.printer) {
    if (flags.json) {
      PrintJson({{"resumed_from", meta.step_dir},
                 {"step", meta.step},
                 {"host0_bytes_read", stats.bytes},
                 {"seconds", stats.seconds}});
    } else {
      std::printf("resumed from %s at step %lld (host 0 read %lld bytes in %lld reads, %.3f s)\n",
                  meta.step_dir.c_str(), static_cast<long long>(meta.step),
                  static_cast<long long>(stats.bytes), static_cast<long long>(stats.reads),
                  stats.seconds);
      std::fflush(stdout);
    }
  }
  return meta.step;
}

// The training loop from `first_step` (0, or a resumed checkpoint's step): steps, progress
// lines, evaluations, checkpoints.
absl::Status TrainLoop(const GptFlags& flags, const Placement& placement, Job& job,
                       int64_t first_step, History& history) {
  const double tokens_per_step = static_cast<double>(flags.batch * flags.seq_len);
  double interval_seconds = 0, interval_simulated = 0;
  int64_t interval_steps = 0;
  if (flags.eval_every > 0) {
    TESSEL_ASSIGN_OR_RETURN(double val, Evaluate(flags, placement, job));
    history.validation.emplace_back(first_step, val);
    if (placement.printer) PrintEval(flags, first_step, val);
  }
  for (int64_t step = first_step; step < flags.steps; ++step) {
    const double lr = nn::WarmupCosineLr(step, flags.warmup, flags.steps, flags.lr, flags.min_lr);
    job.adamw->set_lr(lr);
    const auto start = std::chrono::steady_clock::now();
    const transport::CollectiveStats before = placement.runtime != nullptr
                                                  ? placement.runtime->communicator().stats()
                                                  : transport::CollectiveStats();
    const double simulated_before =
        placement.runtime != nullptr ? placement.runtime->metrics().simulated_seconds : 0;
    TESSEL_ASSIGN_OR_RETURN(StepOutput out, TrainStep(flags, placement, job, step));
    const double seconds = SecondsSince(start);
    if (placement.runtime != nullptr) {
      AddTraffic(before, placement.runtime->communicator().stats(), history.traffic);
      interval_simulated += placement.runtime->metrics().simulated_seconds - simulated_before;
    }
    interval_seconds += seconds;
    ++interval_steps;
    history.train_seconds += seconds;
    history.steps = step + 1;
    const bool last = step + 1 == flags.steps;
    if ((flags.log_every > 0 && (step + 1) % flags.log_every == 0) || last) {
      history.train.emplace_back(step + 1, out.loss);
      if (placement.printer) {
        PrintProgress(flags, placement, step + 1, out, lr,
                      tokens_per_step * static_cast<double>(interval_steps) / interval_seconds,
                      interval_simulated / static_cast<double>(interval_steps));
      }
      history.simulated_seconds += interval_simulated;
      interval_seconds = interval_simulated = 0;
      interval_steps = 0;
    }
    if (flags.eval_every > 0 && ((step + 1) % flags.eval_every == 0 || last)) {
      TESSEL_ASSIGN_OR_RETURN(double val, Evaluate(flags, placement, job));
      history.validation.emplace_back(step + 1, val);
      if (placement.printer) PrintEval(flags, step + 1, val);
    }
    if (!flags.checkpoint_dir.empty() && flags.checkpoint_every > 0 &&
        ((step + 1) % flags.checkpoint_every == 0 || last)) {
      TESSEL_RETURN_IF_ERROR(SaveGpt(flags, placement, job, step + 1));
    }
  }
  return absl::OkStatus();
}

absl::Status Train(const GptFlags& flags, Placement& placement) {
  TESSEL_RETURN_IF_ERROR(CheckCheckpointFlags(flags));
  TESSEL_ASSIGN_OR_RETURN(Job job, MakeJob(flags, placement));
  std::vector<uint8_t> all = job.corpus->train;
  all.insert(all.end(), job.corpus->validation.begin(), job.corpus->validation.end());
  const double unigram_bits = nn::UnigramEntropyBits(all);
  if (placement.printer && !flags.json) PrintHeader(flags, placement, job, unigram_bits);
  ResetLazyMetrics();
  const auto run_start = std::chrono::steady_clock::now();
  int64_t first_step = 0;
  if (flags.resume) {
    TESSEL_ASSIGN_OR_RETURN(first_step, ResumeGpt(flags, placement, job));
  }
  History history;
  if (placement.runtime != nullptr && !flags.trace.empty()) {
    placement.runtime->EnableTracing(true);
  }
  TESSEL_RETURN_IF_ERROR(TrainLoop(flags, placement, job, first_step, history));
  if (placement.runtime != nullptr) placement.runtime->EnableTracing(false);
  const auto sample_start = std::chrono::steady_clock::now();
  Samples samples;
  if (flags.generate > 0) {
    TESSEL_ASSIGN_OR_RETURN(samples, Generate(flags, placement, job));
  }
  const double sample_seconds = SecondsSince(sample_start);
  transport::CollectiveStats job_traffic;
  if (placement.runtime != nullptr) {  // every host takes part
    TESSEL_ASSIGN_OR_RETURN(job_traffic, placement.runtime->SumOverHosts(history.traffic));
    if (!flags.trace.empty()) {
      TESSEL_ASSIGN_OR_RETURN(TraceEventWriter trace, placement.runtime->CollectTrace());
      if (placement.printer) TESSEL_RETURN_IF_ERROR(trace.WriteFile(flags.trace));
    }
  }
  if (!placement.printer) return absl::OkStatus();
  if (!flags.plot.empty()) {
    TESSEL_RETURN_IF_ERROR(WriteLossSvg(flags.plot, history, unigram_bits));
  }
  const double final_val = history.validation.empty() ? 0 : history.validation.back().second;
  const double steps = static_cast<double>(std::max<int64_t>(history.steps, 1));
  nlohmann::json summary = {
      {"summary", true},
      {"steps", history.steps},
      {"parameters", job.model->num_parameters()},
      {"final_train_loss", history.train.empty() ? 0 : history.train.back().second},
      {"final_val_loss", final_val},
      {"final_val_bits_per_byte", final_val / std::log(2.0)},
      {"unigram_entropy_bits_per_byte", unigram_bits},
      {"tokens_per_second",
       history.train_seconds > 0
           ? steps * static_cast<double>(flags.batch * flags.seq_len) / history.train_seconds
           : 0.0},
      {"simulated_step_seconds", history.simulated_seconds / steps},
      {"train_seconds", history.train_seconds},
      {"sample_seconds", sample_seconds},
      {"seconds", SecondsSince(run_start)}};
  if (flags.generate > 0) {
    summary["prompt"] = flags.prompt;
    summary["sample_greedy"] = samples.greedy;
    summary["sample_temperature"] = samples.sampled;
    summary["temperature"] = flags.temperature;
  }
  if (placement.runtime != nullptr) {
    summary["devices"] = placement.runtime->num_devices();
    summary["hosts"] = placement.runtime->num_hosts();
    summary["step_ici_bytes"] = static_cast<double>(job_traffic.ici.bytes) / steps;
    summary["step_dcn_bytes"] = static_cast<double>(job_traffic.dcn.bytes) / steps;
    summary["step_local_bytes"] = static_cast<double>(job_traffic.local.bytes) / steps;
  }
  if (flags.json) {
    PrintJson(summary);
    return absl::OkStatus();
  }
  if (flags.generate > 0) {
    std::printf("--- sample (greedy) ---\n%s\n--- sample (temperature %g) ---\n%s\n---\n",
                samples.greedy.c_str(), flags.temperature, samples.sampled.c_str());
  }
  std::printf(
      "final validation loss %.4f nats = %.3f bits/byte (unigram entropy %.3f bits/byte, ratio "
      "%.2f); %.0f tokens/s, training %.1f s, total %.1f s\n",
      final_val, final_val / std::log(2.0), unigram_bits, final_val / std::log(2.0) / unigram_bits,
      summary["tokens_per_second"].get<double>(), history.train_seconds,
      summary["seconds"].get<double>());
  if (placement.runtime != nullptr) {
    std::printf(
        "job traffic per training step: ICI %.0f B, DCN %.0f B, host-local %.0f B\n"
        "metrics report (host 0):\n%s",
        summary["step_ici_bytes"].get<double>(), summary["step_dcn_bytes"].get<double>(),
        summary["step_local_bytes"].get<double>(), placement.runtime->MetricsReport().c_str());
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckGptRun(const GptFlags& flags, const mesh::Topology& topology,
                         const std::string& config_path) {
  TESSEL_RETURN_IF_ERROR(ConfigOf(flags).status());
  TESSEL_RETURN_IF_ERROR(CheckCheckpointFlags(flags));
  TESSEL_RETURN_IF_ERROR(MakeGptMesh(flags, topology, config_path).status());
  const std::string dir = flags.data_dir.empty() ? nn::kDefaultFortunesDir : flags.data_dir;
  TESSEL_ASSIGN_OR_RETURN(nn::TextCorpus corpus, nn::LoadTextCorpus(dir));
  TESSEL_RETURN_IF_ERROR(nn::TextBatcher::Check(corpus.validation, {flags.batch, flags.seq_len, 0},
                                                "validation split"));
  if (flags.resume) {
    // Checked here, before any host starts, so a bad checkpoint is one error line.
    TESSEL_ASSIGN_OR_RETURN(nn::GptConfig config, ConfigOf(flags));
    TESSEL_ASSIGN_OR_RETURN(nn::Gpt model, nn::Gpt::Create(config, flags.seed));
    TESSEL_RETURN_IF_ERROR(FindResumable(flags, model, nullptr).status());
  }
  return absl::OkStatus();
}

void AddGptFlags(CLI::App& app, GptFlags* flags) {
  auto positive = Positive();
  auto nonnegative = NonNegative();
  app.add_option("--data-dir", flags->data_dir,
                 std::string("directory of the text corpus (default ") + nn::kDefaultFortunesDir +
                     ", Debian package fortunes)");
  app.add_option("--layers", flags->layers, "transformer blocks")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--d-model", flags->d_model, "model width")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--heads", flags->heads, "attention heads (divide --d-model)")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--ffn", flags->ffn, "MLP hidden size (0: 4 x d-model)")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_option("--seq-len", flags->seq_len, "context length in bytes")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--position", flags->position, "position encoding")
      ->check(CLI::IsMember({"learned", "rotary"}))
      ->capture_default_str();
  app.add_option("--mlp", flags->mlp, "MLP activation")
      ->check(CLI::IsMember({"gelu", "swiglu"}))
      ->capture_default_str();
  app.add_option("--head", flags->head, "LM head tied to the token embedding, or its own matrix")
      ->check(CLI::IsMember({"tied", "untied"}))
      ->capture_default_str();
  app.add_option("--batch", flags->batch, "global batch (sequences per step)")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--steps", flags->steps, "training steps")->check(positive)->capture_default_str();
  app.add_option("--lr", flags->lr, "peak AdamW learning rate")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--min-lr", flags->min_lr, "learning rate at the end of the cosine")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_option("--warmup", flags->warmup, "linear warmup steps")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_option("--weight-decay", flags->weight_decay,
                 "AdamW decoupled weight decay (matrices and embedding)")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_option("--clip", flags->clip, "gradient clipping: the largest global norm")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--seed", flags->seed, "seed of the initialization, the batches and sampling")
      ->capture_default_str();
  app.add_option("--threads", flags->threads,
                 "executor threads of the single-device run (0: one per core)")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_option("--log-every", flags->log_every, "progress line every N steps (0: last only)")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_option("--eval-every", flags->eval_every,
                 "validation loss every N steps, before training and at the end (0: never)")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_option("--eval-batches", flags->eval_batches, "validation batches per evaluation")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--prompt", flags->prompt, "text the sample continues")->capture_default_str();
  app.add_option("--generate", flags->generate, "bytes to generate per sample (0: no sample)")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_option("--temperature", flags->temperature, "sampling temperature of the second sample")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--plot", flags->plot, "write the loss curves as an SVG file");
  app.add_flag("--json", flags->json,
               "print JSON records: one per progress line and evaluation, and a summary");
  app.add_flag("--single-device", flags->single_device, "train on one device, no mesh")
      ->excludes(app.add_option("--trace", flags->trace,
                                "write a Chrome-trace JSON timeline of every device's training "
                                "steps and collectives (sharded runs; open in Perfetto)"));
  app.add_option("--checkpoint-dir", flags->checkpoint_dir,
                 "folder of the distributed checkpoints (each host writes its own shards)");
  app.add_option("--checkpoint-every", flags->checkpoint_every,
                 "save a checkpoint every N steps and after the last (0: never)")
      ->check(nonnegative)
      ->capture_default_str();
  app.add_flag("--resume", flags->resume,
               "continue from the newest complete checkpoint in --checkpoint-dir (any mesh)");
  app.add_option("--recipe", flags->recipe, "sharding recipe (nn/transformer.h)")
      ->check(CLI::IsMember({"dp", "fsdp", "tp", "fsdp_tp", "multislice_dp"}))
      ->capture_default_str();
  AddMeshFlags(app, &flags->mesh,
               "the batch over data and fsdp, weights over fsdp and tensor (Megatron)");
}

int RunGpt(const GptFlags& flags) {
  return RunExample(
      kProgram, flags.single_device, flags.threads,
      [&] {
        return ConnectHost(flags.mesh, "gpt",
                           [&](const mesh::Topology& topology, const std::string& path) {
                             return MakeGptMesh(flags, topology, path);
                           });
      },
      [&](Placement& p) { return Train(flags, p); });
}

}  // namespace tessel::examples
