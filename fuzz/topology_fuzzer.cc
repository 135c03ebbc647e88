// libFuzzer target: topology JSON (configs/*.json, `tessel simulate CONFIG`) through
// mesh::ParseTopology. Bad JSON or a topology that does not validate must give an error status,
// never a crash, a sanitizer report or unbounded memory (topology.h bounds the device count).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tessel/mesh/topology/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)tessel::mesh::ParseTopology(text, "fuzz.json");
  return 0;
}
