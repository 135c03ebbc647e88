// rng: element i (row-major index) is a function of (rng_seed, i) only, through the Philox
// generator of core/rng.h, so a shard evaluating its own global indices reproduces the
// unsharded tensor.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/internal/kernels_util.h"
#include "tessel/core/rng.h"

namespace tessel::internal {
namespace {

// The largest T value below `b` (for keeping a uniform sample inside [a, b)).
template <typename T>
T NextBelow(T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(b, -std::numeric_limits<T>::infinity());
  } else {
    // bf16 / f16: step the bit pattern toward -inf.
    uint16_t bits = Eigen::numext::bit_cast<uint16_t>(b);
    const uint16_t sign = 0x8000;
    if ((bits & ~sign) == 0) {
      bits = sign | 1;  // +-0 -> smallest negative subnormal
    } else if (bits & sign) {
      ++bits;
    } else {
      --bits;
    }
    return Eigen::numext::bit_cast<T>(bits);
  }
}

}  // namespace

absl::StatusOr<Literal> Rng(const KernelContext& ctx, const Literal& a, const Literal& b,
                            RngDistribution distribution, uint64_t seed, const Shape& shape) {
  Literal out = Literal::Uninitialized(shape);
  const int64_t n = shape.num_elements();
  absl::Status status = VisitDType(shape.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsFloating<T>) {
      return absl::InvalidArgumentError(
          absl::StrCat("rng: result must be floating point, got ", shape.ToString()));
    } else {
      const double lo = static_cast<double>(Load(a.data<T>()[0]));
      const double hi = static_cast<double>(Load(b.data<T>()[0]));
      const T hi_t = b.data<T>()[0];
      T* dst = out.data<T>().data();
      // Sampling costs ~50 ns per element: parallel chunks of 4K.
      ParallelFor(ctx, n, 4096, [&](int64_t begin, int64_t end) {
        if (distribution == RngDistribution::kUniform) {
          for (int64_t i = begin; i < end; ++i) {
            T v = StoreAs<T>(static_cast<ComputeT<T>>(
                lo + (hi - lo) * RngUniform01(seed, static_cast<uint64_t>(i))));
            // Rounding to T may reach b; XLA's interval is [a, b).
            if (lo < hi && !(Load(v) < Load(hi_t))) v = NextBelow(hi_t);
            dst[i] = v;
          }
        } else {
          for (int64_t i = begin; i < end; ++i) {
            dst[i] = StoreAs<T>(static_cast<ComputeT<T>>(
                lo + hi * RngStandardNormal(seed, static_cast<uint64_t>(i))));
          }
        }
      });
      return absl::OkStatus();
    }
  });
  if (!status.ok()) return status;
  return out;
}

}  // namespace tessel::internal
