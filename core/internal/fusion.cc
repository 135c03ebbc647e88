#include "tessel/core/internal/fusion.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <queue>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace tessel::internal {
namespace {

// The elementwise ops ElementwiseOnBuffers computes: all of core's elementwise opcodes but
// bitcast-convert and reduce-precision, which have kernels of their own.
bool IsElementwiseOp(Opcode opcode) {
  return IsElementwise(opcode) && opcode != Opcode::kBitcastConvert &&
         opcode != Opcode::kReducePrecision;
}

// The element type ElementwiseOnBuffers takes as `operand_dtype`: select's operand 0 is pred.
DType OperandDType(const Node& node) {
  return node.operand(node.opcode() == Opcode::kSelect ? 1 : 0)->shape().dtype();
}

// Whether the fused loop can compute `node`. Elementwise ops are validated with an empty
// buffer, so an element type the op rejects stays unfused and fails as the unfused kernel does.
bool IsFusible(const Node& node) {
  if (node.shape().is_tuple()) return false;
  for (const Node* operand : node.operands()) {
    if (operand->shape().is_tuple()) return false;
  }
  if (node.opcode() == Opcode::kBroadcast || node.opcode() == Opcode::kReshape) return true;
  if (!IsElementwiseOp(node.opcode())) return false;
  std::vector<const void*> none(node.operand_count(), nullptr);
  return ElementwiseOnBuffers(node.opcode(), node.attrs().comparison_direction, OperandDType(node),
                              node.shape().dtype(), none, nullptr, 0)
      .ok();
}

// Distinct reachable users of every node.
std::vector<std::vector<int>> ReachableUsers(const Graph& graph,
                                             const std::vector<bool>& reachable) {
  std::vector<std::vector<int>> users(graph.num_nodes());
  for (const Node* node : graph.nodes()) {
    if (!reachable[node->id()]) continue;
    for (const Node* operand : node->operands()) {
      std::vector<int>& u = users[operand->id()];
      if (u.empty() || u.back() != node->id()) u.push_back(node->id());
    }
  }
  for (std::vector<int>& u : users) {
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
  }
  return users;
}

// Grows one fusion from `root` (see fusion.h) and returns its members in topological order.
// Producers are taken highest id first, so every user of a producer that will ever join has
// joined before the producer is considered.
std::vector<const Node*> GrowFusion(const Graph& graph, const Node& root,
                                    const std::vector<bool>& fusible,
                                    const std::vector<std::vector<int>>& users,
                                    std::vector<bool>& in_fusion) {
  const int64_t count = root.shape().num_elements();
  std::vector<const Node*> members{&root};
  in_fusion[root.id()] = true;
  std::priority_queue<int> candidates;
  auto push_operands = [&](const Node& n) {
    if (n.opcode() == Opcode::kBroadcast) return;  // its operand is always a leaf
    for (const Node* operand : n.operands()) candidates.push(operand->id());
  };
  push_operands(root);
  while (!candidates.empty()) {
    const int id = candidates.top();
    candidates.pop();
    if (in_fusion[id]) continue;
    const Node& p = *graph.nodes()[id];
    if (!fusible[id] || &p == graph.root() || p.shape().num_elements() != count) continue;
    if (p.opcode() != Opcode::kBroadcast) {
      const bool all_users_inside =
          std::all_of(users[id].begin(), users[id].end(), [&](int u) { return in_fusion[u]; });
      if (!all_users_inside) continue;
    }
    in_fusion[id] = true;
    members.push_back(&p);
    push_operands(p);
  }
  std::sort(members.begin(), members.end(),
            [](const Node* a, const Node* b) { return a->id() < b->id(); });
  return members;
}

// Builds the Fusion record of `members` (topological order, root last).
Fusion MakeFusion(const std::vector<const Node*>& members, const std::vector<bool>& in_fusion) {
  Fusion fusion;
  fusion.root = members.back();
  const int64_t count = fusion.root->shape().num_elements();
  std::vector<std::pair<int, int>> instruction_of;  // (node id, instruction index)
  auto find_instruction = [&](int id) {
    for (const auto& [node, index] : instruction_of) {
      if (node == id) return index;
    }
    return -1;
  };
  for (const Node* member : members) {
    FusedInstruction instruction{member, {}};
    const bool broadcast = member->opcode() == Opcode::kBroadcast;
    for (const Node* operand : member->operands()) {
      if (!broadcast && in_fusion[operand->id()]) {
        instruction.operands.push_back(find_instruction(operand->id()));
        continue;
      }
      auto it = std::find(fusion.leaves.begin(), fusion.leaves.end(), operand);
      int leaf = static_cast<int>(it - fusion.leaves.begin());
      if (it == fusion.leaves.end()) {
        fusion.leaves.push_back(operand);
        fusion.leaf_elementwise.push_back(true);
      }
      if (broadcast || operand->shape().num_elements() != count) {
        fusion.leaf_elementwise[leaf] = false;
      }
      instruction.operands.push_back(-(leaf + 1));
    }
    instruction_of.emplace_back(member->id(), static_cast<int>(fusion.instructions.size()));
    fusion.instructions.push_back(std::move(instruction));
  }
  return fusion;
}

// Where transpose `t`, read by a dot with `batch` and `contracting` dims of t, lets the dot read
// t's operand instead: the same roles on the operand's dims (t's dim i is its operand's dim
// perm[i]). False when the dot's output order would change: the free dims of t, taken in
// increasing order, must be increasing dims of the operand too.
bool MapThroughTranspose(const Node& t, const std::vector<int64_t>& batch,
                         const std::vector<int64_t>& contracting, std::vector<int64_t>* new_batch,
                         std::vector<int64_t>* new_contracting) {
  const std::vector<int64_t>& perm = t.attrs().dimensions;
  int64_t last_free = -1;
  for (int64_t d = 0; d < static_cast<int64_t>(perm.size()); ++d) {
    if (std::find(batch.begin(), batch.end(), d) != batch.end() ||
        std::find(contracting.begin(), contracting.end(), d) != contracting.end()) {
      continue;
    }
    if (perm[d] < last_free) return false;
    last_free = perm[d];
  }
  // The outputs may be the inputs.
  auto map = [&](const std::vector<int64_t>& dims) {
    std::vector<int64_t> mapped;
    for (int64_t d : dims) mapped.push_back(perm[d]);
    return mapped;
  };
  if (new_batch != nullptr) *new_batch = map(batch);
  if (new_contracting != nullptr) *new_contracting = map(contracting);
  return true;
}

// Whether every read of transpose `t` is a dot that can read t's operand instead.
bool FoldsIntoItsDots(const Graph& graph, const Node& t, const std::vector<int>& users) {
  if (users.empty() || &t == graph.root()) return false;
  for (int u : users) {
    const Node& dot = *graph.nodes()[u];
    if (dot.opcode() != Opcode::kDot) return false;
    const DotDimensionNumbers& dn = dot.attrs().dot;
    if (dot.operand(0) == &t &&
        !MapThroughTranspose(t, dn.lhs_batch_dims, dn.lhs_contracting_dims, nullptr, nullptr)) {
      return false;
    }
    if (dot.operand(1) == &t &&
        !MapThroughTranspose(t, dn.rhs_batch_dims, dn.rhs_contracting_dims, nullptr, nullptr)) {
      return false;
    }
  }
  return true;
}

// Whether transpose `t` of a dot output [batch, lhs free, rhs free] gives [batch, rhs free,
// lhs free] in order, which is the output of the dot with its operands swapped.
bool SwapsDotOperands(const Node& t, const Node& dot) {
  const DotDimensionNumbers& dn = dot.attrs().dot;
  const int64_t nb = static_cast<int64_t>(dn.lhs_batch_dims.size());
  const int64_t nl =
      dot.operand(0)->shape().rank() - nb - static_cast<int64_t>(dn.lhs_contracting_dims.size());
  const int64_t nr =
      dot.operand(1)->shape().rank() - nb - static_cast<int64_t>(dn.rhs_contracting_dims.size());
  std::vector<int64_t> swap;
  for (int64_t i = 0; i < nb; ++i) swap.push_back(i);
  for (int64_t j = 0; j < nr; ++j) swap.push_back(nb + nl + j);
  for (int64_t j = 0; j < nl; ++j) swap.push_back(nb + j);
  return t.attrs().dimensions == swap;
}

// Transpose folding (fusion.h): fills plan.folded_dots, folded_dot_of and marks what it folds
// away in plan.absorbed.
void PlanTransposeFolding(const Graph& graph, const std::vector<bool>& reachable,
                          const std::vector<std::vector<int>>& users, FusionPlan& plan) {
  const int n = static_cast<int>(graph.num_nodes());
  plan.folded_dot_of.assign(n, -1);
  std::vector<bool> folds(n, false);
  for (const Node* node : graph.nodes()) {
    if (reachable[node->id()] && node->opcode() == Opcode::kTranspose) {
      folds[node->id()] = FoldsIntoItsDots(graph, *node, users[node->id()]);
    }
  }
  // Every dot reading a folded transpose reads its operand.
  std::vector<FoldedDot> dot_of(n);
  for (const Node* node : graph.nodes()) {
    if (!reachable[node->id()] || node->opcode() != Opcode::kDot) continue;
    FoldedDot f{node->operand(0), node->operand(1), node->attrs().dot};
    if (folds[f.lhs->id()]) {
      MapThroughTranspose(*f.lhs, f.dnums.lhs_batch_dims, f.dnums.lhs_contracting_dims,
                          &f.dnums.lhs_batch_dims, &f.dnums.lhs_contracting_dims);
      f.lhs = f.lhs->operand(0);
    }
    if (folds[f.rhs->id()]) {
      MapThroughTranspose(*f.rhs, f.dnums.rhs_batch_dims, f.dnums.rhs_contracting_dims,
                          &f.dnums.rhs_batch_dims, &f.dnums.rhs_contracting_dims);
      f.rhs = f.rhs->operand(0);
    }
    dot_of[node->id()] = std::move(f);
  }
  for (const Node* node : graph.nodes()) {
    const int id = node->id();
    if (!reachable[id]) continue;
    if (folds[id]) {
      plan.absorbed[id] = true;
      continue;
    }
    const Node* dot = node->operand_count() == 1 ? node->operand(0) : nullptr;
    if (node->opcode() == Opcode::kTranspose && dot->opcode() == Opcode::kDot &&
        dot != graph.root() && users[dot->id()].size() == 1 && SwapsDotOperands(*node, *dot)) {
      const FoldedDot& d = dot_of[dot->id()];
      plan.absorbed[dot->id()] = true;
      plan.folded_dot_of[id] = static_cast<int>(plan.folded_dots.size());
      plan.folded_dots.push_back(
          {d.rhs, d.lhs,
           DotDimensionNumbers{d.dnums.rhs_batch_dims, d.dnums.lhs_batch_dims,
                               d.dnums.rhs_contracting_dims, d.dnums.lhs_contracting_dims}});
    }
  }
  for (const Node* node : graph.nodes()) {
    const int id = node->id();
    if (!reachable[id] || node->opcode() != Opcode::kDot || plan.absorbed[id]) continue;
    const FoldedDot& d = dot_of[id];
    if (d.lhs == node->operand(0) && d.rhs == node->operand(1)) continue;
    plan.folded_dot_of[id] = static_cast<int>(plan.folded_dots.size());
    plan.folded_dots.push_back(d);
  }
}

}  // namespace

FusionPlan PlanFusion(const Graph& graph, const std::vector<bool>& reachable) {
  const int n = static_cast<int>(graph.num_nodes());
  FusionPlan plan;
  plan.fusion_of_root.assign(n, -1);
  plan.absorbed.assign(n, false);
  std::vector<bool> fusible(n, false);
  for (const Node* node : graph.nodes()) {
    fusible[node->id()] = reachable[node->id()] && IsFusible(*node);
  }
  const std::vector<std::vector<int>> users = ReachableUsers(graph, reachable);
  // Per broadcast: how many of its users fused it (it is materialised unless all did).
  std::vector<int> fused_users(n, 0);
  std::vector<bool> in_fusion(n, false);
  const std::vector<Node*>& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node& root = **it;
    if (!fusible[root.id()] || plan.absorbed[root.id()]) continue;
    if (root.opcode() == Opcode::kBroadcast) continue;  // alone it is just a broadcast
    std::vector<const Node*> members = GrowFusion(graph, root, fusible, users, in_fusion);
    const bool any_op = std::any_of(members.begin(), members.end(), [](const Node* m) {
      return m->opcode() != Opcode::kBroadcast && m->opcode() != Opcode::kReshape;
    });
    if (members.size() >= 2 && any_op) {
      for (const Node* m : members) {
        if (m == &root) continue;
        if (m->opcode() == Opcode::kBroadcast) {
          for (int u : users[m->id()]) fused_users[m->id()] += in_fusion[u] ? 1 : 0;
        } else {
          plan.absorbed[m->id()] = true;
        }
      }
      plan.fusion_of_root[root.id()] = static_cast<int>(plan.fusions.size());
      plan.fusions.push_back(MakeFusion(members, in_fusion));
    }
    for (const Node* m : members) in_fusion[m->id()] = false;
  }
  for (const Node* node : graph.nodes()) {
    const int id = node->id();
    if (node->opcode() == Opcode::kBroadcast && fused_users[id] > 0 &&
        fused_users[id] == static_cast<int>(users[id].size())) {
      plan.absorbed[id] = true;
    }
  }
  PlanTransposeFolding(graph, reachable, users, plan);
  return plan;
}

namespace {

// dst[i] = src[offsets...] for a broadcast: the `len` output elements from linear index `begin`
// of `out_dims`, where output dim d advances the operand by `strides[d]` elements (0 for the
// dims the broadcast adds).
template <int kWidth>
void GatherBroadcast(const std::byte* src, std::byte* dst, absl::Span<const int64_t> out_dims,
                     absl::Span<const int64_t> strides, int64_t begin, int64_t len) {
  struct Element {
    std::byte bytes[kWidth];
  };
  const Element* in = reinterpret_cast<const Element*>(src);
  Element* out = reinterpret_cast<Element*>(dst);
  const int rank = static_cast<int>(out_dims.size());
  if (rank == 0) {
    for (int64_t i = 0; i < len; ++i) out[i] = in[0];
    return;
  }
  absl::InlinedVector<int64_t, 8> index(rank, 0);
  int64_t offset = 0;
  for (int d = rank - 1; d >= 0; --d) {
    index[d] = begin % out_dims[d];
    begin /= out_dims[d];
    offset += index[d] * strides[d];
  }
  const int last = rank - 1;
  const int64_t inner_stride = strides[last];
  for (int64_t i = 0; i < len;) {
    const int64_t run = std::min(out_dims[last] - index[last], len - i);
    if (inner_stride == 0) {
      for (int64_t t = 0; t < run; ++t) out[i + t] = in[offset];
    } else {
      for (int64_t t = 0; t < run; ++t) out[i + t] = in[offset + t * inner_stride];
    }
    i += run;
    index[last] += run;
    offset += run * inner_stride;
    for (int d = last; d > 0 && index[d] == out_dims[d]; --d) {
      offset -= index[d] * strides[d];
      index[d] = 0;
      ++index[d - 1];
      offset += strides[d - 1];
    }
  }
}

void GatherBroadcastAny(int64_t width, const std::byte* src, std::byte* dst,
                        absl::Span<const int64_t> out_dims, absl::Span<const int64_t> strides,
                        int64_t begin, int64_t len) {
  switch (width) {
    case 1:
      return GatherBroadcast<1>(src, dst, out_dims, strides, begin, len);
    case 2:
      return GatherBroadcast<2>(src, dst, out_dims, strides, begin, len);
    case 4:
      return GatherBroadcast<4>(src, dst, out_dims, strides, begin, len);
    default:
      return GatherBroadcast<8>(src, dst, out_dims, strides, begin, len);
  }
}

// Fills `len` elements of `width` bytes with the element at `value`.
void Fill(const std::byte* value, int64_t width, std::byte* dst, int64_t len) {
  for (int64_t i = 0; i < len; ++i) std::memcpy(dst + i * width, value, width);
}

// How one instruction gets its block of values.
enum class Step {
  kOp,               // ElementwiseOnBuffers into scratch (or the output, for the root)
  kAlias,            // reshape: its operand's block, unchanged (row-major order is kept)
  kScalarBroadcast,  // broadcast of one element: a buffer filled once per chunk
  kGather,           // broadcast of an array: gathered per block
};

// What RunFusion derives from a Fusion before the loop.
struct Program {
  const Fusion* fusion = nullptr;
  std::vector<Step> steps;
  std::vector<int64_t> widths;                // bytes per element of each instruction
  std::vector<std::vector<int64_t>> strides;  // kGather: operand stride per output dim
  std::vector<bool> scalar_leaf;              // leaf read as one element for every position
  // The instruction that writes its block straight into the output: the root, or, when the root
  // only reshapes (kAlias) the last op of the fusion, that op (no copy of the block afterwards).
  int writer = 0;
};

Program Compile(const Fusion& fusion, absl::Span<const Literal* const> leaves) {
  Program program;
  program.fusion = &fusion;
  const int64_t count = fusion.root->shape().num_elements();
  for (const FusedInstruction& instruction : fusion.instructions) {
    const Node& node = *instruction.node;
    program.widths.push_back(ByteWidth(node.shape().dtype()));
    program.strides.emplace_back();
    if (node.opcode() == Opcode::kReshape) {
      program.steps.push_back(Step::kAlias);
    } else if (node.opcode() == Opcode::kBroadcast) {
      const Shape& operand = node.operand(0)->shape();
      if (operand.num_elements() == 1) {
        program.steps.push_back(Step::kScalarBroadcast);
        continue;
      }
      program.steps.push_back(Step::kGather);
      std::vector<int64_t>& strides = program.strides.back();
      strides.assign(node.shape().rank(), 0);
      int64_t stride = 1;
      for (int64_t k = operand.rank() - 1; k >= 0; --k) {
        strides[node.attrs().dimensions[k]] = stride;
        stride *= operand.dims()[k];
      }
    } else {
      program.steps.push_back(Step::kOp);
    }
  }
  for (const Literal* leaf : leaves) {
    program.scalar_leaf.push_back(leaf->num_elements() != count);
  }
  // Follow the root's reshapes to the op they show. It may write the output early only when no
  // op runs after it: a donated leaf's block must be read before the output's block is written.
  int writer = static_cast<int>(fusion.instructions.size()) - 1;
  program.writer = writer;
  while (program.steps[writer] == Step::kAlias && fusion.instructions[writer].operands[0] >= 0) {
    writer = fusion.instructions[writer].operands[0];
  }
  if (program.steps[writer] == Step::kOp &&
      std::none_of(program.steps.begin() + writer + 1, program.steps.end(),
                   [](Step step) { return step == Step::kOp; })) {
    program.writer = writer;
  }
  return program;
}

// Runs the fused loop over output elements [begin, end) into `out` (the output's buffer).
absl::Status RunChunk(const Program& program, absl::Span<const Literal* const> leaves,
                      std::byte* out, int64_t begin, int64_t end) {
  const Fusion& fusion = *program.fusion;
  const int num = static_cast<int>(fusion.instructions.size());
  const int root = num - 1;
  // Scratch: one block per instruction and per scalar leaf; scalar ones filled here once.
  // 64-byte aligned like Literal buffers: Eigen's packet ops then take the same (vector) path
  // for the same elements as in the unfused kernels, which keeps most results bitwise equal.
  const int64_t block_bytes = kFusionBlock * 8;
  std::vector<std::byte> storage(static_cast<size_t>(num + leaves.size()) * block_bytes + 64);
  std::byte* scratch = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64);
  auto instruction_scratch = [&](int i) { return scratch + i * block_bytes; };
  auto leaf_scratch = [&](size_t l) { return scratch + (num + l) * block_bytes; };
  const int64_t fill = std::min(kFusionBlock, end - begin);
  for (size_t l = 0; l < leaves.size(); ++l) {
    if (!program.scalar_leaf[l]) continue;
    Fill(leaves[l]->raw_data(), ByteWidth(leaves[l]->shape().dtype()), leaf_scratch(l), fill);
  }
  for (int i = 0; i < num; ++i) {
    if (program.steps[i] != Step::kScalarBroadcast) continue;
    const int leaf = -fusion.instructions[i].operands[0] - 1;
    Fill(leaves[leaf]->raw_data(), program.widths[i], instruction_scratch(i), fill);
  }
  std::vector<const std::byte*> value(num);
  std::vector<const void*> operands;
  for (int64_t b = begin; b < end; b += kFusionBlock) {
    const int64_t len = std::min(kFusionBlock, end - b);
    auto resolve = [&](int operand) -> const std::byte* {
      if (operand >= 0) return value[operand];
      const size_t leaf = static_cast<size_t>(-operand - 1);
      if (program.scalar_leaf[leaf]) return leaf_scratch(leaf);
      return leaves[leaf]->raw_data() + b * ByteWidth(leaves[leaf]->shape().dtype());
    };
    for (int i = 0; i < num; ++i) {
      const FusedInstruction& instruction = fusion.instructions[i];
      const Node& node = *instruction.node;
      switch (program.steps[i]) {
        case Step::kAlias:
          value[i] = resolve(instruction.operands[0]);
          break;
        case Step::kScalarBroadcast:
          value[i] = instruction_scratch(i);
          break;
        case Step::kGather: {
          const int leaf = -instruction.operands[0] - 1;
          GatherBroadcastAny(program.widths[i], leaves[leaf]->raw_data(), instruction_scratch(i),
                             node.shape().dims(), program.strides[i], b, len);
          value[i] = instruction_scratch(i);
          break;
        }
        case Step::kOp: {
          operands.clear();
          for (int operand : instruction.operands) operands.push_back(resolve(operand));
          std::byte* dst =
              i == program.writer ? out + b * program.widths[i] : instruction_scratch(i);
          absl::Status status =
              ElementwiseOnBuffers(node.opcode(), node.attrs().comparison_direction,
                                   OperandDType(node), node.shape().dtype(), operands, dst, len);
          if (!status.ok()) return status;
          value[i] = dst;
          break;
        }
      }
    }
    std::byte* dst = out + b * program.widths[root];
    if (value[root] != dst) std::memmove(dst, value[root], len * program.widths[root]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Literal> RunFusion(const KernelContext& ctx, const Fusion& fusion,
                                  absl::Span<const Literal* const> leaves, Literal* donated) {
  const Shape& shape = fusion.root->shape();
  Literal result = donated != nullptr ? std::move(*donated) : Literal::Uninitialized(shape);
  TESSEL_CHECK(result.shape() == shape);
  // A donated leaf is read through `result` now (its literal moved there).
  std::vector<const Literal*> inputs(leaves.begin(), leaves.end());
  for (const Literal*& input : inputs) {
    if (input == donated) input = &result;
  }
  const Program program = Compile(fusion, inputs);
  std::byte* out = result.raw_data();
  std::mutex mu;
  absl::Status first_error;
  std::atomic<bool> failed{false};
  ParallelFor(ctx, shape.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    if (failed.load(std::memory_order_relaxed)) return;
    absl::Status status = RunChunk(program, inputs, out, begin, end);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) first_error = status;
      failed = true;
    }
  });
  if (!first_error.ok()) {
    return absl::Status(first_error.code(), absl::StrCat("%", fusion.root->name(),
                                                         " (fusion): ", first_error.message()));
  }
  return result;
}

}  // namespace tessel::internal
