// Tests of the single-device executor: every op against a plain reference loop written here
// (never the executor's kernels), on random inputs with fixed seeds, odd sizes, 0-size dims and
// ranks 0..4; plus rng properties, liveness accounting, argument errors and threading.
#include "tessel/core/executor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/graph.h"
#include "tessel/core/internal/buffer_pool.h"
#include "tessel/core/internal/fusion_loops.h"
#include "tessel/core/internal/kernels.h"
#include "tessel/core/literal.h"
#include "tessel/core/rng.h"
#include "tessel/core/testing/graphs.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {DType::kPred, DType::kU8,  DType::kS32, DType::kS64,
                                DType::kBF16, DType::kF16, DType::kF32, DType::kF64};
constexpr DType kFloatDTypes[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kF64};
constexpr DType kNumericDTypes[] = {DType::kU8,  DType::kS32, DType::kS64, DType::kBF16,
                                    DType::kF16, DType::kF32, DType::kF64};

// Shapes for elementwise tests: ranks 0..4, odd sizes, 1x1 and a 0-size dim.
const std::vector<std::vector<int64_t>> kElementwiseDims = {{},     {5},          {7, 13},  {1, 1},
                                                            {0, 5}, {2, 3, 1, 5}, {3, 4, 5}};

// ---- Helpers -----------------------------------------------------------------------------------

// Random values: floats uniform in [lo, hi), integers uniform in [lo, hi] (u8 clipped to
// [0, 255]), pred fair coin.
Literal Random(const Shape& shape, uint32_t seed, double lo = -3, double hi = 3) {
  Literal lit(shape);
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < lit.num_elements(); ++i) {
    double v;
    if (shape.dtype() == DType::kPred) {
      v = std::bernoulli_distribution(0.5)(gen) ? 1 : 0;
    } else if (IsFloating(shape.dtype())) {
      v = std::uniform_real_distribution<double>(lo, hi)(gen);
    } else {
      double l = shape.dtype() == DType::kU8 ? std::max(lo, 0.0) : lo;
      double h = shape.dtype() == DType::kU8 ? std::min(std::max(hi, 0.0), 255.0) : hi;
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(l),
                                                                     static_cast<int64_t>(h))(gen));
    }
    lit.SetFromDouble(i, v);
  }
  return lit;
}

std::vector<int64_t> Unravel(int64_t linear, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    index[d] = linear % dims[d];
    linear /= dims[d];
  }
  return index;
}

int64_t Ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t linear = 0;
  for (size_t d = 0; d < dims.size(); ++d) linear = linear * dims[d] + index[d];
  return linear;
}

// Relative tolerance for results rounded to `dtype` (one or two roundings of slack).
double Rtol(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return 1.6e-2;
    case DType::kF16:
      return 2e-3;
    case DType::kF32:
      return 2e-6;
    case DType::kF64:
      return 1e-12;
    default:
      return 0;
  }
}

// Expects equal shapes and |got - want| <= atol + rtol * |want| everywhere (NaN == NaN);
// reports the first mismatch with its index.
void ExpectClose(const Literal& got, const Literal& want, double rtol, double atol,
                 const std::string& what = "") {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g == w) continue;  // also equal infinities
    ASSERT_LE(std::abs(g - w), atol + rtol * std::abs(w))
        << what << " at linear index " << i << " of " << got.shape().ToString() << ": got " << g
        << ", want " << w;
  }
}

void ExpectEqual(const Literal& got, const Literal& want, const std::string& what = "") {
  ExpectClose(got, want, 0, 0, what);
}

// Every element of `got` equals `want`'s, or (floating types) differs by at most one ulp of
// the element type: what loop fusion may change (Eigen's packet exp etc. at block boundaries).
void ExpectWithinOneUlp(const Literal& got, const Literal& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const DType dtype = want.shape().dtype();
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    if ((std::isnan(w) && std::isnan(g)) || g == w) continue;
    double ulp = 0;
    if (dtype == DType::kF32) {
      const float wf = static_cast<float>(w);
      ulp = std::abs(std::nextafter(wf, std::numeric_limits<float>::infinity()) - wf);
    } else if (dtype == DType::kF64) {
      ulp = std::abs(std::nextafter(w, std::numeric_limits<double>::infinity()) - w);
    } else if (dtype == DType::kBF16 || dtype == DType::kF16) {
      ulp = std::abs(w) * (dtype == DType::kBF16 ? 0x1p-7 : 0x1p-10);
    }
    ASSERT_LE(std::abs(g - w), ulp)
        << what << " at linear index " << i << " of " << got.shape().ToString() << ": fused " << g
        << ", unfused " << w;
  }
}

// `node` passed through select(broadcast(true), node, node): the identity for every element
// type, and an elementwise op, so the executor fuses it with `node` (when that is elementwise)
// and with the broadcast.
absl::StatusOr<Node*> SelectIdentity(Graph& g, Node* node) {
  Node* yes = g.AddConstant(Literal::Scalar<bool>(true));
  OpAttributes attrs;
  TESSEL_ASSIGN_OR_RETURN(
      Node * all_true,
      g.AddNode(Opcode::kBroadcast, Shape(DType::kPred, node->shape().dims()), {yes}, attrs));
  return g.AddNode(Opcode::kSelect, {all_true, node, node});
}

// Runs `opcode` over one parameter per input once more inside loop fusions: each input and the
// output wrapped in SelectIdentity, fusion on. Must give what the single node gave unfused
// (`plain`, or its error code).
void ExpectFusedAgrees(Opcode opcode, const std::vector<Literal>& inputs, const OpAttributes& attrs,
                       const std::optional<Shape>& shape, ExecutorOptions options,
                       const absl::StatusOr<Literal>& plain) {
  Graph g("fused_op");
  std::vector<Node*> operands;
  int wrapped = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Node* p = g.AddParameter(i, inputs[i].shape()).value();
    wrapped += !p->shape().is_tuple();
    operands.push_back(p->shape().is_tuple() ? p : SelectIdentity(g, p).value());
  }
  absl::StatusOr<Node*> node = shape.has_value() ? g.AddNode(opcode, *shape, operands, attrs)
                                                 : g.AddNode(opcode, operands, attrs);
  if (!node.ok()) {  // the shape rules reject the op: so must the unfused graph have
    EXPECT_FALSE(plain.ok()) << node.status();
    return;
  }
  if (!(*node)->shape().is_tuple()) {
    g.set_root(SelectIdentity(g, *node).value());
    ++wrapped;
  }
  options.fusion = true;
  ExecutionStats stats;
  absl::StatusOr<std::vector<Literal>> fused = Executor(options).Run(g, inputs, &stats);
  const std::string what = absl::StrCat(OpcodeName(opcode), " fused");
  if (!plain.ok()) {
    ASSERT_FALSE(fused.ok()) << what;
    EXPECT_EQ(fused.status().code(), plain.status().code()) << what << ": " << fused.status();
    return;
  }
  ASSERT_TRUE(fused.ok()) << what << ": " << fused.status();
  if (wrapped > 0) {
    EXPECT_GT(stats.fusions, 0) << what;
  }
  if ((*node)->shape().is_tuple()) return;
  ExpectWithinOneUlp((*fused)[0], *plain, what);
}

// Builds a graph with one parameter per input and a single `opcode` node over them, runs it
// (alone the node is never fused), and checks that the same op inside loop fusions agrees.
absl::StatusOr<Literal> RunOp(Opcode opcode, const std::vector<Literal>& inputs,
                              OpAttributes attrs = {}, std::optional<Shape> shape = std::nullopt,
                              ExecutorOptions options = {}) {
  absl::StatusOr<Literal> plain = [&]() -> absl::StatusOr<Literal> {
    Graph g("op");
    std::vector<Node*> params;
    for (size_t i = 0; i < inputs.size(); ++i) {
      TESSEL_ASSIGN_OR_RETURN(Node * p, g.AddParameter(i, inputs[i].shape()));
      params.push_back(p);
    }
    absl::StatusOr<Node*> node = shape.has_value() ? g.AddNode(opcode, *shape, params, attrs)
                                                   : g.AddNode(opcode, params, attrs);
    if (!node.ok()) return node.status();
    Executor executor(options);
    TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> out, executor.Run(g, inputs));
    if (out.size() != 1) return absl::InternalError("expected one output");
    return std::move(out[0]);
  }();
  ExpectFusedAgrees(opcode, inputs, attrs, shape, options, plain);
  return plain;
}

Literal MustRun(Opcode opcode, const std::vector<Literal>& inputs, OpAttributes attrs = {},
                std::optional<Shape> shape = std::nullopt, ExecutorOptions options = {}) {
  absl::StatusOr<Literal> out = RunOp(opcode, inputs, attrs, shape, options);
  EXPECT_TRUE(out.ok()) << OpcodeName(opcode) << ": " << out.status();
  return out.ok() ? std::move(*out) : Literal();
}

// Stores the exact double `v` into element i of `lit` the way a kernel computing in f32 (bf16,
// f16, f32) or f64 would round it.
void StoreRounded(Literal& lit, int64_t i, double v) {
  switch (lit.shape().dtype()) {
    case DType::kBF16:
      lit.data<bf16>()[i] = bf16(static_cast<float>(v));
      break;
    case DType::kF16:
      lit.data<f16>()[i] = f16(static_cast<float>(v));
      break;
    case DType::kF32:
      lit.data<float>()[i] = static_cast<float>(v);
      break;
    default:
      lit.SetFromDouble(i, v);
      break;
  }
}

// ---- Unary -------------------------------------------------------------------------------------

double RefUnaryFloat(Opcode op, double x) {
  switch (op) {
    case Opcode::kAbs:
      return std::abs(x);
    case Opcode::kNegate:
      return -x;
    case Opcode::kExp:
      return std::exp(x);
    case Opcode::kLog:
      return std::log(x);
    case Opcode::kTanh:
      return std::tanh(x);
    case Opcode::kLogistic:
      return 1 / (1 + std::exp(-x));
    case Opcode::kSqrt:
      return std::sqrt(x);
    case Opcode::kRsqrt:
      return 1 / std::sqrt(x);
    case Opcode::kSine:
      return std::sin(x);
    case Opcode::kCosine:
      return std::cos(x);
    case Opcode::kCopy:
      return x;
    default:
      ADD_FAILURE() << "no reference";
      return 0;
  }
}

TEST(ExecutorUnaryTest, FloatOpsEveryFloatDTypeAndRank) {
  const Opcode ops[] = {Opcode::kAbs,  Opcode::kNegate,   Opcode::kExp,  Opcode::kLog,
                        Opcode::kTanh, Opcode::kLogistic, Opcode::kSqrt, Opcode::kRsqrt,
                        Opcode::kSine, Opcode::kCosine,   Opcode::kCopy};
  uint32_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (Opcode op : ops) {
      for (const auto& dims : kElementwiseDims) {
        bool positive = op == Opcode::kLog || op == Opcode::kSqrt || op == Opcode::kRsqrt;
        Literal x = Random(Shape(dtype, dims), seed++, positive ? 0.05 : -4, 4);
        Literal want(x.shape());
        for (int64_t i = 0; i < x.num_elements(); ++i) {
          StoreRounded(want, i, RefUnaryFloat(op, x.GetAsDouble(i)));
        }
        ExpectClose(MustRun(op, {x}), want, Rtol(dtype) * (dtype == DType::kF32 ? 2 : 1), 1e-7,
                    absl::StrCat(OpcodeName(op), " ", x.shape().ToString()));
      }
    }
  }
}

TEST(ExecutorUnaryTest, FloatSpecialValues) {
  Literal x = Literal::FromVector<float>(
      {6}, {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
            -std::numeric_limits<float>::infinity(), std::nanf(""), -1.0f});
  Literal e = MustRun(Opcode::kExp, {x});
  EXPECT_EQ(e.data<float>()[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(e.data<float>()[3], 0.0f);
  EXPECT_TRUE(std::isnan(e.data<float>()[4]));
  // Below ln(FLT_MIN) the result is subnormal or zero, never a clamped constant; f64 likewise.
  Literal tiny = Literal::FromVector<float>({4}, {-87.5f, -100.0f, -104.0f, -200.0f});
  Literal tiny_exp = MustRun(Opcode::kExp, {tiny});
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tiny_exp.data<float>()[i], std::exp(tiny.data<float>()[i]))
        << "exp(" << tiny.data<float>()[i] << ")";
  }
  Literal xd =
      Literal::FromVector<double>({3}, {-std::numeric_limits<double>::infinity(), -710.0, -745.5});
  Literal ed = MustRun(Opcode::kExp, {xd});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ed.data<double>()[i], std::exp(xd.data<double>()[i]));
  Literal l = MustRun(Opcode::kLog, {x});
  EXPECT_EQ(l.data<float>()[0], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(l.data<float>()[5]));
  Literal t = MustRun(Opcode::kTanh, {x});
  EXPECT_EQ(t.data<float>()[2], 1.0f);
  EXPECT_EQ(t.data<float>()[3], -1.0f);
}

template <typename T>
void CheckIntegerUnary(uint32_t seed) {
  const DType dtype = DTypeOf<T>();
  for (const auto& dims : kElementwiseDims) {
    Literal x = Random(Shape(dtype, dims), seed++, -100, 100);
    auto xs = x.data<T>();
    Literal want_abs(x.shape()), want_neg(x.shape()), want_not(x.shape());
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      int64_t v = static_cast<int64_t>(xs[i]);
      want_abs.data<T>()[i] = static_cast<T>(v < 0 ? -v : v);
      want_neg.data<T>()[i] = static_cast<T>(-v);  // modular for u8
      want_not.data<T>()[i] = static_cast<T>(~v);
    }
    EXPECT_EQ(MustRun(Opcode::kAbs, {x}), want_abs) << x.ToString();
    EXPECT_EQ(MustRun(Opcode::kNegate, {x}), want_neg) << x.ToString();
    EXPECT_EQ(MustRun(Opcode::kNot, {x}), want_not) << x.ToString();
    EXPECT_EQ(MustRun(Opcode::kCopy, {x}), x);
  }
}

TEST(ExecutorUnaryTest, IntegerOps) {
  CheckIntegerUnary<uint8_t>(10);
  CheckIntegerUnary<int32_t>(20);
  CheckIntegerUnary<int64_t>(30);
  // XLA: abs and negate of INT_MIN wrap to INT_MIN.
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  Literal x = Literal::FromVector<int32_t>({2}, {kMin, -7});
  EXPECT_EQ(MustRun(Opcode::kAbs, {x}), Literal::FromVector<int32_t>({2}, {kMin, 7}));
  EXPECT_EQ(MustRun(Opcode::kNegate, {x}), Literal::FromVector<int32_t>({2}, {kMin, 7}));
}

TEST(ExecutorUnaryTest, PredNot) {
  for (const auto& dims : kElementwiseDims) {
    Literal x = Random(Shape(DType::kPred, dims), 5);
    Literal want(x.shape());
    for (int64_t i = 0; i < x.num_elements(); ++i) want.data<bool>()[i] = !x.data<bool>()[i];
    EXPECT_EQ(MustRun(Opcode::kNot, {x}), want);
  }
}

TEST(ExecutorUnaryTest, LargeTensorsUseThreadsWithSameResult) {
  Literal x = Random(Shape(DType::kF32, {300, 1001}), 77);
  Literal serial = MustRun(Opcode::kTanh, {x}, {}, std::nullopt, ExecutorOptions{1});
  Literal parallel = MustRun(Opcode::kTanh, {x}, {}, std::nullopt, ExecutorOptions{4});
  EXPECT_EQ(serial, parallel);
}

// ---- Convert -----------------------------------------------------------------------------------

// Element i of `x` as an exact int64 (pred and integer types).
int64_t ExactInt(const Literal& x, int64_t i) {
  switch (x.shape().dtype()) {
    case DType::kPred:
      return x.data<bool>()[i];
    case DType::kU8:
      return x.data<uint8_t>()[i];
    case DType::kS32:
      return x.data<int32_t>()[i];
    default:
      return x.data<int64_t>()[i];
  }
}

// XLA convert of element i of `x` into element i of `out`, written from the spec: -> pred is
// != 0; float -> int truncates, saturates, NaN -> 0; int -> int wraps; -> bf16/f16 rounds
// from f32.
void RefConvert(const Literal& x, int64_t i, Literal& out) {
  const bool from_float = IsFloating(x.shape().dtype());
  const double v = from_float ? x.GetAsDouble(i) : static_cast<double>(ExactInt(x, i));
  VisitDType(out.shape().dtype(), [&]<typename To>() {
    To& dst = out.data<To>()[i];
    if constexpr (std::is_same_v<To, bool>) {
      dst = from_float ? v != 0 : ExactInt(x, i) != 0;
    } else if constexpr (std::is_integral_v<To>) {
      if (!from_float) {
        dst = static_cast<To>(ExactInt(x, i));  // modulo 2^bits (C++20)
      } else if (std::isnan(v)) {
        dst = 0;
      } else if (std::trunc(v) <= static_cast<double>(std::numeric_limits<To>::min())) {
        dst = std::numeric_limits<To>::min();
      } else if (std::trunc(v) >= static_cast<double>(std::numeric_limits<To>::max())) {
        dst = std::numeric_limits<To>::max();
      } else {
        dst = static_cast<To>(std::trunc(v));
      }
    } else if constexpr (std::is_same_v<To, double>) {
      dst = from_float ? v : static_cast<double>(ExactInt(x, i));
    } else {
      float f = from_float ? static_cast<float>(v) : static_cast<float>(ExactInt(x, i));
      dst = static_cast<To>(f);
    }
  });
}

TEST(ExecutorConvertTest, EveryPairOfDTypes) {
  const std::vector<double> values = {0,      1,   -1,   2.5,   -2.5, 0.75,  127.9,
                                      -128.5, 255, 256,  300,   -300, 65504, 1e10,
                                      -1e10,  3e9, 1e30, -1e30, 1e-3, 70000, -7.99};
  for (DType from : kAllDTypes) {
    Literal x(Shape(from, {static_cast<int64_t>(values.size())}));
    for (size_t i = 0; i < values.size(); ++i) x.SetFromDouble(i, values[i]);
    if (IsFloating(from)) {
      // Append specials.
      std::vector<double> all = x.ToDoubles();
      all.push_back(std::nan(""));
      all.push_back(std::numeric_limits<double>::infinity());
      all.push_back(-std::numeric_limits<double>::infinity());
      x = Literal(Shape(from, {static_cast<int64_t>(all.size())}));
      for (size_t i = 0; i < all.size(); ++i) x.SetFromDouble(i, all[i]);
    }
    for (DType to : kAllDTypes) {
      Literal got = MustRun(Opcode::kConvert, {x}, {}, x.shape().WithDType(to));
      Literal want(x.shape().WithDType(to));
      for (int64_t i = 0; i < x.num_elements(); ++i) RefConvert(x, i, want);
      EXPECT_EQ(got, want) << DTypeName(from) << " -> " << DTypeName(to) << "\n got "
                           << got.ToString() << "\nwant " << want.ToString() << "\n  in "
                           << x.ToString();
    }
  }
}

TEST(ExecutorConvertTest, IntegerWrapsAndS64Extremes) {
  Literal x = Literal::FromVector<int64_t>(
      {3}, {int64_t{1} << 40 | 5, -1, std::numeric_limits<int64_t>::min()});
  EXPECT_EQ(MustRun(Opcode::kConvert, {x}, {}, Shape(DType::kS32, {3})),
            Literal::FromVector<int32_t>({3}, {5, -1, 0}));
  Literal f = Literal::FromVector<float>({2}, {1e20f, -1e20f});
  EXPECT_EQ(MustRun(Opcode::kConvert, {f}, {}, Shape(DType::kS64, {2})),
            Literal::FromVector<int64_t>(
                {2}, {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}));
}

// ---- Binary ------------------------------------------------------------------------------------

double RefBinaryFloat(Opcode op, double a, double b) {
  switch (op) {
    case Opcode::kAdd:
      return a + b;
    case Opcode::kSubtract:
      return a - b;
    case Opcode::kMultiply:
      return a * b;
    case Opcode::kDivide:
      return a / b;
    case Opcode::kMaximum:
      return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case Opcode::kMinimum:
      return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case Opcode::kPower:
      return std::pow(a, b);
    default:
      ADD_FAILURE();
      return 0;
  }
}

// Integer reference in int64 (inputs are small), wrapped to T by the caller's cast.
template <typename T>
T RefBinaryInt(Opcode op, T ta, T tb) {
  int64_t a = ta, b = tb;
  switch (op) {
    case Opcode::kAdd:
      return static_cast<T>(a + b);
    case Opcode::kSubtract:
      return static_cast<T>(a - b);
    case Opcode::kMultiply:
      return static_cast<T>(a * b);
    case Opcode::kDivide:
      if (b == 0) return std::is_signed_v<T> ? T(-1) : std::numeric_limits<T>::max();
      return static_cast<T>(a / b);
    case Opcode::kMaximum:
      return static_cast<T>(std::max(a, b));
    case Opcode::kMinimum:
      return static_cast<T>(std::min(a, b));
    case Opcode::kPower: {
      if (b < 0) return a == 1 ? 1 : 0;
      int64_t r = 1;
      for (int64_t i = 0; i < b; ++i) r *= a;
      return static_cast<T>(r);
    }
    case Opcode::kAnd:
      return static_cast<T>(a & b);
    case Opcode::kOr:
      return static_cast<T>(a | b);
    default:
      ADD_FAILURE();
      return 0;
  }
}

TEST(ExecutorBinaryTest, FloatOpsEveryFloatDType) {
  const Opcode ops[] = {Opcode::kAdd,     Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide,
                        Opcode::kMaximum, Opcode::kMinimum,  Opcode::kPower};
  uint32_t seed = 100;
  for (DType dtype : kFloatDTypes) {
    for (Opcode op : ops) {
      for (const auto& dims : kElementwiseDims) {
        bool power = op == Opcode::kPower;
        Literal a = Random(Shape(dtype, dims), seed++, power ? 0.1 : -4, 4);
        Literal b = Random(Shape(dtype, dims), seed++, power ? -2 : -4, power ? 2 : 4);
        Literal want(a.shape());
        for (int64_t i = 0; i < a.num_elements(); ++i) {
          StoreRounded(want, i, RefBinaryFloat(op, a.GetAsDouble(i), b.GetAsDouble(i)));
        }
        ExpectClose(MustRun(op, {a, b}), want, Rtol(dtype), 0,
                    absl::StrCat(OpcodeName(op), " ", a.shape().ToString()));
      }
    }
  }
}

TEST(ExecutorBinaryTest, MaxMinPropagateNaN) {
  Literal a = Literal::FromVector<float>({3}, {std::nanf(""), 1.0f, 2.0f});
  Literal b = Literal::FromVector<float>({3}, {1.0f, std::nanf(""), 3.0f});
  for (Opcode op : {Opcode::kMaximum, Opcode::kMinimum}) {
    Literal out = MustRun(op, {a, b});
    EXPECT_TRUE(std::isnan(out.data<float>()[0]));
    EXPECT_TRUE(std::isnan(out.data<float>()[1]));
  }
  EXPECT_EQ(MustRun(Opcode::kMaximum, {a, b}).data<float>()[2], 3.0f);
}

template <typename T>
void CheckIntegerBinary(uint32_t seed) {
  const Opcode ops[] = {Opcode::kAdd,    Opcode::kSubtract, Opcode::kMultiply,
                        Opcode::kDivide, Opcode::kMaximum,  Opcode::kMinimum,
                        Opcode::kPower,  Opcode::kAnd,      Opcode::kOr};
  const DType dtype = DTypeOf<T>();
  for (Opcode op : ops) {
    for (const auto& dims : kElementwiseDims) {
      bool power = op == Opcode::kPower;
      // Division draws zeros on purpose; u8 products wrap.
      Literal a = Random(Shape(dtype, dims), seed++, power ? -3 : -200, power ? 3 : 200);
      Literal b = Random(Shape(dtype, dims), seed++, power ? -2 : -5, power ? 5 : 5);
      Literal want(a.shape());
      for (int64_t i = 0; i < a.num_elements(); ++i) {
        want.data<T>()[i] = RefBinaryInt<T>(op, a.data<T>()[i], b.data<T>()[i]);
      }
      EXPECT_EQ(MustRun(op, {a, b}), want)
          << OpcodeName(op) << "\n a " << a.ToString() << "\n b " << b.ToString();
    }
  }
}

TEST(ExecutorBinaryTest, IntegerOpsEveryIntegerDType) {
  CheckIntegerBinary<uint8_t>(200);
  CheckIntegerBinary<int32_t>(300);
  CheckIntegerBinary<int64_t>(400);
}

TEST(ExecutorBinaryTest, IntegerDivisionEdgeCasesFollowXla) {
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  Literal a = Literal::FromVector<int32_t>({4}, {7, -7, kMin, kMin});
  Literal b = Literal::FromVector<int32_t>({4}, {0, 0, -1, 2});
  EXPECT_EQ(MustRun(Opcode::kDivide, {a, b}),
            Literal::FromVector<int32_t>({4}, {-1, -1, kMin, kMin / 2}));
  Literal ua = Literal::FromVector<uint8_t>({2}, {7, 200});
  Literal ub = Literal::FromVector<uint8_t>({2}, {0, 3});
  EXPECT_EQ(MustRun(Opcode::kDivide, {ua, ub}), Literal::FromVector<uint8_t>({2}, {255, 66}));
  // Overflow wraps.
  Literal big = Literal::FromVector<int32_t>({1}, {std::numeric_limits<int32_t>::max()});
  Literal one = Literal::FromVector<int32_t>({1}, {1});
  EXPECT_EQ(MustRun(Opcode::kAdd, {big, one}), Literal::FromVector<int32_t>({1}, {kMin}));
}

TEST(ExecutorBinaryTest, PredAndOr) {
  for (const auto& dims : kElementwiseDims) {
    Literal a = Random(Shape(DType::kPred, dims), 7);
    Literal b = Random(Shape(DType::kPred, dims), 8);
    Literal want_and(a.shape()), want_or(a.shape());
    for (int64_t i = 0; i < a.num_elements(); ++i) {
      want_and.data<bool>()[i] = a.data<bool>()[i] && b.data<bool>()[i];
      want_or.data<bool>()[i] = a.data<bool>()[i] || b.data<bool>()[i];
    }
    EXPECT_EQ(MustRun(Opcode::kAnd, {a, b}), want_and);
    EXPECT_EQ(MustRun(Opcode::kOr, {a, b}), want_or);
  }
}

TEST(ExecutorBinaryTest, CompareEveryDirectionAndDType) {
  const ComparisonDirection directions[] = {ComparisonDirection::kEq, ComparisonDirection::kNe,
                                            ComparisonDirection::kLt, ComparisonDirection::kLe,
                                            ComparisonDirection::kGt, ComparisonDirection::kGe};
  uint32_t seed = 500;
  for (DType dtype : kAllDTypes) {
    for (ComparisonDirection direction : directions) {
      // Few distinct values so that equality happens.
      Literal a = Random(Shape(dtype, {7, 13}), seed++, 0, 3);
      Literal b = Random(Shape(dtype, {7, 13}), seed++, 0, 3);
      if (IsFloating(dtype)) {
        for (int64_t i = 0; i < a.num_elements(); ++i) {
          a.SetFromDouble(i, std::floor(a.GetAsDouble(i)));
          b.SetFromDouble(i, std::floor(b.GetAsDouble(i)));
        }
        a.SetFromDouble(0, std::nan(""));
      }
      Literal want(Shape(DType::kPred, {7, 13}));
      for (int64_t i = 0; i < a.num_elements(); ++i) {
        double x = a.GetAsDouble(i), y = b.GetAsDouble(i);
        bool r = false;
        switch (direction) {
          case ComparisonDirection::kEq:
            r = x == y;
            break;
          case ComparisonDirection::kNe:
            r = x != y;
            break;
          case ComparisonDirection::kLt:
            r = x < y;
            break;
          case ComparisonDirection::kLe:
            r = x <= y;
            break;
          case ComparisonDirection::kGt:
            r = x > y;
            break;
          case ComparisonDirection::kGe:
            r = x >= y;
            break;
        }
        want.data<bool>()[i] = r;
      }
      OpAttributes attrs;
      attrs.comparison_direction = direction;
      EXPECT_EQ(MustRun(Opcode::kCompare, {a, b}, attrs), want)
          << DTypeName(dtype) << " " << ComparisonDirectionName(direction);
    }
  }
}

TEST(ExecutorBinaryTest, LargeAddIsThreadCountIndependent) {
  Literal a = Random(Shape(DType::kF32, {1 << 18}), 1);
  Literal b = Random(Shape(DType::kF32, {1 << 18}), 2);
  Literal want(a.shape());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    want.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
  }
  EXPECT_EQ(MustRun(Opcode::kAdd, {a, b}, {}, std::nullopt, ExecutorOptions{4}), want);
  EXPECT_EQ(MustRun(Opcode::kAdd, {a, b}, {}, std::nullopt, ExecutorOptions{1}), want);
}

// ---- Select and clamp --------------------------------------------------------------------------

TEST(ExecutorTernaryTest, SelectFullAndScalarPredicate) {
  uint32_t seed = 600;
  for (DType dtype : kAllDTypes) {
    for (const auto& dims : kElementwiseDims) {
      Shape shape(dtype, dims);
      Literal p = Random(shape.WithDType(DType::kPred), seed++);
      Literal a = Random(shape, seed++), b = Random(shape, seed++);
      Literal want(shape);
      for (int64_t i = 0; i < a.num_elements(); ++i) {
        want.SetFromDouble(i, p.data<bool>()[i] ? a.GetAsDouble(i) : b.GetAsDouble(i));
      }
      EXPECT_EQ(MustRun(Opcode::kSelect, {p, a, b}), want) << shape.ToString();
      for (bool scalar : {false, true}) {
        EXPECT_EQ(MustRun(Opcode::kSelect, {Literal::Scalar<bool>(scalar), a, b}), scalar ? a : b);
      }
    }
  }
}

TEST(ExecutorTernaryTest, ClampWithScalarAndArrayBounds) {
  uint32_t seed = 700;
  for (DType dtype : kNumericDTypes) {
    for (const auto& dims : kElementwiseDims) {
      Shape shape(dtype, dims);
      Literal x = Random(shape, seed++, -50, 50);
      Literal lo_array = Random(shape, seed++, -20, 0);
      Literal hi_array = Random(shape, seed++, 1, 20);
      Literal lo_scalar(Shape(dtype, {})), hi_scalar(Shape(dtype, {}));
      lo_scalar.SetFromDouble(0, dtype == DType::kU8 ? 3 : -5);
      hi_scalar.SetFromDouble(0, 9);
      for (bool scalar_bounds : {true, false}) {
        const Literal& lo = scalar_bounds ? lo_scalar : lo_array;
        const Literal& hi = scalar_bounds ? hi_scalar : hi_array;
        Literal want(shape);
        for (int64_t i = 0; i < x.num_elements(); ++i) {
          double l = lo.GetAsDouble(scalar_bounds ? 0 : i);
          double h = hi.GetAsDouble(scalar_bounds ? 0 : i);
          want.SetFromDouble(i, std::min(std::max(x.GetAsDouble(i), l), h));
        }
        EXPECT_EQ(MustRun(Opcode::kClamp, {lo, x, hi}), want)
            << shape.ToString() << " scalar bounds " << scalar_bounds;
      }
    }
  }
}

// ---- Data movement -----------------------------------------------------------------------------

TEST(ExecutorDataMovementTest, Iota) {
  for (DType dtype : {DType::kS32, DType::kU8, DType::kF32, DType::kBF16, DType::kS64}) {
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{
             {7}, {3, 5}, {2, 0, 3}, {2, 3, 4, 5}, {5, 30011}, {3, 9001, 2}}) {
      // The large ones are split over threads at rows that are not multiples of the iota dim.
      for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
        Shape shape(dtype, dims);
        if (dtype == DType::kU8 && shape.num_elements() > 1000) continue;  // indices past 255
        Graph g;
        OpAttributes attrs;
        attrs.iota_dimension = d;
        ASSERT_TRUE(g.AddNode(Opcode::kIota, shape, {}, attrs).ok());
        std::vector<Literal> out = Executor(ExecutorOptions{4}).Run(g, {}).value();
        Literal want(shape);
        for (int64_t i = 0; i < want.num_elements(); ++i) {
          want.SetFromDouble(i, Unravel(i, dims)[d]);
        }
        EXPECT_EQ(out[0], want) << shape.ToString() << " dim " << d;
      }
    }
  }
}

TEST(ExecutorDataMovementTest, Broadcast) {
  struct Case {
    std::vector<int64_t> in, out, dims;
  };
  const std::vector<Case> cases = {
      {{}, {3, 4}, {}},      {{3}, {3, 4}, {0}},           {{4}, {3, 4}, {1}},
      {{4}, {2, 3, 4}, {2}}, {{2, 4}, {2, 3, 4}, {0, 2}},  {{3, 1}, {2, 3, 5, 1}, {1, 3}},
      {{0}, {0, 3}, {0}},    {{7, 13}, {7, 2, 13}, {0, 2}}};
  uint32_t seed = 800;
  for (DType dtype : {DType::kF32, DType::kS64, DType::kPred, DType::kBF16, DType::kU8}) {
    for (const Case& c : cases) {
      Literal x = Random(Shape(dtype, c.in), seed++);
      Shape out_shape(dtype, c.out);
      Literal want(out_shape);
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        std::vector<int64_t> oi = Unravel(i, c.out), xi;
        for (int64_t d : c.dims) xi.push_back(oi[d]);
        want.SetFromDouble(i, x.GetAsDouble(Ravel(xi, c.in)));
      }
      OpAttributes attrs;
      attrs.dimensions = c.dims;
      EXPECT_EQ(MustRun(Opcode::kBroadcast, {x}, attrs, out_shape), want)
          << x.shape().ToString() << " -> " << out_shape.ToString();
    }
  }
}

TEST(ExecutorDataMovementTest, Reshape) {
  Literal x = Random(Shape(DType::kF16, {2, 3, 4}), 900);
  Literal out = MustRun(Opcode::kReshape, {x}, {}, Shape(DType::kF16, {4, 6}));
  EXPECT_EQ(out.shape(), Shape(DType::kF16, {4, 6}));
  EXPECT_EQ(out.ToDoubles(), x.ToDoubles());
  Literal s = Literal::Scalar<int32_t>(5);
  EXPECT_EQ(MustRun(Opcode::kReshape, {s}, {}, Shape(DType::kS32, {1, 1})),
            Literal::FromVector<int32_t>({1, 1}, {5}));
}

TEST(ExecutorDataMovementTest, Transpose) {
  struct Case {
    std::vector<int64_t> dims, perm;
  };
  const std::vector<Case> cases = {{{7, 13}, {1, 0}},
                                   {{1, 1}, {1, 0}},
                                   {{2, 3, 4}, {2, 0, 1}},
                                   {{2, 3, 4}, {1, 2, 0}},
                                   {{2, 3, 4, 5}, {3, 1, 0, 2}},
                                   {{0, 3}, {1, 0}},
                                   {{5}, {0}},
                                   {{}, {}},
                                   {{33, 1, 65}, {2, 1, 0}},
                                   {{300, 257}, {1, 0}}};
  uint32_t seed = 1000;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kPred, DType::kS32}) {
    for (const Case& c : cases) {
      Literal x = Random(Shape(dtype, c.dims), seed++);
      std::vector<int64_t> out_dims;
      for (int64_t d : c.perm) out_dims.push_back(c.dims[d]);
      Literal want(Shape(dtype, out_dims));
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        std::vector<int64_t> oi = Unravel(i, out_dims), xi(c.dims.size());
        for (size_t d = 0; d < c.perm.size(); ++d) xi[c.perm[d]] = oi[d];
        want.SetFromDouble(i, x.GetAsDouble(Ravel(xi, c.dims)));
      }
      OpAttributes attrs;
      attrs.dimensions = c.perm;
      EXPECT_EQ(MustRun(Opcode::kTranspose, {x}, attrs, std::nullopt, ExecutorOptions{4}), want)
          << x.shape().ToString() << " perm " << absl::StrJoin(c.perm, ",");
    }
  }
}

TEST(ExecutorDataMovementTest, SliceWithStrides) {
  struct Case {
    std::vector<int64_t> dims;
    std::vector<SliceDim> slice;
  };
  const std::vector<Case> cases = {
      {{7, 13}, {{1, 6, 2}, {0, 13, 3}}},
      {{7, 13}, {{0, 7, 1}, {4, 4, 1}}},
      {{2, 3, 4, 5}, {{1, 2, 1}, {0, 3, 2}, {1, 4, 1}, {0, 5, 4}}},
      {{10}, {{3, 10, 7}}},
      {{4, 6}, {{1, 3, 1}, {0, 6, 1}}},  // whole rows: one contiguous block
  };
  uint32_t seed = 1100;
  for (DType dtype : {DType::kF32, DType::kU8, DType::kF16, DType::kS64}) {
    for (const Case& c : cases) {
      Literal x = Random(Shape(dtype, c.dims), seed++);
      std::vector<int64_t> out_dims;
      for (const SliceDim& s : c.slice)
        out_dims.push_back((s.limit - s.start + s.stride - 1) / s.stride);
      Literal want(Shape(dtype, out_dims));
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        std::vector<int64_t> oi = Unravel(i, out_dims), xi;
        for (size_t d = 0; d < oi.size(); ++d)
          xi.push_back(c.slice[d].start + oi[d] * c.slice[d].stride);
        want.SetFromDouble(i, x.GetAsDouble(Ravel(xi, c.dims)));
      }
      OpAttributes attrs;
      attrs.slice = c.slice;
      EXPECT_EQ(MustRun(Opcode::kSlice, {x}, attrs), want) << x.shape().ToString();
    }
  }
}

TEST(ExecutorDataMovementTest, PadNegativeAndInterior) {
  struct Case {
    std::vector<int64_t> dims;
    std::vector<PadDim> padding;
  };
  const std::vector<Case> cases = {
      {{5}, {{2, 3, 0}}},
      {{5}, {{-2, -1, 0}}},
      {{5}, {{1, 2, 2}}},
      {{5}, {{-3, -4, 1}}},  // crops into the interior padding
      {{4, 3}, {{-1, 2, 1}, {3, -2, 2}}},
      {{2, 3, 4}, {{0, 0, 0}, {-3, 1, 0}, {1, 1, 1}}},
      {{0, 3}, {{1, 1, 2}, {0, 1, 0}}},
      {{3}, {{-4, 1, 0}}},  // everything cropped
  };
  uint32_t seed = 1200;
  for (DType dtype : {DType::kF32, DType::kS32, DType::kBF16}) {
    for (const Case& c : cases) {
      Literal x = Random(Shape(dtype, c.dims), seed++, 1, 9);
      Literal value(Shape(dtype, {}));
      value.SetFromDouble(0, -7);
      std::vector<int64_t> out_dims;
      for (size_t d = 0; d < c.dims.size(); ++d) {
        const PadDim& p = c.padding[d];
        out_dims.push_back(p.low + p.high + c.dims[d] +
                           std::max<int64_t>(c.dims[d] - 1, 0) * p.interior);
      }
      // Reference: scatter every operand element to its padded position.
      Literal want(Shape(dtype, out_dims));
      for (int64_t i = 0; i < want.num_elements(); ++i) want.SetFromDouble(i, -7);
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        std::vector<int64_t> xi = Unravel(i, c.dims), oi;
        bool inside = true;
        for (size_t d = 0; d < xi.size(); ++d) {
          int64_t pos = c.padding[d].low + xi[d] * (c.padding[d].interior + 1);
          inside = inside && pos >= 0 && pos < out_dims[d];
          oi.push_back(pos);
        }
        if (inside) want.SetFromDouble(Ravel(oi, out_dims), x.GetAsDouble(i));
      }
      OpAttributes attrs;
      attrs.padding = c.padding;
      EXPECT_EQ(MustRun(Opcode::kPad, {x, value}, attrs), want) << x.ToString();
    }
  }
}

TEST(ExecutorDataMovementTest, Concatenate) {
  uint32_t seed = 1300;
  for (DType dtype : {DType::kF32, DType::kPred, DType::kS64}) {
    for (int64_t dim : {0, 1, 2}) {
      std::vector<std::vector<int64_t>> dims = {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}};
      dims[0][dim] = 1;
      dims[1][dim] = 0;
      dims[2][dim] = 5;
      std::vector<Literal> inputs;
      for (const auto& d : dims) inputs.push_back(Random(Shape(dtype, d), seed++));
      std::vector<int64_t> out_dims = {2, 3, 4};
      out_dims[dim] = 6;
      Literal want(Shape(dtype, out_dims));
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        std::vector<int64_t> oi = Unravel(i, out_dims);
        int64_t k = 0;
        while (oi[dim] >= dims[k][dim]) oi[dim] -= dims[k++][dim];
        want.SetFromDouble(i, inputs[k].GetAsDouble(Ravel(oi, dims[k])));
      }
      OpAttributes attrs;
      attrs.dimensions = {dim};
      EXPECT_EQ(MustRun(Opcode::kConcatenate, inputs, attrs), want) << "dim " << dim;
    }
  }
}

TEST(ExecutorDataMovementTest, DynamicSliceClampsStarts) {
  Literal x = Random(Shape(DType::kF32, {7, 13}), 1400);
  const std::vector<std::pair<int64_t, int64_t>> starts = {
      {0, 0}, {2, 5}, {-3, 4}, {6, 100}, {5, 8}, {std::numeric_limits<int32_t>::min(), -1}};
  for (DType index_type : {DType::kS32, DType::kS64}) {
    for (auto [s0, s1] : starts) {
      Literal i0(Shape(index_type, {})), i1(Shape(index_type, {}));
      i0.SetFromDouble(0, static_cast<double>(s0));
      i1.SetFromDouble(0, static_cast<double>(s1));
      OpAttributes attrs;
      attrs.dynamic_slice_sizes = {3, 5};
      Literal got = MustRun(Opcode::kDynamicSlice, {x, i0, i1}, attrs);
      int64_t c0 = std::clamp<int64_t>(s0, 0, 7 - 3), c1 = std::clamp<int64_t>(s1, 0, 13 - 5);
      Literal want(Shape(DType::kF32, {3, 5}));
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 5; ++j) {
          want.data<float>()[i * 5 + j] = x.data<float>()[(c0 + i) * 13 + c1 + j];
        }
      }
      EXPECT_EQ(got, want) << "starts " << s0 << "," << s1;
    }
  }
}

TEST(ExecutorDataMovementTest, DynamicUpdateSliceClampsStarts) {
  Literal x = Random(Shape(DType::kS32, {4, 5, 6}), 1500, -9, 9);
  Literal update = Random(Shape(DType::kS32, {2, 5, 3}), 1501, 100, 200);
  const std::vector<std::vector<int64_t>> starts = {{0, 0, 0}, {1, 2, 3}, {3, -1, 9}, {-5, 0, 2}};
  for (const auto& s : starts) {
    std::vector<Literal> inputs = {x, update};
    for (int64_t v : s) inputs.push_back(Literal::Scalar<int64_t>(v));
    Literal got = MustRun(Opcode::kDynamicUpdateSlice, inputs);
    std::vector<int64_t> c = {std::clamp<int64_t>(s[0], 0, 2), std::clamp<int64_t>(s[1], 0, 0),
                              std::clamp<int64_t>(s[2], 0, 3)};
    Literal want = x;
    for (int64_t i = 0; i < update.num_elements(); ++i) {
      std::vector<int64_t> ui = Unravel(i, {2, 5, 3});
      for (int d = 0; d < 3; ++d) ui[d] += c[d];
      want.data<int32_t>()[Ravel(ui, {4, 5, 6})] = update.data<int32_t>()[i];
    }
    EXPECT_EQ(got, want) << absl::StrJoin(s, ",");
  }
}

// ---- Reduce ------------------------------------------------------------------------------------

// Sequential reference: for each output element, init op x[r0] op x[r1] ... over the reduced
// elements in row-major order, in T's compute type (f32 for bf16/f16), as the executor
// documents. Results must therefore match bit for bit.
template <typename T>
Literal RefReduce(const Literal& x, T init, const std::vector<int64_t>& dims, ReduceKind kind) {
  using A = std::conditional_t<std::is_same_v<T, bf16> || std::is_same_v<T, f16>, float, T>;
  const std::vector<int64_t>& in_dims = x.shape().dims();
  std::vector<int64_t> out_dims, reduced_dims;
  for (int64_t d = 0; d < x.shape().rank(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    (reduced ? reduced_dims : out_dims).push_back(in_dims[d]);
  }
  Literal out(Shape(x.shape().dtype(), out_dims));
  int64_t reduced_count = 1;
  for (int64_t d : reduced_dims) reduced_count *= d;
  auto apply = [&](A a, A b) -> A {
    switch (kind) {
      case ReduceKind::kAdd:
        if constexpr (std::is_integral_v<A>)
          return static_cast<A>(int64_t{a} + int64_t{b});
        else
          return a + b;
      case ReduceKind::kMultiply:
        if constexpr (std::is_integral_v<A>)
          return static_cast<A>(int64_t{a} * int64_t{b});
        else
          return a * b;
      case ReduceKind::kMaximum:
        if constexpr (std::is_floating_point_v<A>) {
          if (std::isnan(a) || std::isnan(b)) return NAN;
        }
        return std::max(a, b);
      case ReduceKind::kMinimum:
        if constexpr (std::is_floating_point_v<A>) {
          if (std::isnan(a) || std::isnan(b)) return NAN;
        }
        return std::min(a, b);
      case ReduceKind::kAnd:
        if constexpr (std::is_same_v<A, bool>)
          return a && b;
        else if constexpr (std::is_integral_v<A>)
          return static_cast<A>(a & b);
        break;
      case ReduceKind::kOr:
        if constexpr (std::is_same_v<A, bool>)
          return a || b;
        else if constexpr (std::is_integral_v<A>)
          return static_cast<A>(a | b);
        break;
    }
    ADD_FAILURE();
    return a;
  };
  for (int64_t o = 0; o < out.num_elements(); ++o) {
    std::vector<int64_t> oi = Unravel(o, out_dims);
    A acc = static_cast<A>(init);
    for (int64_t r = 0; r < reduced_count; ++r) {
      std::vector<int64_t> ri = Unravel(r, reduced_dims), xi;
      size_t next_out = 0, next_reduced = 0;
      for (int64_t d = 0; d < x.shape().rank(); ++d) {
        bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
        xi.push_back(reduced ? ri[next_reduced++] : oi[next_out++]);
      }
      acc = apply(acc, static_cast<A>(x.data<T>()[Ravel(xi, in_dims)]));
    }
    out.data<T>()[o] = static_cast<T>(acc);
  }
  return out;
}

template <typename T>
void CheckReduce(const std::vector<ReduceKind>& kinds, uint32_t seed) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<std::vector<int64_t>>>> cases = {
      {{7, 13}, {{}, {0}, {1}, {0, 1}, {1, 0}}},
      {{2, 3, 4, 5}, {{1, 3}, {0, 2, 3}, {0, 1, 2, 3}, {3}, {0}, {2}, {0, 2}, {1, 2}, {2, 3}}},
      {{3, 0, 5}, {{2}, {1, 2}}},  // an empty reduced dim before a run: init only
      {{}, {{}}},
      {{0, 4}, {{0}, {1}}},
      {{130, 3}, {{1}, {0}}},  // more than one block of accumulators per row
      {{3, 200}, {{0}}},
  };
  const DType dtype = DTypeOf<T>();
  for (ReduceKind kind : kinds) {
    for (const auto& [shape_dims, dim_sets] : cases) {
      for (const auto& dims : dim_sets) {
        // Products of many values overflow quickly: keep them near 1.
        bool mul = kind == ReduceKind::kMultiply;
        Literal x = Random(Shape(dtype, shape_dims), seed++, mul ? 0 : -9, mul ? 2 : 9);
        T init_value = static_cast<T>(kind == ReduceKind::kMultiply ? 1
                                      : kind == ReduceKind::kAnd    ? -1
                                                                    : 0);
        if constexpr (std::is_same_v<T, bool>) init_value = kind == ReduceKind::kAnd;
        OpAttributes attrs;
        attrs.dimensions = dims;
        attrs.reduce_kind = kind;
        Literal got = MustRun(Opcode::kReduce, {x, Literal::Scalar<T>(init_value)}, attrs,
                              std::nullopt, ExecutorOptions{4});
        ExpectEqual(got, RefReduce<T>(x, init_value, dims, kind),
                    absl::StrCat(ReduceKindName(kind), " of ", x.shape().ToString(), " over {",
                                 absl::StrJoin(dims, ","), "}"));
      }
    }
  }
}

TEST(ExecutorReduceTest, ArithmeticKindsOnFloats) {
  const std::vector<ReduceKind> kinds = {ReduceKind::kAdd, ReduceKind::kMultiply,
                                         ReduceKind::kMaximum, ReduceKind::kMinimum};
  CheckReduce<float>(kinds, 1);
  CheckReduce<double>(kinds, 2);
  CheckReduce<bf16>(kinds, 3);
  CheckReduce<f16>(kinds, 4);
}

TEST(ExecutorReduceTest, AllKindsOnIntegers) {
  const std::vector<ReduceKind> kinds = {ReduceKind::kAdd,     ReduceKind::kMultiply,
                                         ReduceKind::kMaximum, ReduceKind::kMinimum,
                                         ReduceKind::kAnd,     ReduceKind::kOr};
  CheckReduce<int32_t>(kinds, 5);
  CheckReduce<int64_t>(kinds, 6);
  CheckReduce<uint8_t>(kinds, 7);
}

TEST(ExecutorReduceTest, AndOrOnPred) { CheckReduce<bool>({ReduceKind::kAnd, ReduceKind::kOr}, 8); }

TEST(ExecutorReduceTest, LargeSumIsSequentialAndThreadCountIndependent) {
  // Column sums and a full sum over 2^20 elements: same bits on 1 and 4 threads, and equal to
  // the sequential reference.
  Literal x = Random(Shape(DType::kF32, {1024, 1024}), 9);
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {0, 1}}) {
    OpAttributes attrs;
    attrs.dimensions = dims;
    Literal init = Literal::Scalar<float>(0);
    Literal one = MustRun(Opcode::kReduce, {x, init}, attrs, std::nullopt, ExecutorOptions{1});
    Literal four = MustRun(Opcode::kReduce, {x, init}, attrs, std::nullopt, ExecutorOptions{4});
    EXPECT_EQ(one, four);
    ExpectEqual(one, RefReduce<float>(x, 0.0f, dims, ReduceKind::kAdd));
  }
}

// ---- Dot ---------------------------------------------------------------------------------------

// Reference dot in double: out[batch, lhs free, rhs free] = sum over contracting indices.
Literal RefDot(const Literal& lhs, const Literal& rhs, const DotDimensionNumbers& dn) {
  const Shape& ls = lhs.shape();
  const Shape& rs = rhs.shape();
  auto free_dims = [](const Shape& s, const std::vector<int64_t>& batch,
                      const std::vector<int64_t>& contracting) {
    std::vector<int64_t> free;
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
          std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
        free.push_back(d);
      }
    }
    return free;
  };
  std::vector<int64_t> lf = free_dims(ls, dn.lhs_batch_dims, dn.lhs_contracting_dims);
  std::vector<int64_t> rf = free_dims(rs, dn.rhs_batch_dims, dn.rhs_contracting_dims);
  std::vector<int64_t> out_dims, contracting_sizes;
  for (int64_t d : dn.lhs_batch_dims) out_dims.push_back(ls.dim(d));
  for (int64_t d : lf) out_dims.push_back(ls.dim(d));
  for (int64_t d : rf) out_dims.push_back(rs.dim(d));
  int64_t k_count = 1;
  for (int64_t d : dn.lhs_contracting_dims) {
    contracting_sizes.push_back(ls.dim(d));
    k_count *= ls.dim(d);
  }
  Literal out(Shape(ls.dtype(), out_dims));
  const size_t nb = dn.lhs_batch_dims.size();
  for (int64_t o = 0; o < out.num_elements(); ++o) {
    std::vector<int64_t> oi = Unravel(o, out_dims);
    std::vector<int64_t> li(ls.rank()), ri(rs.rank());
    for (size_t b = 0; b < nb; ++b) {
      li[dn.lhs_batch_dims[b]] = oi[b];
      ri[dn.rhs_batch_dims[b]] = oi[b];
    }
    for (size_t f = 0; f < lf.size(); ++f) li[lf[f]] = oi[nb + f];
    for (size_t f = 0; f < rf.size(); ++f) ri[rf[f]] = oi[nb + lf.size() + f];
    double sum = 0;
    bool any = false;
    for (int64_t k = 0; k < k_count; ++k) {
      std::vector<int64_t> ki = Unravel(k, contracting_sizes);
      for (size_t c = 0; c < ki.size(); ++c) {
        li[dn.lhs_contracting_dims[c]] = ki[c];
        ri[dn.rhs_contracting_dims[c]] = ki[c];
      }
      double a = lhs.GetAsDouble(Ravel(li, ls.dims())), b = rhs.GetAsDouble(Ravel(ri, rs.dims()));
      sum += a * b;
      any = any || (a != 0 && b != 0);
    }
    if (ls.dtype() == DType::kPred) {
      out.SetFromDouble(o, any ? 1 : 0);
    } else if (ls.dtype() == DType::kU8) {
      out.data<uint8_t>()[o] = static_cast<uint8_t>(static_cast<int64_t>(sum));
    } else {
      StoreRounded(out, o, sum);
    }
  }
  return out;
}

struct DotCase {
  std::string name;
  std::vector<int64_t> lhs, rhs;
  DotDimensionNumbers dn;
};

const std::vector<DotCase>& DotCases() {
  static const auto* cases = new std::vector<DotCase>{
      {"matmul 7x13x5", {7, 13}, {13, 5}, Dn({}, {}, {1}, {0})},
      {"matmul 33x65x17", {33, 65}, {65, 17}, Dn({}, {}, {1}, {0})},
      {"1x1", {1, 1}, {1, 1}, Dn({}, {}, {1}, {0})},
      {"lhs contracting dim 0", {13, 7}, {13, 5}, Dn({}, {}, {0}, {0})},
      {"rhs contracting dim 1", {7, 13}, {5, 13}, Dn({}, {}, {1}, {1})},
      {"both transposed", {13, 7}, {5, 13}, Dn({}, {}, {0}, {1})},
      {"batch", {3, 4, 5}, {3, 5, 6}, Dn({0}, {0}, {2}, {1})},
      {"batch with transposed lhs", {3, 5, 4}, {3, 5, 6}, Dn({0}, {0}, {1}, {1})},
      {"two batch dims", {2, 3, 4, 5}, {2, 3, 5, 6}, Dn({0, 1}, {0, 1}, {3}, {2})},
      {"batch dims not leading", {4, 3, 5}, {5, 6, 3}, Dn({1}, {2}, {2}, {0})},
      {"two contracting dims", {4, 3, 5}, {3, 5, 6}, Dn({}, {}, {1, 2}, {0, 1})},
      {"contracting dims swapped", {4, 3, 5}, {5, 3, 6}, Dn({}, {}, {2, 1}, {0, 1})},
      {"two free dims each side", {2, 3, 7}, {7, 4, 5}, Dn({}, {}, {2}, {0})},
      {"vector dot", {13}, {13}, Dn({}, {}, {0}, {0})},
      {"matrix vector", {7, 13}, {13}, Dn({}, {}, {1}, {0})},
      {"vector matrix", {13}, {13, 5}, Dn({}, {}, {0}, {0})},
      {"outer product", {7}, {5}, Dn({}, {}, {}, {})},
      {"k = 0", {7, 0}, {0, 5}, Dn({}, {}, {1}, {0})},
      {"m = 0", {0, 4}, {4, 5}, Dn({}, {}, {1}, {0})},
      {"batched 33x65x17", {2, 33, 65}, {2, 17, 65}, Dn({0}, {0}, {2}, {2})},
  };
  return *cases;
}

TEST(ExecutorDotTest, EveryLayoutAndDType) {
  uint32_t seed = 2000;
  for (DType dtype : kNumericDTypes) {
    for (const DotCase& c : DotCases()) {
      Literal lhs = Random(Shape(dtype, c.lhs), seed++, -1, 1);
      Literal rhs = Random(Shape(dtype, c.rhs), seed++, -1, 1);
      if (!IsFloating(dtype)) {
        lhs = Random(Shape(dtype, c.lhs), seed++, -20, 20);
        rhs = Random(Shape(dtype, c.rhs), seed++, -20, 20);
      }
      OpAttributes attrs;
      attrs.dot = c.dn;
      Literal want = RefDot(lhs, rhs, c.dn);
      int64_t k = 1;
      for (int64_t d : c.dn.lhs_contracting_dims) k *= c.lhs[d];
      // f32 GEMM error grows with k; bf16/f16 round the result once.
      double atol = dtype == DType::kF32 ? 1e-6 * k : dtype == DType::kF64 ? 1e-13 * k : 1e-3;
      for (int threads : {1, 4}) {
        Literal got =
            MustRun(Opcode::kDot, {lhs, rhs}, attrs, std::nullopt, ExecutorOptions{threads});
        ExpectClose(got, want, Rtol(dtype), atol,
                    absl::StrCat(c.name, " ", DTypeName(dtype), " threads=", threads));
      }
    }
  }
}

TEST(ExecutorDotTest, PredDotIsOrOfAnds) {
  uint32_t seed = 2500;
  for (const DotCase& c : DotCases()) {
    Literal lhs = Random(Shape(DType::kPred, c.lhs), seed++);
    Literal rhs = Random(Shape(DType::kPred, c.rhs), seed++);
    OpAttributes attrs;
    attrs.dot = c.dn;
    EXPECT_EQ(MustRun(Opcode::kDot, {lhs, rhs}, attrs), RefDot(lhs, rhs, c.dn)) << c.name;
  }
}

TEST(ExecutorDotTest, IntegerDotWraps) {
  Literal a = Literal::FromVector<int32_t>({1, 2}, {1 << 30, 1 << 30});
  Literal b = Literal::FromVector<int32_t>({2, 1}, {2, 2});
  OpAttributes attrs;
  attrs.dot = Dn({}, {}, {1}, {0});
  // 2^31 + 2^31 wraps to 0 in s32.
  EXPECT_EQ(MustRun(Opcode::kDot, {a, b}, attrs), Literal::FromVector<int32_t>({1, 1}, {0}));
}

TEST(ExecutorDotTest, BigDotOneThreadVersusManyThreads) {
  // With several threads the executor splits the output into row (or column) blocks and runs
  // one GEMM per block (oneDNN for f32). The library's kernel choice and blocking depend on the
  // matrix sizes it sees, so the k-summation order is not guaranteed to be the same: the
  // results are compared within tolerance.
  Literal lhs = Random(Shape(DType::kF32, {301, 257}), 31, -1, 1);
  Literal rhs = Random(Shape(DType::kF32, {257, 129}), 32, -1, 1);
  OpAttributes attrs;
  attrs.dot = Dn({}, {}, {1}, {0});
  Literal one = MustRun(Opcode::kDot, {lhs, rhs}, attrs, std::nullopt, ExecutorOptions{1});
  Literal many = MustRun(Opcode::kDot, {lhs, rhs}, attrs, std::nullopt, ExecutorOptions{4});
  Literal dflt = MustRun(Opcode::kDot, {lhs, rhs}, attrs);
  ExpectClose(many, one, 1e-5, 1e-5, "4 threads vs 1");
  ExpectClose(dflt, one, 1e-5, 1e-5, "default vs 1");
  ExpectClose(one, RefDot(lhs, rhs, attrs.dot), 1e-5, 1e-4, "vs reference");
  // Column split (n > m) as well.
  Literal wide = Random(Shape(DType::kF32, {257, 700}), 33, -1, 1);
  Literal small = Random(Shape(DType::kF32, {40, 257}), 34, -1, 1);
  Literal w1 = MustRun(Opcode::kDot, {small, wide}, attrs, std::nullopt, ExecutorOptions{1});
  Literal w4 = MustRun(Opcode::kDot, {small, wide}, attrs, std::nullopt, ExecutorOptions{4});
  ExpectClose(w4, w1, 1e-5, 1e-5, "column split");
  ExpectClose(w1, RefDot(small, wide, attrs.dot), 1e-5, 1e-4, "column split vs reference");
}

// Threads in this process, from /proc/self/task (Linux).
int ThreadCount() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++count;
  }
  return count;
}

// oneDNN (the f32 GEMMs) is built on OpenMP; left alone it would start a team of one thread per
// core beside the executor's own threads in every thread that calls it. Sgemm keeps it to the
// calling thread: a single-threaded executor running big f32 dots, and a convolution, from a
// new thread starts no thread.
TEST(ExecutorDotTest, F32GemmsStartNoThreadsOfTheirOwn) {
  Literal lhs = Random(Shape(DType::kF32, {512, 512}), 41, -1, 1);
  Literal rhs = Random(Shape(DType::kF32, {512, 512}), 42, -1, 1);
  OpAttributes attrs;
  attrs.dot = Dn({}, {}, {1}, {0});
  int before = 0, after = 0;
  std::thread caller([&] {
    before = ThreadCount();
    for (int i = 0; i < 3; ++i) {
      Literal out = MustRun(Opcode::kDot, {lhs, rhs}, attrs, std::nullopt, ExecutorOptions{1});
      ASSERT_EQ(out.shape(), Shape(DType::kF32, {512, 512}));
    }
    after = ThreadCount();
  });
  caller.join();
  EXPECT_EQ(after, before);
}

// Transpose folding (core/internal/fusion.h): transpose(dot(a, b)) that swaps the free dims runs
// as dot(b, a), and a transpose read only by dots is read through the dots' dimension numbers;
// neither transpose is materialised. Every case of DotCases, f32 (within GEMM rounding) and s32
// (exact), against the same graph run unfused.
TEST(ExecutorDotTest, TransposesFoldIntoDots) {
  uint32_t seed = 2600;
  for (DType dtype : {DType::kF32, DType::kS32}) {
    for (const DotCase& c : DotCases()) {
      const std::string what = absl::StrCat(c.name, " ", DTypeName(dtype));
      // The lhs arrives transposed (dims reversed) and is transposed back for the dot.
      std::vector<int64_t> reversed(c.lhs.rbegin(), c.lhs.rend()), back;
      for (int64_t d = static_cast<int64_t>(c.lhs.size()) - 1; d >= 0; --d) back.push_back(d);
      Graph g("fold");
      Node* lhs_t = g.AddParameter(0, Shape(dtype, reversed), "lhs_t").value();
      Node* rhs = g.AddParameter(1, Shape(dtype, c.rhs), "rhs").value();
      OpAttributes transpose;
      transpose.dimensions = back;
      Node* lhs = g.AddNode(Opcode::kTranspose, {lhs_t}, transpose).value();
      OpAttributes dot;
      dot.dot = c.dn;
      Node* d = g.AddNode(Opcode::kDot, {lhs, rhs}, dot).value();
      // The output's free dims swapped: [batch, rhs free, lhs free].
      const int64_t nb = static_cast<int64_t>(c.dn.lhs_batch_dims.size());
      const int64_t nl = static_cast<int64_t>(c.lhs.size()) - nb -
                         static_cast<int64_t>(c.dn.lhs_contracting_dims.size());
      const int64_t nr = d->shape().rank() - nb - nl;
      OpAttributes swap;
      for (int64_t i = 0; i < nb; ++i) swap.dimensions.push_back(i);
      for (int64_t j = 0; j < nr; ++j) swap.dimensions.push_back(nb + nl + j);
      for (int64_t j = 0; j < nl; ++j) swap.dimensions.push_back(nb + j);
      g.set_root(g.AddNode(Opcode::kTranspose, {d}, swap).value());
      const std::vector<Literal> args = {Random(lhs_t->shape(), seed++, -1, 1),
                                         Random(rhs->shape(), seed++, -1, 1)};
      ExecutionStats folded_stats, unfolded_stats;
      Literal folded = Executor({.fusion = true}).Run(g, args, &folded_stats).value()[0];
      Literal unfolded = Executor({.fusion = false}).Run(g, args, &unfolded_stats).value()[0];
      EXPECT_EQ(unfolded_stats.kernels, 3) << what;
      // The lhs transpose folds when its free dims keep their order (one free dim at most here,
      // or none reversed); the output transpose always folds.
      const bool lhs_folds = nl <= 1;
      if (lhs_folds) {
        EXPECT_EQ(folded_stats.kernels, 1) << what;
      }
      EXPECT_LE(folded_stats.kernels, 2) << what;
      int64_t k = 1;
      for (int64_t dim : c.dn.lhs_contracting_dims) k *= c.lhs[dim];
      ExpectClose(folded, unfolded, dtype == DType::kF32 ? 1e-6 : 0,
                  dtype == DType::kF32 ? 1e-6 * k : 0, what);
    }
  }
}

// A transpose with a user other than a dot is materialised (once), and a dot with a second user
// keeps its output: nothing folds.
TEST(ExecutorDotTest, TransposesWithOtherUsersDoNotFold) {
  Graph g("no_fold");
  const Shape shape(DType::kF32, {5, 7});
  Node* x = g.AddParameter(0, shape, "x").value();
  OpAttributes transpose;
  transpose.dimensions = {1, 0};
  Node* xt = g.AddNode(Opcode::kTranspose, {x}, transpose).value();
  OpAttributes dot;
  dot.dot = Dn({}, {}, {1}, {0});
  Node* d = g.AddNode(Opcode::kDot, {x, xt}, dot).value();  // [5, 5]
  Node* dt = g.AddNode(Opcode::kTranspose, {d}, transpose).value();
  Node* sum = g.AddNode(Opcode::kAdd, {d, dt}).value();
  g.set_root(g.AddNode(Opcode::kTuple, {sum, g.AddNode(Opcode::kNegate, {xt}).value()}).value());
  const std::vector<Literal> args = {Random(shape, 2700, -1, 1)};
  ExecutionStats folded_stats, unfolded_stats;
  std::vector<Literal> folded = Executor({.fusion = true}).Run(g, args, &folded_stats).value();
  std::vector<Literal> unfolded = Executor({.fusion = false}).Run(g, args, &unfolded_stats).value();
  // transpose x, dot, transpose d, add, negate: nothing fused or folded.
  EXPECT_EQ(folded_stats.kernels, unfolded_stats.kernels);
  EXPECT_EQ(folded_stats.kernels, 5);
  ASSERT_EQ(folded.size(), 2u);
  ExpectEqual(folded[0], unfolded[0], "sum");
  ExpectEqual(folded[1], unfolded[1], "negated transpose");
}

// ---- Rng ---------------------------------------------------------------------------------------

TEST(RngTest, PhiloxKnownAnswers) {
  // Random123 kat_vectors, philox4x32 with 10 rounds.
  using internal::Philox4x32Block;
  EXPECT_EQ(Philox4x32Block({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      Philox4x32Block({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      Philox4x32Block({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  EXPECT_EQ(Philox4x32(0, 0), Philox4x32Block({0, 0, 0, 0}, {0, 0}));
  EXPECT_EQ(Philox4x32(0x0000000500000007, 0x0000000300000002),
            Philox4x32Block({2, 3, 0, 0}, {7, 5}));
}

TEST(RngTest, UniformAndNormalRanges) {
  for (uint64_t i = 0; i < 10000; ++i) {
    double u = RngUniform01(123, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_TRUE(std::isfinite(RngStandardNormal(123, i)));
  }
  EXPECT_NE(RngUniform01(1, 0), RngUniform01(2, 0));
  EXPECT_NE(RngUniform01(1, 0), RngUniform01(1, 1));
}

Literal RunRng(const Shape& shape, RngDistribution distribution, uint64_t seed, double a, double b,
               ExecutorOptions options = {}) {
  Graph g("rng");
  Literal la(Shape(shape.dtype(), {})), lb(Shape(shape.dtype(), {}));
  la.SetFromDouble(0, a);
  lb.SetFromDouble(0, b);
  Node* na = g.AddConstant(la);
  Node* nb = g.AddConstant(lb);
  OpAttributes attrs;
  attrs.rng_distribution = distribution;
  attrs.rng_seed = seed;
  EXPECT_TRUE(g.AddNode(Opcode::kRng, shape, {na, nb}, attrs).ok());
  absl::StatusOr<std::vector<Literal>> out = Executor(options).Run(g, {});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::move((*out)[0]) : Literal();
}

TEST(RngTest, SameSeedSameValuesAndElementIsFunctionOfIndex) {
  Shape shape(DType::kF64, {37, 29});
  Literal x = RunRng(shape, RngDistribution::kUniform, 42, -2, 3);
  EXPECT_EQ(x, RunRng(shape, RngDistribution::kUniform, 42, -2, 3, ExecutorOptions{1}));
  EXPECT_NE(x, RunRng(shape, RngDistribution::kUniform, 43, -2, 3));
  // Sharded-index property: element i is a + (b - a) * RngUniform01(seed, i), whatever the
  // shape, so a shard computing its global indices reproduces these values.
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    ASSERT_EQ(x.data<double>()[i], -2 + 5 * RngUniform01(42, i)) << i;
  }
  Literal flat = RunRng(Shape(DType::kF64, {37 * 29}), RngDistribution::kUniform, 42, -2, 3);
  EXPECT_EQ(flat.ToDoubles(), x.ToDoubles());
  Literal f32 = RunRng(Shape(DType::kF32, {100}), RngDistribution::kNormal, 7, 1, 2);
  for (int64_t i = 0; i < 100; ++i) {
    ASSERT_EQ(f32.data<float>()[i], static_cast<float>(1 + 2 * RngStandardNormal(7, i)));
  }
}

TEST(RngTest, MomentsOf100kSamples) {
  const int64_t n = 100000;
  Literal u = RunRng(Shape(DType::kF32, {n}), RngDistribution::kUniform, 5, 2, 4);
  Literal z = RunRng(Shape(DType::kF64, {n}), RngDistribution::kNormal, 6, 1, 2);
  auto moments = [&](const Literal& x) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < n; ++i) sum += x.GetAsDouble(i);
    double mean = sum / n;
    for (int64_t i = 0; i < n; ++i) sum_sq += std::pow(x.GetAsDouble(i) - mean, 2);
    return std::pair<double, double>(mean, sum_sq / (n - 1));
  };
  auto [u_mean, u_var] = moments(u);
  EXPECT_NEAR(u_mean, 3.0, 0.01);        // standard error 0.0018
  EXPECT_NEAR(u_var, 4.0 / 12.0, 0.01);  // uniform on [2, 4): (b - a)^2 / 12
  auto [z_mean, z_var] = moments(z);
  EXPECT_NEAR(z_mean, 1.0, 0.03);  // standard error 0.0063
  EXPECT_NEAR(z_var, 4.0, 0.08);   // standard error ~0.018
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(u.data<float>()[i], 2.0f);
    ASSERT_LT(u.data<float>()[i], 4.0f);
  }
}

TEST(RngTest, UniformStaysBelowHighAfterRounding) {
  // In bf16, [1, 1.0078) holds one value; any sample rounding up to b must be pulled below it.
  Literal x = RunRng(Shape(DType::kBF16, {1000}), RngDistribution::kUniform, 3, 1, 1.0078125);
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_LT(x.GetAsDouble(i), 1.0078125);
    ASSERT_GE(x.GetAsDouble(i), 1.0);
  }
}

// ---- Executor: graphs, liveness, errors, threads -----------------------------------------------

// Adds d = dot(x, x), e = exp(d) and r = e + d * 2 over a parameter x of `shape` (square f32) to
// `g`: d dies in the loop fusion of r, so the fusion can write into d's buffer.
struct DotExpSum {
  Node* e;
  Node* r;
};
DotExpSum AddDotExpSum(Graph& g, const Shape& shape) {
  Node* x = g.AddParameter(0, shape, "x").value();
  OpAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  Node* d = g.AddNode(Opcode::kDot, {x, x}, dot).value();
  Node* two =
      g.AddNode(Opcode::kBroadcast, shape, {g.AddConstant(Literal::Scalar(2.0f))}, OpAttributes{})
          .value();
  Node* e = g.AddNode(Opcode::kExp, {d}).value();
  Node* r = g.AddNode(Opcode::kAdd, {e, g.AddNode(Opcode::kMultiply, {d, two}).value()}).value();
  return {e, r};
}

TEST(ExecutorTest, FusedOutputIsWrittenIntoADeadIntermediate) {
  // d = dot(x, x) is an intermediate whose only user is the fusion of exp(d) + d * 2: the
  // fusion writes its output into d's buffer, so the run holds x, d and nothing else.
  Graph g("in_place");
  const Shape shape(DType::kF32, {64, 64});
  g.set_root(AddDotExpSum(g, shape).r);
  Literal xv = Random(shape, 3, -0.1, 0.1);
  ExecutionStats fused_stats, unfused_stats;
  Literal fused = Executor({.fusion = true}).Run(g, {xv}, &fused_stats).value()[0];
  Literal unfused = Executor({.fusion = false}).Run(g, {xv}, &unfused_stats).value()[0];
  EXPECT_EQ(fused_stats.in_place, 1);
  EXPECT_EQ(fused_stats.fusions, 1);
  EXPECT_EQ(fused_stats.kernels, 2);                            // the dot and the fusion
  EXPECT_EQ(fused_stats.peak_live_bytes, 2 * 64 * 64 * 4 + 4);  // x, d (then the result), 2.0
  EXPECT_EQ(unfused_stats.in_place, 0);
  ExpectWithinOneUlp(fused, unfused, "in-place fusion");
}

TEST(ExecutorTest, FusionEndingInReshapesWritesTheOutputFromItsLastOp) {
  // reshape(reshape(exp(x) + x * 2)): the add writes the output's blocks directly (no copy
  // through scratch); large enough for several blocks and chunks.
  Graph g("reshape_root");
  const Shape shape(DType::kF32, {300, 257});
  Node* x = g.AddParameter(0, shape, "x").value();
  Node* two =
      g.AddNode(Opcode::kBroadcast, shape, {g.AddConstant(Literal::Scalar(2.0f))}, OpAttributes{})
          .value();
  Node* sum = g.AddNode(Opcode::kAdd, {g.AddNode(Opcode::kExp, {x}).value(),
                                       g.AddNode(Opcode::kMultiply, {x, two}).value()})
                  .value();
  Node* flat =
      g.AddNode(Opcode::kReshape, Shape(DType::kF32, {300 * 257}), {sum}, OpAttributes{}).value();
  g.set_root(
      g.AddNode(Opcode::kReshape, Shape(DType::kF32, {257, 300}), {flat}, OpAttributes{}).value());
  // x in [0, 1): exp(x) + 2x >= exp(x), so exp's one ulp (Eigen's packet exp at other block
  // edges) stays within one ulp of the sum.
  const std::vector<Literal> args = {Random(shape, 4, 0, 1)};
  for (int threads : {1, 4}) {
    ExecutionStats stats;
    Literal fused =
        Executor({.num_threads = threads, .fusion = true}).Run(g, args, &stats).value()[0];
    Literal unfused = Executor({.num_threads = threads, .fusion = false}).Run(g, args).value()[0];
    EXPECT_EQ(stats.kernels, 1);
    ExpectWithinOneUlp(fused, unfused, absl::StrCat("threads ", threads));
  }
}

// f32 values with the cases elementwise loops get wrong first: signed zeros, infinities, NaN,
// subnormals, and values that round differently under another operation order.
Literal SpecialF32(const Shape& shape, uint32_t seed) {
  Literal lit = Random(shape, seed, -4, 4);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-38f,
                            1.0f,
                            3.0f};
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < lit.num_elements(); i += 3) {
    lit.data<float>()[i] = specials[gen() % std::size(specials)];
  }
  return lit;
}

// Every precompiled fused loop (core/internal/fusion_loops.h), with each operand a block or a
// broadcast scalar (read as one element), against the unfused kernels, bit for bit. The graph
// is op(x or broadcast(s), y or broadcast(t)) wrapped in negate so the op is not the root:
// a loop reading its operands in the wrong order, or a scalar as a block, gives other bits.
TEST(ExecutorTest, PrecompiledFusedLoopsEqualUnfusedKernelsWithScalarOperands) {
  const Shape shape(DType::kF32, {3, 700});  // several blocks and a partial one
  const Shape scalar(DType::kF32, {});
  std::vector<std::pair<Opcode, ComparisonDirection>> ops = {
      {Opcode::kAdd, {}},    {Opcode::kSubtract, {}}, {Opcode::kMultiply, {}},
      {Opcode::kDivide, {}}, {Opcode::kMaximum, {}},  {Opcode::kMinimum, {}},
      {Opcode::kSelect, {}}, {Opcode::kNegate, {}},   {Opcode::kAbs, {}},
      {Opcode::kSqrt, {}},   {Opcode::kConvert, {}}};
  for (ComparisonDirection d :
       {ComparisonDirection::kEq, ComparisonDirection::kNe, ComparisonDirection::kLt,
        ComparisonDirection::kLe, ComparisonDirection::kGt, ComparisonDirection::kGe}) {
    ops.push_back({Opcode::kCompare, d});
  }
  for (const auto& [opcode, direction] : ops) {
    const bool unary = opcode == Opcode::kNegate || opcode == Opcode::kAbs ||
                       opcode == Opcode::kSqrt || opcode == Opcode::kConvert;
    for (int scalars = 0; scalars < (unary ? 1 : 4); ++scalars) {
      Graph g("loop");
      Node* x = g.AddParameter(0, shape, "x").value();
      Node* y = g.AddParameter(1, shape, "y").value();
      Node* s = g.AddParameter(2, scalar, "s").value();
      Node* t = g.AddParameter(3, scalar, "t").value();
      auto broadcast = [&](Node* v) {
        return g.AddNode(Opcode::kBroadcast, shape, {v}, OpAttributes{}).value();
      };
      Node* a = scalars & 1 ? broadcast(s) : x;
      Node* b = scalars & 2 ? broadcast(t) : y;
      OpAttributes attrs;
      attrs.comparison_direction = direction;
      Node* op = nullptr;
      if (opcode == Opcode::kSelect) {
        attrs.comparison_direction = ComparisonDirection::kLt;
        Node* pred = g.AddNode(Opcode::kCompare, {x, y}, attrs).value();
        op = g.AddNode(Opcode::kSelect, {pred, a, b}).value();
      } else if (opcode == Opcode::kConvert) {
        attrs.comparison_direction = ComparisonDirection::kGt;
        Node* pred = g.AddNode(Opcode::kCompare, {x, y}, attrs).value();
        op = g.AddNode(Opcode::kConvert, shape, {pred}, OpAttributes{}).value();
      } else if (unary) {
        op = g.AddNode(opcode, {x}).value();
      } else {
        op = g.AddNode(opcode, {a, b}, attrs).value();
      }
      if (op->shape().dtype() == DType::kPred) {
        g.set_root(g.AddNode(Opcode::kNot, {op}).value());
      } else {
        g.set_root(g.AddNode(Opcode::kNegate, {op}).value());
      }
      const std::vector<Literal> args = {SpecialF32(shape, 1), SpecialF32(shape, 2),
                                         Literal::Scalar(-0.0f), Literal::Scalar(2.5f)};
      const std::string what = absl::StrCat(
          OpcodeName(opcode), " ", ComparisonDirectionName(direction), " scalars ", scalars);
      ExecutionStats stats;
      Literal fused = Executor({.fusion = true}).Run(g, args, &stats).value()[0];
      Literal unfused = Executor({.fusion = false}).Run(g, args).value()[0];
      EXPECT_EQ(stats.fusions, 1) << what;
      ExpectEqual(fused, unfused, what);
      // NaN payloads and signs: compare the bits too (ExpectEqual treats NaNs as equal).
      EXPECT_EQ(fused, unfused) << what;
    }
  }
}

// Multiplies by a broadcast scalar folded into their user's loop (ChooseScaledBlockLoop): the
// product is rounded to f32 before the user's op, as unfused, so results are bitwise equal.
// Each binary op and compare with its operands x * s, s * y, a block or a scalar, in every
// combination; a fused multiply-add (one rounding) or a scale on the wrong operand changes bits.
TEST(ExecutorTest, ScalarMultipliesFoldedIntoTheirUserEqualUnfused) {
  const Shape shape(DType::kF32, {2, 600});
  const Shape scalar(DType::kF32, {});
  std::vector<std::pair<Opcode, ComparisonDirection>> ops = {
      {Opcode::kAdd, {}},
      {Opcode::kSubtract, {}},
      {Opcode::kMultiply, {}},
      {Opcode::kDivide, {}},
      {Opcode::kMaximum, {}},
      {Opcode::kMinimum, {}},
      {Opcode::kCompare, ComparisonDirection::kLt},
      {Opcode::kCompare, ComparisonDirection::kGe}};
  // Per operand: 0 block, 1 block * scalar, 2 scalar * block, 3 broadcast scalar.
  for (const auto& [opcode, direction] : ops) {
    for (int a_kind = 0; a_kind < 4; ++a_kind) {
      for (int b_kind = 0; b_kind < 4; ++b_kind) {
        Graph g("folded");
        Node* x = g.AddParameter(0, shape, "x").value();
        Node* y = g.AddParameter(1, shape, "y").value();
        Node* s = g.AddParameter(2, scalar, "s").value();
        Node* t = g.AddParameter(3, scalar, "t").value();
        auto operand = [&](int kind, Node* block, Node* factor) {
          Node* b = g.AddNode(Opcode::kBroadcast, shape, {factor}, OpAttributes{}).value();
          if (kind == 0) return block;
          if (kind == 3) return b;
          return g
              .AddNode(Opcode::kMultiply,
                       kind == 1 ? std::vector<Node*>{block, b} : std::vector<Node*>{b, block})
              .value();
        };
        OpAttributes attrs;
        attrs.comparison_direction = direction;
        Node* op = g.AddNode(opcode, {operand(a_kind, x, s), operand(b_kind, y, t)}, attrs).value();
        g.set_root(
            g.AddNode(op->shape().dtype() == DType::kPred ? Opcode::kNot : Opcode::kNegate, {op})
                .value());
        // 1.1 and 0.3 make products that round; x * 1e30 and y * -1e30 overflow to infinities.
        for (const auto& [sv, tv] : {std::pair{1.1f, 0.3f}, std::pair{1e30f, -1e30f}}) {
          const std::vector<Literal> args = {SpecialF32(shape, 11), SpecialF32(shape, 12),
                                             Literal::Scalar(sv), Literal::Scalar(tv)};
          const std::string what = absl::StrCat(OpcodeName(opcode), " operands ", a_kind, ",",
                                                b_kind, " scales ", sv, ",", tv);
          Literal fused = Executor({.fusion = true}).Run(g, args).value()[0];
          Literal unfused = Executor({.fusion = false}).Run(g, args).value()[0];
          EXPECT_EQ(fused, unfused) << what;
        }
      }
    }
  }
}

// The ops of training steps take the precompiled loops (fusion_loops.h), in every scalar
// variant; other element types and ops take the general path (no loop).
TEST(ExecutorTest, PrecompiledLoopsCoverTheOpsOfATrainingStep) {
  Graph g("loops");
  const Shape f32(DType::kF32, {8}), f64(DType::kF64, {8});
  Node* x = g.AddParameter(0, f32, "x").value();
  Node* y = g.AddParameter(1, f64, "y").value();
  OpAttributes gt;
  gt.comparison_direction = ComparisonDirection::kGt;
  Node* mask = g.AddNode(Opcode::kCompare, {x, x}, gt).value();
  const bool none[] = {false, false}, second[] = {false, true}, first[] = {true, false};
  const bool neither[] = {false, false, false}, both[] = {false, true, true}, one[] = {false};
  for (Opcode opcode : {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide,
                        Opcode::kMaximum, Opcode::kMinimum}) {
    Node* op = g.AddNode(opcode, {x, x}).value();
    EXPECT_EQ(internal::ChooseBlockLoop(*op, none).scalar_operands, 0u) << OpcodeName(opcode);
    EXPECT_NE(internal::ChooseBlockLoop(*op, none).run, nullptr) << OpcodeName(opcode);
    EXPECT_EQ(internal::ChooseBlockLoop(*op, second).scalar_operands, 2u) << OpcodeName(opcode);
    EXPECT_EQ(internal::ChooseBlockLoop(*op, first).scalar_operands, 1u) << OpcodeName(opcode);
    EXPECT_EQ(internal::ChooseBlockLoop(*g.AddNode(opcode, {y, y}).value(), none).run, nullptr);
  }
  EXPECT_EQ(internal::ChooseBlockLoop(*mask, second).scalar_operands, 2u);
  // Folded multiplies: bit 2 + k for a scaled operand k, never together with a scalar one.
  const bool scaled_first[] = {true, false}, scaled_both[] = {true, true};
  Node* add = g.AddNode(Opcode::kAdd, {x, x}).value();
  EXPECT_EQ(internal::ChooseScaledBlockLoop(*add, second, scaled_first).scalar_operands, 6u);
  EXPECT_EQ(internal::ChooseScaledBlockLoop(*add, none, scaled_both).scalar_operands, 12u);
  EXPECT_EQ(internal::ChooseScaledBlockLoop(*add, first, scaled_first).run, nullptr);
  EXPECT_EQ(internal::ChooseScaledBlockLoop(*mask, none, scaled_both).scalar_operands, 12u);
  Node* select = g.AddNode(Opcode::kSelect, {mask, x, x}).value();
  EXPECT_EQ(internal::ChooseBlockLoop(*select, both).scalar_operands, 6u);
  EXPECT_NE(internal::ChooseBlockLoop(*select, neither).run, nullptr);
  Node* convert = g.AddNode(Opcode::kConvert, f32, {mask}, OpAttributes{}).value();
  EXPECT_NE(internal::ChooseBlockLoop(*convert, one).run, nullptr);
  for (Opcode opcode : {Opcode::kNegate, Opcode::kAbs, Opcode::kSqrt}) {
    EXPECT_NE(internal::ChooseBlockLoop(*g.AddNode(opcode, {x}).value(), one).run, nullptr)
        << OpcodeName(opcode);
  }
  EXPECT_EQ(internal::ChooseBlockLoop(*g.AddNode(Opcode::kExp, {x}).value(), one).run, nullptr);
}

// Multi-output fusion (core/internal/fusion.h): ReLU as the lazy API traces it, with the
// compare kept for the backward pass (a user after the fusion), is one loop writing the select
// and the compare; unfused it is add, compare and select over memory plus two broadcasts.
TEST(ExecutorTest, ReluWithItsMaskKeptIsOneLoopWithTwoOutputs) {
  Graph g("relu");
  const Shape shape(DType::kF32, {33, 1000});
  Node* x = g.AddParameter(0, shape, "x").value();
  Node* bias = g.AddParameter(1, Shape(DType::kF32, {1000}), "bias").value();
  OpAttributes row;
  row.dimensions = {1};
  Node* biased =
      g.AddNode(Opcode::kAdd, {x, g.AddNode(Opcode::kBroadcast, shape, {bias}, row).value()})
          .value();
  Node* zero =
      g.AddNode(Opcode::kBroadcast, shape, {g.AddConstant(Literal::Scalar(0.0f))}, OpAttributes{})
          .value();
  OpAttributes gt;
  gt.comparison_direction = ComparisonDirection::kGt;
  Node* mask = g.AddNode(Opcode::kCompare, {biased, zero}, gt).value();
  Node* relu = g.AddNode(Opcode::kSelect, {mask, biased, zero}).value();
  OpAttributes reduce;
  reduce.dimensions = {0, 1};
  reduce.reduce_kind = ReduceKind::kAdd;
  Node* sum =
      g.AddNode(Opcode::kReduce, {relu, g.AddConstant(Literal::Scalar(0.0f))}, reduce).value();
  // The mask's second user runs after the fusion: select(mask, x * sum, 0).
  Node* scaled = g.AddNode(Opcode::kMultiply,
                           {x, g.AddNode(Opcode::kBroadcast, shape, {sum}, OpAttributes{}).value()})
                     .value();
  g.set_root(g.AddNode(Opcode::kSelect, {mask, scaled, zero}).value());
  const std::vector<Literal> args = {SpecialF32(shape, 5), Random(Shape(DType::kF32, {1000}), 6)};
  ExecutionStats fused_stats, unfused_stats;
  Literal fused = Executor({.fusion = true}).Run(g, args, &fused_stats).value()[0];
  Literal unfused = Executor({.fusion = false}).Run(g, args, &unfused_stats).value()[0];
  EXPECT_EQ(fused, unfused);
  EXPECT_EQ(unfused_stats.kernels, 9);
  // The ReLU loop (writes relu and mask), the reduce, the loop of the root.
  EXPECT_EQ(fused_stats.fusions, 2);
  EXPECT_EQ(fused_stats.fusion_extra_outputs, 1);  // the mask
  EXPECT_EQ(fused_stats.kernels, 3);
}

// A producer whose other user runs before the fusion's root must not be a further output (the
// user would read it before the loop wrote it): p = x + y; s = reduce(p); root = p * s.
TEST(ExecutorTest, ProducerReadBeforeTheFusionIsNotAFurtherOutput) {
  Graph g("before");
  const Shape shape(DType::kF32, {5000});
  Node* x = g.AddParameter(0, shape, "x").value();
  Node* y = g.AddParameter(1, shape, "y").value();
  Node* p = g.AddNode(Opcode::kAdd, {x, y}).value();
  OpAttributes reduce;
  reduce.dimensions = {0};
  reduce.reduce_kind = ReduceKind::kMaximum;
  Node* s = g.AddNode(Opcode::kReduce, {p, g.AddConstant(Literal::Scalar(-1e30f))}, reduce).value();
  Node* e = g.AddNode(Opcode::kExp, {p}).value();
  g.set_root(g.AddNode(Opcode::kMultiply,
                       {e, g.AddNode(Opcode::kBroadcast, shape, {s}, OpAttributes{}).value()})
                 .value());
  const std::vector<Literal> args = {Random(shape, 7, 0, 1), Random(shape, 8, 0, 1)};
  ExecutionStats stats;
  Literal fused = Executor({.fusion = true}).Run(g, args, &stats).value()[0];
  Literal unfused = Executor({.fusion = false}).Run(g, args).value()[0];
  // p is materialised (the reduce reads it first); exp and multiply are one loop.
  EXPECT_EQ(stats.kernels, 3);
  EXPECT_EQ(stats.fusions, 1);
  EXPECT_EQ(stats.fusion_extra_outputs, 0);
  ExpectWithinOneUlp(fused, unfused, "producer read before the fusion");
}

// A further output next to a root written in place: d = dot(x, x) dies in the loop of
// e = exp(d); r = e + d * 2, and e is also read after it (root tuple).
TEST(ExecutorTest, FurtherOutputBesideAnInPlaceRoot) {
  Graph g("in_place_two_outputs");
  const Shape shape(DType::kF32, {64, 64});
  const DotExpSum nodes = AddDotExpSum(g, shape);
  g.set_root(g.AddNode(Opcode::kTuple, {nodes.r, nodes.e}).value());
  const std::vector<Literal> args = {Random(shape, 9, -0.1, 0.1)};
  ExecutionStats stats;
  std::vector<Literal> fused = Executor({.fusion = true}).Run(g, args, &stats).value();
  std::vector<Literal> unfused = Executor({.fusion = false}).Run(g, args).value();
  EXPECT_EQ(stats.in_place, 1);
  EXPECT_EQ(stats.fusions, 1);
  EXPECT_EQ(stats.kernels, 2);  // the dot and the loop writing r and e
  EXPECT_EQ(stats.fusion_extra_outputs, 1);
  ASSERT_EQ(fused.size(), 2u);
  ExpectWithinOneUlp(fused[0], unfused[0], "root written in place");
  ExpectWithinOneUlp(fused[1], unfused[1], "further output");
}

// The SGD update of a weight whose gradient is a dot (as autodiff traces it: the transpose of
// dot(delta, x) contracting the batch) runs as one GEMM accumulating into a copy of the weight
// (kernels.h DotAccumulate): no gradient buffer, no update pass. One rounding fewer than
// unfused (a fused multiply-add), and the GEMM's k-blocks add into the weight instead of into a
// zeroed gradient (a reassociation: one rounding per k-block on each side), so the check is
// |fused - unfused| <= 2^-23 (blocks + 2) (|update| + |w| + lr * sum_b |x_b| |delta_b|) per
// element (the last term bounds every partial sum), blocks = ceil(batch / 128) (the bound takes
// the GEMM's k-blocks to be at least 128 long; the batch of 700 checks that it holds).
TEST(ExecutorTest, SgdUpdateOfADotGradientRunsInTheGemm) {
  for (int64_t batch : {48, 700}) {  // one k-block, and several
    Graph g("sgd");
    const int64_t in = 40, out = 56;
    Node* x = g.AddParameter(0, Shape(DType::kF32, {batch, in}), "x").value();
    Node* delta = g.AddParameter(1, Shape(DType::kF32, {batch, out}), "delta").value();
    Node* w = g.AddParameter(2, Shape(DType::kF32, {in, out}), "w").value();
    Node* lr = g.AddParameter(3, Shape(DType::kF32, {}), "lr").value();
    OpAttributes batch_dims;
    batch_dims.dot.lhs_contracting_dims = {0};
    batch_dims.dot.rhs_contracting_dims = {0};
    Node* dot = g.AddNode(Opcode::kDot, {delta, x}, batch_dims).value();  // [out, in]
    OpAttributes swap;
    swap.dimensions = {1, 0};
    Node* grad = g.AddNode(Opcode::kTranspose, {dot}, swap).value();
    Node* lr_b = g.AddNode(Opcode::kBroadcast, w->shape(), {lr}, OpAttributes{}).value();
    Node* scaled = g.AddNode(Opcode::kMultiply, {lr_b, grad}).value();
    Node* updated = g.AddNode(Opcode::kSubtract, {w, scaled}).value();
    g.set_root(
        g.AddNode(Opcode::kTuple, {updated, g.AddNode(Opcode::kNegate, {w}).value()}).value());
    const std::vector<Literal> args = {Random(x->shape(), 21, -1, 1),
                                       Random(delta->shape(), 22, -1, 1),
                                       Random(w->shape(), 23, -1, 1), Literal::Scalar(0.05f)};
    ExecutionStats fused_stats, unfused_stats;
    std::vector<Literal> fused = Executor({.fusion = true}).Run(g, args, &fused_stats).value();
    std::vector<Literal> unfused = Executor({.fusion = false}).Run(g, args, &unfused_stats).value();
    EXPECT_EQ(fused_stats.kernels, 2) << batch;  // the update's GEMM and the negate
    EXPECT_EQ(unfused_stats.kernels, 6) << batch;
    // sum_b |x_b| |delta_b|, for the tolerance.
    Graph gg("grad");
    Node* gx = gg.AddNode(Opcode::kAbs, {gg.AddParameter(0, x->shape(), "x").value()}).value();
    Node* gd =
        gg.AddNode(Opcode::kAbs, {gg.AddParameter(1, delta->shape(), "delta").value()}).value();
    gg.set_root(gg.AddNode(Opcode::kDot, {gx, gd}, batch_dims).value());  // [in, out]
    Literal gradient = Executor({.fusion = false}).Run(gg, {args[0], args[1]}).value()[0];
    for (int64_t i = 0; i < fused[0].num_elements(); ++i) {
      const double f = fused[0].data<float>()[i], u = unfused[0].data<float>()[i];
      const double step = 0.05 * gradient.data<float>()[i];
      const double blocks = static_cast<double>((batch + 127) / 128);
      const double magnitude = std::abs(u) + std::abs(args[2].data<float>()[i]) + std::abs(step);
      ASSERT_LE(std::abs(f - u), 0x1p-23 * (blocks + 2) * magnitude)
          << "batch " << batch << " element " << i << ": fused " << f << ", unfused " << u;
    }
    EXPECT_EQ(fused[1], unfused[1]);
  }
}

// The addend of a dot update is written in place when it is an intermediate that dies there;
// a dot read by another node too is no dot update.
TEST(ExecutorTest, DotUpdateInPlaceAndOnlyForADotReadOnce) {
  const Shape shape(DType::kF32, {32, 32});
  for (bool dot_read_twice : {false, true}) {
    Graph g("update");
    Node* a = g.AddParameter(0, shape, "a").value();
    Node* b = g.AddParameter(1, shape, "b").value();
    Node* p = g.AddNode(Opcode::kExp, {a}).value();  // an intermediate, dead after the update
    OpAttributes mm;
    mm.dot.lhs_contracting_dims = {1};
    mm.dot.rhs_contracting_dims = {0};
    Node* d = g.AddNode(Opcode::kDot, {a, b}, mm).value();
    Node* two =
        g.AddNode(Opcode::kBroadcast, shape, {g.AddConstant(Literal::Scalar(2.0f))}, OpAttributes{})
            .value();
    Node* updated =
        g.AddNode(Opcode::kSubtract, {p, g.AddNode(Opcode::kMultiply, {d, two}).value()}).value();
    g.set_root(dot_read_twice ? g.AddNode(Opcode::kTuple, {updated, d}).value() : updated);
    const std::vector<Literal> args = {Random(shape, 31, -1, 1), Random(shape, 32, -1, 1)};
    ExecutionStats stats;
    std::vector<Literal> fused = Executor({.fusion = true}).Run(g, args, &stats).value();
    std::vector<Literal> unfused = Executor({.fusion = false}).Run(g, args).value();
    if (dot_read_twice) {
      EXPECT_EQ(stats.kernels, 2);  // the dot, one loop of exp and the update
      EXPECT_EQ(stats.fusions, 1);
      EXPECT_EQ(fused[0], unfused[0]);
    } else {
      EXPECT_EQ(stats.kernels, 2);  // exp, the update's GEMM into exp's buffer
      EXPECT_EQ(stats.in_place, 1);
      ExpectClose(fused[0], unfused[0], 1e-5, 1e-6, "dot update in place");
    }
  }
}

// Large buffers start at different offsets within their pages (core/internal/buffer_pool.cc:
// 4K aliasing), keep them when pooled, and free correctly.
TEST(ExecutorTest, LargeBuffersAreStaggeredWithinPages) {
  std::vector<std::byte*> buffers;
  std::vector<uintptr_t> offsets;
  for (int i = 0; i < 4; ++i) {
    buffers.push_back(internal::AllocateBuffer(3 << 20));
    offsets.push_back(reinterpret_cast<uintptr_t>(buffers.back()) % 4096);
    EXPECT_EQ(offsets.back() % 64, 0u);
    std::memset(buffers.back(), i, 3 << 20);  // all of it is usable
  }
  std::sort(offsets.begin(), offsets.end());
  EXPECT_EQ(std::unique(offsets.begin(), offsets.end()), offsets.end()) << "same page offsets";
  for (std::byte* b : buffers) internal::FreeBuffer(b);
  std::byte* again = internal::AllocateBuffer(3 << 20);
  EXPECT_EQ(again, buffers.back());  // the pool's last freed buffer, at the offset it had
  internal::FreeBuffer(again);
}

TEST(ExecutorTest, SecondRunOfAStepAllocatesNoLargeBuffer) {
  // An Adam-like update of f32[256K] (1 MiB buffers): the first run takes its large buffers from
  // the C library; once its outputs are freed, the same run again takes every one from the pool.
  Graph g("step");
  const Shape shape(DType::kF32, {256 * 1024});
  Node* p = g.AddParameter(0, shape, "p").value();
  Node* m = g.AddParameter(1, shape, "m").value();
  Node* grad = g.AddParameter(2, shape, "g").value();
  Node* half =
      g.AddNode(Opcode::kBroadcast, shape, {g.AddConstant(Literal::Scalar(0.5f))}, OpAttributes{})
          .value();
  Node* m2 =
      g.AddNode(Opcode::kAdd, {g.AddNode(Opcode::kMultiply, {m, half}).value(), grad}).value();
  Node* e = g.AddNode(Opcode::kExp, {m2}).value();
  OpAttributes reverse;
  reverse.dimensions = {0};
  Node* r = g.AddNode(Opcode::kReverse, {e}, reverse).value();  // not fused: a buffer of its own
  Node* p2 = g.AddNode(Opcode::kSubtract, {p, r}).value();
  g.set_root(g.AddNode(Opcode::kTuple, {p2, m2}).value());
  const std::vector<Literal> args = {Random(shape, 1, -1, 1), Random(shape, 2, -1, 1),
                                     Random(shape, 3, -1, 1)};
  for (bool fusion : {false, true}) {
    const Executor executor({.num_threads = 1, .fusion = fusion});
    Literal first = executor.Run(g, args).value()[0];
    first = Literal();  // the outputs of a step die before the next step
    const internal::BufferPoolStats before = internal::GetBufferPoolStats();
    Literal second = executor.Run(g, args).value()[0];
    const internal::BufferPoolStats after = internal::GetBufferPoolStats();
    EXPECT_EQ(after.fresh_allocations, before.fresh_allocations) << "fusion " << fusion;
    EXPECT_GE(after.reuses - before.reuses, 3) << "fusion " << fusion;
  }
}

TEST(ExecutorTest, PeakLiveBytesOfSmallChain) {
  // x: f32[256] argument (1024 B, live for the whole run); k: f32[512] constant (2048 B, live
  // until its last use). Nodes run in insertion order; each output is allocated before the
  // operands whose last use it was are freed.
  //   x                     live 1024
  //   k                     3072
  //   a = exp(x)            4096
  //   b = negate(a)         5120 (peak), free a -> 4096
  //   s = slice(k)[0:256]   5120 (peak), free k -> 3072
  //   c = add(b, s)         4096,        free b, s -> 2048
  //   t = tuple(c, x)       takes c's buffer, copies x: 3072
  // `dead` is unreachable from the root: not run, not counted.
  Graph g("chain");
  Node* x = g.AddParameter(0, Shape(DType::kF32, {256}), "x").value();
  Node* k = g.AddConstant(Random(Shape(DType::kF32, {512}), 1), "k");
  Node* a = g.AddNode(Opcode::kExp, {x}).value();
  Node* b = g.AddNode(Opcode::kNegate, {a}).value();
  OpAttributes slice;
  slice.slice = {{0, 256, 1}};
  Node* s = g.AddNode(Opcode::kSlice, {k}, slice).value();
  Node* c = g.AddNode(Opcode::kAdd, {b, s}).value();
  OpAttributes bcast;
  bcast.dimensions = {1};
  ASSERT_TRUE(
      g.AddNode(Opcode::kBroadcast, Shape(DType::kF32, {1000, 256}), {c}, bcast, "dead").ok());
  Node* t = g.AddNode(Opcode::kTuple, {c, x}).value();
  g.set_root(t);

  Literal xv = Random(Shape(DType::kF32, {256}), 2);
  // With loop fusion, exp, negate and add are one loop (a and b never exist): x + k, then s
  // (4096, the peak), free k, c (3072), free s, t copies x.
  for (bool fusion : {false, true}) {
    for (int threads : {1, 0}) {
      ExecutionStats stats;
      std::vector<Literal> out = Executor(ExecutorOptions{.num_threads = threads, .fusion = fusion})
                                     .Run(g, {xv}, &stats)
                                     .value();
      EXPECT_EQ(stats.peak_live_bytes, fusion ? 4096 : 5120);
      EXPECT_EQ(stats.nodes_executed, 7);
      EXPECT_EQ(stats.kernels, fusion ? 2 : 4);  // slice and the fusion; or exp, negate, slice, add
      EXPECT_EQ(stats.fusions, fusion ? 1 : 0);
      ASSERT_EQ(out.size(), 2u);
      EXPECT_EQ(out[1], xv);
      Literal want(Shape(DType::kF32, {256}));
      for (int64_t i = 0; i < 256; ++i) {
        want.data<float>()[i] = -std::exp(xv.data<float>()[i]) + k->literal().data<float>()[i];
      }
      ExpectClose(out[0], want, 1e-6, 1e-6);
    }
  }
}

TEST(ExecutorTest, TupleAndGetTupleElement) {
  Graph g;
  Node* x = g.AddParameter(0, Shape(DType::kS32, {3}), "x").value();
  Node* y = g.AddParameter(1, Shape(DType::kF32, {2}), "y").value();
  Node* n = g.AddNode(Opcode::kNegate, {x}).value();
  Node* t = g.AddNode(Opcode::kTuple, {n, y, n}).value();
  OpAttributes gte;
  gte.tuple_index = 2;
  Node* e = g.AddNode(Opcode::kGetTupleElement, {t}, gte).value();
  Node* r = g.AddNode(Opcode::kAdd, {e, x}).value();
  g.set_root(r);
  Literal xv = Literal::FromVector<int32_t>({3}, {1, 2, 3});
  Literal yv = Literal::FromVector<float>({2}, {4, 5});
  std::vector<Literal> out = Executor().Run(g, {xv, yv}).value();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], Literal::FromVector<int32_t>({3}, {0, 0, 0}));
  // A tuple root returns its elements; a parameter root returns a copy of the argument.
  g.set_root(t);
  out = Executor().Run(g, {xv, yv}).value();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], Literal::FromVector<int32_t>({3}, {-1, -2, -3}));
  EXPECT_EQ(out[1], yv);
  EXPECT_EQ(out[2], out[0]);
  g.set_root(y);
  out = Executor().Run(g, {xv, yv}).value();
  EXPECT_EQ(out[0], yv);
}

TEST(ExecutorTest, BadArgumentsAreInvalidArgument) {
  Graph g;
  Node* x = g.AddParameter(0, Shape(DType::kF32, {2, 3}), "x").value();
  Node* w = g.AddParameter(1, Shape(DType::kF32, {3}), "weights").value();
  OpAttributes dot;
  dot.dot = Dn({}, {}, {1}, {0});
  ASSERT_TRUE(g.AddNode(Opcode::kDot, {x, w}, dot).ok());
  Executor executor;
  Literal xv(Shape(DType::kF32, {2, 3}));
  absl::StatusOr<std::vector<Literal>> r = executor.Run(g, {xv});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("2 parameter(s) but 1 argument(s)"));
  r = executor.Run(g, {xv, Literal(Shape(DType::kF32, {4}))});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("%weights"));
  EXPECT_THAT(r.status().message(), HasSubstr("f32[4]"));
  r = executor.Run(g, {xv, Literal(Shape(DType::kS32, {3}))});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(executor.Run(g, {xv, Literal(Shape(DType::kF32, {3}))}).ok());
}

TEST(ExecutorTest, MalformedGraphsAreInvalidArgument) {
  // A node whose declared shape breaks its shape rule (built unchecked) is reported, not run.
  Graph g;
  Node* x = g.AddParameter(0, Shape(DType::kF32, {4}), "x").value();
  g.AddNodeUnchecked(Opcode::kAdd, Shape(DType::kF32, {5}), {x, x}, {}, "bad");
  absl::StatusOr<std::vector<Literal>> r = Executor().Run(g, {Literal(Shape(DType::kF32, {4}))});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("%bad"));
  // Parameter numbers with a gap.
  Graph gap;
  ASSERT_TRUE(gap.AddParameter(1, Shape(DType::kF32, {}), "p1").ok());
  r = Executor().Run(gap, {Literal()});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("%p1"));
  // partition-id is the device id; a collective needs a backend.
  Graph spmd;
  Node* pid = spmd.AddNodeUnchecked(Opcode::kPartitionId, Shape(DType::kS32, {}), {}, {}, "pid");
  ExecutorOptions on_device_3;
  on_device_3.device_id = 3;
  r = Executor(on_device_3).Run(spmd, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 3);
  OpAttributes sum;
  sum.replica_groups = {{0, 1}};
  spmd.set_root(spmd.AddNode(Opcode::kAllReduce, {pid}, sum, "ar").value());
  r = Executor().Run(spmd, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("%ar"));
  // An empty graph.
  Graph empty;
  EXPECT_EQ(Executor().Run(empty, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExecutorTest, RunIsThreadSafe) {
  Graph g;
  Node* x = g.AddParameter(0, Shape(DType::kF32, {64, 64}), "x").value();
  OpAttributes dot;
  dot.dot = Dn({}, {}, {1}, {0});
  Node* y = g.AddNode(Opcode::kDot, {x, x}, dot).value();
  Node* z = g.AddNode(Opcode::kTanh, {y}).value();
  OpAttributes reduce;
  reduce.dimensions = {0};
  Node* init = g.AddConstant(Literal::Scalar<float>(0));
  g.set_root(g.AddNode(Opcode::kReduce, {z, init}, reduce).value());
  Literal xv = Random(x->shape(), 3, -0.2, 0.2);
  const Executor executor(ExecutorOptions{1});
  Literal want = executor.Run(g, {xv}).value()[0];
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        absl::StatusOr<std::vector<Literal>> out = executor.Run(g, {xv});
        if (!out.ok() || (*out)[0] != want) return;
      }
      ok[t] = 1;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok, std::vector<int>(8, 1));
}

// Buffer donation (ExecutionDonation): p * q + p with p donated is written into p's buffer.
void BuildDonationGraph(Graph& g, const Shape& shape) {
  Node* p = g.AddParameter(0, shape, "p").value();
  Node* q = g.AddParameter(1, shape, "q").value();
  Node* pq = g.AddNode(Opcode::kMultiply, {p, q}).value();
  g.set_root(g.AddNode(Opcode::kAdd, {pq, p}).value());
}

TEST(ExecutorDonationTest, DonatedArgumentHoldsTheFusedOutput) {
  const Shape shape(DType::kF32, {301, 7});
  Graph g("donation");
  BuildDonationGraph(g, shape);
  Literal p = Random(shape, 1), q = Random(shape, 2);
  ExecutionStats borrowed_stats, donated_stats;
  Literal expected = Executor().Run(g, {p, q}, &borrowed_stats).value()[0];
  const std::byte* p_buffer = p.raw_data();
  const Literal* arguments[] = {&p, &q};
  Literal* donated[] = {&p, nullptr};
  ExecutionDonation donation{.literals = donated};
  absl::StatusOr<std::vector<Literal>> out =
      Executor().RunBorrowed(g, arguments, &donated_stats, &donation);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(donation.taken);
  EXPECT_EQ((*out)[0], expected);
  EXPECT_EQ((*out)[0].raw_data(), p_buffer);  // the output is p's buffer
  EXPECT_EQ(donated_stats.donated_arguments, 1);
  EXPECT_EQ(donated_stats.donated_in_place, 1);
  EXPECT_EQ(donated_stats.in_place, 1);
  EXPECT_EQ(borrowed_stats.in_place, 0);
  // p, q and the output at once without donation; p (then the output) and q with it.
  EXPECT_EQ(borrowed_stats.peak_live_bytes, 3 * shape.byte_size());
  EXPECT_EQ(donated_stats.peak_live_bytes, 2 * shape.byte_size());
}

TEST(ExecutorDonationTest, DonatedArgumentStillReadIsNotOverwritten) {
  // (p * q + p, p * p + p): the first fusion must not write into p, which the second reads;
  // the second may. Unfused, nothing is written in place but the results are the same.
  const Shape shape(DType::kF32, {1000});
  Graph g("donation_two_users");  // two fusions reading p
  Node* p = g.AddParameter(0, shape, "p").value();
  Node* q = g.AddParameter(1, shape, "q").value();
  Node* sum = g.AddNode(Opcode::kAdd, {g.AddNode(Opcode::kMultiply, {p, q}).value(), p}).value();
  Node* square = g.AddNode(Opcode::kAdd, {g.AddNode(Opcode::kMultiply, {p, p}).value(), p}).value();
  g.set_root(g.AddNode(Opcode::kTuple, {sum, square}).value());
  for (bool fusion : {true, false}) {
    SCOPED_TRACE(absl::StrCat("fusion ", fusion));
    Literal pv = Random(shape, 3), qv = Random(shape, 4);
    std::vector<Literal> expected = Executor({.fusion = fusion}).Run(g, {pv, qv}).value();
    const Literal* arguments[] = {&pv, &qv};
    Literal* donated[] = {&pv, nullptr};
    ExecutionDonation donation{.literals = donated};
    ExecutionStats stats;
    absl::StatusOr<std::vector<Literal>> out =
        Executor({.fusion = fusion}).RunBorrowed(g, arguments, &stats, &donation);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, expected);
    EXPECT_EQ(stats.donated_in_place, fusion ? 1 : 0);
  }
}

// Runs `g` on `values` with the arguments marked in `donate` donated; expects the results of
// the run without donation and returns the donated run's outputs and stats.
std::pair<std::vector<Literal>, ExecutionStats> RunDonating(const Graph& g,
                                                            std::vector<Literal>& values,
                                                            const std::vector<bool>& donate) {
  const std::vector<Literal> expected = Executor().Run(g, values).value();
  std::vector<const Literal*> arguments;
  std::vector<Literal*> donated;
  for (size_t i = 0; i < values.size(); ++i) {
    arguments.push_back(&values[i]);
    donated.push_back(donate[i] ? &values[i] : nullptr);
  }
  ExecutionDonation donation{.literals = donated};
  ExecutionStats stats;
  absl::StatusOr<std::vector<Literal>> out =
      Executor().RunBorrowed(g, arguments, &stats, &donation);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  EXPECT_EQ(*out, expected);
  return {*std::move(out), stats};
}

TEST(ExecutorDonationTest, ExtraOutputsAreWrittenIntoDonatedArguments) {
  // m' = 0.5 m + g; p' = p - 0.1 m' as one loop writing p' and m' (an optimizer update): with p
  // and m donated, both outputs go into their buffers.
  const Shape shape(DType::kF32, {5000});
  Graph g("donation_multi_output");
  Node* p = g.AddParameter(0, shape, "p").value();
  Node* m = g.AddParameter(1, shape, "m").value();
  Node* grad = g.AddParameter(2, shape, "g").value();
  auto scaled = [&](Node* x, float s) {
    Node* scalar = g.AddConstant(Literal::Scalar(s));
    Node* full = g.AddNode(Opcode::kBroadcast, shape, {scalar}, OpAttributes{}).value();
    return g.AddNode(Opcode::kMultiply, {x, full}).value();
  };
  Node* m1 = g.AddNode(Opcode::kAdd, {scaled(m, 0.5f), grad}).value();
  Node* p1 = g.AddNode(Opcode::kSubtract, {p, scaled(m1, 0.1f)}).value();
  g.set_root(g.AddNode(Opcode::kTuple, {p1, m1}).value());
  std::vector<Literal> values = {Random(shape, 1), Random(shape, 2), Random(shape, 3)};
  const std::byte* p_buffer = values[0].raw_data();
  const std::byte* m_buffer = values[1].raw_data();
  auto [out, stats] = RunDonating(g, values, {true, true, false});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(stats.fusions, 1);
  EXPECT_EQ(stats.donated_in_place, 2);
  EXPECT_EQ(out[0].raw_data(), p_buffer);
  EXPECT_EQ(out[1].raw_data(), m_buffer);
}

TEST(ExecutorDonationTest, ExtraOutputIsNotWrittenIntoALeafReadAfterIt) {
  // t = p + q is written in the loop before r = t * p reads p: t must not go into p's buffer
  // (r would read t's elements for p's); r, written last, may.
  const Shape shape(DType::kF32, {5000});
  Graph g("donation_read_after_extra_output");
  Node* p = g.AddParameter(0, shape, "p").value();
  Node* q = g.AddParameter(1, shape, "q").value();
  Node* t = g.AddNode(Opcode::kAdd, {p, q}).value();
  Node* r = g.AddNode(Opcode::kMultiply, {t, p}).value();
  g.set_root(g.AddNode(Opcode::kTuple, {r, t}).value());
  std::vector<Literal> values = {Random(shape, 4), Random(shape, 5)};
  const std::byte* p_buffer = values[0].raw_data();
  auto [out, stats] = RunDonating(g, values, {true, false});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(stats.fusions, 1);
  EXPECT_EQ(stats.donated_in_place, 1);
  EXPECT_EQ(out[0].raw_data(), p_buffer);
  EXPECT_NE(out[1].raw_data(), p_buffer);
}

TEST(ExecutorDonationTest, DonatedArgumentReturnedAsAnOutputKeepsItsBuffer) {
  const Shape shape(DType::kF32, {4096});
  Graph g("donation_passthrough");
  Node* p = g.AddParameter(0, shape, "p").value();
  Node* neg = g.AddNode(Opcode::kNegate, {p}).value();
  g.set_root(g.AddNode(Opcode::kTuple, {neg, p}).value());
  Literal pv = Random(shape, 5);
  const Literal copy = pv;
  const std::byte* buffer = pv.raw_data();
  const Literal* arguments[] = {&pv};
  Literal* donated[] = {&pv};
  ExecutionDonation donation{.literals = donated};
  absl::StatusOr<std::vector<Literal>> out =
      Executor().RunBorrowed(g, arguments, nullptr, &donation);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[1], copy);
  EXPECT_EQ((*out)[1].raw_data(), buffer);  // moved into the result, not copied
  EXPECT_EQ((*out)[0].data<float>()[17], -copy.data<float>()[17]);
}

TEST(ExecutorDonationTest, BadDonationOrArgumentsLeaveTheLiteralsUntouched) {
  const Shape shape(DType::kF32, {64});
  Graph g("donation");
  BuildDonationGraph(g, shape);
  Literal p = Random(shape, 6), q = Random(shape, 7);
  const Literal p_copy = p;
  const Literal* arguments[] = {&p, &q};
  {
    Literal* donated[] = {&p};  // one entry for two arguments
    ExecutionDonation donation{.literals = donated};
    absl::StatusOr<std::vector<Literal>> out =
        Executor().RunBorrowed(g, arguments, nullptr, &donation);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(out.status().message(), HasSubstr("1 entries for 2 argument(s)"));
    EXPECT_FALSE(donation.taken);
  }
  {
    Literal* donated[] = {&q, nullptr};  // not argument 0's literal
    ExecutionDonation donation{.literals = donated};
    absl::StatusOr<std::vector<Literal>> out =
        Executor().RunBorrowed(g, arguments, nullptr, &donation);
    EXPECT_THAT(out.status().message(), HasSubstr("donated literal 0 is not argument 0's"));
    EXPECT_FALSE(donation.taken);
  }
  {
    Literal wrong = Random(Shape(DType::kF32, {65}), 8);
    const Literal* bad_arguments[] = {&p, &wrong};
    Literal* donated[] = {&p, nullptr};
    ExecutionDonation donation{.literals = donated};
    absl::StatusOr<std::vector<Literal>> out =
        Executor().RunBorrowed(g, bad_arguments, nullptr, &donation);
    EXPECT_THAT(out.status().message(), HasSubstr("argument 1 has shape f32[65]"));
    EXPECT_FALSE(donation.taken);
  }
  EXPECT_EQ(p, p_copy);
}

}  // namespace
}  // namespace tessel
