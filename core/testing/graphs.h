// Helpers for core's unit tests that build graphs by hand.
//
//   Graph g("m");
//   Node* a = Must(g.AddParameter(0, Shape(DType::kF32, {8, 16}), "a"));
//   OpAttributes attrs;
//   attrs.dot = Dn({}, {}, {1}, {0});  // a plain matmul
//
// Test-only: include from *_test.cc files.
#ifndef TESSEL_CORE_TESTING_GRAPHS_H_
#define TESSEL_CORE_TESTING_GRAPHS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/core/status_macros.h"

namespace tessel {

// The node `node` holds; aborts the test binary (TESSEL_CHECK_OK) when it holds an error.
inline Node* Must(absl::StatusOr<Node*> node) {
  TESSEL_CHECK_OK(node);
  return *node;
}

// The dot dimension numbers with lhs batch dims `lb`, rhs batch dims `rb`, lhs contracting dims
// `lc` and rhs contracting dims `rc` (XLA's DotDimensionNumbers, in that order).
inline DotDimensionNumbers Dn(std::vector<int64_t> lb, std::vector<int64_t> rb,
                              std::vector<int64_t> lc, std::vector<int64_t> rc) {
  DotDimensionNumbers dn;
  dn.lhs_batch_dims = std::move(lb);
  dn.rhs_batch_dims = std::move(rb);
  dn.lhs_contracting_dims = std::move(lc);
  dn.rhs_contracting_dims = std::move(rc);
  return dn;
}

}  // namespace tessel

#endif  // TESSEL_CORE_TESTING_GRAPHS_H_
