// A transformer described in a JSON file (`tessel simulate --model-config FILE`), as an
// alternative to the model flags; configs/models/ holds presets of published models, each
// citing its source.
//
//   {
//     "name": "llama3-8b",
//     "source": ["https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json"],
//     "arch": "llama", "layers": 32, "d_model": 4096, "heads": 32, "kv_heads": 8,
//     "head_dim": 128, "ffn": 14336, "vocab": 128256, "seq_len": 8192,
//     "attention": "flash"
//   }
//
// Keys (all but "arch" optional; an absent key keeps TransformerConfig's default):
//   model: "arch" ("gpt" | "llama"), "layers", "d_model", "heads", "kv_heads", "head_dim",
//     "ffn", "vocab", "seq_len", "batch" (positive integers; kv_heads, head_dim and
//     sliding_window may be 0 = the default), "sliding_window", "experts" (0 = dense),
//     "top_k", "capacity_factor" (a positive number), "positions" ("default" |
//     "learned" | "rotary"), "tie_embeddings", "parallel_block" (booleans), "dtype",
//     "param_dtype" ("bf16" | "f16" | "f32");
//   run settings kept as text for the caller to check: "attention", "remat", "matmul_dtype",
//     "remat_device", "remat_offload" (remat custom's lists of MaxText names, comma-separated);
//   meta: "name", "description", "source" (a string or a list of strings), "comment".
// An unknown key is an error (a misspelt key must not silently fall back to a default).
#ifndef TESSEL_NN_MODEL_CONFIG_H_
#define TESSEL_NN_MODEL_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/nn/transformer.h"

namespace tessel::nn {

struct ModelFile {
  std::string source;  // the path (or name) it was read from, for messages
  std::string name;
  std::vector<std::string> sources;
  TransformerConfig config;  // validated with ValidateTransformerConfig
  bool has_batch = false;    // whether the file gave "batch" (else config.batch is the default)
  // Run settings as written ("" when absent).
  std::string attention;
  std::string remat;
  std::string remat_device;
  std::string remat_offload;
  std::string matmul_dtype;
};

// Parses `json_text`; `source` names it in messages (a path).
// Errors: kInvalidArgument naming the source, the JSON pointer of the key and the value:
// `m.json: /layers: expected a positive integer, got -2`, `m.json: /hidden: unknown key`,
// `m.json: /arch: missing`, invalid JSON (with the byte offset), or a config that
// ValidateTransformerConfig rejects.
[[nodiscard]] absl::StatusOr<ModelFile> ParseModelConfig(std::string_view json_text,
                                                         std::string_view source);

// Reads and parses the file at `path`. Errors: kNotFound when it cannot be read; those of
// ParseModelConfig.
[[nodiscard]] absl::StatusOr<ModelFile> LoadModelConfig(const std::string& path);

}  // namespace tessel::nn

#endif  // TESSEL_NN_MODEL_CONFIG_H_
