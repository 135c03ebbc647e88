// The counter-based random generator behind the `rng` op.
//
// Element i of an rng node with seed s is a pure function of (s, i): Philox-4x32-10 with key
// derived from s and counter i (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011). A sharded rng therefore reproduces the unsharded tensor exactly: each device
// evaluates the same function at its elements' global indices.
//
//   double u = RngUniform01(/*seed=*/42, /*index=*/17);   // in [0, 1)
//   double z = RngStandardNormal(42, 17);                 // N(0, 1), Box-Muller
#ifndef TESSEL_CORE_RNG_H_
#define TESSEL_CORE_RNG_H_

#include <array>
#include <cstdint>

namespace tessel {

// Philox-4x32-10 on the 128-bit counter (index, 0) with key (seed low, seed high).
std::array<uint32_t, 4> Philox4x32(uint64_t seed, uint64_t index);

// A uniform double in [0, 1) with 53 random bits.
double RngUniform01(uint64_t seed, uint64_t index);

// A standard normal sample by the Box-Muller transform of two uniforms from the same Philox
// block.
double RngStandardNormal(uint64_t seed, uint64_t index);

}  // namespace tessel

#endif  // TESSEL_CORE_RNG_H_
