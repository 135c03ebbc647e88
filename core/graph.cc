#include "tessel/core/graph.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/status_macros.h"

namespace tessel {

namespace {

struct OpcodeInfo {
  Opcode opcode;
  const char* name;
};

constexpr OpcodeInfo kOpcodes[] = {
    {Opcode::kParameter, "parameter"},
    {Opcode::kConstant, "constant"},
    {Opcode::kIota, "iota"},
    {Opcode::kRng, "rng"},
    {Opcode::kAbs, "abs"},
    {Opcode::kNegate, "negate"},
    {Opcode::kExp, "exponential"},
    {Opcode::kLog, "log"},
    {Opcode::kTanh, "tanh"},
    {Opcode::kLogistic, "logistic"},
    {Opcode::kSqrt, "sqrt"},
    {Opcode::kRsqrt, "rsqrt"},
    {Opcode::kSine, "sine"},
    {Opcode::kCosine, "cosine"},
    {Opcode::kErf, "erf"},
    {Opcode::kIsFinite, "is-finite"},
    {Opcode::kPopcnt, "popcnt"},
    {Opcode::kNot, "not"},
    {Opcode::kCopy, "copy"},
    {Opcode::kConvert, "convert"},
    {Opcode::kBitcastConvert, "bitcast-convert"},
    {Opcode::kReducePrecision, "reduce-precision"},
    {Opcode::kAdd, "add"},
    {Opcode::kSubtract, "subtract"},
    {Opcode::kMultiply, "multiply"},
    {Opcode::kDivide, "divide"},
    {Opcode::kMaximum, "maximum"},
    {Opcode::kMinimum, "minimum"},
    {Opcode::kPower, "power"},
    {Opcode::kAnd, "and"},
    {Opcode::kOr, "or"},
    {Opcode::kXor, "xor"},
    {Opcode::kShiftLeft, "shift-left"},
    {Opcode::kShiftRightLogical, "shift-right-logical"},
    {Opcode::kShiftRightArithmetic, "shift-right-arithmetic"},
    {Opcode::kRemainder, "remainder"},
    {Opcode::kAtan2, "atan2"},
    {Opcode::kCompare, "compare"},
    {Opcode::kSelect, "select"},
    {Opcode::kClamp, "clamp"},
    {Opcode::kBroadcast, "broadcast"},
    {Opcode::kReshape, "reshape"},
    {Opcode::kTranspose, "transpose"},
    {Opcode::kSlice, "slice"},
    {Opcode::kPad, "pad"},
    {Opcode::kConcatenate, "concatenate"},
    {Opcode::kDynamicSlice, "dynamic-slice"},
    {Opcode::kDynamicUpdateSlice, "dynamic-update-slice"},
    {Opcode::kGather, "gather"},
    {Opcode::kScatter, "scatter"},
    {Opcode::kReverse, "reverse"},
    {Opcode::kReduce, "reduce"},
    {Opcode::kDot, "dot"},
    {Opcode::kConvolution, "convolution"},
    {Opcode::kReduceWindow, "reduce-window"},
    {Opcode::kSelectAndScatter, "select-and-scatter"},
    {Opcode::kSort, "sort"},
    {Opcode::kTopK, "topk"},
    {Opcode::kTuple, "tuple"},
    {Opcode::kGetTupleElement, "get-tuple-element"},
    {Opcode::kWhile, "while"},
    {Opcode::kConditional, "conditional"},
    {Opcode::kPartitionId, "partition-id"},
    {Opcode::kAllReduce, "all-reduce"},
    {Opcode::kAllGather, "all-gather"},
    {Opcode::kReduceScatter, "reduce-scatter"},
    {Opcode::kAllToAll, "all-to-all"},
    {Opcode::kCollectivePermute, "collective-permute"},
    {Opcode::kCustomCall, "custom-call"},
};

}  // namespace

const std::string& OpcodeName(Opcode opcode) {
  static const std::vector<std::string>* const kNames = [] {
    auto* names = new std::vector<std::string>(std::size(kOpcodes));
    for (const OpcodeInfo& info : kOpcodes) (*names)[static_cast<int>(info.opcode)] = info.name;
    return names;
  }();
  return (*kNames)[static_cast<int>(opcode)];
}

absl::StatusOr<Opcode> ParseOpcode(std::string_view name) {
  for (const OpcodeInfo& info : kOpcodes) {
    if (name == info.name) return info.opcode;
  }
  return absl::UnimplementedError(absl::StrCat("unsupported op \"", std::string(name), "\""));
}

bool IsCollective(Opcode opcode) {
  return opcode >= Opcode::kAllReduce && opcode <= Opcode::kCollectivePermute;
}

bool IsElementwise(Opcode opcode) { return opcode >= Opcode::kAbs && opcode <= Opcode::kClamp; }

const std::string& ComparisonDirectionName(ComparisonDirection d) {
  static const std::string* const kNames = new std::string[6]{"EQ", "NE", "LT", "LE", "GT", "GE"};
  return kNames[static_cast<int>(d)];
}

const std::string& ReduceKindName(ReduceKind k) {
  static const std::string* const kNames =
      new std::string[6]{"add", "multiply", "maximum", "minimum", "and", "or"};
  return kNames[static_cast<int>(k)];
}

Graph::Graph(std::string name) : name_(std::move(name)) {}

std::string Graph::UniqueName(std::string name, Opcode opcode) {
  if (name.empty()) name = absl::StrCat(OpcodeName(opcode), ".", storage_.size());
  if (!by_name_.contains(name)) return name;
  for (int64_t suffix = 1;; ++suffix) {
    std::string candidate = absl::StrCat(name, ".", suffix);
    if (!by_name_.contains(candidate)) return candidate;
  }
}

Node* Graph::AddNodeUnchecked(Opcode opcode, const Shape& shape, std::vector<Node*> operands,
                              OpAttributes attrs, std::string name) {
  auto node = std::unique_ptr<Node>(new Node());
  node->id_ = static_cast<int64_t>(storage_.size());
  node->name_ = UniqueName(std::move(name), opcode);
  node->opcode_ = opcode;
  node->shape_ = shape;
  node->operands_ = std::move(operands);
  node->attrs_ = std::move(attrs);
  Node* raw = node.get();
  for (Node* operand : raw->operands_) {
    TESSEL_CHECK(operand != nullptr);
    operand->users_.push_back(raw);
  }
  by_name_[raw->name_] = raw;
  if (opcode == Opcode::kParameter) parameter_by_number_.emplace(raw->attrs_.parameter_number, raw);
  storage_.push_back(std::move(node));
  order_.push_back(raw);
  return raw;
}

absl::StatusOr<Node*> Graph::AddNode(Opcode opcode, std::vector<Node*> operands, OpAttributes attrs,
                                     std::string name) {
  std::vector<const Shape*> shapes;
  for (Node* operand : operands) shapes.push_back(&operand->shape());
  TESSEL_ASSIGN_OR_RETURN(Shape shape, InferShape(opcode, shapes, attrs, std::nullopt));
  return AddNodeUnchecked(opcode, shape, std::move(operands), std::move(attrs), std::move(name));
}

absl::StatusOr<Node*> Graph::AddNode(Opcode opcode, const Shape& shape, std::vector<Node*> operands,
                                     OpAttributes attrs, std::string name) {
  std::vector<const Shape*> shapes;
  for (Node* operand : operands) shapes.push_back(&operand->shape());
  TESSEL_ASSIGN_OR_RETURN(Shape checked, InferShape(opcode, shapes, attrs, shape));
  return AddNodeUnchecked(opcode, checked, std::move(operands), std::move(attrs), std::move(name));
}

absl::StatusOr<Node*> Graph::AddParameter(int64_t number, const Shape& shape, std::string name) {
  auto taken = parameter_by_number_.find(number);
  if (taken != parameter_by_number_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter number ", number, " is already taken by %", taken->second->name()));
  }
  OpAttributes attrs;
  attrs.parameter_number = number;
  return AddNodeUnchecked(Opcode::kParameter, shape, {}, std::move(attrs), std::move(name));
}

Node* Graph::AddConstant(Literal literal, std::string name) {
  Shape shape = literal.shape();
  OpAttributes attrs;
  attrs.literal = std::make_shared<const Literal>(std::move(literal));
  return AddNodeUnchecked(Opcode::kConstant, shape, {}, std::move(attrs), std::move(name));
}

std::vector<Node*> Graph::parameters() const {
  std::vector<Node*> params;
  for (Node* node : order_) {
    if (node->opcode() == Opcode::kParameter) params.push_back(node);
  }
  std::sort(params.begin(), params.end(), [](Node* a, Node* b) {
    return a->attrs().parameter_number < b->attrs().parameter_number;
  });
  return params;
}

Node* Graph::FindNode(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

}  // namespace tessel
