#include "tessel/core/verifier.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/testing/graphs.h"

namespace tessel {
namespace {

void ExpectInvalid(const absl::Status& status, const std::string& needle) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(needle), absl::string_view::npos)
      << "message: " << status.message() << "\nmissing: " << needle;
}

TEST(VerifierTest, AcceptsWellFormedGraph) {
  Graph g("m");
  Node* a = Must(g.AddParameter(0, Shape(DType::kF32, {8, 16}), "a"));
  Node* b = Must(g.AddParameter(1, Shape(DType::kF32, {16, 4}), "b"));
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  Node* d = Must(g.AddNode(Opcode::kDot, {a, b}, dot, "d"));
  Node* c = g.AddConstant(Literal::Scalar<float>(2), "c");
  OpAttributes bcast;
  Node* cb = Must(g.AddNode(Opcode::kBroadcast, Shape(DType::kF32, {8, 4}), {c}, bcast, "cb"));
  g.set_root(Must(g.AddNode(Opcode::kMultiply, {d, cb}, {}, "out")));
  EXPECT_TRUE(Verify(g).ok()) << Verify(g);
}

TEST(VerifierTest, RejectsEmptyGraph) {
  Graph g("m");
  ExpectInvalid(Verify(g), "no root");
}

TEST(VerifierTest, RejectsShapeThatDisagreesWithInference) {
  Graph g("m");
  Node* a = Must(g.AddParameter(0, Shape(DType::kF32, {8}), "a"));
  Node* b = Must(g.AddParameter(1, Shape(DType::kF32, {9}), "b"));
  g.AddNodeUnchecked(Opcode::kAdd, Shape(DType::kF32, {8}), {a, b}, {}, "bad_add");
  ExpectInvalid(Verify(g), "%bad_add");
  ExpectInvalid(Verify(g), "f32[8] vs f32[9]");
}

TEST(VerifierTest, RejectsWrongDeclaredShape) {
  Graph g("m");
  Node* a = Must(g.AddParameter(0, Shape(DType::kF32, {8}), "a"));
  g.AddNodeUnchecked(Opcode::kNegate, Shape(DType::kF32, {7}), {a}, {}, "neg");
  ExpectInvalid(Verify(g), "%neg");
}

TEST(VerifierTest, RejectsWrongOperandCount) {
  Graph g("m");
  Node* a = Must(g.AddParameter(0, Shape(DType::kF32, {8}), "a"));
  g.AddNodeUnchecked(Opcode::kAdd, Shape(DType::kF32, {8}), {a}, {}, "half_add");
  ExpectInvalid(Verify(g), "%half_add");
}

TEST(VerifierTest, RejectsOperandFromAnotherGraph) {
  Graph other("other");
  Node* foreign = Must(other.AddParameter(0, Shape(DType::kF32, {8}), "foreign"));
  Graph g("m");
  Must(g.AddParameter(0, Shape(DType::kF32, {8}), "a"));
  g.AddNodeUnchecked(Opcode::kNegate, Shape(DType::kF32, {8}), {foreign}, {}, "neg");
  ExpectInvalid(Verify(g), "%neg");
  ExpectInvalid(Verify(g), "%foreign");
}

TEST(VerifierTest, RejectsRootFromAnotherGraph) {
  Graph other("other");
  Node* foreign = Must(other.AddParameter(0, Shape(DType::kF32, {8}), "foreign"));
  Graph g("m");
  Must(g.AddParameter(0, Shape(DType::kF32, {8}), "a"));
  g.set_root(foreign);
  ExpectInvalid(Verify(g), "%foreign");
}

TEST(VerifierTest, RejectsSparseParameterNumbers) {
  Graph g("m");
  Must(g.AddParameter(0, Shape(DType::kF32, {8}), "a"));
  Must(g.AddParameter(2, Shape(DType::kF32, {8}), "c"));
  ExpectInvalid(Verify(g), "%c");
  ExpectInvalid(Verify(g), "parameter number 2");
}

TEST(VerifierTest, RejectsDuplicateParameterNumbers) {
  Graph g("m");
  Must(g.AddParameter(0, Shape(DType::kF32, {8}), "a"));
  OpAttributes attrs;
  attrs.parameter_number = 0;
  g.AddNodeUnchecked(Opcode::kParameter, Shape(DType::kF32, {8}), {}, attrs, "b");
  ExpectInvalid(Verify(g), "%b");
}

TEST(VerifierTest, RejectsNegativeParameterNumber) {
  Graph g("m");
  OpAttributes attrs;
  attrs.parameter_number = -1;
  g.AddNodeUnchecked(Opcode::kParameter, Shape(DType::kF32, {8}), {}, attrs, "p");
  ExpectInvalid(Verify(g), "%p");
}

TEST(VerifierTest, RejectsConstantWithoutLiteral) {
  Graph g("m");
  g.AddNodeUnchecked(Opcode::kConstant, Shape(DType::kF32, {}), {}, {}, "c");
  ExpectInvalid(Verify(g), "%c");
}

TEST(VerifierTest, RejectsConstantOfOtherShape) {
  Graph g("m");
  OpAttributes attrs;
  attrs.literal = std::make_shared<const Literal>(Literal::FromVector<float>({2}, {1, 2}));
  g.AddNodeUnchecked(Opcode::kConstant, Shape(DType::kF32, {3}), {}, attrs, "c");
  ExpectInvalid(Verify(g), "%c");
  ExpectInvalid(Verify(g), "f32[2]");
}

TEST(VerifierTest, RejectsBadAttributes) {
  Graph g("m");
  Node* a = Must(g.AddParameter(0, Shape(DType::kF32, {4, 6}), "a"));
  OpAttributes tr;
  tr.dimensions = {0, 0};
  g.AddNodeUnchecked(Opcode::kTranspose, Shape(DType::kF32, {4, 4}), {a}, tr, "tr");
  ExpectInvalid(Verify(g), "%tr");
}

}  // namespace
}  // namespace tessel
