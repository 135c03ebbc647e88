// SPMD partitioning: turns a global graph with shardings into one per-device program.
//
//   Graph g = ...;                      // global shapes; some nodes carry sharding={...}
//   TESSEL_ASSIGN_OR_RETURN(SpmdProgram p, Partition(g, /*num_devices=*/8));
//   PrintHloModule(*p.program);         // local shapes, all-reduce / all-gather / ... inserted
//
// Every device runs `program` (SPMD): its parameters take the device's shards of the global
// inputs (spmd::ShardedTensor::Split with `parameters[i].sharding`), and its outputs are the
// device's shards of the results (assemble with ShardedTensor::Assemble). Collectives name
// replica groups in global device ids; ops that depend on the device's position read
// `partition-id` and look up per-device constants, as XLA's SpmdPartitioner does.
//
// Rules per op family live in partitioner/handlers/ (see docs/partitioner.md): elementwise,
// broadcast, transpose, reshape, reduce, dot, data movement (slice, pad, concatenate,
// dynamic-slice, dynamic-update-slice), leaves (parameter, constant, iota, rng).
// Uneven dims are padded to ceil(dim / tiles); padding is masked before reductions and dots
// over a sharded dim. Source: XLA GSPMD (Xu et al., "GSPMD: General and Scalable
// Parallelization for ML Computation Graphs", 2021) and its SpmdPartitioner.
#ifndef TESSEL_PARTITIONER_PARTITIONER_H_
#define TESSEL_PARTITIONER_PARTITIONER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/graph.h"
#include "spmd/sharding.h"

namespace tessel::partitioner {

// A global value of the program: its global shape and how devices hold it.
struct ShardedValue {
  Shape global_shape;
  spmd::Sharding sharding;
};

struct SpmdProgram {
  // The per-device program (local shapes). Parameters keep their global sharding as text.
  std::unique_ptr<Graph> program;
  int64_t num_devices = 1;
  // By parameter number.
  std::vector<ShardedValue> parameters;
  // The root's value, or each element of a tuple root.
  std::vector<ShardedValue> outputs;
};

// Propagates shardings (partitioner/propagation.h) and partitions `graph` for devices
// 0..num_devices-1. The input graph is not changed.
// Errors: those of ComputeShardings; kUnimplemented naming the instruction for an op without a
// rule (e.g. tuple-shaped parameters); kInvalidArgument for num_devices < 1.
[[nodiscard]] absl::StatusOr<SpmdProgram> Partition(const Graph& graph, int64_t num_devices);

// The device count a module's shardings imply: the largest device id named by any node's
// sharding (tiled device list or maximal device) + 1, at least 1. Shardings that do not parse
// are skipped (Partition reports them). Used when the caller gives no --num-partitions
// (`tessel propagate` / `partition`, the Python package's propagate / partition / verify).
[[nodiscard]] int64_t InferNumPartitions(const Graph& graph);

// Number of collectives of each kind ("all-reduce", ...) in a program and the bytes of their
// local results (each device's output buffer), for `tessel partition --stats` and tests.
struct CollectiveCount {
  int64_t count = 0;
  int64_t result_bytes = 0;
};
std::map<std::string, CollectiveCount> CountCollectives(const Graph& program);

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_PARTITIONER_H_
