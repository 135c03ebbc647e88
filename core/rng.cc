// Philox-4x32-10: J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011 (Random123). Round function and constants as in the paper and
// Random123's philox.h: ten rounds, the key bumped by the Weyl constants between rounds.
#include "tessel/core/rng.h"

#include <cmath>
#include <numbers>

#include "tessel/core/internal/kernels.h"

namespace tessel {
namespace internal {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

}  // namespace

std::array<uint32_t, 4> Philox4x32Block(std::array<uint32_t, 4> counter,
                                        std::array<uint32_t, 2> key) {
  std::array<uint32_t, 4> x = counter;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kPhiloxM0, x[0], hi0, lo0);
    MulHiLo(kPhiloxM1, x[2], hi1, lo1);
    x = {hi1 ^ x[1] ^ key[0], lo1, hi0 ^ x[3] ^ key[1], lo0};
  }
  return x;
}

}  // namespace internal

std::array<uint32_t, 4> Philox4x32(uint64_t seed, uint64_t index) {
  return internal::Philox4x32Block(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

namespace {

// 53 bits from two 32-bit words (the top 32 and 21 bits), scaled to [0, 1).
inline double Uniform53(uint32_t hi_word, uint32_t lo_word) {
  uint64_t bits = (static_cast<uint64_t>(hi_word) << 21) | (lo_word >> 11);
  return static_cast<double>(bits) * 0x1.0p-53;
}

}  // namespace

double RngUniform01(uint64_t seed, uint64_t index) {
  std::array<uint32_t, 4> x = Philox4x32(seed, index);
  return Uniform53(x[0], x[1]);
}

double RngStandardNormal(uint64_t seed, uint64_t index) {
  std::array<uint32_t, 4> x = Philox4x32(seed, index);
  // u1 in (0, 1] keeps the logarithm finite.
  double u1 = 1.0 - Uniform53(x[0], x[1]);
  double u2 = Uniform53(x[2], x[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace tessel
