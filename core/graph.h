// The graph IR: a computation of nodes whose ops follow XLA HLO names and semantics.
//
// A `Graph` corresponds to an XLA HloModule's entry computation: nodes are kept in insertion
// order, which is always a topological order (operands are added before users), and one node is
// the root (the result; a `tuple` root returns several values). `while` and `conditional` nodes
// own the computations they call (OpAttributes::called_computations), each a Graph of its own
// with its parameters and root; `call`s are inlined by the parser.
//
//   Graph g("mlp");
//   Node* x = g.AddParameter(0, Shape(DType::kF32, {8, 784}), "x").value();
//   Node* w = g.AddParameter(1, Shape(DType::kF32, {784, 512}), "w").value();
//   OpAttributes dot;
//   dot.dot.lhs_contracting_dims = {1};
//   dot.dot.rhs_contracting_dims = {0};
//   Node* y = g.AddNode(Opcode::kDot, {x, w}, dot).value();   // f32[8,512], shape inferred
//   g.set_root(y);
//
// Every node may carry a sharding string (XLA `HloSharding` text such as
// "{devices=[2,1]0,1}"), kept opaque here; spmd/ gives it meaning.
// The text form (HLO text) lives in core/hlo_text.h, checks in core/verifier.h and shape rules
// in core/shape_inference.h. Source: XLA HloInstruction / HloComputation (operation semantics at
// https://openxla.org/xla/operation_semantics).
#ifndef TESSEL_CORE_GRAPH_H_
#define TESSEL_CORE_GRAPH_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/collective_device_list.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"

namespace tessel {

// HLO opcodes supported by Tessel. OpcodeName() gives XLA's spelling ("dynamic-slice").
enum class Opcode : uint8_t {
  // Leaves.
  kParameter,  // parameter(N): input N of the graph
  kConstant,   // constant({...}): a literal
  kIota,       // iota(), iota_dimension=D: element value = its index along D
  kRng,        // rng(a, b), distribution=rng_uniform|rng_normal, rng_seed=S (see OpAttributes)
  // Elementwise unary (shape of the operand).
  kAbs,
  kNegate,
  kExp,
  kLog,
  kTanh,
  kLogistic,
  kSqrt,
  kRsqrt,
  kSine,
  kCosine,
  kErf,       // Gauss error function (floating types)
  kIsFinite,  // is-finite(x): pred, true unless x is an infinity or NaN
  kPopcnt,    // popcnt(x): number of set bits (integer types)
  kNot,
  kCopy,
  kConvert,  // element type from the node's shape; XLA convert semantics
  // bitcast-convert(x): the bits of each element reread as the node's element type, which must
  // have the operand's bit width (XLA's width-changing form, which adds or drops a minor dim,
  // is rejected by shape inference). Not differentiable.
  kBitcastConvert,
  // reduce-precision(x), exponent_bits=E, mantissa_bits=M: each floating value rounded (to
  // nearest even) to a float with E exponent and M mantissa bits, kept in x's type.
  kReducePrecision,
  // Elementwise binary (operands of identical shape).
  kAdd,
  kSubtract,
  kMultiply,
  kDivide,
  kMaximum,
  kMinimum,
  kPower,
  kAnd,
  kOr,
  kXor,                   // pred or integer
  kShiftLeft,             // integers; a shift by >= the bit width (or negative) gives 0
  kShiftRightLogical,     // integers; zeros shifted in; a shift by >= the width gives 0
  kShiftRightArithmetic,  // integers; sign bits shifted in; >= the width gives 0 or -1
  kRemainder,             // x - y * trunc(x / y): sign of x (C fmod / %); integer x % 0 == x
  kAtan2,                 // atan2(y, x), floating types
  kCompare,               // direction=EQ|NE|LT|LE|GT|GE; result pred
  // Elementwise ternary.
  kSelect,  // select(pred p, a, b): p ? a : b
  kClamp,   // clamp(min, x, max); min and max may be scalars
  // Shape ops.
  kBroadcast,           // dimensions={...}: operand dim i becomes output dim dimensions[i]
  kReshape,             // same element count, row-major order
  kTranspose,           // dimensions={...}: output dim i is operand dim dimensions[i]
  kSlice,               // slice={[start:limit:stride], ...}
  kPad,                 // pad(x, value), padding=low_high_interior per dim, "x"-separated
  kConcatenate,         // dimensions={d}
  kDynamicSlice,        // dynamic-slice(x, s0, s1, ...), dynamic_slice_sizes={...}
  kDynamicUpdateSlice,  // dynamic-update-slice(x, update, s0, s1, ...)
  kGather,              // gather(operand, indices), GatherDimensionNumbers (see OpAttributes)
  kScatter,             // scatter(operand, indices, updates), ScatterDimensionNumbers, to_apply
  kReverse,             // reverse(x), dimensions={...}: index i of each listed dim reads n-1-i
  // Reductions and contractions.
  kReduce,  // reduce(x, init), dimensions={...}, to_apply=<add|multiply|maximum|minimum|and|or>
  kDot,     // lhs_batch_dims, lhs_contracting_dims, rhs_batch_dims, rhs_contracting_dims
  // Windowed ops (core/window.h): `window` and, for convolution, ConvolutionDimensionNumbers.
  kConvolution,       // convolution(lhs, rhs), window, dim_labels, feature/batch_group_count
  kReduceWindow,      // reduce-window(x, init), window, to_apply=<reduce kind>
  kSelectAndScatter,  // select-and-scatter(x, source, init), window, select=<GE|GT..>, scatter
  // Sorting.
  kSort,  // sort(k, v...), dimensions={d}, is_stable, to_apply=<ascending|descending on k>
  kTopK,  // topk(x), k=K, largest=true|false -> (values, s32 indices) along the last dim
  // Tuples.
  kTuple,
  kGetTupleElement,  // index=N
  // Control flow: nodes that own called computations (OpAttributes::called_computations).
  kWhile,        // while(init), condition=%c, body=%b: loop state of init's shape
  kConditional,  // conditional(pred, t, f) or conditional(s32 index, a0, ...): one branch runs
  // SPMD: emitted by the partitioner into per-device programs. Replica groups hold global
  // device ids (XLA's use_global_device_ids=true); every device runs the same program.
  kPartitionId,        // partition-id(): s32[] id of the executing device (XLA: u32[])
  kAllReduce,          // all-reduce(x), replica_groups={{...}}, to_apply=<reduce kind>
  kAllGather,          // all-gather(x), replica_groups, dimensions={d}: concat in group order
  kReduceScatter,      // reduce-scatter(x), replica_groups, dimensions={d}, to_apply
  kAllToAll,           // all-to-all(x), replica_groups, dimensions={d}: split d, concat on d
  kCollectivePermute,  // collective-permute(x), source_target_pairs={{0,1},...}
  // SPMD manual regions (JAX shard_map, torch_xla enable_manual_sharding): XLA's custom-calls
  // that enter and leave a region written per device. Only the targets kFullToShardShapeTarget
  // and kShardToFullShapeTarget exist (attrs.custom_call_target); the partitioner gives them
  // meaning (partitioner/partitioner.h), the executor runs them only on one device.
  kCustomCall,  // custom-call(x), custom_call_target="SPMDFullToShardShape", sharding={manual}
};

// custom-call targets of Opcode::kCustomCall. Source: XLA spmd_partitioner.cc
// (kSPMDFullToShardShape, kSPMDShardToFullShape). FullToShard: global shape in, one device's
// (padded) shard out, the operand's sharding saying how it is split; ShardToFull: one device's
// shard in, the global value out, the node's own sharding saying how the shards are laid out.
inline constexpr std::string_view kFullToShardShapeTarget = "SPMDFullToShardShape";
inline constexpr std::string_view kShardToFullShapeTarget = "SPMDShardToFullShape";

// True for the collective opcodes above (not partition-id).
[[nodiscard]] bool IsCollective(Opcode opcode);

// XLA's text name of `opcode`, e.g. "get-tuple-element".
[[nodiscard]] const std::string& OpcodeName(Opcode opcode);
// Parses an XLA opcode name. Errors: kUnimplemented naming the op if Tessel has no such op.
[[nodiscard]] absl::StatusOr<Opcode> ParseOpcode(std::string_view name);
// Unary and binary elementwise ops, compare, select, clamp, convert, copy.
[[nodiscard]] bool IsElementwise(Opcode opcode);

// `compare` directions, XLA's ComparisonDirection.
enum class ComparisonDirection : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
[[nodiscard]] const std::string& ComparisonDirectionName(ComparisonDirection d);  // "LT"

// The binary computation a `reduce` applies (its `to_apply`). Tessel recognises the six
// computations XLA emits for these reductions; other to_apply bodies are kUnimplemented.
enum class ReduceKind : uint8_t { kAdd, kMultiply, kMaximum, kMinimum, kAnd, kOr };
[[nodiscard]] const std::string& ReduceKindName(ReduceKind k);  // "add", "maximum", ...

// `rng` distributions, XLA's RandomDistribution: operands (low, high) for uniform [low, high),
// (mu, sigma) for normal.
enum class RngDistribution : uint8_t { kUniform, kNormal };

// XLA DotDimensionNumbers. Output dims: batch dims, then lhs free dims, then rhs free dims.
struct DotDimensionNumbers {
  std::vector<int64_t> lhs_batch_dims;
  std::vector<int64_t> rhs_batch_dims;
  std::vector<int64_t> lhs_contracting_dims;
  std::vector<int64_t> rhs_contracting_dims;
  bool operator==(const DotDimensionNumbers&) const = default;
};

// One dim of a slice: elements start, start+stride, ... < limit.
struct SliceDim {
  int64_t start = 0;
  int64_t limit = 0;
  int64_t stride = 1;
  bool operator==(const SliceDim&) const = default;
};

// One dim of a pad: `low`/`high` elements added before/after (negative removes), `interior`
// elements between each pair of operand elements. Source: XLA PaddingConfig.
struct PadDim {
  int64_t low = 0;
  int64_t high = 0;
  int64_t interior = 0;
  bool operator==(const PadDim&) const = default;
};

// XLA GatherDimensionNumbers plus the slice sizes (XLA keeps those beside them). Source: XLA
// operation semantics, "Gather"; xla::ShapeInference::InferGatherShape.
//
// `indices` holds one start-index vector per batch position; the vector lies along
// `index_vector_dim` (== indices rank means an implicit trailing dim of size 1). Component k of a
// vector is the start of operand dim `start_index_map[k]`, clamped so that the slice
// [start, start + slice_sizes[d]) stays inside the operand. Operand dims in
// `operand_batching_dims[i]` take the batch position's index along indices dim
// `start_indices_batching_dims[i]` (slice size 1). Output dims: `offset_dims` (sorted) hold the
// slice dims that are neither collapsed nor batching, in operand order; the other output dims are
// the indices' batch dims (all but index_vector_dim), in order.
// Example (embedding lookup): operand f32[128,16], indices s32[8,16,1], offset_dims={2},
// collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,16}
// -> f32[8,16,16].
struct GatherDimensionNumbers {
  std::vector<int64_t> offset_dims;
  std::vector<int64_t> collapsed_slice_dims;
  std::vector<int64_t> start_index_map;
  std::vector<int64_t> operand_batching_dims;
  std::vector<int64_t> start_indices_batching_dims;
  int64_t index_vector_dim = 0;
  std::vector<int64_t> slice_sizes;
  bool indices_are_sorted = false;  // a hint; read and printed, never relied on
  bool operator==(const GatherDimensionNumbers&) const = default;
};

// XLA ScatterDimensionNumbers. Source: XLA operation semantics, "Scatter";
// xla::ShapeInference::InferScatterShape. The result has the operand's shape. The update dims
// not in `update_window_dims` are the scatter (batch) dims and match the indices' dims other than
// `index_vector_dim`, in order; the window dims map, in order, to the operand dims not in
// `inserted_window_dims` or `input_batching_dims`. Index vector component k is the window's start
// in operand dim `scatter_dims_to_operand_dims[k]`; operand dim `input_batching_dims[i]` takes the
// scatter position's index along indices dim `scatter_indices_batching_dims[i]`.
// `indices_are_sorted` and `unique_indices` are hints, read and printed, never relied on.
struct ScatterDimensionNumbers {
  std::vector<int64_t> update_window_dims;
  std::vector<int64_t> inserted_window_dims;
  std::vector<int64_t> scatter_dims_to_operand_dims;
  std::vector<int64_t> input_batching_dims;
  std::vector<int64_t> scatter_indices_batching_dims;
  int64_t index_vector_dim = 0;
  bool indices_are_sorted = false;
  bool unique_indices = false;
  bool operator==(const ScatterDimensionNumbers&) const = default;
};

// One dim of an XLA Window (xla::WindowDimension). Positions of the padded, base-dilated
// operand that the window covers for output index o: o * stride - padding_low + k *
// window_dilation for k in [0, size) (reversed when window_reversal). Text (core/window.h):
// `window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=1x1 rhs_reversal=0x0}`,
// defaults omitted. Source: xla/xla_data.proto Window, xla/window_util.cc.
struct WindowDim {
  int64_t size = 1;
  int64_t stride = 1;
  int64_t padding_low = 0;
  int64_t padding_high = 0;
  int64_t window_dilation = 1;   // rhs_dilate: holes between window elements
  int64_t base_dilation = 1;     // lhs_dilate: holes between operand elements
  bool window_reversal = false;  // rhs_reversal
  bool operator==(const WindowDim&) const = default;
};

// XLA ConvolutionDimensionNumbers. Text: `dim_labels=b01f_01io->b01f` (lhs: b batch, f
// feature; rhs: i input feature, o output feature; output: b, f; digits k: spatial dim k).
// Spatial dim k of lhs, rhs and output corresponds to window dim k.
// Source: xla/xla_data.proto ConvolutionDimensionNumbers.
struct ConvolutionDimensionNumbers {
  int64_t input_batch_dimension = 0;
  int64_t input_feature_dimension = 0;
  std::vector<int64_t> input_spatial_dimensions;
  int64_t kernel_input_feature_dimension = 0;
  int64_t kernel_output_feature_dimension = 0;
  std::vector<int64_t> kernel_spatial_dimensions;
  int64_t output_batch_dimension = 0;
  int64_t output_feature_dimension = 0;
  std::vector<int64_t> output_spatial_dimensions;
  bool operator==(const ConvolutionDimensionNumbers&) const = default;
};
class Graph;

// The attributes of a node; which fields matter depends on the opcode (see Opcode).
struct OpAttributes {
  // broadcast, transpose, reduce, concatenate (one entry) dims.
  std::vector<int64_t> dimensions;
  std::vector<SliceDim> slice;               // slice
  std::vector<PadDim> padding;               // pad
  DotDimensionNumbers dot;                   // dot
  std::vector<int64_t> dynamic_slice_sizes;  // dynamic-slice
  GatherDimensionNumbers gather;             // gather
  ScatterDimensionNumbers scatter;           // scatter
  std::vector<WindowDim> window;             // convolution, reduce-window, select-and-scatter
  ConvolutionDimensionNumbers convolution;   // convolution
  int64_t feature_group_count = 1;           // convolution
  int64_t batch_group_count = 1;             // convolution
  // scatter: true when to_apply returns its second parameter (the update replaces the operand
  // element, XLA's scatter-overwrite); otherwise the update is combined with `reduce_kind`.
  bool scatter_overwrite = false;
  // compare; select-and-scatter: its `select` computation is compare(param0, param1) with this
  // direction (GE picks the first maximum of a window, GT the last).
  ComparisonDirection comparison_direction = ComparisonDirection::kEq;
  // reduce, scatter, reduce-window; select-and-scatter's `scatter` computation.
  ReduceKind reduce_kind = ReduceKind::kAdd;
  RngDistribution rng_distribution = RngDistribution::kUniform;  // rng
  // rng: the counter-based generator's key. Element i (row-major global index) of an rng node
  // depends only on (rng_seed, i). Text: `rng_seed=S` (a Tessel extension; XLA keeps the seed
  // in the module config).
  uint64_t rng_seed = 0;
  int64_t parameter_number = 0;            // parameter
  int64_t iota_dimension = 0;              // iota
  int64_t exponent_bits = 0;               // reduce-precision
  int64_t mantissa_bits = 0;               // reduce-precision
  int64_t tuple_index = 0;                 // get-tuple-element
  std::shared_ptr<const Literal> literal;  // constant
  // Collectives: groups of global device ids; the reduction of all-reduce and reduce-scatter is
  // `reduce_kind`, their dim `dimensions[0]`.
  CollectiveDeviceList replica_groups;
  // collective-permute: (source device, target device) pairs. A device that is no target
  // receives zeros, as in XLA.
  std::vector<std::pair<int64_t, int64_t>> source_target_pairs;
  // while: {condition, body}; conditional: the branches in XLA's branch_computations order (the
  // predicated form is {true_computation, false_computation}). Each is a graph of its own with
  // one parameter per value passed in and a root; shared, so copying attributes (and the
  // partitioner reusing one body for several loops) never copies a graph. Source: XLA
  // HloInstruction::called_computations().
  std::vector<std::shared_ptr<const Graph>> called_computations;
  // while: the trip count XLA's WhileLoopTripCountAnnotator wrote in
  // `backend_config={"known_trip_count":{"n":"N"}}`, or -1 when the text has none.
  int64_t known_trip_count = -1;
  // Collectives: XLA's channel_id (0 when absent) and use_global_device_ids, read and printed.
  // Tessel programs have one replica and N partitions, so replica_groups are global device ids
  // in every mode XLA defines for them (cross-replica groups of one replica never occur in JAX's
  // manual regions, which always set channel_id).
  int64_t channel_id = 0;
  bool use_global_device_ids = false;
  // sort: the comparator recognised in to_apply (descending: GT on operand 0, else LT), and
  // is_stable (read and printed; Tessel's sort is always stable).
  bool sort_descending = false;
  bool is_stable = false;
  // topk: k and largest.
  int64_t topk_k = 0;
  bool topk_largest = true;
  // custom-call: its custom_call_target (kFullToShardShapeTarget or kShardToFullShapeTarget).
  std::string custom_call_target;
};

// One instruction. Owned by its Graph; pointers stay valid for the Graph's lifetime.
class Node {
 public:
  int64_t id() const { return id_; }
  // Unique within the graph, without the leading '%'.
  const std::string& name() const { return name_; }
  Opcode opcode() const { return opcode_; }
  const Shape& shape() const { return shape_; }
  const std::vector<Node*>& operands() const { return operands_; }
  Node* operand(int64_t i) const { return operands_[i]; }
  int64_t operand_count() const { return static_cast<int64_t>(operands_.size()); }
  // Nodes that use this one, in insertion order (a user appears once per use).
  const std::vector<Node*>& users() const { return users_; }
  const OpAttributes& attrs() const { return attrs_; }
  OpAttributes& mutable_attrs() { return attrs_; }
  // XLA HloSharding text ("{replicated}", "{devices=[2,1]0,1}") or empty when unannotated.
  const std::string& sharding() const { return sharding_; }
  void set_sharding(std::string sharding) { sharding_ = std::move(sharding); }
  // Convenience: the literal of a constant. Precondition: opcode() == kConstant.
  const Literal& literal() const { return *attrs_.literal; }

 private:
  friend class Graph;
  Node() = default;

  int64_t id_ = 0;
  std::string name_;
  Opcode opcode_ = Opcode::kParameter;
  Shape shape_;
  std::vector<Node*> operands_;
  std::vector<Node*> users_;
  OpAttributes attrs_;
  std::string sharding_;
};

class Graph {
 public:
  // `name` is the HloModule name printed in the text form.
  explicit Graph(std::string name = "module");
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Adds a node whose shape is inferred from the operands and attributes (ops whose shape is
  // not determined by them: parameter, iota, rng, reshape, broadcast, convert, need the
  // overload with `shape`). `name` defaults to "<opcode>.<id>"; a taken name gets a ".N" suffix.
  // Errors: kInvalidArgument from shape inference (naming the op and the offending operand or
  // attribute), e.g. a dot whose contracting dims differ in size.
  [[nodiscard]] absl::StatusOr<Node*> AddNode(Opcode opcode, std::vector<Node*> operands,
                                              OpAttributes attrs = {}, std::string name = "");
  // Adds a node with an explicit result `shape`, checked against shape inference.
  [[nodiscard]] absl::StatusOr<Node*> AddNode(Opcode opcode, const Shape& shape,
                                              std::vector<Node*> operands, OpAttributes attrs = {},
                                              std::string name = "");
  // Adds a node without checking its shape (the parser uses this and then runs the verifier).
  // Precondition: every operand belongs to this graph.
  Node* AddNodeUnchecked(Opcode opcode, const Shape& shape, std::vector<Node*> operands,
                         OpAttributes attrs, std::string name = "");

  // Shorthands for leaves. Errors: kInvalidArgument if parameter `number` is already taken.
  [[nodiscard]] absl::StatusOr<Node*> AddParameter(int64_t number, const Shape& shape,
                                                   std::string name = "");
  Node* AddConstant(Literal literal, std::string name = "");

  // All nodes in topological (insertion) order.
  const std::vector<Node*>& nodes() const { return order_; }
  int64_t num_nodes() const { return static_cast<int64_t>(order_.size()); }
  // Parameters sorted by parameter number.
  std::vector<Node*> parameters() const;
  // The node with `name`, or nullptr.
  Node* FindNode(std::string_view name) const;

  // The result. Defaults to the last node added.
  Node* root() const {
    return root_ != nullptr ? root_ : (order_.empty() ? nullptr : order_.back());
  }
  void set_root(Node* root) { root_ = root; }

 private:
  std::string UniqueName(std::string name, Opcode opcode);

  std::string name_;
  std::vector<std::unique_ptr<Node>> storage_;
  std::vector<Node*> order_;
  Node* root_ = nullptr;
  absl::flat_hash_map<std::string, Node*> by_name_;
  absl::flat_hash_map<int64_t, Node*> parameter_by_number_;
};

}  // namespace tessel

#endif  // TESSEL_CORE_GRAPH_H_
