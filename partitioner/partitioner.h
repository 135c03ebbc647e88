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
// dynamic-slice, dynamic-update-slice), gather / scatter, leaves (parameter, constant, iota,
// rng), control flow (while: loop state in one sharding, body and condition partitioned once;
// conditional: replicated selector, branches partitioned with their operands' shardings).
// Uneven dims are padded to ceil(dim / tiles); padding is masked before reductions and dots
// over a sharded dim. Source: XLA GSPMD (Xu et al., "GSPMD: General and Scalable
// Parallelization for ML Computation Graphs", 2021) and its SpmdPartitioner.
#ifndef TESSEL_PARTITIONER_PARTITIONER_H_
#define TESSEL_PARTITIONER_PARTITIONER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/mesh/cost/cost_model.h"
#include "tessel/partitioner/propagation.h"
#include "tessel/spmd/sharding.h"

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

// How the partitioner costs its choices (the dot strategy today): in seconds, with the one cost
// model of mesh/cost that the simulator also uses: each candidate's collectives on the links
// their replica groups cross, plus the local dot's compute (so a strategy that repeats the
// compute on devices holding the same data pays for it).
// Why the partitioner emitted what it did (`tessel partition --explain`).
struct PartitionExplanation {
  // The entry computation's propagation (ComputeShardings with an explanation).
  ShardingExplanation propagation;
  // One per collective of the program (the entry's and every called computation's), in the order
  // they were emitted.
  struct Collective {
    std::string computation;  // where it is: the entry's or a called computation's name
    std::string instruction;  // the global instruction whose partitioning emitted it
    std::string opcode;       // the global instruction's op ("dot", ...)
    std::string name;         // the collective's name in the per-device program
    std::string kind;         // "all-gather", "all-reduce", ...
    // Why: "operand 1 %w2 {from} -> {to}" (an operand resharded for the op's rule), "result
    // {from} -> {to}" (the op's result moved to its propagated sharding), or "inside the rule"
    // (a collective the op's own rule needs: a reduce's partial results, a halo exchange, ...).
    std::string reason;
    int64_t bytes = 0;   // each device's result buffer
    double seconds = 0;  // the cost model's estimate (mesh::CostModel::CollectiveCost)
  };
  std::vector<Collective> collectives;
  // One per dot: the iteration-space shardings the dot rule weighed and their costs in seconds
  // (resharding both operands, the local dot, moving the result to its target); `chosen`
  // indexes the winner (the first of the cheapest).
  struct DotChoice {
    std::string computation;
    std::string instruction;
    std::vector<std::string> candidates;  // "target", "lhs", "rhs", "merge"
    std::vector<spmd::Sharding> spaces;
    std::vector<double> seconds;
    int64_t chosen = 0;
  };
  std::vector<DotChoice> dots;
};

// The explanation as text: the propagation (FormatShardingExplanation, with `line_of`), then the
// dot strategies with their candidates' costs, then every collective with its reason, bytes and
// seconds.
std::string FormatPartitionExplanation(const Graph& graph,
                                       const std::vector<spmd::Sharding>& shardings,
                                       const PartitionExplanation& explanation,
                                       const absl::flat_hash_map<std::string, int>& line_of = {});

struct PartitionOptions {
  // The topology's model (its devices must be 0..num_devices-1). nullptr: DefaultCostModel.
  const mesh::CostModel* cost_model = nullptr;
  // When set, Partition records why (PartitionExplanation); nothing is recorded otherwise.
  PartitionExplanation* explain = nullptr;
  // When set with `explain`, receives the entry's propagated shardings (for
  // FormatPartitionExplanation).
  std::vector<spmd::Sharding>* shardings = nullptr;
};

// The link model used when no topology is given (`tessel partition` without --topology): one
// slice of `num_devices` TPU v5p chips on a ring with wraparound, 459 TFLOP/s bf16 per chip,
// ICI 800 Gbps per link and direction with 1 us per hop (configs/v5p-128.json's figures, from
// cloud.google.com/tpu/docs/v5p). A documented, fixed choice: results do not depend on the host.
// Errors: kInvalidArgument for num_devices < 1 or above mesh::kMaxDevices.
[[nodiscard]] absl::StatusOr<mesh::CostModel> DefaultCostModel(int64_t num_devices);

// Propagates shardings (partitioner/propagation.h) and partitions `graph` for devices
// 0..num_devices-1. The input graph is not changed.
// Errors: those of ComputeShardings; kUnimplemented naming the instruction for an op without a
// rule (e.g. the entry's tuple-shaped parameters, a loop state with a nested tuple);
// kInvalidArgument for num_devices < 1, or a cost model whose topology has another number of
// devices. Errors inside a called computation name it ("in computation %body: ...").
[[nodiscard]] absl::StatusOr<SpmdProgram> Partition(const Graph& graph, int64_t num_devices,
                                                    const PartitionOptions& options = {});

// The device count a module's shardings imply: the largest device id named by any node's
// sharding (tiled device list or maximal device) + 1, at least 1. Shardings that do not parse
// are skipped (Partition reports them). Used when the caller gives no --num-partitions
// (`tessel propagate` / `partition`, the Python package's propagate / partition / verify).
[[nodiscard]] int64_t InferNumPartitions(const Graph& graph);

// Number of collectives of each kind ("all-reduce", ...) in a program and the bytes of their
// local results (each device's output buffer), for `tessel partition --stats` and tests. Counts
// the program text: a collective in a loop body or a branch counts once, however often it runs
// (CountExecutedCollectives counts executions).
struct CollectiveCount {
  int64_t count = 0;
  int64_t result_bytes = 0;
};
std::map<std::string, CollectiveCount> CountCollectives(const Graph& program);

// The collectives of one while loop of a program, per iteration (body and condition; a nested
// loop's multiplied by its trip count).
struct LoopCollectives {
  std::string loop;                   // the while node's name; "outer/inner" when nested
  std::optional<int64_t> trip_count;  // core/while_loop_analysis.h; nullopt when unknown
  std::map<std::string, CollectiveCount> per_iteration;
};
// Every while loop of `program` (nested ones too) in program order.
std::vector<LoopCollectives> ListLoopCollectives(const Graph& program);

// The collectives one execution of `program` runs: a loop body's times its trip count (once,
// and `unknown_trip_count` set, when the count is unknown), a conditional's branch with the most
// collective bytes (the worst case: which branch runs depends on data). Without control flow it
// equals CountCollectives. Trip counts: core/while_loop_analysis.h.
struct ExecutedCollectives {
  std::map<std::string, CollectiveCount> counts;
  bool unknown_trip_count = false;
};
ExecutedCollectives CountExecutedCollectives(const Graph& program);

}  // namespace tessel::partitioner

#endif  // TESSEL_PARTITIONER_PARTITIONER_H_
