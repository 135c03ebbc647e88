// Loop fusion for the single-device executor (core/executor.h). Internal to tessel::core.
//
//   FusionPlan plan = PlanFusion(graph, reachable);
//   if (plan.absorbed[n->id()]) { /* computed inside a fusion, never materialised */ }
//   if (int f = plan.fusion_of_root[n->id()]; f >= 0) {
//     std::vector<Literal> out =  // the root, then plan.fusions[f].extra_outputs
//         RunFusion(ctx, plan.fusions[f], leaf_values, /*donated=*/{}).value();
//   }
//
// The idea of XLA's loop fusion (xla/service/instruction_fusion.cc, gpu/cpu "kLoop" fusions):
// a chain or DAG of elementwise ops (unary, binary, compare, select, clamp, convert), the
// broadcasts feeding them and reshapes between them becomes one loop over the output, so the
// intermediates never reach memory. The plan is an executor-internal view of the local program:
// the Graph and its HLO text do not change.
//
// Planning (consumer first, as XLA's InstructionFusion): nodes are visited in reverse
// topological order; a fusible node not yet absorbed starts a fusion and pulls in operands, a
// producer joining when it is an elementwise op (or a reshape), has the fusion's element count,
// is not the graph root and every user is in the fusion or runs after the fusion's root. A
// producer with users outside is a further output of the fusion (XLA's multi-output fusion,
// xla/service/multi_output_fusion.h): the loop writes it as well, so its inputs are read once.
// The Adam update of one parameter is then one loop writing m, v and the parameter (reads p, g,
// m, v; writes 3), where separate loops for m, v and p would read 7 arrays and write 3; ReLU's
// compare (kept for the backward pass) and its select are one loop over the dot output. A
// reshape joins only when all of its users are in the fusion. Broadcasts are duplicated into every
// fusion that uses them (XLA does the same for cheap producers), so a scalar hyperparameter
// broadcast to several shapes is never materialised; a broadcast is materialised only when some
// user is not fused. Broadcast operands are always leaves (materialised values read through the
// broadcast's index map). A fusion needs at least two instructions; anything else runs as before.
//
// Running: the output is split into chunks (kElementwiseGrain, TBB for large outputs) and each
// chunk into blocks of kFusionBlock elements; per block every instruction runs its op over the
// block into a small per-thread scratch buffer and the outputs are written directly. Where each
// value's block lies (a base and a stride per block) is bound once per chunk, so a block costs
// the ops' own loops and little else. One pass over memory per fusion. The common f32 ops (add,
// subtract, multiply, divide, maximum, minimum, negate, abs, sqrt, compare, select, convert from
// pred) run through one precompiled loop each, chosen once per fusion with its operands' kinds (a
// block, or one scalar read for every element, so a scalar hyperparameter is never spread over a
// block); the loops are vectorised by the compiler (no aliasing but an output written over its own
// operand element by element). A multiply by a broadcast scalar read once in the fusion is folded
// into its user's loop (ChooseScaledBlockLoop: the product rounded, then the user's op), so the
// Adam update's hyperparameter scalings never pass through scratch. Every other op goes through
// ElementwiseOnBuffers, the unfused kernels' own arithmetic. Results equal the unfused executor's
// bitwise (IEEE operations round the same in vector and scalar code), except Eigen's packet
// transcendental ops at block boundaries (within one ulp).
//
// Dot updates (XLA CPU's dot output fusion with an addend): subtract(w, multiply(broadcast(s),
// d)), d a dot read only there, runs as the GEMM of d accumulating into a copy of w (DotUpdate
// below): no gradient buffer and no update pass for an SGD step.
//
// Transpose folding (XLA's TransposeFolding pass and AlgebraicSimplifier's
// transpose(dot(a, b)) -> dot(b, a)): a transpose feeding only dots is never materialised, each
// dot reads its operand through the permuted dimension numbers (the dot kernel views a
// transposed matrix without copying); and a transpose that swaps a dot's lhs and rhs free dims,
// the only user of that dot, is computed as the dot of the swapped operands (autodiff's weight
// gradients are such transposes). Folded dots may differ from the unfolded ones by rounding:
// the GEMM tiles the swapped product differently.
#ifndef TESSEL_CORE_INTERNAL_FUSION_H_
#define TESSEL_CORE_INTERNAL_FUSION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/graph.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/literal.h"

namespace tessel::internal {

// The most arrays a multi-output fusion may stream through (elementwise leaves plus outputs);
// one that would stream more is planned without further outputs. 7 makes the Adam update of a
// parameter one loop (reads p, g, m, v; writes p, m, v), all three outputs in place when the
// parameter and moments are donated (MayWriteInto). On the development machine (x86-64 VM;
// benchmarks/executor_bench BM_ExecutorAdamLoop, elements:1869824, interleaved rounds) that took
// 1.42-1.64 ms in place against 1.55-1.98 ms as three loops over 3, 3 and 4 arrays, and 2.90-4.45
// against 3.51-6.29 ms out of place. (Three loops were the faster while each block's operands
// were resolved per op and only the root could be written in place.) ReLU's select with its
// compare as a second output streams 3 arrays.
inline constexpr int kMaxFusionStreams = 7;

// Elements per block of a fused loop: the scratch of one instruction is at most 2 KiB, so the
// blocks of a fusion of a dozen ops stay in the L1 cache.
inline constexpr int64_t kFusionBlock = 256;

// One op of a fused loop.
struct FusedInstruction {
  const Node* node = nullptr;
  // Per operand of `node`: an instruction index (>= 0, earlier in the list) or a leaf, encoded
  // as -(leaf index + 1).
  std::vector<int> operands;
};

// What the fused loop needs besides the buffers (per instruction: how it gets its block, the
// precompiled loop, which output it writes), derived from the Fusion alone; fusion.cc.
struct CompiledFusion;

// One loop fusion (XLA kLoop): `instructions` in topological order, the last one the root.
struct Fusion {
  const Node* root = nullptr;
  std::vector<FusedInstruction> instructions;
  // Indices into `instructions` of the further outputs (multi-output fusion, above): nodes
  // computed in the loop whose values are also read after the fusion. Never the root.
  std::vector<int> extra_outputs;
  // Materialised operands of the fusion, each once.
  std::vector<const Node*> leaves;
  // Per leaf: read only at the output's own linear index (never through a broadcast, never a
  // scalar read for every element), so the output may be written into its buffer.
  std::vector<bool> leaf_elementwise;
  // Set by PlanFusion: the loop compiled once, shared by every run of the plan on any thread
  // (a prepared program's runs only bind their buffers to it; XLA compiles a fusion once per
  // executable as well).
  std::shared_ptr<const CompiledFusion> compiled;
};

// A dot computed on other nodes than its graph operands (transpose folding, above): the dot
// of `lhs` and `rhs` with `dnums` has the shape of the node that runs it.
struct FoldedDot {
  const Node* lhs = nullptr;
  const Node* rhs = nullptr;
  DotDimensionNumbers dnums;
};

// subtract(addend, multiply(broadcast(scale), d)) (either multiply operand order), d a dot
// (or a folded one) read only there: runs as out = addend; out -= scale * dot, the dot's GEMM
// accumulating into the addend (kernels.h DotAccumulate). The SGD update p - lr * grad of a
// weight whose gradient is a dot then needs no gradient buffer and no pass of its own.
struct DotUpdate {
  const Node* addend = nullptr;
  const Node* scale = nullptr;  // the broadcast's scalar operand (one f32 element)
  FoldedDot dot;
};

struct FusionPlan {
  // Per node id: the index of the fusion it is the root of, or -1.
  std::vector<int> fusion_of_root;
  // Per node id: computed inside fusions only; the executor never materialises it.
  std::vector<bool> absorbed;
  std::vector<Fusion> fusions;
  // Per node id: the index of the folded dot that node runs as (a dot reading transposes'
  // operands, or a transpose of a dot), or -1. Nodes folded away are marked in `absorbed`.
  std::vector<int> folded_dot_of;
  std::vector<FoldedDot> folded_dots;
  // Per node id: the index of the dot update (above) that subtract runs as, or -1. Its
  // multiply and dot (or folded transpose) are marked in `absorbed`, and its broadcast when no
  // other node reads it.
  std::vector<int> dot_update_of;
  std::vector<DotUpdate> dot_updates;
};

// Plans loop fusions and transpose folding over the nodes of `graph` marked in `reachable` (indexed
// by node id). Never fails: a node the fused loop cannot compute (an op an element type has no
// meaning for) stays unfused, so the executor reports its error as before.
// Every fusion of the plan is compiled here (Fusion::compiled), not at each RunFusion.
[[nodiscard]] FusionPlan PlanFusion(const Graph& graph, const std::vector<bool>& reachable);

// Fusions compiled (by PlanFusion) since the process started: a prepared program's runs add
// none (core/prepared_program_test.cc counts them).
[[nodiscard]] int64_t CompiledFusionCount();

// The node whose value is output `output` of `fusion`: 0 the root, 1 + e extra output e (the
// order of RunFusion's results).
[[nodiscard]] const Node& FusionOutput(const Fusion& fusion, int output);

// Whether output `output` of `fusion` (0 the root, 1 + e extra output e) may be written into
// the buffer of leaf `leaf` when that leaf's value dies in the fusion: the leaf is read only at
// the output's own index (leaf_elementwise) and, for an extra output, no op of the loop reads
// the leaf's block after the output's block is written. The caller checks the shape. `fusion`
// must be compiled (PlanFusion).
[[nodiscard]] bool MayWriteInto(const Fusion& fusion, int output, int leaf);

// Computes `fusion` (compiled by PlanFusion) with `leaves[i]` the value of fusion.leaves[i];
// returns the root's value followed by the value of each of fusion.extra_outputs, in that order
// (each with its node's shape). `donated` is empty or has one entry per output, in that order:
// null, or a literal with that output's shape that the output is written into (it is moved into
// the result). A donated literal is the value of a leaf dead after this fusion for which
// MayWriteInto holds, and it is also that leaf's entry in `leaves`; distinct outputs take
// distinct literals. Errors: kInvalidArgument as ElementwiseOnBuffers (PlanFusion keeps such
// nodes out of fusions).
[[nodiscard]] absl::StatusOr<std::vector<Literal>> RunFusion(
    const KernelContext& ctx, const Fusion& fusion, absl::Span<const Literal* const> leaves,
    absl::Span<Literal* const> donated);

}  // namespace tessel::internal

#endif  // TESSEL_CORE_INTERNAL_FUSION_H_
