#include "tools/model_flags.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessel/core/command_line.h"
#include "tessel/core/status_macros.h"

namespace tessel::tools {
namespace {

absl::StatusOr<DType> ParseFloatDType(const std::string& name, const std::string& flag) {
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  if (name == "f32") return DType::kF32;
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": unknown dtype \"", name, "\"; expected bf16, f16 or f32"));
}

}  // namespace

absl::StatusOr<std::optional<nn::ModelFile>> LoadModelFile(const TransformerFlags& f) {
  if (f.model_config.empty()) return std::optional<nn::ModelFile>();
  TESSEL_ASSIGN_OR_RETURN(nn::ModelFile file, nn::LoadModelConfig(f.model_config));
  return std::optional<nn::ModelFile>(std::move(file));
}

void AddTransformerFlags(CLI::App* cmd, TransformerFlags* f) {
  cmd->add_option("--model", f->model, "gpt or llama (a generated training step)");
  cmd->add_option("--model-config", f->model_config,
                  "model JSON file (configs/models/*.json); flags given override it");
  cmd->add_option("--layers", f->layers, "decoder layers")->check(Positive());
  cmd->add_option("--d-model", f->d_model, "model width")->check(Positive());
  cmd->add_option("--heads", f->heads, "attention heads")->check(Positive());
  cmd->add_option("--kv-heads", f->kv_heads, "key/value heads (GQA; default = heads)")
      ->check(NonNegative());
  cmd->add_option("--head-dim", f->head_dim, "width of one head (default d_model / heads)")
      ->check(NonNegative());
  cmd->add_option("--ffn", f->ffn, "MLP hidden size (default 4 * d_model)")->check(NonNegative());
  cmd->add_option("--vocab", f->vocab, "vocabulary size")->check(Positive());
  cmd->add_option("--seq-len", f->seq_len, "sequence length")->check(Positive());
  cmd->add_option("--batch", f->batch, "global batch in sequences (default: one per device)")
      ->check(NonNegative());
  cmd->add_option("--dtype", f->dtype, "activation dtype: bf16 (default), f16, f32");
  cmd->add_option("--param-dtype", f->param_dtype, "parameter / optimizer dtype (default f32)");
  cmd->add_option("--positions", f->positions,
                  "default (gpt learned, llama rotary), learned or rotary");
  cmd->add_flag("--tie-embeddings", f->tie_embeddings, "LM head = embedding table transposed");
  cmd->add_flag("--parallel-block", f->parallel_block,
                "PaLM block: attention and MLP on one norm, added together");
  cmd->add_option("--sliding-window", f->sliding_window,
                  "attend the last W keys only (0: full causal)")
      ->check(NonNegative());
  cmd->add_option("--experts", f->experts,
                  "mixture of experts: experts per layer (0: dense; split over an \"expert\" axis)")
      ->check(NonNegative());
  cmd->add_option("--top-k", f->top_k, "experts per token (default 2)")->check(Positive());
  cmd->add_option("--capacity-factor", f->capacity_factor,
                  "expert capacity = factor * tokens * top_k / experts (default 1)")
      ->check(Positive());
}

absl::StatusOr<nn::TransformerConfig> TransformerConfigOf(const TransformerFlags& f,
                                                          const CLI::App& cmd,
                                                          const nn::ModelFile* file,
                                                          int64_t num_devices) {
  nn::TransformerConfig config = file ? file->config : nn::TransformerConfig{};
  auto given = [&](const std::string& flag) { return cmd.count(flag) > 0; };
  // A model file is the base; only the flags written on the command line override it.
  auto use = [&](const std::string& flag) { return !file || given(flag); };
  if (use("--model")) {
    TESSEL_ASSIGN_OR_RETURN(config.arch, nn::ParseTransformerArch(f.model));
  }
  if (use("--layers")) config.layers = f.layers;
  if (use("--d-model")) config.d_model = f.d_model;
  if (use("--heads")) config.heads = f.heads;
  if (use("--kv-heads")) config.kv_heads = f.kv_heads;
  if (use("--head-dim")) config.head_size = f.head_dim;
  if (use("--ffn")) {
    if (f.ffn == 0 && config.d_model > std::numeric_limits<int64_t>::max() / 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("--d-model ", config.d_model,
                       " is too large for the default --ffn (4 x d_model overflows int64)"));
    }
    config.ffn = f.ffn > 0 ? f.ffn : 4 * config.d_model;
  }
  if (use("--vocab")) config.vocab = f.vocab;
  if (use("--seq-len")) config.seq_len = f.seq_len;
  if (given("--batch") || !file || !file->has_batch) {
    config.batch = f.batch > 0 ? f.batch : num_devices;
  }
  if (use("--dtype")) {
    TESSEL_ASSIGN_OR_RETURN(config.dtype, ParseFloatDType(f.dtype, "--dtype"));
  }
  if (use("--param-dtype")) {
    TESSEL_ASSIGN_OR_RETURN(config.param_dtype, ParseFloatDType(f.param_dtype, "--param-dtype"));
  }
  if (use("--positions")) {
    TESSEL_ASSIGN_OR_RETURN(config.positions, nn::ParsePositionEmbedding(f.positions));
  }
  if (use("--tie-embeddings")) config.tie_embeddings = f.tie_embeddings;
  if (use("--parallel-block")) config.parallel_block = f.parallel_block;
  if (use("--sliding-window")) config.sliding_window = f.sliding_window;
  if (use("--experts")) config.experts = f.experts;
  if (use("--top-k")) config.top_k = f.top_k;
  if (use("--capacity-factor")) config.capacity_factor = f.capacity_factor;
  TESSEL_RETURN_IF_ERROR(nn::ValidateTransformerConfig(config));
  return config;
}

absl::StatusOr<std::string> MatmulPeakDType(const std::string& name) {
  if (name.empty() || name == "bf16") return std::string();
  if (name == "int8") return std::string("s8");
  if (name == "fp8") return std::string("f8e4m3fn");
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\"; expected bf16, int8 or fp8"));
}

RunSetting RunSettingOf(const std::string& flag, const std::string& flag_value,
                        const nn::ModelFile* file, const std::string& key,
                        const std::string& file_value) {
  if (!flag_value.empty() || file == nullptr || file_value.empty()) return {flag_value, flag};
  return {file_value, absl::StrCat(file->source, ": /", key)};
}

}  // namespace tessel::tools
