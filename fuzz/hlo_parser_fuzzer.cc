// libFuzzer target: HLO text -> ParseHloModule (which runs the verifier) -> PrintHloModule ->
// ParseHloModule again. Bad text must give an error status, never a crash, a sanitizer report
// or unbounded memory; a module that parses must print as text that parses back (hlo_text.h's
// round-trip property) and that prints identically.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tessel/core/hlo_text.h"
#include "tessel/core/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<tessel::Graph>> graph = tessel::ParseHloModule(text);
  if (!graph.ok()) return 0;
  if (absl::Status verified = tessel::Verify(**graph); !verified.ok()) {
    std::fprintf(stderr, "parsed module fails the verifier: %s\n",
                 std::string(verified.message()).c_str());
    std::abort();
  }
  const std::string printed = tessel::PrintHloModule(**graph);
  absl::StatusOr<std::unique_ptr<tessel::Graph>> again = tessel::ParseHloModule(printed);
  if (!again.ok()) {
    std::fprintf(stderr, "printed module does not parse back: %s\n%s\n",
                 std::string(again.status().message()).c_str(), printed.c_str());
    std::abort();
  }
  if (tessel::PrintHloModule(**again) != printed) {
    std::fprintf(stderr, "printed module prints differently after a round trip:\n%s\n",
                 printed.c_str());
    std::abort();
  }
  return 0;
}
