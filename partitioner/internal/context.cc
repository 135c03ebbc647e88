#include "tessel/partitioner/internal/context.h"

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

absl::StatusOr<Node*> Context::Add(Opcode opcode, std::vector<Node*> operands, OpAttributes attrs) {
  TESSEL_ASSIGN_OR_RETURN(Node * node,
                          local_.AddNode(opcode, std::move(operands), std::move(attrs)));
  if (explain_ != nullptr && IsCollective(opcode)) NoteCollective(*node);
  return node;
}

absl::StatusOr<Node*> Context::Add(Opcode opcode, const Shape& shape, std::vector<Node*> operands,
                                   OpAttributes attrs) {
  TESSEL_ASSIGN_OR_RETURN(Node * node,
                          local_.AddNode(opcode, shape, std::move(operands), std::move(attrs)));
  if (explain_ != nullptr && IsCollective(opcode)) NoteCollective(*node);
  return node;
}

// Every collective goes through Add, so this sees them all, whichever rule emits them. Costed
// like ReshardSeconds: V is the full buffer (an all-gather's result, any other's operand), on
// the links the first replica group (or source-target pair) crosses.
void Context::NoteCollective(const Node& collective) {
  PartitionExplanation::Collective note;
  note.computation = computation_;
  if (current_ != nullptr) {
    note.instruction = current_->name();
    note.opcode = std::string(OpcodeName(current_->opcode()));
  }
  note.name = collective.name();
  note.kind = std::string(OpcodeName(collective.opcode()));
  note.reason = resharding_.empty() ? std::string("inside the rule") : resharding_;
  note.bytes = collective.shape().byte_size();
  const int64_t v = collective.opcode() == Opcode::kAllGather || collective.operand_count() == 0
                        ? collective.shape().byte_size()
                        : collective.operand(0)->shape().byte_size();
  std::vector<int64_t> group;
  const OpAttributes& attrs = collective.attrs();
  if (collective.opcode() == Opcode::kCollectivePermute) {
    if (!attrs.source_target_pairs.empty()) {
      group = {attrs.source_target_pairs[0].first, attrs.source_target_pairs[0].second};
    }
  } else if (!attrs.replica_groups.empty()) {
    group = attrs.replica_groups[0];
  } else {
    for (int64_t d = 0; d < num_devices_; ++d) group.push_back(d);
  }
  if (cost_ != nullptr && !group.empty()) {
    note.seconds = cost_->CollectiveCost(collective.opcode(), group, v, group[0]).seconds;
  }
  explain_->collectives.push_back(std::move(note));
}

Node* Context::ScalarConstant(DType dtype, double value) {
  Literal lit(Shape(dtype, {}));
  lit.SetFromDouble(0, value);
  return local_.AddConstant(std::move(lit));
}

// One partition-id node per program, created on first use: a program that never needs the
// device's position (e.g. pure elementwise over matching shardings) has none.
absl::StatusOr<Node*> Context::PartitionId() {
  if (partition_id_ == nullptr) {
    TESSEL_ASSIGN_OR_RETURN(partition_id_, Add(Opcode::kPartitionId, {}));
  }
  return partition_id_;
}

// XLA's SpmdPartitioner idiom: a constant table indexed by partition-id with dynamic-slice.
// Every device runs the same program text (SPMD), so device-dependent values must come from
// data, not from per-device constants. The table is s32, the type of every index the
// partitioner emits; an offset of 2^31 or more would not fit (no realistic dim is that long).
absl::StatusOr<Node*> Context::PerDeviceScalar(const std::vector<int64_t>& values) {
  std::vector<int32_t> table(values.begin(), values.end());
  Node* constant =
      local_.AddConstant(Literal::FromVector<int32_t>({static_cast<int64_t>(table.size())}, table));
  TESSEL_ASSIGN_OR_RETURN(Node * pid, PartitionId());
  OpAttributes ds;
  ds.dynamic_slice_sizes = {1};
  TESSEL_ASSIGN_OR_RETURN(Node * one, Add(Opcode::kDynamicSlice, {constant, pid}, ds));
  return Add(Opcode::kReshape, Shape(DType::kS32, {}), {one});
}

absl::StatusOr<Node*> Context::TileOffset(const Sharding& s, const Shape& global, int64_t dim) {
  const int64_t tiles = s.num_tiles(dim);
  const int64_t size = (global.dim(dim) + tiles - 1) / tiles;
  // One offset node per (sharding, dim, tile size), reused by every later user (as XLA's CSE
  // would leave it): the per-device table is O(devices), so building it once matters at scale.
  OffsetKey key{s, dim, size};
  auto it = offsets_.find(key);
  if (it != offsets_.end()) return it->second;
  // Indexed by device id, not tile position: partition-id is the device id. Annotations are
  // checked to cover every device (CoversAllDevices), so the 0 fallback is never read.
  std::vector<int64_t> offsets(num_devices_, 0);
  for (int64_t device = 0; device < num_devices_; ++device) {
    auto index = s.TileIndexOf(device);
    offsets[device] = index ? (*index)[dim] * size : 0;
  }
  TESSEL_ASSIGN_OR_RETURN(Node * offset, PerDeviceScalar(offsets));
  offsets_.emplace(std::move(key), offset);
  return offset;
}

CollectiveDeviceList Context::GroupsAlong(const Sharding& s, const std::vector<int64_t>& dims) {
  auto key = std::make_pair(s, dims);
  auto it = groups_.find(key);
  if (it == groups_.end()) it = groups_.emplace(std::move(key), GroupsAlongDims(s, dims)).first;
  return it->second;
}

absl::StatusOr<Node*> Context::AllReduce(Node* local, CollectiveDeviceList groups,
                                         ReduceKind kind) {
  // Groups of one device are an identity; emitting nothing keeps 1-device meshes and unsharded
  // reductions free of collectives (the golden files check `CHECK-NOT: all-`).
  if (groups.empty() || groups[0].size() <= 1) return local;
  OpAttributes attrs;
  attrs.replica_groups = std::move(groups);
  attrs.reduce_kind = kind;
  return Add(Opcode::kAllReduce, {local}, std::move(attrs));
}

namespace {

// One all-to-all step: tiled on dim `step.dim` -> tiled on `step.to_dim` over the same groups.
absl::StatusOr<Node*> EmitAllToAll(Context& ctx, Node* local, const ReshardStep& step,
                                   const Shape& global) {
  // [.., s_a, .., B, ..] -> split B into [n, B/n], move the n chunks to dim 0, exchange along
  // dim 0 (chunk i goes to the i-th device; received chunks ordered by source position =
  // tile index along a), then fold dim 0 into a: [.., n*s_a, .., B/n, ..].
  const int64_t n = static_cast<int64_t>(step.groups[0].size());
  const int64_t a = step.dim, b = step.to_dim;
  // An uneven dim b is padded to n equal chunks: the padding lands in the last tiles along
  // b, where the ceil rule puts it.
  if (const int64_t size = local->shape().dim(b); size % n != 0) {
    OpAttributes pad;
    pad.padding.assign(global.rank(), PadDim{});
    pad.padding[b].high = (size + n - 1) / n * n - size;
    TESSEL_ASSIGN_OR_RETURN(
        local, ctx.Add(Opcode::kPad, {local, ctx.ScalarConstant(global.dtype(), 0)}, pad));
  }
  const std::vector<int64_t>& dims = local->shape().dims();
  std::vector<int64_t> split;
  for (int64_t d = 0; d < global.rank(); ++d) {
    if (d == b) {
      split.push_back(n);
      split.push_back(dims[d] / n);
    } else {
      split.push_back(dims[d]);
    }
  }
  TESSEL_ASSIGN_OR_RETURN(Node * reshaped,
                          ctx.Add(Opcode::kReshape, Shape(global.dtype(), split), {local}));
  std::vector<int64_t> to_front = {b};
  for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d) {
    if (d != b) to_front.push_back(d);
  }
  OpAttributes front;
  front.dimensions = to_front;
  TESSEL_ASSIGN_OR_RETURN(Node * moved, ctx.Add(Opcode::kTranspose, {reshaped}, front));
  OpAttributes exchange;
  exchange.replica_groups = step.groups;
  exchange.dimensions = {0};
  TESSEL_ASSIGN_OR_RETURN(Node * swapped, ctx.Add(Opcode::kAllToAll, {moved}, exchange));
  // `swapped` dims: [n, rest of split without index b]. Put n right before dim a.
  std::vector<int64_t> rest;  // positions in `split` of the other dims
  for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d) {
    if (d != b) rest.push_back(d);
  }
  const int64_t a_in_split = a < b ? a : a + 1;
  std::vector<int64_t> back;
  std::vector<int64_t> merged_dims;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == a_in_split) {
      back.push_back(0);
      merged_dims.push_back(n * split[rest[i]]);
    } else {
      merged_dims.push_back(split[rest[i]]);
    }
    back.push_back(static_cast<int64_t>(i) + 1);
  }
  OpAttributes place;
  place.dimensions = back;
  TESSEL_ASSIGN_OR_RETURN(Node * placed, ctx.Add(Opcode::kTranspose, {swapped}, place));
  TESSEL_ASSIGN_OR_RETURN(Node * merged,
                          ctx.Add(Opcode::kReshape, Shape(global.dtype(), merged_dims), {placed}));
  // An uneven dim a arrives as n padded tiles, the padding all after its first dim(a)
  // elements (only trailing tiles are short): slice it off. (A partial all-to-all, which
  // leaves dim a tiled, is planned only for divisible dims and needs no slice.)
  const int64_t want = LocalShape(global, step.after).dim(a);
  if (merged_dims[a] == want) return merged;
  OpAttributes slice;
  for (int64_t d = 0; d < global.rank(); ++d) {
    slice.slice.push_back({0, d == a ? want : merged_dims[d], 1});
  }
  return ctx.Add(Opcode::kSlice, {merged}, slice);
}

}  // namespace

absl::StatusOr<Node*> Context::EmitStep(Node* local, const Sharding& before,
                                        const ReshardStep& step, const Shape& global) {
  switch (step.kind) {
    // Partial values are summed; for pred a "sum" is OR (any partial true), which is also what
    // ShardedTensor::Assemble does when it adds unreduced pieces.
    case ReshardStep::Kind::kAllReduce:
      return AllReduce(local, step.groups,
                       global.dtype() == DType::kPred ? ReduceKind::kOr : ReduceKind::kAdd);
    case ReshardStep::Kind::kAllGather: {
      OpAttributes attrs;
      attrs.replica_groups = step.groups;
      attrs.dimensions = {step.dim};
      TESSEL_ASSIGN_OR_RETURN(Node * gathered, Add(Opcode::kAllGather, {local}, attrs));
      // n * ceil(dim / n) elements, the padding all at the end (only trailing tiles are short):
      // slicing to the global size leaves exactly the value. A partial gather (the dim stays
      // tiled, planned only when divisible) is already the target's local size.
      const int64_t want = LocalShape(global, step.after).dim(step.dim);
      if (gathered->shape().dim(step.dim) == want) return gathered;
      std::vector<int64_t> limits = gathered->shape().dims();
      limits[step.dim] = want;
      OpAttributes slice;
      for (int64_t d = 0; d < global.rank(); ++d) slice.slice.push_back({0, limits[d], 1});
      return Add(Opcode::kSlice, {gathered}, slice);
    }
    case ReshardStep::Kind::kReduceScatter: {
      // Pad the dim to a multiple of the group size (zeros add nothing to the sum). The input
      // holds the whole dim, so each device's chunk is then ceil(dim / n): the target's local
      // size, with the padding in the last chunks as the ceil rule has it.
      const int64_t n = static_cast<int64_t>(step.groups[0].size());
      const int64_t size = local->shape().dim(step.dim);
      const int64_t padded = (size + n - 1) / n * n;
      if (padded != size) {
        OpAttributes pad;
        pad.padding.assign(global.rank(), PadDim{});
        pad.padding[step.dim].high = padded - size;
        TESSEL_ASSIGN_OR_RETURN(local,
                                Add(Opcode::kPad, {local, ScalarConstant(global.dtype(), 0)}, pad));
      }
      OpAttributes attrs;
      attrs.replica_groups = step.groups;
      attrs.dimensions = {step.dim};
      attrs.reduce_kind = global.dtype() == DType::kPred ? ReduceKind::kOr : ReduceKind::kAdd;
      return Add(Opcode::kReduceScatter, {local}, attrs);
    }
    case ReshardStep::Kind::kAllToAll:
      return EmitAllToAll(*this, local, step, global);
    case ReshardStep::Kind::kCollectivePermute: {
      OpAttributes attrs;
      attrs.source_target_pairs = step.pairs;
      return Add(Opcode::kCollectivePermute, {local}, attrs);
    }
    case ReshardStep::Kind::kLocalSlice: {
      const Sharding& target = step.target;
      Shape local_target = LocalShape(global, target);
      // Pad dims that are cut here so every device's window lies inside the buffer.
      // dynamic-slice clamps its start into [0, dim - size] (XLA semantics): without the pad,
      // the last tile of an uneven dim would be clamped back and read its neighbour's rows.
      OpAttributes pad;
      bool needs_pad = false;
      std::vector<bool> cut(global.rank(), false);
      for (int64_t d = 0; d < global.rank(); ++d) {
        cut[d] = local->shape().dim(d) != local_target.dim(d);
        int64_t high = 0;
        if (cut[d]) {
          // A dim tiled before holds only the tiles nested in its own (the planner's refinement
          // case); a whole dim holds all of them.
          const int64_t tiles = before.IsTiled() && before.num_tiles(d) > 1
                                    ? target.num_tiles(d) / before.num_tiles(d)
                                    : target.num_tiles(d);
          high = tiles * local_target.dim(d) - local->shape().dim(d);
          needs_pad = needs_pad || high > 0;
        }
        pad.padding.push_back(PadDim{0, high, 0});
      }
      if (needs_pad) {
        Node* zero = ScalarConstant(global.dtype(), 0);
        TESSEL_ASSIGN_OR_RETURN(local, Add(Opcode::kPad, {local, zero}, pad));
      }
      // Dims not cut start at 0: the device already holds exactly its part along them.
      std::vector<Node*> operands = {local};
      Node* zero_index = nullptr;
      for (int64_t d = 0; d < global.rank(); ++d) {
        if (cut[d] && before.IsTiled() && before.num_tiles(d) > 1) {
          // Refinement: the offset inside the device's current tile.
          std::vector<int64_t> offsets(num_devices_, 0);
          const int64_t size = local_target.dim(d);
          const int64_t before_size = LocalShape(global, before).dim(d);
          for (int64_t device = 0; device < num_devices_; ++device) {
            auto t = target.TileIndexOf(device), b = before.TileIndexOf(device);
            if (t && b) offsets[device] = (*t)[d] * size - (*b)[d] * before_size;
          }
          TESSEL_ASSIGN_OR_RETURN(Node * offset, PerDeviceScalar(offsets));
          operands.push_back(offset);
        } else if (cut[d]) {
          TESSEL_ASSIGN_OR_RETURN(Node * offset, TileOffset(target, global, d));
          operands.push_back(offset);
        } else {
          if (zero_index == nullptr) zero_index = ScalarConstant(DType::kS32, 0);
          operands.push_back(zero_index);
        }
      }
      // A scalar has no dim to cut.
      if (global.rank() == 0) return local;
      OpAttributes ds;
      ds.dynamic_slice_sizes = local_target.dims();
      return Add(Opcode::kDynamicSlice, operands, ds);
    }
  }
  return absl::InternalError("unknown reshard step");
}

// Plans are memoized per (from, to, dtype, dims): the bytes depend on the dtype and shape, the
// steps on the shardings and on which dims divide evenly.
absl::StatusOr<const ReshardPlan*> Context::Plan(const PValue& value, const Sharding& to) {
  if (value.global_shape.is_tuple()) {  // rare; not worth a key of its own
    TESSEL_ASSIGN_OR_RETURN(ReshardPlan plan,
                            PlanReshard(value.sharding, to, value.global_shape, num_devices_));
    uncached_plans_.push_back(std::make_unique<const ReshardPlan>(std::move(plan)));
    return uncached_plans_.back().get();
  }
  PlanKey key{value.sharding, to, value.global_shape.dtype(), value.global_shape.dims()};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  TESSEL_ASSIGN_OR_RETURN(ReshardPlan plan,
                          PlanReshard(value.sharding, to, value.global_shape, num_devices_));
  auto inserted =
      plans_.emplace(std::move(key), std::make_unique<const ReshardPlan>(std::move(plan)));
  return inserted.first->second.get();
}

absl::StatusOr<PValue> Context::ReshardValue(const PValue& value, const Sharding& to) {
  TESSEL_ASSIGN_OR_RETURN(const ReshardPlan* plan, Plan(value, to));
  Node* local = value.local;
  Sharding current = value.sharding;
  for (const ReshardStep& step : plan->steps) {
    if (explain_ != nullptr) resharding_ = ReshardReason(value, current, step.after);
    absl::StatusOr<Node*> emitted = EmitStep(local, current, step, value.global_shape);
    resharding_.clear();
    if (!emitted.ok()) return emitted.status();
    local = *emitted;
    current = step.after;
  }
  // An empty plan (equal shardings, or maximal vs replicated) keeps the value's own sharding.
  PValue out;
  out.local = local;
  out.sharding = plan->steps.empty() ? value.sharding : current;
  out.global_shape = value.global_shape;
  return out;
}

// "operand 1 %w2 {from} -> {to}", "result {from} -> {to}", or "%x {from} -> {to}" for a value
// that is neither (a loop state element, a value the rule derived).
std::string Context::ReshardReason(const PValue& value, const Sharding& from,
                                   const Sharding& to) const {
  const std::string move = absl::StrCat(from.ToString(), " -> ", to.ToString());
  auto it = origin_.find(value.local);
  const Node* global = it == origin_.end() ? nullptr : it->second;
  if (global == nullptr) return absl::StrCat("a value the rule derived ", move);
  if (global == current_) return absl::StrCat("result ", move);
  if (current_ != nullptr) {
    for (int64_t i = 0; i < current_->operand_count(); ++i) {
      if (current_->operand(i) == global) {
        return absl::StrCat("operand ", i, " %", global->name(), " ", move);
      }
    }
  }
  return absl::StrCat("%", global->name(), " ", move);
}

absl::StatusOr<Node*> Context::Reshard(const PValue& value, const Sharding& to) {
  TESSEL_ASSIGN_OR_RETURN(PValue out, ReshardValue(value, to));
  return out.local;
}

absl::StatusOr<int64_t> Context::ReshardBytes(const PValue& value, const Sharding& to) {
  TESSEL_ASSIGN_OR_RETURN(const ReshardPlan* plan, Plan(value, to));
  return plan->bytes_per_device;
}

absl::StatusOr<double> Context::ReshardSeconds(const PValue& value, const Sharding& to) {
  TESSEL_ASSIGN_OR_RETURN(const ReshardPlan* plan, Plan(value, to));
  TESSEL_CHECK(cost_ != nullptr);
  double seconds = 0;
  Sharding before = value.sharding;
  for (const ReshardStep& step : plan->steps) {
    // V of the cost model: the full buffer, i.e. the gathered result of an all-gather and the
    // operand of every other collective.
    const int64_t in_bytes = LocalShape(value.global_shape, before).byte_size();
    const int64_t out_bytes = LocalShape(value.global_shape, step.after).byte_size();
    std::vector<int64_t> group;
    Opcode opcode = Opcode::kAllReduce;
    int64_t bytes = in_bytes;
    switch (step.kind) {
      case ReshardStep::Kind::kLocalSlice:
        before = step.after;
        continue;
      case ReshardStep::Kind::kCollectivePermute:
        opcode = Opcode::kCollectivePermute;
        if (!step.pairs.empty()) group = {step.pairs[0].first, step.pairs[0].second};
        break;
      case ReshardStep::Kind::kAllGather:
        opcode = Opcode::kAllGather;
        bytes = out_bytes;
        break;
      case ReshardStep::Kind::kReduceScatter:
        opcode = Opcode::kReduceScatter;
        break;
      case ReshardStep::Kind::kAllToAll:
        opcode = Opcode::kAllToAll;
        break;
      case ReshardStep::Kind::kAllReduce:
        break;
    }
    if (opcode != Opcode::kCollectivePermute) {
      if (step.groups.empty()) {
        for (int64_t d = 0; d < num_devices_; ++d) group.push_back(d);
      } else {
        group = step.groups[0];
      }
    }
    if (!group.empty()) seconds += cost_->CollectiveCost(opcode, group, bytes, group[0]).seconds;
    before = step.after;
  }
  return seconds;
}

double Context::DotSeconds(double flops, DType dtype) const {
  TESSEL_CHECK(cost_ != nullptr);
  return flops / (cost_->PeakFlopsPerSecond(dtype) * cost_->Efficiency(mesh::OpClass::kDot));
}

// Padding content is unspecified (a zero from Split or a pad, or whatever an elementwise op made
// of it, e.g. exp(0) = 1), so it is replaced right before the op that would read it. The mask is
// computed from global indices: iota along the dim plus the device's tile offset, compared with
// the global size; elements of the last tiles at or past it are padding.
absl::StatusOr<Node*> Context::MaskPadding(Node* local, const Sharding& s, const Shape& global,
                                           const std::vector<int64_t>& dims, double fill) {
  Node* valid = nullptr;
  const Shape& local_shape = local->shape();
  Shape index_shape(DType::kS32, local_shape.dims());
  for (int64_t d : dims) {
    int64_t tiles = s.num_tiles(d);
    if (tiles <= 1 || global.dim(d) % tiles == 0) continue;
    OpAttributes iota;
    iota.iota_dimension = d;
    TESSEL_ASSIGN_OR_RETURN(Node * index, Add(Opcode::kIota, index_shape, {}, iota));
    TESSEL_ASSIGN_OR_RETURN(Node * offset, TileOffset(s, global, d));
    TESSEL_ASSIGN_OR_RETURN(Node * offsets, Add(Opcode::kBroadcast, index_shape, {offset}));
    TESSEL_ASSIGN_OR_RETURN(Node * global_index, Add(Opcode::kAdd, {index, offsets}));
    TESSEL_ASSIGN_OR_RETURN(Node * limit, Add(Opcode::kBroadcast, index_shape,
                                              {ScalarConstant(DType::kS32, global.dim(d))}));
    OpAttributes lt;
    lt.comparison_direction = ComparisonDirection::kLt;
    TESSEL_ASSIGN_OR_RETURN(Node * in_range, Add(Opcode::kCompare, {global_index, limit}, lt));
    if (valid == nullptr) {
      valid = in_range;
    } else {
      TESSEL_ASSIGN_OR_RETURN(valid, Add(Opcode::kAnd, {valid, in_range}));
    }
  }
  if (valid == nullptr) return local;
  TESSEL_ASSIGN_OR_RETURN(Node * filler, Add(Opcode::kBroadcast, local_shape,
                                             {ScalarConstant(local_shape.dtype(), fill)}));
  return Add(Opcode::kSelect, {valid, local, filler});
}

}  // namespace tessel::partitioner::internal
