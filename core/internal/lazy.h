// Internal representation behind tessel::Tensor (core/tensor.h): the lazy IR DAG.
//
// A LazyNode is one recorded op (or a device-data leaf); a TensorImpl is the value a Tensor
// handle refers to, pointing at the node that currently produces it. Sync replaces that node by
// a data leaf. Not part of the public API.
#ifndef TESSEL_CORE_INTERNAL_LAZY_H_
#define TESSEL_CORE_INTERNAL_LAZY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"

namespace tessel::internal_lazy {

struct LazyNode {
  Opcode opcode = Opcode::kParameter;
  Shape shape;
  OpAttributes attrs;
  std::vector<std::shared_ptr<LazyNode>> operands;
  // Set for device-data leaves (opcode kParameter): the value (LiteralData for host data and
  // the local client; a client's own type otherwise).
  std::shared_ptr<const DeviceData> data;
  // Set for shape-only inputs (Tensor::Placeholder, opcode kParameter): a graph input that has
  // no value; TraceGraph makes it a parameter, Sync refuses to run a graph that reads it.
  bool placeholder = false;
  // XLA HloSharding text, "" when none.
  std::string sharding;
};

struct TensorImpl {
  std::shared_ptr<LazyNode> node;
  absl::Status status;
  // Creation order on this thread; Sync lowers pending tensors in this order.
  uint64_t id = 0;
};

// Wraps `node` in a new tensor value registered with this thread's lazy context.
std::shared_ptr<TensorImpl> MakeImpl(std::shared_ptr<LazyNode> node);

}  // namespace tessel::internal_lazy

#endif  // TESSEL_CORE_INTERNAL_LAZY_H_
