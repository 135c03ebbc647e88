// The partitioner's working state (internal): the local graph being built, the partitioned value
// of each global node, and helpers that emit collectives and per-device lookups.
#ifndef TESSEL_PARTITIONER_INTERNAL_CONTEXT_H_
#define TESSEL_PARTITIONER_INTERNAL_CONTEXT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/mesh/cost/cost_model.h"
#include "tessel/partitioner/reshard.h"
#include "tessel/spmd/sharding.h"

namespace tessel::partitioner {
struct PartitionExplanation;  // partitioner.h
}  // namespace tessel::partitioner

namespace tessel::partitioner::internal {

using spmd::Sharding;

// A partitioned value: the local node and the sharding relating it to the global value.
struct PValue {
  Node* local = nullptr;
  Sharding sharding;
  Shape global_shape;
  // For tuple values: the elements.
  std::vector<PValue> elements;
};

class Context {
 public:
  Context(Graph& local, int64_t num_devices) : local_(local), num_devices_(num_devices) {}

  Graph& local() { return local_; }
  int64_t num_devices() const { return num_devices_; }

  // Adds a local node, shape inferred (or checked against `shape`).
  absl::StatusOr<Node*> Add(Opcode opcode, std::vector<Node*> operands, OpAttributes attrs = {});
  absl::StatusOr<Node*> Add(Opcode opcode, const Shape& shape, std::vector<Node*> operands,
                            OpAttributes attrs = {});
  Node* ScalarConstant(DType dtype, double value);

  // s32[] holding values[device] on each device (constant table indexed by partition-id).
  absl::StatusOr<Node*> PerDeviceScalar(const std::vector<int64_t>& values);
  // The element offset of this device's tile along `dim` under `s`: tile_index * ceil(dim/tiles).
  absl::StatusOr<Node*> TileOffset(const Sharding& s, const Shape& global, int64_t dim);

  // Moves `value` to sharding `to` (PlanReshard, then emits its steps).
  absl::StatusOr<Node*> Reshard(const PValue& value, const Sharding& to);
  absl::StatusOr<PValue> ReshardValue(const PValue& value, const Sharding& to);
  // Bytes each device would receive for that reshard.
  absl::StatusOr<int64_t> ReshardBytes(const PValue& value, const Sharding& to);
  // Seconds that reshard takes: each collective of its plan costed by the cost model on the
  // links its first replica group crosses (mesh::CostModel::CollectiveCost, V = the collective's
  // full buffer), measured on that group's first device; local slices cost nothing.
  absl::StatusOr<double> ReshardSeconds(const PValue& value, const Sharding& to);
  // Seconds of `flops` of a local dot in `dtype` at the device's peak times the dot efficiency.
  double DotSeconds(double flops, DType dtype) const;
  // The cost model (set by Partition before any handler runs).
  void set_cost_model(const mesh::CostModel* cost) { cost_ = cost; }
  const mesh::CostModel* cost_model() const { return cost_; }

  // Explaining (`tessel partition --explain`): collectives added from now on are recorded into
  // `explain` under `computation`'s name; nullptr (the default) records nothing.
  void set_explain(PartitionExplanation* explain, std::string computation) {
    explain_ = explain;
    computation_ = std::move(computation);
  }
  PartitionExplanation* explain() const { return explain_; }
  const std::string& computation() const { return computation_; }
  // The global instruction being partitioned (the driver sets it before each one).
  void set_current(const Node* global) { current_ = global; }
  const Node* current() const { return current_; }
  // Explaining: `local` holds the value of global node `global` (so a reshard of it can say whose
  // value moves).
  void set_origin(const Node* local, const Node* global) {
    if (explain_ != nullptr) origin_[local] = global;
  }

  // Replaces the padding of `local` (a value of `global` under `s`) along `dims` by `fill`, so
  // reductions and dots over those dims ignore it. Dims that divide evenly are left alone.
  absl::StatusOr<Node*> MaskPadding(Node* local, const Sharding& s, const Shape& global,
                                    const std::vector<int64_t>& dims, double fill);

  // all-reduce of `local` over `groups`.
  absl::StatusOr<Node*> AllReduce(Node* local, CollectiveDeviceList groups, ReduceKind kind);
  // GroupsAlongDims(s, dims) (partitioner/sharding_util.h), memoized: one shared list per
  // (sharding, dims) for every collective over them.
  CollectiveDeviceList GroupsAlong(const Sharding& s, const std::vector<int64_t>& dims);

 private:
  // PlanReshard memoized for this partitioning: a model repeats the same (from, to, shape)
  // triples in every layer, and with compact tile assignments the key hashes in O(rank).
  struct PlanKey {
    Sharding from;
    Sharding to;
    DType dtype;
    std::vector<int64_t> dims;
    bool operator==(const PlanKey& o) const {
      return dtype == o.dtype && dims == o.dims && from == o.from && to == o.to;
    }
    template <typename H>
    friend H AbslHashValue(H h, const PlanKey& k) {
      return H::combine(std::move(h), k.from, k.to, k.dtype, k.dims);
    }
  };
  absl::StatusOr<const ReshardPlan*> Plan(const PValue& value, const Sharding& to);

  absl::StatusOr<Node*> EmitStep(Node* local, const Sharding& before, const ReshardStep& step,
                                 const Shape& global);
  absl::StatusOr<Node*> PartitionId();

  Graph& local_;
  int64_t num_devices_;
  const mesh::CostModel* cost_ = nullptr;
  Node* partition_id_ = nullptr;
  // Explaining only (set_explain): where collectives are recorded, the instruction being
  // partitioned, the reshard in progress ("" outside ReshardValue) and local -> global values.
  void NoteCollective(const Node& collective);
  std::string ReshardReason(const PValue& value, const Sharding& from, const Sharding& to) const;
  PartitionExplanation* explain_ = nullptr;
  std::string computation_;
  const Node* current_ = nullptr;
  std::string resharding_;
  absl::flat_hash_map<const Node*, const Node*> origin_;
  // Node-stable storage: pointers into it stay valid as it grows.
  absl::flat_hash_map<PlanKey, std::unique_ptr<const ReshardPlan>> plans_;
  std::vector<std::unique_ptr<const ReshardPlan>> uncached_plans_;
  // TileOffset's nodes, by (sharding, dim, tile size).
  struct OffsetKey {
    Sharding sharding;
    int64_t dim;
    int64_t size;
    bool operator==(const OffsetKey& o) const {
      return dim == o.dim && size == o.size && sharding == o.sharding;
    }
    template <typename H>
    friend H AbslHashValue(H h, const OffsetKey& k) {
      return H::combine(std::move(h), k.sharding, k.dim, k.size);
    }
  };
  absl::flat_hash_map<OffsetKey, Node*> offsets_;
  absl::flat_hash_map<std::pair<Sharding, std::vector<int64_t>>, CollectiveDeviceList> groups_;
};

// Op-family rules. Each returns the partitioned result, in any sharding; the driver reshards it
// to the node's target sharding. `target` is the propagated sharding of `node`.
using Handler = absl::StatusOr<PValue> (*)(Context& ctx, const Node& node,
                                           const std::vector<PValue>& operands,
                                           const Sharding& target);

absl::StatusOr<PValue> HandleElementwise(Context&, const Node&, const std::vector<PValue>&,
                                         const Sharding&);
absl::StatusOr<PValue> HandleBroadcast(Context&, const Node&, const std::vector<PValue>&,
                                       const Sharding&);
absl::StatusOr<PValue> HandleTranspose(Context&, const Node&, const std::vector<PValue>&,
                                       const Sharding&);
absl::StatusOr<PValue> HandleReshape(Context&, const Node&, const std::vector<PValue>&,
                                     const Sharding&);
absl::StatusOr<PValue> HandleDataMovement(Context&, const Node&, const std::vector<PValue>&,
                                          const Sharding&);
// slice, pad, concatenate with the target tiled along a dim they change: the halo-exchange
// result in a layout keeping that tiling when it moves fewer bytes than the all-gather fallback,
// else nullopt (handlers/halo_ops.cc; HandleDataMovement asks it first).
absl::StatusOr<std::optional<PValue>> PartitionWithHalo(Context&, const Node&,
                                                        const std::vector<PValue>&,
                                                        const Sharding&);
// gather: index-parallel, passthrough, else replicate (handlers/gather_scatter.cc).
absl::StatusOr<PValue> HandleGather(Context&, const Node&, const std::vector<PValue>&,
                                    const Sharding&);
// scatter: passthrough, else replicate (handlers/gather_scatter.cc).
absl::StatusOr<PValue> HandleScatter(Context&, const Node&, const std::vector<PValue>&,
                                     const Sharding&);
absl::StatusOr<PValue> HandleReduce(Context&, const Node&, const std::vector<PValue>&,
                                    const Sharding&);
// sort, topk: the sorted dim all-gathered, the other dims keep operand 0's tiling
// (handlers/sort.cc).
absl::StatusOr<PValue> HandleSort(Context&, const Node&, const std::vector<PValue>&,
                                  const Sharding&);
absl::StatusOr<PValue> HandleDot(Context&, const Node&, const std::vector<PValue>&,
                                 const Sharding&);
// convolution (batch, output feature, input feature, grouped), reduce-window,
// select-and-scatter (trivial window dims keep their tiling), reverse (reversed dims whole);
// windowed dims through PartitionSpatialDimsByReplicating (handlers/windowed.cc).
absl::StatusOr<PValue> HandleConvolution(Context&, const Node&, const std::vector<PValue>&,
                                         const Sharding&);
absl::StatusOr<PValue> HandleReduceWindow(Context&, const Node&, const std::vector<PValue>&,
                                          const Sharding&);
absl::StatusOr<PValue> HandleSelectAndScatter(Context&, const Node&, const std::vector<PValue>&,
                                              const Sharding&);
absl::StatusOr<PValue> HandleReverse(Context&, const Node&, const std::vector<PValue>&,
                                     const Sharding&);
absl::StatusOr<PValue> HandleConstant(Context&, const Node&, const std::vector<PValue>&,
                                      const Sharding&);
absl::StatusOr<PValue> HandleIota(Context&, const Node&, const std::vector<PValue>&,
                                  const Sharding&);
absl::StatusOr<PValue> HandleRng(Context&, const Node&, const std::vector<PValue>&,
                                 const Sharding&);
// while: the loop state in `target` (a tuple sharding, the fixed point ComputeShardings found),
// body and condition partitioned once (handlers/control_flow.cc).
absl::StatusOr<PValue> HandleWhile(Context&, const Node&, const std::vector<PValue>&,
                                   const Sharding&);
// conditional: selector replicated, each branch partitioned with its operand's sharding
// (handlers/control_flow.cc).
absl::StatusOr<PValue> HandleConditional(Context&, const Node&, const std::vector<PValue>&,
                                         const Sharding&);

// The per-device graph of called computation `computation` (global shapes) on `num_devices`
// devices: its parameter 0 holds `parameter` (a tuple sharding for a tuple parameter) and its
// root is resharded to `root`; choices are costed with `cost` (the caller's cost model). Defined
// by the driver (partitioner.cc), which runs the same rules over the computation's nodes.
// Errors: those of Partition, naming the computation.
// With `explain`, its collectives and dot choices are recorded there (PartitionExplanation).
absl::StatusOr<std::shared_ptr<const Graph>> PartitionCalled(
    const Graph& computation, int64_t num_devices, const Sharding& parameter, const Sharding& root,
    const mesh::CostModel* cost, PartitionExplanation* explain = nullptr);

// The local node of `value`: its own, or (a tuple whose elements travel as PValues) a local
// tuple of its elements' nodes. Errors: kUnimplemented for an element without a local node.
absl::StatusOr<Node*> Materialize(Context& ctx, const PValue& value);
// Local shape of `global` under `s`, element by element for a tuple (`s` a tuple sharding).
Shape LocalTupleShape(const Shape& global, const Sharding& s);

}  // namespace tessel::partitioner::internal

#endif  // TESSEL_PARTITIONER_INTERNAL_CONTEXT_H_
