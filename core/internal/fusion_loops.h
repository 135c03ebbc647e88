// Precompiled block loops of the fused executor loop (core/internal/fusion.h). Internal to
// tessel::core.
//
//   BlockLoop loop = ChooseBlockLoop(node, /*scalar_operands=*/{false, true});
//   if (loop.run != nullptr) {
//     const std::byte* operands[] = {block_of_a, &scalar_b};  // the scalar as one element
//     loop.run(operands, out, n);                             // out[i] = a[i] + b for add
//   }
//
// Why: a fused loop runs each of its ops over blocks of a few hundred elements. Through the
// general kernels (ElementwiseOnBuffers: a switch on the opcode, one on the element type, the
// op's own loop) the dispatch costs about as much as the arithmetic of such a block; here the
// choice is made once per fusion and each block is one indirect call into a loop the compiler
// vectorises. An operand that is a broadcast scalar (a hyperparameter, the 0 of ReLU) is read
// as one value instead of a filled block. XLA's CPU backend gets the same from emitting one
// LLVM loop per fusion (xla/service/cpu/ir_emitter.cc, elemental_ir_emitter.cc); these loops
// are the interpreter's version of it for the ops training steps are made of.
//
// Numerics: the same IEEE operations as the unfused kernels (kernels_elementwise.cc: add,
// subtract, multiply, divide, sqrt round correctly in vector and scalar code alike; maximum and
// minimum use the same NaN-propagating FloatMax/FloatMin), so results are bitwise equal.
#ifndef TESSEL_CORE_INTERNAL_FUSION_LOOPS_H_
#define TESSEL_CORE_INTERNAL_FUSION_LOOPS_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "tessel/core/graph.h"

namespace tessel::internal {

// One op over `n` elements: operands[k] points at operand k's n elements, or at its single
// element when operand k was chosen as scalar (BlockLoop::scalar_operands). `out` may be one
// of the operands' buffers (each element is read before it is written), never a shifted view.
using BlockLoopFn = void (*)(const std::byte* const* operands, std::byte* out, int64_t n);

struct BlockLoop {
  BlockLoopFn run = nullptr;  // null: no precompiled loop for this op and these types
  // Bit k set: operand k is passed as one element (a subset of the operands offered as scalar
  // to ChooseBlockLoop; the others must be given as full blocks). Bit 2 + k set (scaled
  // loops): operand k's block is multiplied by the one element at operands[2 + k] first.
  uint32_t scalar_operands = 0;
};

// The precompiled loop of elementwise `node`, when there is one: f32 add, subtract, multiply,
// divide, maximum, minimum, negate, abs, sqrt, compare (f32 operands, pred result), select
// (pred, f32, f32) and convert from pred to f32. `scalar_operands[k]` says operand k can be
// given as one element (a broadcast scalar); at most the operands it marks are chosen as such.
// Returns {nullptr, 0} for every other op or element type (the caller's general path).
[[nodiscard]] BlockLoop ChooseBlockLoop(const Node& node, absl::Span<const bool> scalar_operands);

// The same for a binary arithmetic op or compare of f32 whose operand k, when
// `scaled_operands[k]`, is a folded multiply: the block of that multiply's operand times its
// broadcast scalar, rounded to f32 before `node`'s op (exactly what the two unfused ops give;
// the file is compiled without floating-point contraction). Saves the multiply's pass through
// scratch: the Adam update's hyperparameter scalings fold into their users. A scaled operand
// is never also scalar. Returns {nullptr, 0} where no such loop exists (other ops, types).
[[nodiscard]] BlockLoop ChooseScaledBlockLoop(const Node& node,
                                              absl::Span<const bool> scalar_operands,
                                              absl::Span<const bool> scaled_operands);

}  // namespace tessel::internal

#endif  // TESSEL_CORE_INTERNAL_FUSION_LOOPS_H_
