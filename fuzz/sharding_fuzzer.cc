// libFuzzer target: XLA sharding text -> spmd::ParseSharding -> ToString (both device-list
// forms) -> ParseSharding, which must give an equal sharding (sharding.h: ToString prints what
// ParseSharding reads back). Bad text must give an error status, never a crash or a sanitizer
// report.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tessel/spmd/sharding.h"

namespace {

void CheckRoundTrip(const tessel::spmd::Sharding& sharding,
                    tessel::spmd::Sharding::DeviceListFormat format) {
  const std::string printed = sharding.ToString(format);
  absl::StatusOr<tessel::spmd::Sharding> back = tessel::spmd::ParseSharding(printed);
  if (!back.ok() || !(*back == sharding)) {
    std::fprintf(
        stderr, "sharding %s does not read back: %s\n", printed.c_str(),
        back.ok() ? back->ToString().c_str() : std::string(back.status().message()).c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<tessel::spmd::Sharding> sharding = tessel::spmd::ParseSharding(text);
  if (!sharding.ok()) return 0;
  CheckRoundTrip(*sharding, tessel::spmd::Sharding::DeviceListFormat::kExplicit);
  CheckRoundTrip(*sharding, tessel::spmd::Sharding::DeviceListFormat::kIota);
  return 0;
}
