// Small tensors for nn's unit tests, and their values back as doubles.
//
//   Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
//   EXPECT_THAT(Values(x), ElementsAre(1, 2, 3, 4, 5, 6));
//
// Test-only (uses GoogleTest): include from *_test.cc files.
#ifndef TESSEL_NN_TESTING_TENSORS_H_
#define TESSEL_NN_TESTING_TENSORS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tessel/core/literal.h"
#include "tessel/core/tensor.h"

namespace tessel::nn {

// The elements of `t` (run if lazy) in row-major order, as doubles; a failed run is a test
// failure and gives an empty vector.
inline std::vector<double> Values(const Tensor& t) {
  absl::StatusOr<Literal> lit = t.ToLiteral();
  EXPECT_TRUE(lit.ok()) << lit.status();
  return lit.ok() ? lit->ToDoubles() : std::vector<double>{};
}

// A data tensor of shape f32[dims...] (F32) or f64[dims...] (F64) holding `values` row-major;
// `values` has the product of `dims` elements.
inline Tensor F32(std::vector<int64_t> dims, const std::vector<float>& values) {
  return Tensor::FromLiteral(Literal::FromVector<float>(std::move(dims), values));
}
inline Tensor F64(std::vector<int64_t> dims, const std::vector<double>& values) {
  return Tensor::FromLiteral(Literal::FromVector<double>(std::move(dims), values));
}

}  // namespace tessel::nn

#endif  // TESSEL_NN_TESTING_TENSORS_H_
