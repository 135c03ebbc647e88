#include "tessel/core/while_loop_analysis.h"

#include <cmath>

namespace tessel {
namespace {

// The integer value of a scalar integer constant node, or nullopt.
std::optional<int64_t> IntConstant(const Node* node) {
  if (node->opcode() != Opcode::kConstant || node->shape().is_tuple() ||
      node->shape().rank() != 0) {
    return std::nullopt;
  }
  const DType dtype = node->shape().dtype();
  if (!IsInteger(dtype)) return std::nullopt;
  return static_cast<int64_t>(node->literal().GetAsDouble(0));
}

// k when `node` is get-tuple-element(parameter(0), k) of its computation.
std::optional<int64_t> StateElement(const Node* node) {
  if (node->opcode() != Opcode::kGetTupleElement) return std::nullopt;
  const Node* tuple = node->operand(0);
  if (tuple->opcode() != Opcode::kParameter || tuple->attrs().parameter_number != 0) {
    return std::nullopt;
  }
  return node->attrs().tuple_index;
}

// The direction that compares (constant, x) as (x, constant).
ComparisonDirection Mirror(ComparisonDirection d) {
  switch (d) {
    case ComparisonDirection::kLt:
      return ComparisonDirection::kGt;
    case ComparisonDirection::kLe:
      return ComparisonDirection::kGe;
    case ComparisonDirection::kGt:
      return ComparisonDirection::kLt;
    case ComparisonDirection::kGe:
      return ComparisonDirection::kLe;
    default:
      return d;
  }
}

bool Holds(ComparisonDirection d, int64_t x, int64_t bound) {
  switch (d) {
    case ComparisonDirection::kLt:
      return x < bound;
    case ComparisonDirection::kLe:
      return x <= bound;
    case ComparisonDirection::kGt:
      return x > bound;
    case ComparisonDirection::kGe:
      return x >= bound;
    case ComparisonDirection::kNe:
      return x != bound;
    case ComparisonDirection::kEq:
      return x == bound;
  }
  return false;
}

}  // namespace

std::optional<int64_t> ComputeWhileLoopTripCount(const Node& loop) {
  const OpAttributes& attrs = loop.attrs();
  if (attrs.known_trip_count >= 0) return attrs.known_trip_count;
  if (attrs.called_computations.size() != 2) return std::nullopt;
  const Graph& condition = *attrs.called_computations[0];
  const Graph& body = *attrs.called_computations[1];
  const Node* init = loop.operand(0);
  const Node* compare = condition.root();
  if (init->opcode() != Opcode::kTuple || compare->opcode() != Opcode::kCompare) {
    return std::nullopt;
  }
  // compare(gte(param, k), bound) or compare(bound, gte(param, k)).
  ComparisonDirection direction = compare->attrs().comparison_direction;
  std::optional<int64_t> k = StateElement(compare->operand(0));
  std::optional<int64_t> bound = IntConstant(compare->operand(1));
  if (!k.has_value()) {
    k = StateElement(compare->operand(1));
    bound = IntConstant(compare->operand(0));
    direction = Mirror(direction);
  }
  if (!k.has_value() || !bound.has_value() || *k >= init->operand_count()) return std::nullopt;
  std::optional<int64_t> start = IntConstant(init->operand(*k));
  // The body's root sets element k to add(gte(param, k), step).
  const Node* root = body.root();
  if (!start.has_value() || root->opcode() != Opcode::kTuple || *k >= root->operand_count()) {
    return std::nullopt;
  }
  const Node* next = root->operand(*k);
  if (next->opcode() != Opcode::kAdd) return std::nullopt;
  std::optional<int64_t> step;
  for (int i = 0; i < 2; ++i) {
    if (StateElement(next->operand(i)) == k) step = IntConstant(next->operand(1 - i));
  }
  if (!step.has_value()) return std::nullopt;
  if (!Holds(direction, *start, *bound)) return 0;
  // Closed forms for the ordered comparisons; NE needs the step to land on the bound.
  const int64_t distance = *bound - *start;
  switch (direction) {
    case ComparisonDirection::kLt:
      if (*step <= 0) return std::nullopt;
      return (distance + *step - 1) / *step;
    case ComparisonDirection::kLe:
      if (*step <= 0) return std::nullopt;
      return distance / *step + 1;
    case ComparisonDirection::kGt:
      if (*step >= 0) return std::nullopt;
      return (-distance + -*step - 1) / -*step;
    case ComparisonDirection::kGe:
      if (*step >= 0) return std::nullopt;
      return -distance / -*step + 1;
    case ComparisonDirection::kNe:
      if (*step == 0 || distance % *step != 0 || distance / *step < 0) return std::nullopt;
      return distance / *step;
    case ComparisonDirection::kEq:
      // Holds once (start == bound); the next value differs unless the step is 0.
      if (*step == 0) return std::nullopt;
      return 1;
  }
  return std::nullopt;
}

}  // namespace tessel
