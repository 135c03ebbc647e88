// while and conditional (XLA SpmdPartitioner::HandleWhile / HandleConditional).
//   while: the loop state keeps one sharding for the whole loop (ComputeShardings' fixed point of
//     the body): init elements are resharded to it once, before the loop; the body is
//     partitioned once with its parameter and root in it, so an iteration hands the state on
//     without a collective unless the body itself changes a sharding; the condition sees the same
//     state and returns a replicated pred, so every device takes the same branch of the loop.
//   conditional: the selector (pred or index) is replicated, so every device runs the same
//     branch; branch k is partitioned with operand k+1 as it arrives (no collective before the
//     branch) and its root resharded to the conditional's sharding.
#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

namespace {

// The sharding of each element of a tuple-shaped value: `s`'s elements when it is a tuple
// sharding of the right size, else {replicated} for each.
std::vector<Sharding> ElementShardings(const Shape& shape, const Sharding& s) {
  const size_t n = shape.tuple_shapes().size();
  if (s.IsTuple() && s.tuple_elements().size() == n) return s.tuple_elements();
  return std::vector<Sharding>(n, Sharding::Replicate());
}

// The PValue of a tuple-shaped local `node` whose elements are in `shardings`: one
// get-tuple-element per element, so users downstream pick theirs as from any tuple.
absl::StatusOr<PValue> Unpack(Context& ctx, Node* node, const Shape& global,
                              const std::vector<Sharding>& shardings) {
  PValue out{node, Sharding::Tuple(shardings), global, {}};
  for (size_t i = 0; i < shardings.size(); ++i) {
    OpAttributes gte;
    gte.tuple_index = static_cast<int64_t>(i);
    TESSEL_ASSIGN_OR_RETURN(Node * element, ctx.Add(Opcode::kGetTupleElement, {node}, gte));
    out.elements.push_back(PValue{element, shardings[i], global.tuple_shapes()[i], {}});
  }
  return out;
}

}  // namespace

Shape LocalTupleShape(const Shape& global, const Sharding& s) {
  if (!global.is_tuple()) return LocalShape(global, s);
  std::vector<Sharding> shardings = ElementShardings(global, s);
  std::vector<Shape> elements;
  for (size_t i = 0; i < shardings.size(); ++i) {
    elements.push_back(LocalTupleShape(global.tuple_shapes()[i], shardings[i]));
  }
  return Shape::Tuple(std::move(elements));
}

absl::StatusOr<Node*> Materialize(Context& ctx, const PValue& value) {
  if (value.local != nullptr) return value.local;
  if (!value.global_shape.is_tuple()) {
    return absl::InternalError("an array value without a local node");
  }
  std::vector<Node*> elements;
  for (const PValue& e : value.elements) {
    TESSEL_ASSIGN_OR_RETURN(Node * local, Materialize(ctx, e));
    elements.push_back(local);
  }
  return ctx.Add(Opcode::kTuple, std::move(elements));
}

absl::StatusOr<PValue> HandleWhile(Context& ctx, const Node& node,
                                   const std::vector<PValue>& operands, const Sharding& target) {
  const Shape& global = node.shape();
  const auto& called = node.attrs().called_computations;
  Sharding state = target;
  Node* init = nullptr;
  if (global.is_tuple()) {
    std::vector<Sharding> elements = ElementShardings(global, target);
    state = Sharding::Tuple(elements);
    // The init elements move to the loop state's sharding once, before the first iteration.
    PValue moved = operands[0];
    if (moved.elements.size() != elements.size()) {
      TESSEL_ASSIGN_OR_RETURN(Node * local, Materialize(ctx, moved));
      TESSEL_ASSIGN_OR_RETURN(moved,
                              Unpack(ctx, local, global, ElementShardings(global, moved.sharding)));
    }
    std::vector<Node*> locals;
    for (size_t i = 0; i < elements.size(); ++i) {
      if (global.tuple_shapes()[i].is_tuple()) {
        return absl::UnimplementedError(
            absl::StrCat("%", node.name(), ": a loop state with a nested tuple (element ", i,
                         ") is not "
                         "supported"));
      }
      TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(moved.elements[i], elements[i]));
      locals.push_back(local);
    }
    TESSEL_ASSIGN_OR_RETURN(init, ctx.Add(Opcode::kTuple, std::move(locals)));
  } else {
    TESSEL_ASSIGN_OR_RETURN(init, ctx.Reshard(operands[0], state));
  }
  TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> condition,
                          PartitionCalled(*called[0], ctx.num_devices(), state,
                                          Sharding::Replicate(), ctx.cost_model(), ctx.explain()));
  TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> body,
                          PartitionCalled(*called[1], ctx.num_devices(), state, state,
                                          ctx.cost_model(), ctx.explain()));
  OpAttributes attrs = node.attrs();
  attrs.called_computations = {std::move(condition), std::move(body)};
  TESSEL_ASSIGN_OR_RETURN(Node * loop, ctx.Add(Opcode::kWhile, {init}, std::move(attrs)));
  if (!global.is_tuple()) return PValue{loop, state, global, {}};
  return Unpack(ctx, loop, global, state.tuple_elements());
}

absl::StatusOr<PValue> HandleConditional(Context& ctx, const Node& node,
                                         const std::vector<PValue>& operands,
                                         const Sharding& target) {
  const Shape& global = node.shape();
  const Sharding result =
      global.is_tuple() ? Sharding::Tuple(ElementShardings(global, target)) : target;
  // Every device must run the same branch: the branch bodies hold collectives.
  TESSEL_ASSIGN_OR_RETURN(Node * selector, ctx.Reshard(operands[0], Sharding::Replicate()));
  std::vector<Node*> locals = {selector};
  OpAttributes attrs = node.attrs();
  attrs.called_computations.clear();
  for (size_t k = 0; k + 1 < operands.size(); ++k) {
    const PValue& arg = operands[k + 1];
    Sharding sharding = arg.sharding;
    if (arg.global_shape.is_tuple()) {
      std::vector<Sharding> elements;
      if (arg.elements.empty()) {
        elements = ElementShardings(arg.global_shape, arg.sharding);
      } else {
        for (const PValue& e : arg.elements) elements.push_back(e.sharding);
      }
      sharding = Sharding::Tuple(std::move(elements));
    }
    TESSEL_ASSIGN_OR_RETURN(Node * local, Materialize(ctx, arg));
    locals.push_back(local);
    TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> branch,
                            PartitionCalled(*node.attrs().called_computations[k], ctx.num_devices(),
                                            sharding, result, ctx.cost_model(), ctx.explain()));
    attrs.called_computations.push_back(std::move(branch));
  }
  TESSEL_ASSIGN_OR_RETURN(Node * local,
                          ctx.Add(Opcode::kConditional, std::move(locals), std::move(attrs)));
  if (!global.is_tuple()) return PValue{local, result, global, {}};
  return Unpack(ctx, local, global, result.tuple_elements());
}

}  // namespace tessel::partitioner::internal
