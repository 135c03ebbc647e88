#include "tessel/partitioner/combine_collectives.h"

#include <functional>
#include <queue>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tessel/partitioner/internal/rewrite.h"

namespace tessel::partitioner {
namespace {

bool IsAllReduceOfArray(const Node& node) {
  return node.opcode() == Opcode::kAllReduce && node.operand_count() == 1 &&
         !node.shape().is_tuple() && node.shape().num_elements() > 0;
}

// Below the threshold: one at or above it gains nothing from company, and stays in place.
bool IsCandidate(const Node& node, const AllReduceCombinerOptions& options) {
  return options.threshold_bytes > 0 && options.threshold_count > 0 && IsAllReduceOfArray(node) &&
         node.shape().byte_size() < options.threshold_bytes;
}

// Two all-reduces may be combined when these are equal (XLA's AllReduceKey less the
// computation, which Tessel programs do not carry: one reduction kind per op).
bool SameKey(const Node& a, const Node& b) {
  const OpAttributes& x = a.attrs();
  const OpAttributes& y = b.attrs();
  return x.reduce_kind == y.reduce_kind && a.shape().dtype() == b.shape().dtype() &&
         (x.channel_id != 0) == (y.channel_id != 0) &&
         x.use_global_device_ids == y.use_global_device_ids && x.replica_groups == y.replica_groups;
}

class Rebuilder {
 public:
  Rebuilder(const Graph& program, const AllReduceCombinerOptions& options,
            AllReduceCombineStats& stats)
      : program_(program), options_(options), stats_(stats) {
    out_ = std::make_unique<Graph>(program.name());
    const std::vector<Node*>& nodes = program.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      position_[nodes[i]] = static_cast<int64_t>(i);
      waiting_[nodes[i]] = nodes[i]->operand_count();
    }
  }

  std::unique_ptr<Graph> Run() {
    const std::vector<Node*>& nodes = program_.nodes();
    for (Node* node : nodes) {
      if (node->operand_count() == 0) MakeReady(node);
    }
    while (!ready_.empty() || !ready_all_reduces_.empty()) {
      if (!ready_.empty()) {
        const int64_t position = ready_.top();
        ready_.pop();
        Node* node = nodes[position];
        Schedule(node, Copy(*node));
        continue;
      }
      // Only all-reduces can run: combine those of the earliest one's key.
      EmitCombination();
    }
    out_->set_root(mapped_.at(program_.root()));
    return std::move(out_);
  }

 private:
  void MakeReady(Node* node) {
    if (IsCandidate(*node, options_)) {
      ready_all_reduces_.insert(position_.at(node));
    } else {
      ready_.push(position_.at(node));
    }
  }

  // `node` is done and `copy` is its value in the new graph: its users may become ready.
  void Schedule(const Node* node, Node* copy) {
    mapped_[node] = copy;
    for (Node* user : node->users()) {
      if (--waiting_.at(user) == 0) MakeReady(user);
    }
  }

  Node* Copy(const Node& node) {
    return internal::CopyNode(*out_, node, internal::MappedOperands(node, mapped_));
  }

  void EmitCombination() {
    const std::vector<Node*>& nodes = program_.nodes();
    const Node* first = nodes[*ready_all_reduces_.begin()];
    std::vector<const Node*> members;
    int64_t bytes = 0;
    for (int64_t position : ready_all_reduces_) {
      const Node* node = nodes[position];
      if (!SameKey(*first, *node)) continue;
      const int64_t size = node->shape().byte_size();
      const bool fits = bytes + size <= options_.threshold_bytes &&
                        static_cast<int64_t>(members.size()) < options_.threshold_count;
      if (!members.empty() && !fits) continue;
      members.push_back(node);
      bytes += size;
    }
    for (const Node* m : members) ready_all_reduces_.erase(position_.at(m));
    ++stats_.all_reduces_after;
    if (members.size() == 1) {
      Schedule(members[0], Copy(*members[0]));
      return;
    }
    ++stats_.combined;
    const DType dtype = first->shape().dtype();
    // Flat operands, concatenated in program order.
    std::vector<Node*> flat;
    int64_t total = 0;
    for (const Node* m : members) {
      Node* operand = mapped_.at(m->operand(0));
      const int64_t n = m->shape().num_elements();
      if (operand->shape().rank() != 1) {
        operand = out_->AddNodeUnchecked(Opcode::kReshape, Shape(dtype, {n}), {operand}, {},
                                         absl::StrCat(m->name(), ".flat"));
      }
      flat.push_back(operand);
      total += n;
    }
    OpAttributes concat_attrs;
    concat_attrs.dimensions = {0};
    Node* concat =
        out_->AddNodeUnchecked(Opcode::kConcatenate, Shape(dtype, {total}), flat,
                               std::move(concat_attrs), absl::StrCat(first->name(), ".operands"));
    Node* combined =
        out_->AddNodeUnchecked(Opcode::kAllReduce, Shape(dtype, {total}), {concat}, first->attrs(),
                               absl::StrCat(first->name(), ".combined"));
    int64_t offset = 0;
    for (const Node* m : members) {
      const int64_t n = m->shape().num_elements();
      OpAttributes slice_attrs;
      slice_attrs.slice = {SliceDim{.start = offset, .limit = offset + n, .stride = 1}};
      offset += n;
      const bool flat_result = m->shape().rank() == 1;
      Node* piece = out_->AddNodeUnchecked(
          Opcode::kSlice, Shape(dtype, {n}), {combined}, std::move(slice_attrs),
          flat_result ? m->name() : absl::StrCat(m->name(), ".flat_result"));
      if (!flat_result) {
        piece = out_->AddNodeUnchecked(Opcode::kReshape, m->shape(), {piece}, {}, m->name());
      }
      piece->set_sharding(m->sharding());
      Schedule(m, piece);
    }
  }

  const Graph& program_;
  const AllReduceCombinerOptions& options_;
  AllReduceCombineStats& stats_;
  std::unique_ptr<Graph> out_;
  absl::flat_hash_map<const Node*, int64_t> position_;
  absl::flat_hash_map<const Node*, int64_t> waiting_;  // operands not yet scheduled
  absl::flat_hash_map<const Node*, Node*> mapped_;     // old node -> its value in out_
  // Ready nodes by program position, earliest first; ready all-reduces held back apart.
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> ready_;
  std::set<int64_t> ready_all_reduces_;
};

// The transpose of `node` when `node` is an all-reduce of an array whose one use is a transpose.
const Node* TransposeAfter(const Node& node) {
  if (!IsAllReduceOfArray(node) || node.users().size() != 1) return nullptr;
  const Node* user = node.users()[0];
  return user->opcode() == Opcode::kTranspose ? user : nullptr;
}

}  // namespace

std::unique_ptr<Graph> MoveTransposesBeforeAllReduces(const Graph& program, int64_t* moved) {
  auto out = std::make_unique<Graph>(program.name());
  absl::flat_hash_map<const Node*, Node*> mapped;
  int64_t count = 0;
  for (const Node* node : program.nodes()) {
    if (mapped.contains(node)) continue;  // a transpose already moved
    std::vector<Node*> operands = internal::MappedOperands(*node, mapped);
    if (const Node* transpose = TransposeAfter(*node); transpose != nullptr) {
      // all-reduce(x) -> transpose  becomes  transpose(x) -> all-reduce, each keeping its name.
      Node* before = out->AddNodeUnchecked(Opcode::kTranspose, transpose->shape(), operands,
                                           transpose->attrs(), transpose->name());
      Node* reduced = out->AddNodeUnchecked(Opcode::kAllReduce, transpose->shape(), {before},
                                            node->attrs(), node->name());
      reduced->set_sharding(transpose->sharding());
      mapped[node] = reduced;  // no other user: only the transpose's entry is read
      mapped[transpose] = reduced;
      ++count;
      continue;
    }
    mapped[node] = internal::CopyNode(*out, *node, std::move(operands));
  }
  out->set_root(mapped.at(program.root()));
  if (moved != nullptr) *moved = count;
  return out;
}

absl::StatusOr<std::unique_ptr<Graph>> CombineAllReduces(const Graph& program,
                                                         const AllReduceCombinerOptions& options,
                                                         AllReduceCombineStats* stats) {
  if (options.threshold_bytes < 0 || options.threshold_count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce combiner: thresholds must be >= 0, got threshold_bytes=",
                     options.threshold_bytes, " threshold_count=", options.threshold_count));
  }
  AllReduceCombineStats local;
  for (const Node* node : program.nodes()) {
    if (node->opcode() == Opcode::kAllReduce) ++local.all_reduces_before;
  }
  // Non-candidate all-reduces are copied like any node; count them as they are.
  for (const Node* node : program.nodes()) {
    if (node->opcode() == Opcode::kAllReduce && !IsCandidate(*node, options)) {
      ++local.all_reduces_after;
    }
  }
  std::unique_ptr<Graph> out = Rebuilder(program, options, local).Run();
  if (stats != nullptr) *stats = local;
  return out;
}

}  // namespace tessel::partitioner
