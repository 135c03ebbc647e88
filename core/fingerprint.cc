#include "tessel/core/fingerprint.h"

namespace tessel {

Fingerprint& Fingerprint::Bytes(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash_ ^= p[i];
    hash_ *= kFnv1a64Prime;
  }
  return *this;
}

Fingerprint& Fingerprint::U64(uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    hash_ ^= (value >> (8 * i)) & 0xff;
    hash_ *= kFnv1a64Prime;
  }
  return *this;
}

Fingerprint& Fingerprint::Ints(absl::Span<const int64_t> values) {
  Int(static_cast<int64_t>(values.size()));
  for (int64_t v : values) Int(v);
  return *this;
}

Fingerprint& Fingerprint::Str(std::string_view text) {
  Int(static_cast<int64_t>(text.size()));
  return Bytes(text);
}

uint64_t Fnv1a64(const void* data, size_t size) { return Fingerprint().Bytes(data, size).value(); }

}  // namespace tessel
