#include "tessel/nn/model_config.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tessel/core/config_json.h"
#include "tessel/core/file_util.h"
#include "tessel/core/status_macros.h"

namespace tessel::nn {
namespace {

using json = nlohmann::json;

// nlohmann's messages start with "[json.exception.parse_error.101] "; the id helps nobody.
std::string WithoutExceptionId(const std::string& what) {
  const size_t end = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && end != std::string::npos ? what.substr(end + 2)
                                                                            : what;
}

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": /", key, ": ", what));
  }

  // An integer >= `min` (1 for sizes, 0 where 0 means "the default").
  absl::Status Int(const json& root, const std::string& key, int64_t min, int64_t& out) const {
    auto it = root.find(key);
    if (it == root.end()) return absl::OkStatus();
    std::optional<int64_t> value =
        JsonIntegerInRange(*it, min, std::numeric_limits<int64_t>::max());
    if (!value.has_value()) {
      return Error(key, absl::StrCat("expected ", min > 0 ? "a positive" : "a non-negative",
                                     " integer, got ", JsonForMessage(*it)));
    }
    out = *value;
    return absl::OkStatus();
  }

  absl::Status Bool(const json& root, const std::string& key, bool& out) const {
    auto it = root.find(key);
    if (it == root.end()) return absl::OkStatus();
    if (!it->is_boolean())
      return Error(key, absl::StrCat("expected true or false, got ", JsonForMessage(*it)));
    out = it->get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const json& root, const std::string& key, std::string& out) const {
    auto it = root.find(key);
    if (it == root.end()) return absl::OkStatus();
    if (!it->is_string())
      return Error(key, absl::StrCat("expected a string, got ", JsonForMessage(*it)));
    out = it->get<std::string>();
    return absl::OkStatus();
  }

  absl::Status Float(const json& root, const std::string& key, DType& out) const {
    std::string name;
    TESSEL_RETURN_IF_ERROR(String(root, key, name));
    if (name.empty()) return absl::OkStatus();
    if (name == "bf16") {
      out = DType::kBF16;
    } else if (name == "f16") {
      out = DType::kF16;
    } else if (name == "f32") {
      out = DType::kF32;
    } else {
      return Error(key, absl::StrCat("unknown dtype \"", name, "\"; expected bf16, f16 or f32"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ModelFile> Read(const json& root) const {
    if (!root.is_object()) return Error("", "expected a JSON object");
    static const char* const kKeys[] = {
        "name",      "description",    "source",         "comment",       "arch",
        "layers",    "d_model",        "heads",          "kv_heads",      "head_dim",
        "ffn",       "vocab",          "seq_len",        "batch",         "sliding_window",
        "positions", "tie_embeddings", "parallel_block", "dtype",         "param_dtype",
        "attention", "remat",          "remat_device",   "remat_offload", "matmul_dtype",
        "experts",   "top_k",          "capacity_factor"};
    for (const auto& [key, value] : root.items()) {
      bool known = false;
      for (const char* k : kKeys) known = known || key == k;
      if (!known) return Error(key, "unknown key");
    }
    ModelFile file;
    TransformerConfig& c = file.config;
    std::string arch;
    TESSEL_RETURN_IF_ERROR(String(root, "arch", arch));
    if (arch.empty()) return Error("arch", "missing (\"gpt\" or \"llama\")");
    absl::StatusOr<TransformerArch> parsed_arch = ParseTransformerArch(arch);
    if (!parsed_arch.ok()) return Error("arch", std::string(parsed_arch.status().message()));
    c.arch = *parsed_arch;
    const std::pair<const char*, int64_t*> sizes[] = {
        {"layers", &c.layers}, {"d_model", &c.d_model}, {"heads", &c.heads}, {"ffn", &c.ffn},
        {"vocab", &c.vocab},   {"seq_len", &c.seq_len}, {"batch", &c.batch}};
    for (const auto& [key, field] : sizes) TESSEL_RETURN_IF_ERROR(Int(root, key, 1, *field));
    file.has_batch = root.contains("batch");
    TESSEL_RETURN_IF_ERROR(Int(root, "kv_heads", 0, c.kv_heads));
    TESSEL_RETURN_IF_ERROR(Int(root, "head_dim", 0, c.head_size));
    TESSEL_RETURN_IF_ERROR(Int(root, "sliding_window", 0, c.sliding_window));
    TESSEL_RETURN_IF_ERROR(Int(root, "experts", 0, c.experts));
    TESSEL_RETURN_IF_ERROR(Int(root, "top_k", 1, c.top_k));
    if (auto it = root.find("capacity_factor"); it != root.end()) {
      if (!it->is_number() || !(it->get<double>() > 0)) {
        return Error("capacity_factor",
                     absl::StrCat("expected a positive number, got ", JsonForMessage(*it)));
      }
      c.capacity_factor = it->get<double>();
    }
    std::string positions;
    TESSEL_RETURN_IF_ERROR(String(root, "positions", positions));
    if (!positions.empty()) {
      absl::StatusOr<PositionEmbedding> p = ParsePositionEmbedding(positions);
      if (!p.ok()) return Error("positions", std::string(p.status().message()));
      c.positions = *p;
    }
    TESSEL_RETURN_IF_ERROR(Bool(root, "tie_embeddings", c.tie_embeddings));
    TESSEL_RETURN_IF_ERROR(Bool(root, "parallel_block", c.parallel_block));
    TESSEL_RETURN_IF_ERROR(Float(root, "dtype", c.dtype));
    TESSEL_RETURN_IF_ERROR(Float(root, "param_dtype", c.param_dtype));
    TESSEL_RETURN_IF_ERROR(String(root, "name", file.name));
    // Documentation only, but typed like the other keys: a number here is a mistake.
    std::string unused;
    TESSEL_RETURN_IF_ERROR(String(root, "description", unused));
    TESSEL_RETURN_IF_ERROR(String(root, "comment", unused));
    TESSEL_RETURN_IF_ERROR(String(root, "attention", file.attention));
    TESSEL_RETURN_IF_ERROR(String(root, "remat", file.remat));
    TESSEL_RETURN_IF_ERROR(String(root, "remat_device", file.remat_device));
    TESSEL_RETURN_IF_ERROR(String(root, "remat_offload", file.remat_offload));
    TESSEL_RETURN_IF_ERROR(String(root, "matmul_dtype", file.matmul_dtype));
    if (auto it = root.find("source"); it != root.end()) {
      if (it->is_string()) {
        file.sources.push_back(it->get<std::string>());
      } else if (it->is_array()) {
        for (const json& s : *it) {
          if (!s.is_string()) return Error("source", "expected strings");
          file.sources.push_back(s.get<std::string>());
        }
      } else {
        return Error("source", "expected a string or a list of strings");
      }
    }
    absl::Status valid = ValidateTransformerConfig(c);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": ", valid.message()));
    }
    return file;
  }

 private:
  std::string source_;
};

}  // namespace

absl::StatusOr<ModelFile> ParseModelConfig(std::string_view json_text, std::string_view source) {
  const std::string source_text(source);
  TESSEL_ASSIGN_OR_RETURN(json root, ParseConfigJson(json_text, source_text));
  // The adapter for nlohmann's exceptions: the reader checks types before it reads, so this is
  // a backstop; nothing thrown escapes.
  try {
    TESSEL_ASSIGN_OR_RETURN(ModelFile file, Reader(source_text).Read(root));
    file.source = source_text;
    return file;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_text, ": cannot read JSON: ", WithoutExceptionId(e.what())));
  }
}

absl::StatusOr<ModelFile> LoadModelConfig(const std::string& path) {
  // A model file is a few hundred bytes; 16 MiB is far beyond any.
  constexpr int64_t kMaxModelFileBytes = int64_t{16} << 20;
  absl::StatusOr<std::string> text = ReadInputFile(path, "a model config", kMaxModelFileBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("cannot read model config \"", path, "\""));
  }
  if (!text.ok()) return text.status();
  return ParseModelConfig(*text, path);
}

}  // namespace tessel::nn
