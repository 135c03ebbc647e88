#include "tessel/core/hlo_text.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/collective_device_list.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/testing/graphs.h"
#include "tessel/core/window.h"

namespace tessel {
namespace {

// Builds a graph that uses every opcode, every dtype in constants, and shardings.
std::unique_ptr<Graph> BuildAllOpsGraph() {
  auto g = std::make_unique<Graph>("all_ops");
  const Shape f32_4x6(DType::kF32, {4, 6});
  Node* x = Must(g->AddParameter(0, f32_4x6, "x"));
  x->set_sharding("{devices=[2,1]0,1}");
  Node* y = Must(g->AddParameter(1, f32_4x6, "y"));
  Node* p = Must(g->AddParameter(2, Shape(DType::kPred, {4, 6}), "p"));
  Node* lo = Must(g->AddParameter(3, Shape(DType::kF32, {}), "lo"));
  lo->set_sharding("{maximal device=0}");
  Node* hi = Must(g->AddParameter(4, Shape(DType::kF32, {}), "hi"));
  Node* tup = Must(
      g->AddParameter(5, Shape::Tuple({Shape(DType::kF32, {2}), Shape(DType::kS32, {})}), "tup"));
  tup->set_sharding("{{replicated}, {replicated}}");
  Node* i0 = Must(g->AddParameter(6, Shape(DType::kS32, {}), "i0"));
  Node* batch = Must(g->AddParameter(7, Shape(DType::kBF16, {2, 3, 4}), "batch"));
  Node* w = Must(g->AddParameter(8, Shape(DType::kBF16, {2, 4, 5}), "w"));

  std::vector<Node*> outs;
  auto keep = [&](Node* n) {
    outs.push_back(n);
    return n;
  };

  // Constants of every dtype.
  keep(g->AddConstant(Literal::FromVector<bool>({2}, {true, false}), "c_pred"));
  keep(g->AddConstant(Literal::FromVector<uint8_t>({3}, {0, 7, 255}), "c_u8"));
  keep(g->AddConstant(Literal::FromVector<uint32_t>({2}, {0, 4294967295u}), "c_u32"));
  keep(g->AddConstant(Literal::FromVector<uint64_t>({2}, {0, 18446744073709551615ull}), "c_u64"));
  keep(g->AddConstant(Literal::FromVector<int32_t>({2, 2}, {-1, 2, -2147483647 - 1, 2147483647}),
                      "c_s32"));
  keep(g->AddConstant(
      Literal::FromVector<int64_t>({2}, {std::numeric_limits<int64_t>::min(), 1234567890123456789}),
      "c_s64"));
  keep(g->AddConstant(Literal::FromVector<bf16>({3}, {bf16(1.5f), bf16(-0.1f), bf16(3e38f)}),
                      "c_bf16"));
  keep(g->AddConstant(Literal::FromVector<f16>({2}, {f16(0.1f), f16(-65504.0f)}), "c_f16"));
  keep(g->AddConstant(Literal::FromVector<float>(
                          {2, 3}, {0.1f, -2.5f, 1e-30f, std::numeric_limits<float>::infinity(),
                                   -std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()}),
                      "c_f32"));
  keep(g->AddConstant(Literal::FromVector<double>({1, 1, 2}, {0.1, 1e300}), "c_f64"));
  keep(g->AddConstant(Literal::Scalar<float>(3.25f), "c_scalar"));
  keep(g->AddConstant(Literal(Shape(DType::kF32, {0, 3})), "c_empty"));
  std::vector<Literal> elements;
  elements.push_back(Literal::FromVector<float>({2}, {1, 2}));
  elements.push_back(Literal::Scalar<int32_t>(7));
  keep(g->AddConstant(Literal::Tuple(std::move(elements)), "c_tuple"));

  // Leaves.
  OpAttributes iota;
  iota.iota_dimension = 1;
  keep(Must(g->AddNode(Opcode::kIota, Shape(DType::kS32, {4, 6}), {}, iota, "iota")));
  OpAttributes rng;
  rng.rng_distribution = RngDistribution::kUniform;
  rng.rng_seed = 42;
  keep(Must(g->AddNode(Opcode::kRng, f32_4x6, {lo, hi}, rng, "rng_u")));
  rng.rng_distribution = RngDistribution::kNormal;
  rng.rng_seed = std::numeric_limits<uint64_t>::max();
  keep(Must(g->AddNode(Opcode::kRng, f32_4x6, {lo, hi}, rng, "rng_n")));

  // Elementwise.
  for (Opcode op :
       {Opcode::kAbs, Opcode::kNegate, Opcode::kExp, Opcode::kLog, Opcode::kTanh, Opcode::kLogistic,
        Opcode::kSqrt, Opcode::kRsqrt, Opcode::kSine, Opcode::kCosine, Opcode::kCopy}) {
    keep(Must(g->AddNode(op, {x})));
  }
  keep(Must(g->AddNode(Opcode::kNot, {p})));
  keep(Must(g->AddNode(Opcode::kConvert, Shape(DType::kS32, {4, 6}), {x}, {}, "to_s32")));
  keep(Must(g->AddNode(Opcode::kConvert, Shape(DType::kBF16, {4, 6}), {x}, {}, "to_bf16")));
  Node* bits = keep(
      Must(g->AddNode(Opcode::kBitcastConvert, Shape(DType::kU32, {4, 6}), {x}, {}, "bits_u32")));
  keep(Must(g->AddNode(Opcode::kConvert, Shape(DType::kU64, {4, 6}), {bits}, {}, "to_u64")));
  OpAttributes rp;
  rp.exponent_bits = 5;
  rp.mantissa_bits = 10;
  keep(Must(g->AddNode(Opcode::kReducePrecision, {x}, rp, "to_f16_precision")));
  for (Opcode op : {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide,
                    Opcode::kMaximum, Opcode::kMinimum, Opcode::kPower}) {
    keep(Must(g->AddNode(op, {x, y})));
  }
  keep(Must(g->AddNode(Opcode::kAnd, {p, p})));
  keep(Must(g->AddNode(Opcode::kOr, {p, p})));
  for (ComparisonDirection d :
       {ComparisonDirection::kEq, ComparisonDirection::kNe, ComparisonDirection::kLt,
        ComparisonDirection::kLe, ComparisonDirection::kGt, ComparisonDirection::kGe}) {
    OpAttributes cmp;
    cmp.comparison_direction = d;
    keep(Must(g->AddNode(Opcode::kCompare, {x, y}, cmp)));
  }
  keep(Must(g->AddNode(Opcode::kSelect, {p, x, y}, {}, "select")));
  keep(Must(g->AddNode(Opcode::kClamp, {lo, x, hi}, {}, "clamp")));

  // Shape ops.
  OpAttributes bcast;
  bcast.dimensions = {};
  keep(Must(g->AddNode(Opcode::kBroadcast, Shape(DType::kF32, {2, 3}), {lo}, bcast, "bcast0")));
  Node* row = keep(Must(g->AddNode(Opcode::kReshape, Shape(DType::kF32, {24}), {x}, {}, "flat")));
  bcast.dimensions = {1};
  Node* six =
      keep(Must(g->AddNode(Opcode::kBroadcast, Shape(DType::kF32, {6}), {lo}, {}, "six_src")));
  keep(Must(g->AddNode(Opcode::kBroadcast, f32_4x6, {six}, bcast, "bcast1")));
  (void)row;
  OpAttributes tr;
  tr.dimensions = {1, 0};
  keep(Must(g->AddNode(Opcode::kTranspose, {x}, tr, "tr")));
  OpAttributes slice;
  slice.slice = {{0, 4, 1}, {1, 6, 2}};
  keep(Must(g->AddNode(Opcode::kSlice, {x}, slice, "slice")));
  OpAttributes pad;
  pad.padding = {{0, 1, 0}, {-1, 2, 1}};
  keep(Must(g->AddNode(Opcode::kPad, {x, lo}, pad, "pad")));
  keep(Must(g->AddNode(Opcode::kPad, {lo, hi}, {}, "pad_scalar")));
  OpAttributes cat;
  cat.dimensions = {0};
  keep(Must(g->AddNode(Opcode::kConcatenate, {x, y, x}, cat, "cat")));
  OpAttributes ds;
  ds.dynamic_slice_sizes = {2, 4};
  Node* piece = keep(Must(g->AddNode(Opcode::kDynamicSlice, {x, i0, i0}, ds, "ds")));
  keep(Must(g->AddNode(Opcode::kDynamicUpdateSlice, {x, piece, i0, i0}, {}, "dus")));
  // Gather and scatter: an embedding-style lookup and its scatter-add, and a batched
  // one-element-per-row gather with the matching scatter-overwrite.
  Node* rows = g->AddConstant(Literal::FromVector<int32_t>({3, 1}, {0, 2, 1}), "rows");
  OpAttributes gather;
  gather.gather.offset_dims = {1};
  gather.gather.collapsed_slice_dims = {0};
  gather.gather.start_index_map = {0};
  gather.gather.index_vector_dim = 1;
  gather.gather.slice_sizes = {1, 6};
  Node* looked_up = keep(Must(g->AddNode(Opcode::kGather, {x, rows}, gather, "gather")));
  Node* cols = g->AddConstant(Literal::FromVector<int64_t>({4}, {5, 0, 3, 1}), "cols");
  OpAttributes batched;
  batched.gather.collapsed_slice_dims = {1};
  batched.gather.start_index_map = {1};
  batched.gather.operand_batching_dims = {0};
  batched.gather.start_indices_batching_dims = {0};
  batched.gather.index_vector_dim = 1;
  batched.gather.slice_sizes = {1, 1};
  batched.gather.indices_are_sorted = true;
  Node* picked = keep(Must(g->AddNode(Opcode::kGather, {x, cols}, batched, "gather_batched")));
  OpAttributes scatter;
  scatter.scatter = GatherAsScatter(gather.gather);
  keep(Must(g->AddNode(Opcode::kScatter, {x, rows, looked_up}, scatter, "scatter_add")));
  OpAttributes overwrite;
  overwrite.scatter = GatherAsScatter(batched.gather);
  overwrite.scatter.unique_indices = true;
  overwrite.scatter_overwrite = true;
  keep(Must(g->AddNode(Opcode::kScatter, {x, cols, picked}, overwrite, "scatter_overwrite")));

  // Windowed ops and reverse.
  OpAttributes reverse;
  reverse.dimensions = {1};
  keep(Must(g->AddNode(Opcode::kReverse, {x}, reverse, "reverse")));
  OpAttributes pool;
  pool.window = ParseWindow("size=2x2 stride=2x2 pad=0_0x1_1").value();
  pool.reduce_kind = ReduceKind::kMaximum;
  Node* pooled = keep(Must(g->AddNode(Opcode::kReduceWindow, {x, lo}, pool, "max_pool")));
  OpAttributes unpool = pool;
  unpool.reduce_kind = ReduceKind::kAdd;
  unpool.comparison_direction = ComparisonDirection::kGt;
  keep(Must(g->AddNode(Opcode::kSelectAndScatter, {x, pooled, lo}, unpool, "unpool")));
  OpAttributes conv;
  conv.window = ParseWindow("size=2 stride=2 pad=1_0 lhs_dilate=2 rhs_dilate=1").value();
  conv.convolution = ParseDimLabels("b0f_0io->b0f").value();
  keep(Must(g->AddNode(Opcode::kConvolution, {batch, w}, conv, "conv")));
  OpAttributes grouped;
  grouped.convolution = ParseDimLabels("bf_oi->bf").value();
  grouped.feature_group_count = 2;
  OpAttributes half;
  half.slice = {SliceDim{0, 4, 1}, SliceDim{0, 3, 1}};
  Node* kernel = Must(g->AddNode(Opcode::kSlice, {y}, half, "kernel"));
  keep(Must(g->AddNode(Opcode::kConvolution, {x, kernel}, grouped, "conv_grouped")));

  // Reductions and contractions.
  const std::pair<ReduceKind, Node*> reduces[] = {{ReduceKind::kAdd, x},
                                                  {ReduceKind::kMultiply, x},
                                                  {ReduceKind::kMaximum, x},
                                                  {ReduceKind::kMinimum, x}};
  for (const auto& [kind, operand] : reduces) {
    OpAttributes r;
    r.dimensions = {1};
    r.reduce_kind = kind;
    keep(Must(g->AddNode(Opcode::kReduce, {operand, lo}, r)));
  }
  Node* t = g->AddConstant(Literal::Scalar<bool>(true), "t");
  for (ReduceKind kind : {ReduceKind::kAnd, ReduceKind::kOr}) {
    OpAttributes r;
    r.dimensions = {0, 1};
    r.reduce_kind = kind;
    keep(Must(g->AddNode(Opcode::kReduce, {p, t}, r)));
  }
  OpAttributes dot;
  dot.dot.lhs_batch_dims = {0};
  dot.dot.rhs_batch_dims = {0};
  dot.dot.lhs_contracting_dims = {2};
  dot.dot.rhs_contracting_dims = {1};
  Node* bmm = keep(Must(g->AddNode(Opcode::kDot, {batch, w}, dot, "bmm")));
  bmm->set_sharding("{devices=[2,1,1]0,1}");
  keep(Must(g->AddNode(Opcode::kDot, {lo, hi}, {}, "outer")));

  // SPMD ops.
  keep(Must(g->AddNode(Opcode::kPartitionId, {}, {}, "pid")));
  OpAttributes ar;
  ar.replica_groups = {{0, 1}, {2, 3}};
  ar.reduce_kind = ReduceKind::kAdd;
  keep(Must(g->AddNode(Opcode::kAllReduce, {x}, ar, "ar")));
  ar.reduce_kind = ReduceKind::kOr;
  keep(Must(g->AddNode(Opcode::kAllReduce, {p}, ar, "ar_or")));
  OpAttributes ag;
  ag.replica_groups = {{0, 1}};
  ag.dimensions = {0};
  keep(Must(g->AddNode(Opcode::kAllGather, {x}, ag, "ag")));
  OpAttributes rs;
  rs.replica_groups = {{0, 1, 2}};
  rs.dimensions = {1};
  rs.reduce_kind = ReduceKind::kMaximum;
  keep(Must(g->AddNode(Opcode::kReduceScatter, {x}, rs, "rs")));
  OpAttributes a2a;
  a2a.replica_groups = {{0, 1}, {2, 3}};
  a2a.dimensions = {0};
  keep(Must(g->AddNode(Opcode::kAllToAll, {x}, a2a, "a2a")));
  OpAttributes cp;
  cp.source_target_pairs = {{0, 1}, {1, 2}, {2, 0}};
  keep(Must(g->AddNode(Opcode::kCollectivePermute, {x}, cp, "cp")));
  keep(Must(g->AddNode(Opcode::kCollectivePermute, {x}, {}, "cp_empty")));

  // The small ops of issue 17: bit ops, remainder, atan2, erf, is-finite, popcnt, sort, topk.
  Node* ints = Must(g->AddParameter(9, Shape(DType::kS32, {4, 6}), "ints"));
  for (Opcode op : {Opcode::kErf, Opcode::kIsFinite}) keep(Must(g->AddNode(op, {x})));
  keep(Must(g->AddNode(Opcode::kPopcnt, {ints})));
  for (Opcode op : {Opcode::kXor, Opcode::kShiftLeft, Opcode::kShiftRightLogical,
                    Opcode::kShiftRightArithmetic, Opcode::kRemainder}) {
    keep(Must(g->AddNode(op, {ints, ints})));
  }
  keep(Must(g->AddNode(Opcode::kRemainder, {x, y})));
  keep(Must(g->AddNode(Opcode::kAtan2, {x, y})));
  OpAttributes sort;
  sort.dimensions = {1};
  sort.is_stable = true;
  keep(Must(g->AddNode(Opcode::kSort, {x}, sort, "sort_up")));
  sort.sort_descending = true;
  sort.is_stable = false;
  Node* sorted = Must(g->AddNode(Opcode::kSort, {x, ints}, sort, "sort_down"));
  OpAttributes first;
  keep(Must(g->AddNode(Opcode::kGetTupleElement, {sorted}, first)));
  OpAttributes topk;
  topk.topk_k = 2;
  topk.topk_largest = false;
  Node* top = Must(g->AddNode(Opcode::kTopK, {y}, topk, "top"));
  keep(Must(g->AddNode(Opcode::kGetTupleElement, {top}, first)));
  // A manual region's boundaries.
  OpAttributes to_shard;
  to_shard.custom_call_target = std::string(kFullToShardShapeTarget);
  Node* shard = Must(g->AddNode(Opcode::kCustomCall, Shape(DType::kF32, {2, 6}), {x}, to_shard));
  shard->set_sharding("{manual}");
  OpAttributes to_full;
  to_full.custom_call_target = std::string(kShardToFullShapeTarget);
  Node* full = Must(g->AddNode(Opcode::kCustomCall, Shape(DType::kF32, {4, 6}), {shard}, to_full));
  full->set_sharding("{devices=[2,1]0,1}");
  keep(full);

  // Tuples.
  OpAttributes gte;
  gte.tuple_index = 1;
  keep(Must(g->AddNode(Opcode::kGetTupleElement, {tup}, gte, "gte")));

  // Control flow: a while over `tup` (negate element 0, count element 1 up to 3) and an indexed
  // conditional choosing between negate and exponential of a f32[4,6].
  const Shape state = tup->shape();
  auto condition = std::make_shared<Graph>("loop_cond");
  {
    Node* s = Must(condition->AddParameter(0, state, "s"));
    Node* i = Must(condition->AddNode(Opcode::kGetTupleElement, {s}, gte, "i"));
    Node* n = condition->AddConstant(Literal::Scalar<int32_t>(3), "n");
    OpAttributes lt;
    lt.comparison_direction = ComparisonDirection::kLt;
    condition->set_root(Must(condition->AddNode(Opcode::kCompare, {i, n}, lt, "lt")));
  }
  auto body = std::make_shared<Graph>("loop_body");
  {
    Node* s = Must(body->AddParameter(0, state, "s"));
    OpAttributes first;
    Node* v = Must(body->AddNode(Opcode::kGetTupleElement, {s}, first, "v"));
    Node* i = Must(body->AddNode(Opcode::kGetTupleElement, {s}, gte, "i"));
    Node* one = body->AddConstant(Literal::Scalar<int32_t>(1), "one");
    Node* next = Must(body->AddNode(Opcode::kAdd, {i, one}, {}, "next"));
    Node* neg = Must(body->AddNode(Opcode::kNegate, {v}, {}, "neg"));
    body->set_root(Must(body->AddNode(Opcode::kTuple, {neg, next}, {}, "state")));
  }
  OpAttributes loop;
  loop.called_computations = {condition, body};
  loop.known_trip_count = 3;
  keep(Must(g->AddNode(Opcode::kWhile, {tup}, loop, "loop")));
  OpAttributes branches;
  for (Opcode op : {Opcode::kNegate, Opcode::kExp}) {
    auto branch = std::make_shared<Graph>(absl::StrCat("branch_", OpcodeName(op)));
    Node* a = Must(branch->AddParameter(0, f32_4x6, "a"));
    branch->set_root(Must(branch->AddNode(op, {a}, {}, "r")));
    branches.called_computations.push_back(branch);
  }
  keep(Must(g->AddNode(Opcode::kConditional, {i0, x, y}, branches, "cond")));
  Node* root = Must(g->AddNode(Opcode::kTuple, outs, {}, "out"));
  g->set_root(root);
  return g;
}

// Compares two graphs node by node (names, opcodes, shapes, operands, attributes, sharding).
void ExpectSameGraph(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name(), b.name());
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  ASSERT_NE(a.root(), nullptr);
  ASSERT_NE(b.root(), nullptr);
  EXPECT_EQ(a.root()->name(), b.root()->name());
  for (int64_t i = 0; i < a.num_nodes(); ++i) {
    const Node& x = *a.nodes()[i];
    const Node& y = *b.nodes()[i];
    SCOPED_TRACE(x.name());
    EXPECT_EQ(x.name(), y.name());
    EXPECT_EQ(x.opcode(), y.opcode());
    EXPECT_EQ(x.shape(), y.shape());
    EXPECT_EQ(x.sharding(), y.sharding());
    ASSERT_EQ(x.operand_count(), y.operand_count());
    for (int64_t k = 0; k < x.operand_count(); ++k) {
      EXPECT_EQ(x.operand(k)->name(), y.operand(k)->name());
    }
    const OpAttributes& p = x.attrs();
    const OpAttributes& q = y.attrs();
    EXPECT_EQ(p.dimensions, q.dimensions);
    EXPECT_EQ(p.slice, q.slice);
    EXPECT_EQ(p.padding, q.padding);
    EXPECT_EQ(p.dot, q.dot);
    EXPECT_EQ(p.dynamic_slice_sizes, q.dynamic_slice_sizes);
    EXPECT_EQ(p.gather, q.gather);
    EXPECT_EQ(p.scatter, q.scatter);
    EXPECT_EQ(p.scatter_overwrite, q.scatter_overwrite);
    EXPECT_EQ(p.window, q.window);
    EXPECT_EQ(p.convolution, q.convolution);
    EXPECT_EQ(p.feature_group_count, q.feature_group_count);
    EXPECT_EQ(p.batch_group_count, q.batch_group_count);
    if (x.opcode() == Opcode::kSelectAndScatter) {
      EXPECT_EQ(p.comparison_direction, q.comparison_direction);
    }
    if (x.opcode() == Opcode::kReduceWindow || x.opcode() == Opcode::kSelectAndScatter) {
      EXPECT_EQ(p.reduce_kind, q.reduce_kind);
    }
    if (x.opcode() == Opcode::kScatter) {
      EXPECT_EQ(p.reduce_kind, q.reduce_kind);
    }
    EXPECT_EQ(p.parameter_number, q.parameter_number);
    EXPECT_EQ(p.iota_dimension, q.iota_dimension);
    EXPECT_EQ(p.tuple_index, q.tuple_index);
    EXPECT_EQ(p.replica_groups, q.replica_groups);
    EXPECT_EQ(p.source_target_pairs, q.source_target_pairs);
    if (x.opcode() == Opcode::kCompare) {
      EXPECT_EQ(p.comparison_direction, q.comparison_direction);
    }
    if (x.opcode() == Opcode::kReduce || x.opcode() == Opcode::kAllReduce ||
        x.opcode() == Opcode::kReduceScatter) {
      EXPECT_EQ(p.reduce_kind, q.reduce_kind);
    }
    EXPECT_EQ(p.sort_descending, q.sort_descending);
    EXPECT_EQ(p.is_stable, q.is_stable);
    EXPECT_EQ(p.topk_k, q.topk_k);
    EXPECT_EQ(p.topk_largest, q.topk_largest);
    EXPECT_EQ(p.custom_call_target, q.custom_call_target);
    EXPECT_EQ(p.channel_id, q.channel_id);
    EXPECT_EQ(p.use_global_device_ids, q.use_global_device_ids);
    if (x.opcode() == Opcode::kRng) {
      EXPECT_EQ(p.rng_distribution, q.rng_distribution);
      EXPECT_EQ(p.rng_seed, q.rng_seed);
    }
    if (x.opcode() == Opcode::kConstant) {
      ASSERT_NE(q.literal, nullptr);
      EXPECT_TRUE(*p.literal == *q.literal)
          << p.literal->ToString() << " vs " << q.literal->ToString();
    }
  }
}

TEST(HloTextTest, AllOpsGraphCoversEveryOpcode) {
  std::unique_ptr<Graph> g = BuildAllOpsGraph();
  std::set<Opcode> seen;
  for (const Node* n : g->nodes()) seen.insert(n->opcode());
  // Update the last enumerator here when Opcode grows.
  for (int op = 0; op <= static_cast<int>(Opcode::kCustomCall); ++op) {
    EXPECT_TRUE(seen.contains(static_cast<Opcode>(op)))
        << "no node for " << OpcodeName(static_cast<Opcode>(op));
  }
}

TEST(HloTextTest, RoundTripEveryOp) {
  std::unique_ptr<Graph> g = BuildAllOpsGraph();
  std::string text = PrintHloModule(*g);
  absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_EQ(PrintHloModule(**parsed), text);
  ExpectSameGraph(*g, **parsed);
}

TEST(HloTextTest, RoundTripEachOpAlone) {
  // Every node of the all-ops graph as the root of its own graph (only its operands kept).
  std::unique_ptr<Graph> all = BuildAllOpsGraph();
  for (const Node* n : all->nodes()) {
    Graph g("one_op");
    std::vector<Node*> operands;
    int64_t next_param = 0;
    for (const Node* operand : n->operands()) {
      Node* existing = g.FindNode(operand->name());
      if (existing == nullptr) {
        existing = Must(g.AddParameter(next_param++, operand->shape(), operand->name()));
      }
      operands.push_back(existing);
    }
    OpAttributes attrs = n->attrs();
    if (n->opcode() == Opcode::kParameter) attrs.parameter_number = 0;
    Node* copy = g.AddNodeUnchecked(n->opcode(), n->shape(), operands, attrs, n->name());
    copy->set_sharding(n->sharding());
    std::string text = PrintHloModule(g);
    absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
    EXPECT_EQ(PrintHloModule(**parsed), text);
    ExpectSameGraph(g, **parsed);
  }
}

TEST(HloTextTest, ParsesJaxGatherAndScatter) {
  // As JAX dumps them (tests/fixtures/jax/embed_vocab_sharded_*.hlo, gpt_train_f32.hlo).
  const char* text = R"(HloModule m
region_0.3 {
  scatter-add.2 = f32[] parameter(0)
  scatter-add.3 = f32[] parameter(1)
  ROOT add.5 = f32[] add(scatter-add.2, scatter-add.3)
}
overwrite {
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}
ENTRY main.5 {
  table = f32[128,16]{1,0} parameter(0)
  ids = s32[8,16,1]{2,1,0} parameter(1)
  g = f32[8,16,16]{2,1,0} gather(table, ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,16}, indices_are_sorted=true
  s = f32[128,16]{1,0} scatter(table, ids, g), update_window_dims={2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=region_0.3
  logits = f32[8,16,64] parameter(2)
  labels = s32[8,16,1] parameter(3)
  picked = f32[8,16,1]{2,1,0} gather(logits, labels), offset_dims={}, collapsed_slice_dims={2}, start_index_map={2}, operand_batching_dims={0,1}, start_indices_batching_dims={0,1}, index_vector_dim=3, slice_sizes={1,1,1}
  w = f32[8,16,64] scatter(logits, labels, picked), update_window_dims={}, inserted_window_dims={2}, scatter_dims_to_operand_dims={2}, input_batching_dims={0,1}, scatter_indices_batching_dims={0,1}, index_vector_dim=3, indices_are_sorted=true, unique_indices=true, to_apply=overwrite
  ROOT t = (f32[128,16], f32[8,16,64]) tuple(s, w)
}
)";
  absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Node* s = (*parsed)->FindNode("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->attrs().reduce_kind, ReduceKind::kAdd);
  EXPECT_FALSE(s->attrs().scatter_overwrite);
  const Node* w = (*parsed)->FindNode("w");
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->attrs().scatter_overwrite);
  EXPECT_TRUE(w->attrs().scatter.unique_indices);
  EXPECT_EQ(w->attrs().scatter.input_batching_dims, (std::vector<int64_t>{0, 1}));
  const Node* g = (*parsed)->FindNode("g");
  EXPECT_TRUE(g->attrs().gather.indices_are_sorted);
  std::string printed = PrintHloModule(**parsed);
  EXPECT_NE(printed.find("ROOT %y = f32[] parameter(1)"), std::string::npos) << printed;
  absl::StatusOr<std::unique_ptr<Graph>> again = ParseHloModule(printed);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(PrintHloModule(**again), printed);
}

TEST(HloTextTest, GatherScatterErrorsNameTheAttribute) {
  const std::string head =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
      " ROOT c = f32[] add(a, b) }\nENTRY e {\n"
      "  t = f32[8,4] parameter(0)\n  i = s32[3,1] parameter(1)\n";
  const std::pair<std::string, std::string> cases[] = {
      {"  ROOT g = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, "
       "start_index_map={0}, index_vector_dim=1\n}\n",
       "needs attribute \"slice_sizes\""},
      {"  ROOT g = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, "
       "start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,4}\n}\n",
       "start_index_map has 2 entries"},
      {"  ROOT g = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, "
       "start_index_map={0}, index_vector_dim=1, slice_sizes={1,9}\n}\n",
       "slice_sizes[1]=9"},
      {"  ROOT g = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={1}, "
       "start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}\n}\n",
       "collapsed_slice_dims: dim 1 has slice size 4"},
      {"  ROOT g = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, "
       "start_index_map={0}, index_vector_dim=3, slice_sizes={1,4}\n}\n",
       "index_vector_dim=3 is out of range"},
      {"  u = f32[3,5] parameter(2)\n  ROOT s = f32[8,4] scatter(t, i, u), update_window_dims={1}, "
       "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
       "to_apply=add\n}\n",
       "window dim 1 is larger than operand dim 1"},
      {"  u = f32[3,4] parameter(2)\n  ROOT s = f32[8,4] scatter(t, i, u), update_window_dims={1}, "
       "inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
       "to_apply=add\n}\n",
       "update_window_dims={1} must have 2 entries"},
      {"  u = f32[3,4] parameter(2)\n  ROOT s = f32[8,4] scatter(t, i, u), update_window_dims={1}, "
       "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1\n}\n",
       "needs attribute \"to_apply\""},
  };
  for (const auto& [body, want] : cases) {
    absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(head + body);
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_NE(std::string(parsed.status().message()).find(want), std::string::npos)
        << parsed.status() << "\nwant: " << want;
  }
}

TEST(HloTextTest, PrintsXlaSyntax) {
  Graph g("m");
  Node* x = Must(g.AddParameter(0, Shape(DType::kF32, {4, 6}), "x"));
  x->set_sharding("{devices=[2,1]0,1}");
  Node* zero = g.AddConstant(Literal::Scalar<float>(0), "zero");
  OpAttributes pad;
  pad.padding = {{0, 1, 0}, {2, 2, 1}};
  Node* padded = Must(g.AddNode(Opcode::kPad, {x, zero}, pad, "padded"));
  OpAttributes slice;
  slice.slice = {{0, 4, 1}, {2, 8, 2}};
  Node* sliced = Must(g.AddNode(Opcode::kSlice, {padded}, slice, "sliced"));
  OpAttributes r;
  r.dimensions = {1};
  r.reduce_kind = ReduceKind::kMaximum;
  Node* red = Must(g.AddNode(Opcode::kReduce, {sliced, zero}, r, "red"));
  g.set_root(red);
  EXPECT_EQ(PrintHloModule(g),
            "HloModule m\n"
            "\n"
            "%maximum_f32 (x: f32[], y: f32[]) -> f32[] {\n"
            "  %x = f32[] parameter(0)\n"
            "  %y = f32[] parameter(1)\n"
            "  ROOT %maximum = f32[] maximum(%x, %y)\n"
            "}\n"
            "\n"
            "ENTRY %main (x: f32[4,6]) -> f32[4] {\n"
            "  %x = f32[4,6] parameter(0), sharding={devices=[2,1]0,1}\n"
            "  %zero = f32[] constant(0)\n"
            "  %padded = f32[5,15] pad(%x, %zero), padding=0_1x2_2_1\n"
            "  %sliced = f32[4,3] slice(%padded), slice={[0:4], [2:8:2]}\n"
            "  ROOT %red = f32[4] reduce(%sliced, %zero), dimensions={1}, to_apply=%maximum_f32\n"
            "}\n");
}

TEST(HloTextTest, PrintsDotAttributesAndOmitsEmptyLists) {
  Graph g("m");
  Node* a = Must(g.AddParameter(0, Shape(DType::kF32, {8, 16}), "a"));
  Node* b = Must(g.AddParameter(1, Shape(DType::kF32, {16, 4}), "b"));
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  Must(g.AddNode(Opcode::kDot, {a, b}, dot, "d"));
  std::string text = PrintHloModule(g);
  EXPECT_NE(text.find("ROOT %d = f32[8,4] dot(%a, %b), lhs_contracting_dims={1}, "
                      "rhs_contracting_dims={0}\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("batch"), std::string::npos) << text;
}

constexpr char kXlaModule[] =
    R"(HloModule jit_f, entry_computation_layout={(f32[8,16]{1,0}, f32[16,4]{1,0})->(f32[8]{0}, f32[8,4]{1,0})}, allow_spmd_sharding_propagation_to_output={true}

// A comment line.
ENTRY %main.10 (Arg_0.1: f32[8,16], Arg_1.2: f32[16,4]) -> (f32[8], f32[8,4]) {
  %Arg_0.1 = f32[8,16]{1,0} parameter(0), sharding={devices=[2,1]0,1}, metadata={op_name="x"}
  Arg_1.2 = f32[16,4]{1,0} parameter(1), sharding={replicated}, frontend_attributes={_xla_compute_type="host"}
  %dot.3 = f32[8,4]{1,0} dot(f32[8,16]{1,0} %Arg_0.1, f32[16,4]{1,0} Arg_1.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={default,default}, metadata={op_name="jit(f)/jit(main)/dot_general[dimension_numbers=(([1], [0]), ([], []))]" source_file="/tmp/x.py" source_line=5}
  %constant.4 = f32[] constant(-inf)
  %reduce.6 = f32[8]{0} reduce(f32[8,16]{1,0} %Arg_0.1, f32[] %constant.4), dimensions={1}, to_apply=%region_0.5, metadata={op_name="jit(f)/reduce_max[axes=(1,)]"}
  %copy.7 = f32[8]{0} copy(%reduce.6), backend_config={"note":"a } brace"}, channel_id=3
  ROOT %tuple.9 = (f32[8]{0}, f32[8,4]{1,0}) tuple(f32[8]{0} %copy.7, /*index=1*/f32[8,4]{1,0} %dot.3),
      sharding={{replicated}, {devices=[2,1]0,1}}
}

%region_0.5 (Arg_0.6: f32[], Arg_1.7: f32[]) -> f32[] {
  %Arg_0.6 = f32[] parameter(0)
  %Arg_1.7 = f32[] parameter(1)
  ROOT %maximum.8 = f32[] maximum(f32[] %Arg_0.6, f32[] %Arg_1.7)
}
)";

TEST(HloTextTest, ParsesXlaDump) {
  absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(kXlaModule);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Graph& g = **parsed;
  EXPECT_EQ(g.name(), "jit_f");
  EXPECT_EQ(g.num_nodes(), 7);
  ASSERT_NE(g.root(), nullptr);
  EXPECT_EQ(g.root()->name(), "tuple.9");
  EXPECT_EQ(g.root()->shape().ToString(), "(f32[8], f32[8,4])");
  EXPECT_EQ(g.root()->sharding(), "{{replicated}, {devices=[2,1]0,1}}");
  EXPECT_EQ(g.FindNode("Arg_0.1")->sharding(), "{devices=[2,1]0,1}");
  EXPECT_EQ(g.FindNode("Arg_1.2")->sharding(), "{replicated}");
  EXPECT_EQ(g.FindNode("Arg_1.2")->attrs().parameter_number, 1);
  const Node* reduce = g.FindNode("reduce.6");
  ASSERT_NE(reduce, nullptr);
  EXPECT_EQ(reduce->attrs().reduce_kind, ReduceKind::kMaximum);
  EXPECT_EQ(reduce->attrs().dimensions, std::vector<int64_t>{1});
  EXPECT_EQ(reduce->shape().ToString(), "f32[8]");
  const Node* dot = g.FindNode("dot.3");
  EXPECT_EQ(dot->attrs().dot.lhs_contracting_dims, std::vector<int64_t>{1});
  EXPECT_EQ(dot->attrs().dot.rhs_contracting_dims, std::vector<int64_t>{0});
  EXPECT_EQ(g.FindNode("constant.4")->literal().GetAsDouble(0),
            -std::numeric_limits<double>::infinity());
  // The printed form parses back to the same text.
  std::string text = PrintHloModule(g);
  absl::StatusOr<std::unique_ptr<Graph>> again = ParseHloModule(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(PrintHloModule(**again), text);
}

constexpr char kXlaCollectives[] = R"(HloModule spmd, num_partitions=4
%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %pid = s32[] partition-id()
  %ar = f32[4,8]{1,0} all-reduce(f32[4,8]{1,0} %x), channel_id=1, replica_groups=[2,2]<=[4], use_global_device_ids=true, to_apply=%sum
  %ar_t = f32[4,8]{1,0} all-reduce(%ar), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=%sum
  %ag = f32[16,8]{1,0} all-gather(%ar_t), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  %rs = f32[4,8]{1,0} reduce-scatter(%ag), channel_id=4, replica_groups=[1,4]<=[4], use_global_device_ids=true, dimensions={0}, to_apply=%sum
  %a2a = f32[4,8]{1,0} all-to-all(%rs), channel_id=5, replica_groups={{0,1},{2,3}}, dimensions={1}
  ROOT %cp = f32[4,8]{1,0} collective-permute(%a2a), channel_id=6, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)";

// The iota form: found for every transposed layout, the smallest XLA would print, and nothing
// is found for lists no layout gives.
TEST(IotaReplicaGroupsTest, FindsTheSmallestFormAndRoundTrips) {
  using Groups = std::vector<std::vector<int64_t>>;
  auto find = [](const Groups& groups) {
    std::optional<IotaReplicaGroups> iota = FindIotaReplicaGroups(groups);
    return iota.has_value() ? iota->ToString() : std::string("none");
  };
  EXPECT_EQ(find({{0, 1}, {2, 3}}), "[2,2]<=[4]");
  EXPECT_EQ(find({{0, 2}, {1, 3}}), "[2,2]<=[2,2]T(1,0)");
  EXPECT_EQ(find({{0, 1, 2, 3}}), "[1,4]<=[4]");
  EXPECT_EQ(find({{0}, {1}, {2}}), "[3,1]<=[3]");
  EXPECT_EQ(find({{0}}), "[1,1]<=[1]");
  // Columns of a [2,4] mesh; the middle axis of [2,2,2].
  EXPECT_EQ(find({{0, 4}, {1, 5}, {2, 6}, {3, 7}}), "[4,2]<=[2,4]T(1,0)");
  EXPECT_EQ(find({{0, 2}, {1, 3}, {4, 6}, {5, 7}}), "[4,2]<=[2,2,2]T(0,2,1)");
  // Pod scale: 8192 devices print as a few numbers.
  EXPECT_EQ(find(ExpandIotaReplicaGroups({2048, 4, {8192}, {0}})), "[2048,4]<=[8192]");
  EXPECT_EQ(find(ExpandIotaReplicaGroups({4, 2048, {2, 2048, 2}, {1, 0, 2}})),
            "[4,2048]<=[2,2048,2]T(1,0,2)");
  // No iota form: ids missing, repeated or out of range; unequal groups; an order no transpose
  // gives; no groups.
  EXPECT_EQ(find({{0, 1}, {4, 5}}), "none");
  EXPECT_EQ(find({{0, 0}, {1, 2}}), "none");
  EXPECT_EQ(find({{0, 1, 2}, {3}}), "none");
  EXPECT_EQ(find({{1, 0}, {2, 3}}), "none");
  EXPECT_EQ(find({{0, 1}, {3, 2}}), "none");
  EXPECT_EQ(find({{0, 3}, {1, 2}}), "none");
  EXPECT_EQ(find({}), "none");

  // Every transpose of every factorization of 24 devices, cut every way: the found form
  // expands to the same groups.
  const std::vector<std::vector<int64_t>> shapes = {{24},      {2, 12},      {4, 6}, {2, 3, 4},
                                                    {3, 2, 4}, {2, 2, 2, 3}, {6, 4}, {2, 2, 6}};
  int checked = 0;
  for (const std::vector<int64_t>& dims : shapes) {
    std::vector<int64_t> perm(dims.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      for (int64_t group_size : {1, 2, 3, 4, 6, 8, 12, 24}) {
        const IotaReplicaGroups iota{24 / group_size, group_size, dims, perm};
        const Groups groups = ExpandIotaReplicaGroups(iota);
        std::optional<IotaReplicaGroups> found = FindIotaReplicaGroups(groups);
        ASSERT_TRUE(found.has_value()) << iota.ToString();
        EXPECT_EQ(ExpandIotaReplicaGroups(*found), groups)
            << iota.ToString() << " -> " << found->ToString();
        EXPECT_LE(found->reshape_dims.size(), dims.size()) << iota.ToString();
        ++checked;
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  EXPECT_EQ(checked, 49 * 8);  // 49 (shape, transpose) pairs, 8 group sizes
}

TEST(HloTextTest, ParsesXlaCollectives) {
  absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(kXlaCollectives);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Graph& g = **parsed;
  using Groups = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(g.FindNode("ar")->attrs().replica_groups, (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(g.FindNode("ar_t")->attrs().replica_groups, (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(g.FindNode("ag")->attrs().replica_groups, (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(g.FindNode("rs")->attrs().replica_groups, (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(g.FindNode("rs")->attrs().reduce_kind, ReduceKind::kAdd);
  EXPECT_EQ(g.FindNode("a2a")->attrs().dimensions, std::vector<int64_t>{1});
  EXPECT_EQ(g.FindNode("cp")->attrs().source_target_pairs,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}, {2, 3}, {3, 0}}));
  std::string text = PrintHloModule(g);
  // Printed back in XLA's iota form, whichever form the text used; channel_id and
  // use_global_device_ids are kept.
  EXPECT_NE(text.find("%ar = f32[4,8] all-reduce(%x), channel_id=1, replica_groups=[2,2]<=[4], "
                      "use_global_device_ids=true, to_apply=%add_f32\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("all-reduce(%ar), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("all-gather(%ar_t), channel_id=3, replica_groups=[1,4]<=[4], dimensions={0}, "
                      "use_global_device_ids=true\n"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("reduce-scatter(%ag), channel_id=4, replica_groups=[1,4]<=[4], dimensions={0}, "
                "use_global_device_ids=true, to_apply=%add_f32\n"),
      std::string::npos)
      << text;
  absl::StatusOr<std::unique_ptr<Graph>> again = ParseHloModule(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(PrintHloModule(**again), text);
}

TEST(HloTextTest, RecognisesEveryReduction) {
  const std::pair<const char*, ReduceKind> cases[] = {
      {"add", ReduceKind::kAdd},         {"multiply", ReduceKind::kMultiply},
      {"maximum", ReduceKind::kMaximum}, {"minimum", ReduceKind::kMinimum},
      {"and", ReduceKind::kAnd},         {"or", ReduceKind::kOr}};
  for (const auto& [op, kind] : cases) {
    bool logical = kind == ReduceKind::kAnd || kind == ReduceKind::kOr;
    std::string type = logical ? "pred" : "s32";
    std::string text = absl::StrCat(
        "HloModule m\n"
        "region (a: ",
        type, "[], b: ", type, "[]) -> ", type,
        "[] {\n"
        "  b = ",
        type,
        "[] parameter(1)\n"
        "  a = ",
        type,
        "[] parameter(0)\n"
        "  ROOT r = ",
        type, "[] ", op,
        "(b, a)\n"
        "}\n"
        "ENTRY main {\n"
        "  x = ",
        type,
        "[3,5] parameter(0)\n"
        "  init = ",
        type,
        "[] parameter(1)\n"
        "  ROOT y = ",
        type,
        "[5] reduce(x, init), dimensions={0}, to_apply=region\n"
        "}\n");
    absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
    EXPECT_EQ((*parsed)->root()->attrs().reduce_kind, kind) << op;
  }
}

// A reducer the parser would read only by its root's pattern must not hide anything else: a third
// parameter (XLA requires two for a one-operand reduce) or a call, which could also recurse.
TEST(HloTextTest, ReducerWithAThirdParameterOrACallIsRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {"  c = f32[] parameter(2)\n",
       "%add is not a supported reduction: it takes 3 parameters, not two"},
      {"  t = f32[2] broadcast(a), dimensions={}\n"
       "  dead = f32[] reduce(t, b), dimensions={0}, to_apply=add\n",
       "%dead calls a computation"},
  };
  for (const auto& [extra, needle] : cases) {
    const std::string text = absl::StrCat(
        "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n", extra,
        "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  x = f32[8,8] parameter(0)\n"
        "  z = f32[] constant(0)\n"
        "  ROOT r = f32[8] reduce(x, z), dimensions={1}, to_apply=add\n}\n");
    absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(std::string(parsed.status().message()), testing::HasSubstr(needle));
  }
}

TEST(HloTextTest, RootDefaultsToLastInstruction) {
  absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(
      "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  b = f32[2] negate(a)\n}\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->root()->name(), "b");
}

TEST(HloTextTest, RootNeedNotBeLast) {
  Graph g("m");
  Node* a = Must(g.AddParameter(0, Shape(DType::kF32, {2}), "a"));
  Node* b = Must(g.AddNode(Opcode::kNegate, {a}, {}, "b"));
  Must(g.AddNode(Opcode::kAbs, {a}, {}, "c"));
  g.set_root(b);
  std::string text = PrintHloModule(g);
  absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->root()->name(), "b");
  EXPECT_EQ(PrintHloModule(**parsed), text);
}

// `call` is inlined (XLA's CallInliner): the callee's instructions join the graph in place of the
// call, parameter(k) becomes the call's operand k, nested calls inline recursively, and a
// sharding on the call lands on a copy of the callee's result.
TEST(HloTextTest, InlinesCalls) {
  absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(R"(HloModule jit_f

%relu.1 (x.2: f32[4]) -> f32[4] {
  %x.2 = f32[4]{0} parameter(0)
  %zero = f32[] constant(0)
  %zeros = f32[4] broadcast(%zero), dimensions={}
  ROOT %max = f32[4] maximum(%x.2, %zeros)
}

%scaled_relu (a: f32[4], b: f32[4]) -> f32[4] {
  %b = f32[4] parameter(1)
  %a = f32[4] parameter(0)
  %r = f32[4] call(%a), to_apply=%relu.1
  ROOT %m = f32[4] multiply(%r, %b)
}

ENTRY %main.9 (p0: f32[4], p1: f32[4]) -> f32[4] {
  %p0 = f32[4] parameter(0)
  %p1 = f32[4] parameter(1)
  %c1 = f32[4] call(%p0, %p1), to_apply=%scaled_relu, metadata={op_name="jit(f)/relu"}
  %c2 = f32[4] call(%c1), to_apply=%relu.1, sharding={replicated}
  ROOT %out = f32[4] add(%c1, %c2)
}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Graph& g = **parsed;
  EXPECT_EQ(g.parameters().size(), 2u);
  int copies = 0, maxima = 0;
  for (const Node* node : g.nodes()) {
    if (node->opcode() == Opcode::kCopy) {
      ++copies;
      EXPECT_EQ(node->sharding(), "{replicated}");
    }
    if (node->opcode() == Opcode::kMaximum) ++maxima;
  }
  EXPECT_EQ(copies, 1);
  EXPECT_EQ(maxima, 2);  // relu inlined at each of its two call sites
  // out = 2 * relu(p0) * p1 for positive products: check the numbers.
  Literal p0 = Literal::FromVector<float>({4}, {1, -2, 3, -4});
  Literal p1 = Literal::FromVector<float>({4}, {2, 2, -1, 5});
  absl::StatusOr<std::vector<Literal>> out = Executor().Run(g, {p0, p1});
  ASSERT_TRUE(out.ok()) << out.status();
  // c1 = relu(p0) * p1 = {2, 0, -3, 0}; c2 = relu(c1) = {2, 0, 0, 0}.
  EXPECT_EQ((*out)[0], Literal::FromVector<float>({4}, {4, 0, -3, 0}));
  // The printed graph has no call left and parses again.
  std::string text = PrintHloModule(g);
  EXPECT_EQ(text.find(" call("), std::string::npos) << text;
  EXPECT_TRUE(ParseHloModule(text).ok()) << text;
}

struct BadCase {
  const char* label;
  std::string text;
  absl::StatusCode code;
  std::vector<std::string> needles;  // substrings the message must contain
};

std::string Module(const std::string& body) {
  return absl::StrCat("HloModule m\n\nENTRY %main {\n", body, "}\n");
}

TEST(HloTextTest, BadTextGivesStatusWithLineAndToken) {
  const std::string kAdd =
      "%add (a: f32[], b: f32[]) -> f32[] {\n"
      "  %a = f32[] parameter(0)\n"
      "  %b = f32[] parameter(1)\n"
      "  ROOT %s = f32[] add(%a, %b)\n"
      "}\n";
  const BadCase cases[] = {
      {"unknown op",
       Module("  %x = f32[8] parameter(0)\n  %y = f32[8] cholesky(%x)\n"),
       absl::StatusCode::kUnimplemented,
       {"line 5", "unsupported op \"cholesky\""}},
      // A NUL (or any control or non-ASCII byte) is shown escaped: printed raw, it cut the
      // message short on a terminal.
      {"NUL byte inside an opcode",
       Module(std::string("  %x = f32[8] parameter(0)\n  ROOT %y = f32[8] negate\0(%x)\n", 58)),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "expected \"(\" after \"negate\", got \"\\x00\""}},
      {"non-ASCII byte inside a name",
       Module("  %x = f32[8] parameter(0)\n  ROOT %y\xff = f32[8] negate(%x)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "\"\\xff\""}},
      {"unknown op in another computation",
       "HloModule m\n%c {\n  ROOT %s = f32[] fft()\n}\nENTRY %e {\n  %a = f32[] parameter(0)\n}\n",
       absl::StatusCode::kUnimplemented,
       {"line 3", "\"fft\""}},
      {"operand shapes differ",
       Module("  %x = f32[8] parameter(0)\n  %y = f32[9] parameter(1)\n"
              "  ROOT %sum = f32[8] add(%x, %y)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 6", "%sum", "f32[8] vs f32[9]"}},
      {"declared shape differs",
       Module("  %x = f32[8,16] parameter(0)\n  %w = f32[16,4] parameter(1)\n"
              "  ROOT %d = f32[8,5] dot(%x, %w), lhs_contracting_dims={1}, "
              "rhs_contracting_dims={0}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 6", "%d", "f32[8,5]"}},
      {"unknown operand",
       Module("  %x = f32[8] parameter(0)\n  ROOT %y = f32[8] add(%x, %nope)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "\"%nope\""}},
      {"operand used before definition",
       Module("  %y = f32[8] negate(%x)\n  %x = f32[8] parameter(0)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "\"%x\""}},
      {"missing operand",
       Module("  %x = f32[8] parameter(0)\n  ROOT %y = f32[8] add(%x)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "%y", "operand"}},
      {"operand written with another shape",
       Module("  %x = f32[8] parameter(0)\n  ROOT %y = f32[8] negate(f32[9] %x)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "\"%x\"", "f32[9]"}},
      {"duplicate name",
       Module("  %a = f32[8] parameter(0)\n  %a = f32[8] negate(%a)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "duplicate instruction name \"%a\"", "line 4"}},
      {"duplicate computation",
       absl::StrCat("HloModule m\n", kAdd, kAdd, "ENTRY %e {\n  %p = f32[] parameter(0)\n}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 7", "\"%add\""}},
      {"malformed dimensions",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %b = f32[8,2] broadcast(%x), dimensions={0,x}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "dimensions", "\"x\""}},
      {"malformed padding",
       Module("  %x = f32[8] parameter(0)\n  %z = f32[] constant(0)\n"
              "  ROOT %p = f32[9] pad(%x, %z), padding=0_1_2_3\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 6", "padding", "\"0_1_2_3\""}},
      {"malformed slice",
       Module("  %x = f32[8] parameter(0)\n  ROOT %s = f32[4] slice(%x), slice={[0:a]}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "slice", "\"a\""}},
      {"malformed direction",
       Module("  %x = f32[8] parameter(0)\n  ROOT %c = pred[8] compare(%x, %x), direction=XX\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "direction", "\"XX\""}},
      {"missing direction",
       Module("  %x = f32[8] parameter(0)\n  ROOT %c = pred[8] compare(%x, %x)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "%c", "\"direction\""}},
      {"missing dimensions",
       Module("  %x = f32[8] parameter(0)\n  ROOT %b = f32[8,2] broadcast(%x)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "%b", "\"dimensions\""}},
      {"duplicate attribute",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %b = f32[2,8] broadcast(%x), dimensions={1}, dimensions={1}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "duplicate attribute \"dimensions\""}},
      {"unbalanced sharding brace",
       "HloModule m\nENTRY %e {\n  %x = f32[8] parameter(0), sharding={devices=[2]0,1\n",
       absl::StatusCode::kInvalidArgument,
       {"line 3", "unbalanced \"{\""}},
      {"mismatched bracket",
       Module("  %x = f32[8] parameter(0), sharding={devices=[2)0,1}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "unbalanced \")\""}},
      {"computation never closed",
       "HloModule m\nENTRY %e {\n  %x = f32[8] parameter(0)\n",
       absl::StatusCode::kInvalidArgument,
       {"line 2", "unbalanced \"{\"", "%e"}},
      {"stray closing brace",
       absl::StrCat(Module("  %x = f32[8] parameter(0)\n"), "}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 6", "\"}\""}},
      {"empty input", "", absl::StatusCode::kInvalidArgument, {"line 1", "empty input"}},
      {"blank input", "  \n\n", absl::StatusCode::kInvalidArgument, {"line 3", "empty input"}},
      {"no HloModule header",
       "ENTRY %e {\n  %x = f32[8] parameter(0)\n}\n",
       absl::StatusCode::kInvalidArgument,
       {"line 1", "\"HloModule\"", "\"ENTRY\""}},
      {"missing ENTRY",
       absl::StrCat("HloModule m\n", kAdd),
       absl::StatusCode::kInvalidArgument,
       {"line 7", "missing ENTRY"}},
      {"two ENTRY computations",
       "HloModule m\nENTRY %a {\n  %x = f32[] parameter(0)\n}\n"
       "ENTRY %b {\n  %x = f32[] parameter(0)\n}\n",
       absl::StatusCode::kInvalidArgument,
       {"line 5", "\"%b\""}},
      {"two ROOTs",
       Module("  ROOT %x = f32[8] parameter(0)\n  ROOT %y = f32[8] negate(%x)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "ROOT \"%y\"", "line 4"}},
      {"unknown element type",
       Module("  %x = f33[8] parameter(0)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "\"f33\""}},
      {"negative dimension",
       Module("  %x = f32[-8] parameter(0)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "\"-8\""}},
      {"huge shape",
       Module("  %x = f32[99999999999,99999999999] parameter(0)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "too large"}},
      {"bad constant",
       Module("  ROOT %c = f32[2] constant({1, 2, 3})\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "f32[2]"}},
      {"bad constant token",
       Module("  ROOT %c = f32[2] constant({1, zz})\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "\"zz\""}},
      {"bad parameter number",
       Module("  %x = f32[2] parameter(x)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "\"x\""}},
      {"duplicate parameter number",
       Module("  %x = f32[2] parameter(0)\n  %y = f32[2] parameter(0)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "duplicate parameter number 0", "%x"}},
      {"sparse parameter numbers",
       Module("  %x = f32[2] parameter(0)\n  %y = f32[2] parameter(2)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "\"%y\"", "0..1"}},
      {"unsupported to_apply",
       Module("  %x = f32[8] parameter(0)\n  %z = f32[] constant(0)\n"
              "  ROOT %r = f32[] reduce(%x, %z), dimensions={0}, to_apply=%region_0\n") +
           "%region_0 (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
           "  %b = f32[] parameter(1)\n  ROOT %s = f32[] subtract(%a, %b)\n}\n",
       absl::StatusCode::kUnimplemented,
       {"line 11", "%region_0", "subtract"}},
      {"to_apply of a constant",
       Module("  %x = f32[8] parameter(0)\n  %z = f32[] constant(0)\n"
              "  ROOT %r = f32[] reduce(%x, %z), dimensions={0}, to_apply=%region_0\n") +
           "%region_0 (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
           "  %b = f32[] constant(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n",
       absl::StatusCode::kUnimplemented,
       {"line 11", "%region_0", "%b"}},
      {"unknown to_apply",
       Module("  %x = f32[8] parameter(0)\n  %z = f32[] constant(0)\n"
              "  ROOT %r = f32[] reduce(%x, %z), dimensions={0}, to_apply=%nowhere\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 6", "\"%nowhere\""}},
      {"to_apply of another type",
       Module("  %x = s32[8] parameter(0)\n  %z = s32[] constant(0)\n"
              "  ROOT %r = s32[] reduce(%x, %z), dimensions={0}, to_apply=%add\n") +
           kAdd,
       absl::StatusCode::kInvalidArgument,
       {"line 6", "%r", "\"%add\""}},
      {"variadic reduce",
       Module("  %x = f32[8] parameter(0)\n  %y = f32[8] parameter(1)\n"
              "  %z = f32[] constant(0)\n"
              "  ROOT %r = (f32[], f32[]) reduce(%x, %y, %z, %z), dimensions={0}, "
              "to_apply=%add\n") +
           kAdd,
       absl::StatusCode::kUnimplemented,
       {"line 7", "%r", "variadic"}},
      {"malformed replica_groups",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %ag = f32[16] all-gather(%x), replica_groups={{0,y}}, dimensions={0}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "replica_groups", "\"y\""}},
      {"iota replica_groups that do not cover the devices",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %ag = f32[16] all-gather(%x), replica_groups=[2,3]<=[4], dimensions={0}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "replica_groups", "[2,3]<=[4]"}},
      {"iota replica_groups with a bad transpose",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %ag = f32[16] all-gather(%x), replica_groups=[2,2]<=[2,2]T(0,0), "
              "dimensions={0}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "replica_groups", "T(0,0)"}},
      {"huge device id",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %ar = f32[8] all-reduce(%x), replica_groups={{0,99999999999}}, "
              "to_apply=%add\n") +
           kAdd,
       absl::StatusCode::kInvalidArgument,
       {"line 5", "99999999999"}},
      {"all-gather of the wrong size",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %ag = f32[8] all-gather(%x), replica_groups={{0,1}}, dimensions={0}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "%ag"}},
      {"all-reduce without to_apply",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %ar = f32[8] all-reduce(%x), replica_groups={{0,1}}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "%ar", "\"to_apply\""}},
      {"malformed source_target_pairs",
       Module("  %x = f32[8] parameter(0)\n"
              "  ROOT %cp = f32[8] collective-permute(%x), source_target_pairs={{0,1,2}}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "source_target_pairs", "pairs"}},
      {"unterminated string",
       Module("  %x = f32[8] parameter(0), metadata={op_name=\"abc}\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "unterminated string"}},
      {"unterminated comment",
       Module("  %x = f32[8] parameter(0) /* no end\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "\"/*\""}},
      {"missing equals",
       Module("  %x f32[8] parameter(0)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "\"=\"", "\"f32\""}},
      {"junk after instruction",
       Module("  %x = f32[8] parameter(0) )\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "\")\""}},
      {"padding that overflows int64",
       Module("  %x = f32[8] parameter(0)\n  %z = f32[] constant(0)\n"
              "  ROOT %p = f32[8] pad(%x, %z), padding=9223372036854775807_9223372036854775807\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 6", "%p", "overflows int64"}},
      {"a parameter too large to address",
       Module("  ROOT %x = f32[4611686018427387904,4] parameter(0)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 4", "shape too large", "4611686018427387904"}},
      {"call of an unknown computation",
       Module("  %x = f32[2] parameter(0)\n  ROOT %c = f32[2] call(%x), to_apply=%nowhere\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "unknown computation \"%nowhere\""}},
      {"call without to_apply",
       Module("  %x = f32[2] parameter(0)\n  ROOT %c = f32[2] call(%x)\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "%c", "to_apply"}},
      {"call passing too few operands",
       "HloModule m\n%f {\n  %a = f32[2] parameter(0)\n  %b = f32[2] parameter(1)\n"
       "  ROOT %s = f32[2] add(%a, %b)\n}\nENTRY %e {\n  %x = f32[2] parameter(0)\n"
       "  ROOT %c = f32[2] call(%x), to_apply=%f\n}\n",
       absl::StatusCode::kInvalidArgument,
       {"line 4", "parameter(1)", "passes 1 operand"}},
      {"call passing the wrong shape",
       "HloModule m\n%f {\n  ROOT %a = f32[3] parameter(0)\n}\nENTRY %e {\n"
       "  %x = f32[2] parameter(0)\n  ROOT %c = f32[2] call(%x), to_apply=%f\n}\n",
       absl::StatusCode::kInvalidArgument,
       {"line 3", "f32[3]", "passes f32[2]"}},
      {"call whose result differs from the callee's root",
       "HloModule m\n%f {\n  ROOT %a = f32[2] parameter(0)\n}\nENTRY %e {\n"
       "  %x = f32[2] parameter(0)\n  ROOT %c = s32[2] call(%x), to_apply=%f\n}\n",
       absl::StatusCode::kInvalidArgument,
       {"line 7", "%c", "s32[2]", "f32[2]"}},
      {"recursive call",
       "HloModule m\n%f {\n  %a = f32[2] parameter(0)\n  ROOT %r = f32[2] call(%a), "
       "to_apply=%f\n}\nENTRY %e {\n  %x = f32[2] parameter(0)\n"
       "  ROOT %c = f32[2] call(%x), to_apply=%f\n}\n",
       absl::StatusCode::kInvalidArgument,
       {"line 4", "recursive call", "%f"}},
      {"get-tuple-element index out of range",
       Module("  %t = (f32[2], s32[]) parameter(0)\n"
              "  ROOT %g = f32[2] get-tuple-element(%t), index=2\n"),
       absl::StatusCode::kInvalidArgument,
       {"line 5", "%g", "index=2"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(c.text);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), c.code) << parsed.status();
    for (const std::string& needle : c.needles) {
      EXPECT_NE(parsed.status().message().find(needle), absl::string_view::npos)
          << "message: " << parsed.status().message() << "\nmissing: " << needle;
    }
  }
}

// Mutates valid text at random (fixed seed) and checks the parser always returns; whatever
// parses must also survive a print/parse round trip.
// Issue 22: slice's shape inference computed (limit - start + stride - 1) / stride, a signed
// overflow for a huge stride (UBSan), and a wrong size. One element is taken, from `start`.
TEST(HloTextTest, SliceWithAHugeStrideTakesOneElement) {
  const std::string slice = "slice(%x), slice={[1:8:9223372036854775807]}\n";
  absl::StatusOr<std::unique_ptr<Graph>> one =
      ParseHloModule(Module("  %x = f32[8] parameter(0)\n  ROOT %s = f32[1] " + slice));
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<std::unique_ptr<Graph>> two =
      ParseHloModule(Module("  %x = f32[8] parameter(0)\n  ROOT %s = f32[2] " + slice));
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HloTextTest, FuzzedTextNeverCrashes) {
  std::unique_ptr<Graph> all = BuildAllOpsGraph();
  const std::vector<std::string> seeds = {kXlaModule, kXlaCollectives, PrintHloModule(*all)};
  const std::string kAlphabet = "{}()[],=%:_x0123456789-\"/* \nfs.ROOTENTRY";
  std::mt19937 rng(20240601);
  int parsed_ok = 0;
  constexpr int kIterations = 3000;
  for (int iter = 0; iter < kIterations; ++iter) {
    std::string text = seeds[iter % seeds.size()];
    int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations && !text.empty(); ++m) {
      size_t i = rng() % text.size();
      switch (rng() % 4) {
        case 0:
          text.erase(i, 1);
          break;
        case 1:
          text.insert(i, 1, text[i]);
          break;
        case 2:
          std::swap(text[i], text[rng() % text.size()]);
          break;
        default:
          text[i] = kAlphabet[rng() % kAlphabet.size()];
          break;
      }
    }
    absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseHloModule(text);
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find("line "), absl::string_view::npos)
          << parsed.status();
      continue;
    }
    ++parsed_ok;
    std::string printed = PrintHloModule(**parsed);
    absl::StatusOr<std::unique_ptr<Graph>> again = ParseHloModule(printed);
    ASSERT_TRUE(again.ok()) << again.status() << "\nfrom:\n" << text << "\nprinted:\n" << printed;
    EXPECT_EQ(PrintHloModule(**again), printed);
  }
  // Some mutations (in metadata, comments, names) keep the text valid.
  EXPECT_GT(parsed_ok, 0);
  EXPECT_LT(parsed_ok, kIterations);
}

}  // namespace
}  // namespace tessel
