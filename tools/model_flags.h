// The transformer-model flags shared by `tessel simulate` and `tessel autoshard` (--model,
// --model-config, --layers, --d-model, ...): one registration and one reading, so both commands
// take the same models with the same defaults.
#ifndef TESSEL_TOOLS_MODEL_FLAGS_H_
#define TESSEL_TOOLS_MODEL_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/transformer.h"

namespace tessel::tools {

// The flags' values, with the defaults of a flag not given (sizes in elements, not bytes).
struct TransformerFlags {
  std::string model;         // gpt or llama
  std::string model_config;  // configs/models/*.json
  int64_t layers = 2;
  int64_t d_model = 512;
  int64_t heads = 8;
  int64_t kv_heads = 0;  // 0: heads
  int64_t head_dim = 0;  // 0: d_model / heads
  int64_t ffn = 0;       // 0: 4 * d_model
  int64_t vocab = 32000;
  int64_t seq_len = 1024;
  int64_t batch = 0;  // global, in sequences; 0: one sequence per device
  std::string dtype = "bf16";
  std::string param_dtype = "f32";
  std::string positions = "default";
  bool tie_embeddings = false;
  bool parallel_block = false;
  int64_t sliding_window = 0;
  int64_t experts = 0;
  int64_t top_k = 2;
  double capacity_factor = 1.0;
};

// The --model-config file of `flags`, or nullopt when none is given. Errors: those of
// nn::LoadModelConfig (a missing or invalid file, naming it).
[[nodiscard]] absl::StatusOr<std::optional<nn::ModelFile>> LoadModelFile(
    const TransformerFlags& flags);

// Registers the flags of `flags` on `cmd` (which must outlive neither). Range checks are CLI11's
// (a bad value is a usage error, exit 2).
void AddTransformerFlags(CLI::App* cmd, TransformerFlags* flags);

// The model: the --model-config `file`'s (null: none), then every model flag given explicitly on
// `cmd` (without a file, every flag with its default). The batch is a run setting: `--batch`, else
// the file's, else one sequence per device of `num_devices`. Errors (kInvalidArgument, naming the
// flag and the value): an unknown --model, --dtype, --param-dtype or --positions; what
// nn::ValidateTransformerConfig refuses.
[[nodiscard]] absl::StatusOr<nn::TransformerConfig> TransformerConfigOf(
    const TransformerFlags& flags, const CLI::App& cmd, const nn::ModelFile* file,
    int64_t num_devices);

// The device-spec dtype (DeviceSpec::peak_tflops key) of a matmul dtype name: "" for "" or
// "bf16" (each dot at its inputs' rate), "s8" for "int8", "f8e4m3fn" for "fp8". Errors:
// kInvalidArgument for any other name ("unknown dtype ..."; the caller names the flag or key).
[[nodiscard]] absl::StatusOr<std::string> MatmulPeakDType(const std::string& name);

// A run setting written as flag `flag` (value `flag_value`, "" when not given) or as key `key`
// of the model `file` (`file_value`, "" when absent): the value used (the flag's first) and where
// it came from for messages ("--remat", or "llama.json: /remat"; `flag` when neither gives it).
struct RunSetting {
  std::string value;
  std::string origin;
};
RunSetting RunSettingOf(const std::string& flag, const std::string& flag_value,
                        const nn::ModelFile* file, const std::string& key,
                        const std::string& file_value);

// `parse(setting.value)` (or `parse(fallback)` when no value was given), an error prefixed with
// the setting's origin: "llama.json: /remat: unknown remat policy ...".
template <typename Parse>
auto ParseRunSetting(const RunSetting& setting, const std::string& fallback, Parse parse)
    -> decltype(parse(fallback)) {
  auto parsed = parse(setting.value.empty() ? fallback : setting.value);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(setting.origin, ": ", parsed.status().message()));
  }
  return parsed;
}

}  // namespace tessel::tools

#endif  // TESSEL_TOOLS_MODEL_FLAGS_H_
