// libFuzzer target: model-config JSON (configs/models/*.json, `--model`) through
// nn::ParseModelConfig, which also runs ValidateTransformerConfig. Bad JSON, wrong types and
// sizes that overflow must give an error status, never a crash or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tessel/nn/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)tessel::nn::ParseModelConfig(text, "fuzz.json");
  return 0;
}
