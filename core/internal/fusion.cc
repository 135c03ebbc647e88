#include "tessel/core/internal/fusion.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/internal/fusion_loops.h"

namespace tessel::internal {
namespace {

std::atomic<int64_t> compiled_fusions{0};

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
                                    bool allow_extra_outputs, std::vector<bool>& in_fusion) {
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
    if (p.opcode() == Opcode::kReshape) {
      const bool all_users_inside =
          std::all_of(users[id].begin(), users[id].end(), [&](int u) { return in_fusion[u]; });
      if (!all_users_inside) continue;
    } else if (p.opcode() != Opcode::kBroadcast) {
      // Users outside make p a further output; they must run after the fusion (which runs at
      // the root's place in the node order), or they would read p before the loop wrote it.
      const bool users_inside_or_later = std::all_of(
          users[id].begin(), users[id].end(),
          [&](int u) { return in_fusion[u] || (allow_extra_outputs && u > root.id()); });
      if (!users_inside_or_later) continue;
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
Fusion MakeFusion(const std::vector<const Node*>& members, const std::vector<bool>& in_fusion,
                  const std::vector<std::vector<int>>& users) {
  Fusion fusion;
  fusion.root = members.back();
  const int64_t count = fusion.root->shape().num_elements();
  // Node id -> instruction index. A map, not a scan: one fusion can hold a chain of 10^5
  // elementwise ops (a 200000-add chain took 52 s to fuse with a linear search per operand).
  absl::flat_hash_map<int, int> instruction_of;
  auto find_instruction = [&](int id) {
    auto it = instruction_of.find(id);
    return it == instruction_of.end() ? -1 : it->second;
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
    const int index = static_cast<int>(fusion.instructions.size());
    instruction_of.emplace(member->id(), index);
    fusion.instructions.push_back(std::move(instruction));
    const std::vector<int>& member_users = users[member->id()];
    if (member != fusion.root && !broadcast &&
        std::any_of(member_users.begin(), member_users.end(),
                    [&](int u) { return !in_fusion[u]; })) {
      fusion.extra_outputs.push_back(index);
    }
  }
  return fusion;
}

// Arrays a fusion reads or writes at the output's index: its elementwise leaves and outputs.
int MemoryStreams(const Fusion& fusion) {
  const int reads = static_cast<int>(
      std::count(fusion.leaf_elementwise.begin(), fusion.leaf_elementwise.end(), true));
  return reads + 1 + static_cast<int>(fusion.extra_outputs.size());
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

// The dot update `s` runs as (DotUpdate, fusion.h), if it is one, and which operand of the
// multiply is the broadcast.
std::optional<std::pair<DotUpdate, int>> MatchDotUpdate(const Graph& graph, const Node& s,
                                                        const std::vector<std::vector<int>>& users,
                                                        const FusionPlan& plan) {
  auto f32 = [](const Node& n) { return n.shape().dtype() == DType::kF32; };
  if (s.opcode() != Opcode::kSubtract || !f32(s) || s.operand(0) == s.operand(1)) return {};
  const Node& multiply = *s.operand(1);
  // Whether `user` is the only reachable user of `node`.
  auto only_user = [&](const Node& node, const Node& user) {
    return users[node.id()].size() == 1 && users[node.id()][0] == user.id();
  };
  if (multiply.opcode() != Opcode::kMultiply || !only_user(multiply, s) ||
      &multiply == graph.root()) {
    return {};
  }
  for (int k = 0; k < 2; ++k) {
    const Node& broadcast = *multiply.operand(k);
    const Node& d = *multiply.operand(1 - k);
    if (broadcast.opcode() != Opcode::kBroadcast ||
        broadcast.operand(0)->shape().num_elements() != 1 || !f32(broadcast) ||
        !only_user(d, multiply) || &d == graph.root() || !f32(d)) {
      continue;
    }
    FoldedDot dot;
    if (plan.folded_dot_of[d.id()] >= 0) {
      dot = plan.folded_dots[plan.folded_dot_of[d.id()]];
    } else if (d.opcode() == Opcode::kDot && !plan.absorbed[d.id()]) {
      dot = {d.operand(0), d.operand(1), d.attrs().dot};
    } else {
      continue;
    }
    if (!f32(*dot.lhs) || !f32(*dot.rhs)) continue;
    return std::make_pair(DotUpdate{s.operand(0), broadcast.operand(0), dot}, k);
  }
  return {};
}

// Plans the dot updates (fusion.h) after transpose folding, before loop fusion: the subtracts,
// multiplies and dots they take are then no fusion's members.
// Returns, per broadcast, how many of its users are multiplies a dot update took.
std::vector<int> PlanDotUpdates(const Graph& graph, const std::vector<bool>& reachable,
                                const std::vector<std::vector<int>>& users, FusionPlan& plan) {
  plan.dot_update_of.assign(graph.num_nodes(), -1);
  std::vector<int> update_users(graph.num_nodes(), 0);  // per broadcast: multiplies taken
  for (const Node* node : graph.nodes()) {
    if (!reachable[node->id()] || plan.absorbed[node->id()]) continue;
    std::optional<std::pair<DotUpdate, int>> update = MatchDotUpdate(graph, *node, users, plan);
    if (!update.has_value()) continue;
    const Node& multiply = *node->operand(1);
    const int k = update->second;
    plan.absorbed[multiply.id()] = true;
    plan.absorbed[multiply.operand(1 - k)->id()] = true;  // the dot, or its folded transpose
    ++update_users[multiply.operand(k)->id()];
    plan.dot_update_of[node->id()] = static_cast<int>(plan.dot_updates.size());
    plan.dot_updates.push_back(update->first);
  }
  return update_users;
}

// Fills Fusion::compiled of every fusion of `plan` (defined with the fused loop below).
void CompileFusions(FusionPlan& plan);

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
  PlanTransposeFolding(graph, reachable, users, plan);
  // Per broadcast: how many of its users fused it or are dot updates' multiplies (it is
  // materialised unless all are).
  std::vector<int> fused_users = PlanDotUpdates(graph, reachable, users, plan);
  for (const Node* node : graph.nodes()) {
    if (plan.dot_update_of[node->id()] >= 0 || plan.absorbed[node->id()]) {
      fusible[node->id()] = false;
    }
  }
  std::vector<bool> in_fusion(n, false);
  const std::vector<Node*>& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node& root = **it;
    if (!fusible[root.id()] || plan.absorbed[root.id()]) continue;
    if (root.opcode() == Opcode::kBroadcast) continue;  // alone it is just a broadcast
    std::vector<const Node*> members =
        GrowFusion(graph, root, fusible, users, /*allow_extra_outputs=*/true, in_fusion);
    if (MemoryStreams(MakeFusion(members, in_fusion, users)) > kMaxFusionStreams) {
      for (const Node* m : members) in_fusion[m->id()] = false;
      members = GrowFusion(graph, root, fusible, users, /*allow_extra_outputs=*/false, in_fusion);
    }
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
      plan.fusions.push_back(MakeFusion(members, in_fusion, users));
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
  CompileFusions(plan);
  return plan;
}

int64_t CompiledFusionCount() { return compiled_fusions.load(std::memory_order_relaxed); }

namespace {

// dst[i] = src[offsets...] for a broadcast: the `len` output elements from linear index `begin`
// of `out_dims`, where output dim d advances the operand by `strides[d]` elements (0 for the
// dims the broadcast adds).
template <int kWidth>
void GatherBroadcast(const std::byte* src, std::byte* dst, absl::Span<const int64_t> out_dims,
                     absl::Span<const int64_t> strides, int64_t begin, int64_t len) {
  // Elements are moved as unsigned integers of their width (through memcpy, so any element
  // type may be moved this way): the copy and fill loops below then vectorise.
  using Element =
      std::conditional_t<kWidth == 1, uint8_t,
                         std::conditional_t<kWidth == 2, uint16_t,
                                            std::conditional_t<kWidth == 4, uint32_t, uint64_t>>>;
  auto load = [src](int64_t index) {
    Element e;
    std::memcpy(&e, src + index * kWidth, kWidth);
    return e;
  };
  auto store = [dst](int64_t index, Element e) { std::memcpy(dst + index * kWidth, &e, kWidth); };
  const int rank = static_cast<int>(out_dims.size());
  if (rank == 0) {
    const Element e = load(0);
    for (int64_t i = 0; i < len; ++i) store(i, e);
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
      // The element is read once: the compiler cannot tell that `src` and `dst` do not alias.
      const Element e = load(offset);
      for (int64_t t = 0; t < run; ++t) store(i + t, e);
    } else if (inner_stride == 1) {
      std::memcpy(dst + i * kWidth, src + offset * kWidth, run * kWidth);
    } else {
      for (int64_t t = 0; t < run; ++t) store(i + t, load(offset + t * inner_stride));
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

template <int kWidth>
void FillTyped(const std::byte* value, std::byte* dst, int64_t len) {
  struct Element {
    std::byte bytes[kWidth];
  };
  Element element;
  std::memcpy(&element, value, kWidth);
  Element* out = reinterpret_cast<Element*>(dst);
  for (int64_t i = 0; i < len; ++i) out[i] = element;
}

// Fills `len` elements of `width` bytes with the element at `value`. By element type: a
// memcpy call per element was about 4% of a small training step (a block per scalar operand
// of every fusion run).
void Fill(const std::byte* value, int64_t width, std::byte* dst, int64_t len) {
  switch (width) {
    case 1:
      return FillTyped<1>(value, dst, len);
    case 2:
      return FillTyped<2>(value, dst, len);
    case 4:
      return FillTyped<4>(value, dst, len);
    case 8:
      return FillTyped<8>(value, dst, len);
    default:
      for (int64_t i = 0; i < len; ++i) std::memcpy(dst + i * width, value, width);
  }
}

// How one instruction gets its block of values.
enum class Step {
  kOp,               // a precompiled loop or ElementwiseOnBuffers into scratch or an output
  kAlias,            // reshape: its operand's block, unchanged (row-major order is kept)
  kScalarBroadcast,  // broadcast of one element: a buffer filled once per chunk
  kGather,           // broadcast of an array: gathered per block
  kFolded,           // multiply by a scalar, computed inside its one user's loop (not stored)
};

}  // namespace

// What the fused loop derives from a Fusion alone (shapes, ops, the precompiled loops): built
// once by PlanFusion, so a prepared program's runs (on any thread or device) only bind buffers.
struct CompiledFusion {
  std::vector<Step> steps;
  std::vector<int64_t> widths;                // bytes per element of each instruction
  std::vector<std::vector<int64_t>> strides;  // kGather: operand stride per output dim
  std::vector<bool> scalar_leaf;              // leaf read as one element for every position
  std::vector<int64_t> leaf_widths;           // bytes per element of each leaf
  // kOp: the precompiled loop (fusion_loops.h), or none (ElementwiseOnBuffers).
  std::vector<BlockLoop> loops;
  // Per instruction: its value is one element for every position (a scalar broadcast, or a
  // reshape of one), which a precompiled loop may read as that element.
  std::vector<bool> scalar_value;
  // Per instruction: the output (0 the root, 1 + e extra output e) whose buffer it writes its
  // blocks into directly, or -1.
  std::vector<int> output_of;
  // Per kOp instruction and operand (binary ops): the operand is a folded multiply; read the
  // block of `folded_source` times the element of instruction `folded_scale` (-1: not folded).
  std::vector<std::array<int, 2>> folded_source;
  std::vector<std::array<int, 2>> folded_scale;
  // Per output (0 the root, 1 + e extra output e), per leaf: the output may be written into
  // that leaf's buffer, as far as the loop's order goes (no op reads the leaf's block after the
  // output's block is written).
  std::vector<std::vector<bool>> may_write_into;
};

namespace {

using Program = CompiledFusion;

// The instruction that may write its blocks straight into the root's buffer: the root, or,
// when the root only reshapes (kAlias) the last op of the fusion, that op (no copy of the
// block afterwards). It may write the output early only when no op runs after it: a donated
// leaf's block must be read before the output's block is written. -1: none.
int RootWriter(const Fusion& fusion, const std::vector<Step>& steps) {
  int writer = static_cast<int>(fusion.instructions.size()) - 1;
  while (steps[writer] == Step::kAlias && fusion.instructions[writer].operands[0] >= 0) {
    writer = fusion.instructions[writer].operands[0];
  }
  if (steps[writer] != Step::kOp) return -1;
  if (std::any_of(steps.begin() + writer + 1, steps.end(),
                  [](Step step) { return step == Step::kOp; })) {
    return -1;
  }
  if (std::find(fusion.extra_outputs.begin(), fusion.extra_outputs.end(), writer) !=
      fusion.extra_outputs.end()) {
    return -1;  // it writes its own output; the root's block is copied
  }
  return writer;
}

// Folds multiplies by a broadcast scalar (x * s, s * x) into their one user when that user is
// a precompiled binary loop (ChooseScaledBlockLoop): the product is computed in the user's loop
// and never stored. The multiply must not be an output, be read once in the fusion, and not
// itself read a folded value (its block operand is then computed or a leaf).
void FoldScalings(const Fusion& fusion, Program& program) {
  const int num = static_cast<int>(fusion.instructions.size());
  program.folded_source.assign(num, {-1, -1});
  program.folded_scale.assign(num, {-1, -1});
  std::vector<int> reads(num, 0);
  for (const FusedInstruction& instruction : fusion.instructions) {
    for (int operand : instruction.operands) {
      if (operand >= 0) ++reads[operand];
    }
  }
  for (int i = 0; i < num - 1; ++i) {
    const FusedInstruction& multiply = fusion.instructions[i];
    if (program.steps[i] != Step::kOp || program.loops[i].run == nullptr ||
        multiply.node->opcode() != Opcode::kMultiply || program.output_of[i] >= 0 ||
        reads[i] != 1 || program.folded_scale[i][0] >= 0 || program.folded_scale[i][1] >= 0) {
      continue;
    }
    const std::array<int, 2> ops = {multiply.operands[0], multiply.operands[1]};
    const bool scalar0 = ops[0] >= 0 && program.scalar_value[ops[0]];
    const bool scalar1 = ops[1] >= 0 && program.scalar_value[ops[1]];
    if (scalar0 == scalar1) continue;  // not exactly one scalar factor
    const int block = scalar0 ? ops[1] : ops[0];
    const int scale = scalar0 ? ops[0] : ops[1];
    // The one user, and which of its operands the multiply is.
    for (int j = i + 1; j < num; ++j) {
      const FusedInstruction& user = fusion.instructions[j];
      const auto it = std::find(user.operands.begin(), user.operands.end(), i);
      if (it == user.operands.end()) continue;
      if (program.steps[j] != Step::kOp || user.operands.size() != 2) break;
      const int k = static_cast<int>(it - user.operands.begin());
      bool scalar[2], scaled[2];
      for (int o = 0; o < 2; ++o) {
        const int operand = user.operands[o];
        scalar[o] = operand >= 0 && program.scalar_value[operand];
        scaled[o] = program.folded_scale[j][o] >= 0 || o == k;
      }
      const BlockLoop loop = ChooseScaledBlockLoop(*user.node, scalar, scaled);
      if (loop.run == nullptr) break;
      program.loops[j] = loop;
      program.folded_source[j][k] = block;
      program.folded_scale[j][k] = scale;
      program.steps[i] = Step::kFolded;
      break;
    }
  }
}

// Which leaf buffers each output may be written into (CompiledFusion::may_write_into). The
// root's block is written by the last op or copied after it, so every leaf's block has been read
// by then. An extra output is written directly by its instruction, in the middle of the block's
// ops: a leaf qualifies only if every op that reads its block (through reshapes and folded
// multiplies too) runs no later than that instruction (the one at that instruction reads each
// element before writing it).
void PlanWritesIntoLeaves(const Fusion& fusion, Program& program) {
  const int num = static_cast<int>(fusion.instructions.size());
  // The leaf an operand's block is, through reshapes, or -1 for a computed block.
  auto leaf_of = [&](int operand) {
    while (operand >= 0 && program.steps[operand] == Step::kAlias) {
      operand = fusion.instructions[operand].operands[0];
    }
    return operand >= 0 ? -1 : -operand - 1;
  };
  std::vector<int> last_read(fusion.leaves.size(), -1);
  for (int i = 0; i < num; ++i) {
    if (program.steps[i] != Step::kOp) continue;
    const std::vector<int>& operands = fusion.instructions[i].operands;
    for (size_t k = 0; k < operands.size(); ++k) {
      const bool folded = k < 2 && program.folded_scale[i][k] >= 0;
      const int leaf = leaf_of(folded ? program.folded_source[i][k] : operands[k]);
      if (leaf >= 0) last_read[leaf] = i;
    }
  }
  const size_t outputs = 1 + fusion.extra_outputs.size();
  program.may_write_into.assign(outputs, std::vector<bool>(fusion.leaves.size(), true));
  for (size_t e = 0; e < fusion.extra_outputs.size(); ++e) {
    for (size_t l = 0; l < fusion.leaves.size(); ++l) {
      program.may_write_into[1 + e][l] = last_read[l] <= fusion.extra_outputs[e];
    }
  }
}

Program Compile(const Fusion& fusion) {
  Program program;
  const int64_t count = fusion.root->shape().num_elements();
  const int num = static_cast<int>(fusion.instructions.size());
  program.loops.resize(num);
  program.scalar_value.assign(num, false);
  program.output_of.assign(num, -1);
  for (int i = 0; i < num; ++i) {
    const FusedInstruction& instruction = fusion.instructions[i];
    const Node& node = *instruction.node;
    program.widths.push_back(ByteWidth(node.shape().dtype()));
    program.strides.emplace_back();
    if (node.opcode() == Opcode::kReshape) {
      program.steps.push_back(Step::kAlias);
      const int operand = instruction.operands[0];
      program.scalar_value[i] = operand >= 0 && program.scalar_value[operand];
    } else if (node.opcode() == Opcode::kBroadcast) {
      const Shape& operand = node.operand(0)->shape();
      if (operand.num_elements() == 1) {
        program.steps.push_back(Step::kScalarBroadcast);
        program.scalar_value[i] = true;
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
      absl::InlinedVector<bool, 3> scalar;
      for (int operand : instruction.operands) {
        scalar.push_back(operand >= 0 && program.scalar_value[operand]);
      }
      program.loops[i] = ChooseBlockLoop(node, scalar);
    }
  }
  for (const Node* leaf : fusion.leaves) {
    program.scalar_leaf.push_back(leaf->shape().num_elements() != count);
    program.leaf_widths.push_back(ByteWidth(leaf->shape().dtype()));
  }
  for (size_t e = 0; e < fusion.extra_outputs.size(); ++e) {
    program.output_of[fusion.extra_outputs[e]] = static_cast<int>(e) + 1;
  }
  if (const int writer = RootWriter(fusion, program.steps); writer >= 0) {
    program.output_of[writer] = 0;
  }
  FoldScalings(fusion, program);
  PlanWritesIntoLeaves(fusion, program);
  compiled_fusions.fetch_add(1, std::memory_order_relaxed);
  return program;
}

void CompileFusions(FusionPlan& plan) {
  for (Fusion& fusion : plan.fusions) {
    fusion.compiled = std::make_shared<const CompiledFusion>(Compile(fusion));
  }
}

// Scratch of the calling thread for RunChunk, 64-byte aligned like Literal buffers: Eigen's
// packet ops then take the same (vector) path for the same elements as in the unfused kernels,
// which keeps most results bitwise equal. Kept across calls (no allocation per chunk).
std::byte* ThreadScratch(size_t bytes) {
  thread_local std::unique_ptr<std::byte[]> storage;
  thread_local size_t capacity = 0;
  if (capacity < bytes + 64) {
    capacity = std::max(bytes + 64, 2 * capacity);
    storage.reset(new std::byte[capacity]);
  }
  return storage.get() + (64 - reinterpret_cast<uintptr_t>(storage.get()) % 64) % 64;
}

// Where a value's block of output elements [b, b + len) lies: base + b * stride bytes, a
// stride of 0 for a buffer that is the same for every block (scratch, one element). Within a
// chunk every value of a fused loop is such a pointer, so the per-block loop computes each
// operand's position with one multiply-add and dispatches nothing but the ops themselves
// (resolving operands per block cost about as much as the Adam update's arithmetic).
struct BlockPointer {
  const std::byte* base = nullptr;
  int64_t stride = 0;
  const std::byte* At(int64_t b) const { return base + b * stride; }
};

// One instruction of the per-block loop, its operands and destination bound for a chunk.
struct BoundStep {
  Step step = Step::kOp;  // kOp or kGather: the only steps that do work per block
  int instruction = 0;
  BlockLoopFn loop = nullptr;  // kOp: the precompiled loop, or null (ElementwiseOnBuffers)
  // kOp with a loop: the loop's four argument slots (fusion_loops.h: blocks or single
  // elements, then the scales of folded operands); without a loop: the operands.
  absl::InlinedVector<BlockPointer, 4> args;
  BlockPointer dst;
};

// A fusion bound to one chunk's buffers: the steps run per block and where each
// instruction's block lies.
struct BoundChunk {
  absl::InlinedVector<BoundStep, 32> steps;
  absl::InlinedVector<BlockPointer, 32> value;
};

// Binds `fusion` to `leaves` and `outputs` with `scratch` (one block per instruction, then one
// per leaf, `block_bytes` apart); fills the scratch of scalar leaves and scalar broadcasts
// with `fill` copies of their element.
BoundChunk BindChunk(const Fusion& fusion, const Program& program,
                     absl::Span<const Literal* const> leaves, absl::Span<std::byte* const> outputs,
                     std::byte* scratch, int64_t block_bytes, int64_t fill) {
  const int num = static_cast<int>(fusion.instructions.size());
  auto instruction_scratch = [&](int i) { return scratch + i * block_bytes; };
  auto leaf_scratch = [&](size_t leaf) { return scratch + (num + leaf) * block_bytes; };
  auto leaf_pointer = [&](size_t leaf) -> BlockPointer {
    if (program.scalar_leaf[leaf]) return {leaf_scratch(leaf), 0};
    return {leaves[leaf]->raw_data(), program.leaf_widths[leaf]};
  };
  BoundChunk chunk;
  for (size_t l = 0; l < leaves.size(); ++l) {
    if (!program.scalar_leaf[l]) continue;
    Fill(leaves[l]->raw_data(), program.leaf_widths[l], leaf_scratch(l), fill);
  }
  // Per instruction: a scalar broadcast's (or its reshape's) one element.
  absl::InlinedVector<const std::byte*, 32> element(num, nullptr);
  chunk.value.resize(num);
  auto resolve = [&](int operand) -> BlockPointer {
    if (operand >= 0) return chunk.value[operand];
    return leaf_pointer(static_cast<size_t>(-operand - 1));
  };
  for (int i = 0; i < num; ++i) {
    const FusedInstruction& instruction = fusion.instructions[i];
    BoundStep step;
    step.step = program.steps[i];
    step.instruction = i;
    switch (program.steps[i]) {
      case Step::kAlias:
        chunk.value[i] = resolve(instruction.operands[0]);
        if (instruction.operands[0] >= 0) element[i] = element[instruction.operands[0]];
        continue;
      case Step::kScalarBroadcast:
        element[i] = leaves[-instruction.operands[0] - 1]->raw_data();
        Fill(element[i], program.widths[i], instruction_scratch(i), fill);
        chunk.value[i] = {instruction_scratch(i), 0};
        continue;
      case Step::kFolded:
        continue;  // its one user computes it
      case Step::kGather:
        step.dst = {instruction_scratch(i), 0};
        break;
      case Step::kOp: {
        const int out = program.output_of[i];
        step.dst = out >= 0 ? BlockPointer{outputs[out], program.widths[i]}
                            : BlockPointer{instruction_scratch(i), 0};
        const BlockLoop& loop = program.loops[i];
        if (loop.run == nullptr) {
          for (int operand : instruction.operands) step.args.push_back(resolve(operand));
          break;
        }
        step.loop = loop.run;
        step.args.resize(4);
        for (size_t k = 0; k < instruction.operands.size(); ++k) {
          const int operand = instruction.operands[k];
          if (k < 2 && program.folded_scale[i][k] >= 0) {
            step.args[k] = resolve(program.folded_source[i][k]);
            step.args[2 + k] = {element[program.folded_scale[i][k]], 0};
          } else if ((loop.scalar_operands >> k) & 1) {
            step.args[k] = {element[operand], 0};
          } else {
            step.args[k] = resolve(operand);
          }
        }
        break;
      }
    }
    chunk.value[i] = step.dst;
    chunk.steps.push_back(std::move(step));
  }
  return chunk;
}

// Runs the fused loop over output elements [begin, end).
absl::Status RunChunk(const Fusion& fusion, const Program& program,
                      absl::Span<const Literal* const> leaves, absl::Span<std::byte* const> outputs,
                      int64_t begin, int64_t end) {
  const int num = static_cast<int>(fusion.instructions.size());
  const int root = num - 1;
  // Scratch: one block per instruction and per scalar leaf; scalar ones filled once per chunk.
  // Blocks 64 bytes more than a power of two apart: loads of one block and stores of another
  // then never share their address bits below 4 KiB (no false store-to-load dependence).
  const int64_t block_bytes = kFusionBlock * 8 + 64;
  std::byte* scratch = ThreadScratch(static_cast<size_t>(num + leaves.size()) * block_bytes);
  const BoundChunk chunk = BindChunk(fusion, program, leaves, outputs, scratch, block_bytes,
                                     std::min(kFusionBlock, end - begin));
  std::vector<const void*> operands;
  for (int64_t b = begin; b < end; b += kFusionBlock) {
    const int64_t len = std::min(kFusionBlock, end - b);
    for (const BoundStep& step : chunk.steps) {
      std::byte* dst = const_cast<std::byte*>(step.dst.At(b));
      if (step.loop != nullptr) {
        const std::byte* args[4] = {step.args[0].At(b), step.args[1].At(b), step.args[2].At(b),
                                    step.args[3].At(b)};
        step.loop(args, dst, len);
        continue;
      }
      const FusedInstruction& instruction = fusion.instructions[step.instruction];
      const Node& node = *instruction.node;
      if (step.step == Step::kGather) {
        const int leaf = -instruction.operands[0] - 1;
        GatherBroadcastAny(program.widths[step.instruction], leaves[leaf]->raw_data(), dst,
                           node.shape().dims(), program.strides[step.instruction], b, len);
        continue;
      }
      operands.clear();
      for (const BlockPointer& arg : step.args) operands.push_back(arg.At(b));
      absl::Status status =
          ElementwiseOnBuffers(node.opcode(), node.attrs().comparison_direction, OperandDType(node),
                               node.shape().dtype(), operands, dst, len);
      if (!status.ok()) return status;
    }
    const std::byte* result = chunk.value[root].At(b);
    std::byte* dst = outputs[0] + b * program.widths[root];
    if (result != dst) std::memmove(dst, result, len * program.widths[root]);
  }
  return absl::OkStatus();
}

}  // namespace

const Node& FusionOutput(const Fusion& fusion, int output) {
  return output == 0 ? *fusion.root : *fusion.instructions[fusion.extra_outputs[output - 1]].node;
}

bool MayWriteInto(const Fusion& fusion, int output, int leaf) {
  TESSEL_CHECK(fusion.compiled != nullptr);
  return fusion.leaf_elementwise[leaf] && fusion.compiled->may_write_into[output][leaf];
}

absl::StatusOr<std::vector<Literal>> RunFusion(const KernelContext& ctx, const Fusion& fusion,
                                               absl::Span<const Literal* const> leaves,
                                               absl::Span<Literal* const> donated) {
  const Shape& shape = fusion.root->shape();
  const size_t count = 1 + fusion.extra_outputs.size();
  TESSEL_CHECK(donated.empty() || donated.size() == count);
  std::vector<Literal> outputs;
  outputs.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    const Shape& output_shape = FusionOutput(fusion, static_cast<int>(k)).shape();
    Literal* donor = donated.empty() ? nullptr : donated[k];
    outputs.push_back(donor != nullptr ? std::move(*donor) : Literal::Uninitialized(output_shape));
    TESSEL_CHECK(outputs.back().shape() == output_shape);
  }
  // A donated leaf is read through its output now (its literal moved there).
  std::vector<const Literal*> inputs(leaves.begin(), leaves.end());
  for (const Literal*& input : inputs) {
    for (size_t k = 0; k < donated.size(); ++k) {
      if (donated[k] != nullptr && input == donated[k]) input = &outputs[k];
    }
  }
  TESSEL_CHECK(fusion.compiled != nullptr);  // PlanFusion compiles every fusion it plans
  const Program& program = *fusion.compiled;
  absl::InlinedVector<std::byte*, 4> buffers;
  for (Literal& output : outputs) buffers.push_back(output.raw_data());
  std::mutex mu;
  absl::Status first_error;
  std::atomic<bool> failed{false};
  ParallelFor(ctx, shape.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    if (failed.load(std::memory_order_relaxed)) return;
    absl::Status status = RunChunk(fusion, program, inputs, buffers, begin, end);
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
  return outputs;
}

}  // namespace tessel::internal
