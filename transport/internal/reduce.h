// Element-wise reduction kernels for collectives: out = lhs op rhs on flat typed buffers.
//
//   Combine(ReduceKind::kAdd, DType::kF32, recv, acc, acc, n);   // acc = recv + acc
//
// Semantics (XLA's reduction computations on one element pair):
//   floating: add, multiply, maximum/minimum (NaN-propagating: a NaN operand gives NaN,
//             the left one if both are NaN); bf16/f16 round to their type after every op;
//   integers: add and multiply wrap (two's complement), maximum, minimum, and/or bitwise;
//   pred (one byte, 0 or 1): add = or, multiply = and, maximum = or, minimum = and.
// and/or are not defined on floating types (CheckReduction says so).
#ifndef TESSEL_TRANSPORT_INTERNAL_REDUCE_H_
#define TESSEL_TRANSPORT_INTERNAL_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tessel/core/dtype.h"
#include "tessel/core/graph.h"

namespace tessel::transport::internal {

// Errors: kInvalidArgument naming the reduction and dtype if `kind` is and/or on a floating
// dtype.
[[nodiscard]] absl::Status CheckReduction(ReduceKind kind, DType dtype);

// out[i] = lhs[i] op rhs[i] for i in [0, count). `out` may alias `lhs` or `rhs` exactly (not
// partially). Any pointer may be unaligned for the element type (received ZeroMQ frames can be):
// such data is staged through an aligned scratch block. Precondition: CheckReduction is OK.
void Combine(ReduceKind kind, DType dtype, const void* lhs, const void* rhs, void* out,
             int64_t count);

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_REDUCE_H_
