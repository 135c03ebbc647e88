// Runs one op on the single-device executor, for core's op tests:
//
//   std::vector<Literal> out = RunOp(Opcode::kXor, {a, b});
//   EXPECT_THAT(Values<uint32_t>(out[0]), ElementsAre(...));
//
// Test-only: include from *_test.cc files (uses GoogleTest's EXPECT).
#ifndef TESSEL_CORE_TESTING_RUN_OP_H_
#define TESSEL_CORE_TESTING_RUN_OP_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/testing/graphs.h"

namespace tessel {

// Builds a graph with one parameter per input (shapes from the inputs) and one `opcode` node
// over them (its shape inferred, or `declared` for ops whose result shape is an attribute, such
// as convert and bitcast-convert), runs it on the Executor and returns its outputs. A node the
// graph refuses or a failed run is a test failure (EXPECT) and gives an empty vector.
inline std::vector<Literal> RunOp(Opcode opcode, const std::vector<Literal>& inputs,
                                  const OpAttributes& attrs = {},
                                  const std::optional<Shape>& declared = std::nullopt) {
  Graph g("op");
  std::vector<Node*> params;
  for (size_t i = 0; i < inputs.size(); ++i) {
    params.push_back(Must(g.AddParameter(static_cast<int64_t>(i), inputs[i].shape())));
  }
  absl::StatusOr<Node*> node =
      declared ? g.AddNode(opcode, *declared, params, attrs) : g.AddNode(opcode, params, attrs);
  EXPECT_TRUE(node.ok()) << node.status();
  absl::StatusOr<std::vector<Literal>> out = Executor().Run(g, inputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<Literal>{};
}

// The elements of `l` (element type T) as a vector, for EXPECT_THAT / ElementsAre.
template <typename T>
std::vector<T> Values(const Literal& l) {
  absl::Span<const T> d = l.data<T>();
  return std::vector<T>(d.begin(), d.end());
}

}  // namespace tessel

#endif  // TESSEL_CORE_TESTING_RUN_OP_H_
