// Fingerprints: the 64-bit FNV-1a hash, the one hash Tessel uses wherever a value must be the
// same in every process, run and machine (compilation-cache keys, replica-group ids and the
// device-map fingerprint that hosts compare, file names derived from a job id). absl::Hash is
// seeded per process and must not be used for these.
//
//   Fingerprint h;
//   h.Int(shape.rank()).Ints(shape.dims());  // 8 little-endian bytes per integer
//   h.Str(sharding);                         // length, then the bytes
//   uint64_t key = h.value();
//
//   uint64_t id = Fnv1a64("job-42");  // the bytes of one string, nothing else
//
// Not a cryptographic hash: equal fingerprints do not prove equal inputs to an adversary.
// Source: Fowler, Noll, Vo, "FNV-1a" (http://www.isthe.com/chongo/tech/comp/fnv/) and the IETF
// draft "The FNV Non-Cryptographic Hash Algorithm" (draft-eastlake-fnv): 64-bit offset basis
// 14695981039346656037, prime 1099511628211; for each byte, xor it into the hash, then multiply
// by the prime modulo 2^64.
#ifndef TESSEL_CORE_FINGERPRINT_H_
#define TESSEL_CORE_FINGERPRINT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/types/span.h"

namespace tessel {

// The 64-bit FNV offset basis (0xcbf29ce484222325) and FNV prime (0x100000001b3).
inline constexpr uint64_t kFnv1a64OffsetBasis = 14695981039346656037ULL;
inline constexpr uint64_t kFnv1a64Prime = 1099511628211ULL;

// A running 64-bit FNV-1a hash. The mixing functions feed bytes in a fixed, platform-independent
// order (integers as 8 little-endian bytes), so a fingerprint is the same on every machine.
// Each returns *this so calls chain. A default-constructed Fingerprint holds the offset basis:
// its value() is the FNV-1a hash of no bytes.
class Fingerprint {
 public:
  Fingerprint() = default;

  // Mixes `size` bytes starting at `data` (may be null when `size` is 0).
  Fingerprint& Bytes(const void* data, size_t size);
  // Mixes the bytes of `bytes`, without its length.
  Fingerprint& Bytes(std::string_view bytes) { return Bytes(bytes.data(), bytes.size()); }
  // Mixes `value` as 8 bytes, least significant first.
  Fingerprint& U64(uint64_t value);
  // Mixes `value` as U64 does (two's complement).
  Fingerprint& Int(int64_t value) { return U64(static_cast<uint64_t>(value)); }
  // Mixes the element count, then each element as Int does.
  Fingerprint& Ints(absl::Span<const int64_t> values);
  // Mixes the length as Int does, then the bytes: "ab","c" and "a","bc" differ.
  Fingerprint& Str(std::string_view text);

  // The hash of everything mixed so far.
  [[nodiscard]] uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = kFnv1a64OffsetBasis;
};

// The 64-bit FNV-1a hash of `size` bytes at `data`: Fnv1a64("") = 0xcbf29ce484222325,
// Fnv1a64("a") = 0xaf63dc4c8601ec8c, Fnv1a64("foobar") = 0x85944171f73967e8.
[[nodiscard]] uint64_t Fnv1a64(const void* data, size_t size);
// The 64-bit FNV-1a hash of the bytes of `bytes`.
[[nodiscard]] inline uint64_t Fnv1a64(std::string_view bytes) {
  return Fnv1a64(bytes.data(), bytes.size());
}

}  // namespace tessel

#endif  // TESSEL_CORE_FINGERPRINT_H_
