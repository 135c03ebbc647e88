// The windowed ops: window and dim_labels text, shape inference (and its errors), the HLO text
// round trip, and the executor's convolution, reduce-window, select-and-scatter and reverse
// against hand-computed values (one taken from JAX / XLA:CPU) and against a naive loop written
// straight from the operation semantics, over random windows, layouts and group counts.
#include "tessel/core/window.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/testing/graphs.h"

namespace tessel {
namespace {

Literal RunOne(Opcode opcode, const std::vector<Literal>& inputs, const OpAttributes& attrs,
               int num_threads = 1) {
  Graph g("op");
  std::vector<Node*> params;
  for (size_t i = 0; i < inputs.size(); ++i) {
    params.push_back(Must(g.AddParameter(static_cast<int64_t>(i), inputs[i].shape())));
  }
  Must(g.AddNode(opcode, params, attrs));
  ExecutorOptions options;
  options.num_threads = num_threads;
  Executor executor(options);
  absl::StatusOr<std::vector<Literal>> out = executor.Run(g, inputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::move((*out)[0]) : Literal();
}

std::vector<WindowDim> Window(const std::string& text) {
  absl::StatusOr<std::vector<WindowDim>> w = ParseWindow(text);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *w : std::vector<WindowDim>{};
}

TEST(WindowTextTest, RoundTripsAndOmitsDefaults) {
  for (const char* text :
       {"size=3x3 stride=2x2 pad=0_1x0_1", "size=1x64 pad=0_0x63_0",
        "size=3x3 pad=2_1x2_1 lhs_dilate=2x2", "size=8x8 pad=0_1x0_1 rhs_dilate=2x2",
        "size=2 rhs_reversal=1", "size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0", ""}) {
    EXPECT_EQ(WindowToString(Window(text)), text);
  }
  std::vector<WindowDim> w = Window("stride=2x1 size=3x1 pad=-1_2x0_0");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].size, 3);
  EXPECT_EQ(w[0].stride, 2);
  EXPECT_EQ(w[0].padding_low, -1);
  EXPECT_EQ(w[0].padding_high, 2);
  EXPECT_EQ(WindowToString(Window("size=2x2 stride=1x1 pad=0_0x0_0")), "size=2x2");
}

TEST(WindowTextTest, Errors) {
  EXPECT_FALSE(ParseWindow("stride=2").ok());               // no size
  EXPECT_FALSE(ParseWindow("size=3x3 stride=2").ok());      // count differs
  EXPECT_FALSE(ParseWindow("size=3 stride=0").ok());        // stride < 1
  EXPECT_FALSE(ParseWindow("size=0").ok());                 // size < 1
  EXPECT_FALSE(ParseWindow("size=3 pad=1").ok());           // not low_high
  EXPECT_FALSE(ParseWindow("size=3 color=1").ok());         // unknown field
  EXPECT_FALSE(ParseWindow("size=3 size=3").ok());          // twice
  EXPECT_FALSE(ParseWindow("size=3 rhs_reversal=2").ok());  // not 0/1
  absl::Status s = ParseWindow("size=3x3 stride=2").status();
  EXPECT_NE(s.message().find("stride=2"), std::string::npos) << s;
}

TEST(DimLabelsTest, RoundTripsAndErrors) {
  for (const char* text : {"b01f_01io->b01f", "f01b_i01o->01bf", "b01f_01oi->b01f", "bf0_oi0->bf0",
                           "bf_io->bf", "012bf_o210i->f2b10"}) {
    absl::StatusOr<ConvolutionDimensionNumbers> d = ParseDimLabels(text);
    ASSERT_TRUE(d.ok()) << text << ": " << d.status();
    EXPECT_EQ(DimLabelsToString(*d), text);
  }
  absl::StatusOr<ConvolutionDimensionNumbers> d = ParseDimLabels("f01b_i01o->01bf");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->input_batch_dimension, 3);
  EXPECT_EQ(d->input_feature_dimension, 0);
  EXPECT_EQ(d->kernel_output_feature_dimension, 3);
  EXPECT_EQ(d->output_spatial_dimensions, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(d->output_batch_dimension, 2);
  for (const char* bad : {"b01f_01io", "b01_01io->b01f", "bb1f_01io->b01f", "b01f_01io->b0f",
                          "b02f_01io->b01f", "b01x_01io->b01f"}) {
    EXPECT_FALSE(ParseDimLabels(bad).ok()) << bad;
  }
}

OpAttributes ConvAttrs(const std::string& window, const std::string& labels, int64_t fgc = 1,
                       int64_t bgc = 1) {
  OpAttributes a;
  a.window = Window(window);
  a.convolution = ParseDimLabels(labels).value();
  a.feature_group_count = fgc;
  a.batch_group_count = bgc;
  return a;
}

TEST(WindowShapeTest, ConvolutionShapes) {
  const Shape x(DType::kF32, {8, 16, 16, 3}), k(DType::kF32, {3, 3, 3, 8});
  EXPECT_EQ(
      InferConvolutionShape(x, k, ConvAttrs("size=3x3 pad=1_1x1_1", "b01f_01io->b01f"), DType::kF32)
          .value(),
      Shape(DType::kF32, {8, 16, 16, 8}));
  const Shape y(DType::kF32, {8, 16, 16, 8}), k2(DType::kF32, {3, 3, 8, 16});
  EXPECT_EQ(InferConvolutionShape(
                y, k2, ConvAttrs("size=3x3 stride=2x2 pad=0_1x0_1", "b01f_01io->b01f"), DType::kF32)
                .value(),
            Shape(DType::kF32, {8, 8, 8, 16}));
  // The weight gradient of the resnet fixture: lhs f01b, "kernel" = output gradient i01o.
  const Shape act(DType::kF32, {8, 16, 16, 8}), grad(DType::kF32, {8, 8, 8, 16});
  EXPECT_EQ(InferConvolutionShape(
                act, grad, ConvAttrs("size=8x8 pad=0_1x0_1 rhs_dilate=2x2", "f01b_i01o->01bf"),
                DType::kF32)
                .value(),
            Shape(DType::kF32, {3, 3, 8, 16}));
  // Feature groups (depthwise): 8 features in 8 groups of 1, 16 outputs.
  EXPECT_EQ(InferConvolutionShape(y, Shape(DType::kF32, {3, 3, 1, 16}),
                                  ConvAttrs("size=3x3", "b01f_01io->b01f", 8), DType::kF32)
                .value(),
            Shape(DType::kF32, {8, 14, 14, 16}));
  // Batch groups: batch 4 in 2 groups.
  EXPECT_EQ(InferConvolutionShape(Shape(DType::kF32, {4, 1, 3}), Shape(DType::kF32, {4, 1, 1}),
                                  ConvAttrs("size=1", "bf0_oi0->bf0", 1, 2), DType::kF32)
                .value(),
            Shape(DType::kF32, {2, 4, 3}));
}

void ExpectConvError(const Shape& x, const Shape& k, const OpAttributes& a,
                     const std::string& needle) {
  absl::StatusOr<Shape> s = InferConvolutionShape(x, k, a, DType::kF32);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status();
}

TEST(WindowShapeTest, ConvolutionErrors) {
  const Shape x(DType::kF32, {8, 16, 16, 8});
  ExpectConvError(x, Shape(DType::kF32, {3, 3, 4, 8}), ConvAttrs("size=3x3", "b01f_01io->b01f"),
                  "feature_group_count=1");
  ExpectConvError(x, Shape(DType::kF32, {3, 3, 8, 8}), ConvAttrs("size=3x2", "b01f_01io->b01f"),
                  "window dim 1 has size 2");
  ExpectConvError(x, Shape(DType::kF32, {3, 3, 8, 8}), ConvAttrs("size=3", "b01f_01io->b01f"),
                  "window has 1 dims");
  ExpectConvError(x, Shape(DType::kF32, {3, 3, 8, 8}), ConvAttrs("size=3x3", "bf0_oi0->bf0"),
                  "rank");
  ExpectConvError(x, Shape(DType::kF32, {3, 3, 2, 6}), ConvAttrs("size=3x3", "b01f_01io->b01f", 4),
                  "not a multiple");
  ExpectConvError(x, Shape(DType::kF32, {3, 3, 8, 6}),
                  ConvAttrs("size=3x3", "b01f_01io->b01f", 1, 3), "batch_group_count=3");
  ExpectConvError(x, Shape(DType::kF32, {3, 3, 8, 8}), ConvAttrs("size=3x3", "b01f_01io->b01f", 0),
                  ">= 1");
  ExpectConvError(x, Shape(DType::kBF16, {3, 3, 8, 8}), ConvAttrs("size=3x3", "b01f_01io->b01f"),
                  "operand types differ");
  OpAttributes bad_output = ConvAttrs("size=3x3", "b01f_01io->b01f");
  bad_output.convolution.output_batch_dimension = 7;  // built by hand, not parsed
  ExpectConvError(x, Shape(DType::kF32, {3, 3, 8, 8}), bad_output, "output dims");
}

TEST(WindowShapeTest, ReduceWindowSelectAndScatterReverse) {
  OpAttributes a;
  a.window = Window("size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0");
  a.reduce_kind = ReduceKind::kMaximum;
  const Shape x(DType::kF32, {4, 16, 16, 8}), init(DType::kF32, {});
  EXPECT_EQ(InferReduceWindowShape(x, init, a).value(), Shape(DType::kF32, {4, 8, 8, 8}));
  EXPECT_EQ(InferShape(Opcode::kReduceWindow, {&x, &init}, a, std::nullopt).value(),
            Shape(DType::kF32, {4, 8, 8, 8}));
  EXPECT_FALSE(InferReduceWindowShape(x, Shape(DType::kS32, {}), a).ok());
  OpAttributes short_window = a;
  short_window.window.pop_back();
  EXPECT_FALSE(InferReduceWindowShape(x, init, short_window).ok());
  OpAttributes logical = a;
  logical.reduce_kind = ReduceKind::kAnd;
  EXPECT_FALSE(InferReduceWindowShape(x, init, logical).ok());

  a.comparison_direction = ComparisonDirection::kGe;
  a.reduce_kind = ReduceKind::kAdd;
  const Shape source(DType::kF32, {4, 8, 8, 8});
  EXPECT_EQ(InferSelectAndScatterShape(x, source, init, a).value(), x);
  EXPECT_FALSE(InferSelectAndScatterShape(x, Shape(DType::kF32, {4, 8, 8, 7}), init, a).ok());
  OpAttributes eq = a;
  eq.comparison_direction = ComparisonDirection::kEq;
  EXPECT_FALSE(InferSelectAndScatterShape(x, source, init, eq).ok());

  OpAttributes r;
  r.dimensions = {0, 1};
  EXPECT_EQ(InferReverseShape(x, r).value(), x);
  r.dimensions = {0, 0};
  EXPECT_FALSE(InferReverseShape(x, r).ok());
  r.dimensions = {4};
  EXPECT_FALSE(InferReverseShape(x, r).ok());
}

TEST(WindowTextTest, HloRoundTrip) {
  const std::string text = R"(HloModule m

max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ge_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}

ENTRY main {
  x = f32[2,8,8,3] parameter(0)
  k = f32[3,3,3,4] parameter(1)
  g = f32[2,4,4,3] parameter(2)
  rk = f32[3,3,3,4] reverse(k), dimensions={0,1}
  c = f32[2,4,4,4] convolution(x, rk), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  p = f32[2,4,4,3] reduce-window(x, ninf), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max_f32
  s = f32[2,8,8,3] select-and-scatter(x, g, z), window={size=1x2x2x1 stride=1x2x2x1}, select=ge_f32, scatter=add_f32
  d = f32[2,4,4,3] convolution(p, k), window={size=1x1}, dim_labels=b01f_01io->b01f, feature_group_count=3
  ROOT t = (f32[2,4,4,4], f32[2,8,8,3], f32[2,4,4,3]) tuple(c, s, p)
}
)";
  absl::StatusOr<std::unique_ptr<Graph>> g = ParseHloModule(text);
  ASSERT_FALSE(g.ok());  // d: rhs input features 3 != 3 / feature_group_count
  EXPECT_NE(g.status().message().find("feature_group_count=3"), std::string::npos) << g.status();

  std::string fixed = text;
  fixed.replace(fixed.find("k), window={size=1x1}"), 1, "kd");
  fixed.replace(fixed.find("  d = "), 0,
                "  kd = f32[1,1,1,3] slice(k), slice={[0:1],[0:1],[0:1],[0:3]}\n");
  g = ParseHloModule(fixed);
  ASSERT_TRUE(g.ok()) << g.status();
  const Node* s = (*g)->FindNode("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->attrs().comparison_direction, ComparisonDirection::kGe);
  EXPECT_EQ(s->attrs().reduce_kind, ReduceKind::kAdd);
  EXPECT_EQ((*g)->FindNode("d")->attrs().feature_group_count, 3);
  const std::string printed = PrintHloModule(**g);
  EXPECT_NE(printed.find("window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("select=%select_GE_f32, scatter=%add_f32"), std::string::npos);
  absl::StatusOr<std::unique_ptr<Graph>> again = ParseHloModule(printed);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(PrintHloModule(**again), printed);
}

TEST(WindowTextTest, ParseErrorsNameTheLine) {
  const std::string head = "HloModule m\nENTRY main {\n  x = f32[2,8] parameter(0)\n";
  absl::StatusOr<std::unique_ptr<Graph>> g =
      ParseHloModule(head +
                     "  k = f32[3,8] parameter(1)\n  ROOT c = f32[2,8] convolution(x, k), "
                     "window={size=3 stride=0}, dim_labels=bf_io->bf\n}\n");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("line 5"), std::string::npos) << g.status();
  g = ParseHloModule(head +
                     "  k = f32[8,8] parameter(1)\n  ROOT c = f32[2,8] convolution(x, k), "
                     "dim_labels=bf_iq->bf\n}\n");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("dim_labels"), std::string::npos) << g.status();
  g = ParseHloModule(head +
                     "  ROOT c = f32[2,8] reduce-window(x, x), window={size=1x1}, "
                     "to_apply=nowhere\n}\n");
  ASSERT_FALSE(g.ok());
}

// ---- Executor ----------------------------------------------------------------------------------

Literal Random(const Shape& shape, std::mt19937& rng) {
  Literal out(shape);
  std::uniform_int_distribution<int> dist(-4, 4);
  for (int64_t i = 0; i < shape.num_elements(); ++i) out.SetFromDouble(i, dist(rng) * 0.5);
  return out;
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

// Operand index read at output index o, window position k of dim `w`, or -1: straight from the
// semantics (pad, base-dilate, then slide a dilated window).
int64_t Read(const WindowDim& w, int64_t size, int64_t o, int64_t k) {
  const int64_t kk = w.window_reversal ? w.size - 1 - k : k;
  const int64_t dilated = o * w.stride + kk * w.window_dilation - w.padding_low;
  if (dilated < 0 || dilated % w.base_dilation != 0) return -1;
  return dilated / w.base_dilation < size ? dilated / w.base_dilation : -1;
}

Literal NaiveConvolution(const Literal& lhs, const Literal& rhs, const OpAttributes& a,
                         const Shape& out_shape) {
  const ConvolutionDimensionNumbers& d = a.convolution;
  Literal out(Shape(DType::kF64, out_shape.dims()));
  const int64_t groups = std::max(a.feature_group_count, a.batch_group_count);
  const int64_t out_features = out_shape.dim(d.output_feature_dimension);
  const int64_t cg = rhs.shape().dim(d.kernel_input_feature_dimension);
  const int64_t ns = static_cast<int64_t>(d.input_spatial_dimensions.size());
  std::vector<int64_t> ksizes;
  for (int64_t k : d.kernel_spatial_dimensions) ksizes.push_back(rhs.shape().dim(k));
  int64_t kcount = 1;
  for (int64_t s : ksizes) kcount *= s;
  for (int64_t i = 0; i < out_shape.num_elements(); ++i) {
    const std::vector<int64_t> oi = Unravel(i, out_shape.dims());
    const int64_t b = oi[d.output_batch_dimension], o = oi[d.output_feature_dimension];
    const int64_t g = o / (out_features / groups);
    const int64_t n = a.batch_group_count > 1 ? g * out_shape.dim(d.output_batch_dimension) + b : b;
    double sum = 0;
    for (int64_t c = 0; c < cg; ++c) {
      const int64_t f = a.feature_group_count > 1 ? g * cg + c : c;
      for (int64_t kp = 0; kp < kcount; ++kp) {
        const std::vector<int64_t> ki = Unravel(kp, ksizes);
        std::vector<int64_t> li(lhs.shape().rank()), ri(rhs.shape().rank());
        li[d.input_batch_dimension] = n;
        li[d.input_feature_dimension] = f;
        ri[d.kernel_input_feature_dimension] = c;
        ri[d.kernel_output_feature_dimension] = o;
        bool inside = true;
        for (int64_t s = 0; s < ns; ++s) {
          const int64_t idx = Read(a.window[s], lhs.shape().dim(d.input_spatial_dimensions[s]),
                                   oi[d.output_spatial_dimensions[s]], ki[s]);
          inside = inside && idx >= 0;
          li[d.input_spatial_dimensions[s]] = idx;
          ri[d.kernel_spatial_dimensions[s]] = ki[s];
        }
        if (!inside) continue;
        sum += lhs.GetAsDouble(Ravel(li, lhs.shape().dims())) *
               rhs.GetAsDouble(Ravel(ri, rhs.shape().dims()));
      }
    }
    out.SetFromDouble(i, sum);
  }
  return out;
}

void ExpectNear(const Literal& got, const Literal& want, double tolerance) {
  ASSERT_EQ(got.shape().dims(), want.shape().dims());
  for (int64_t i = 0; i < want.shape().num_elements(); ++i) {
    ASSERT_NEAR(got.GetAsDouble(i), want.GetAsDouble(i),
                tolerance * (1 + std::abs(want.GetAsDouble(i))))
        << "element " << i;
  }
}

TEST(ConvolutionKernelTest, BatchGroupsAsXla) {
  // JAX (XLA:CPU): lax.conv_general_dilated(lhs f32[4,1,3] = 1..12, rhs f32[4,1,1] =
  // {1,10,100,1000}, dimension_numbers NCH/OIH/NCH, batch_group_count=2).
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[i] = static_cast<float>(i + 1);
  Literal lhs = Literal::FromVector<float>({4, 1, 3}, x);
  Literal rhs = Literal::FromVector<float>({4, 1, 1}, {1, 10, 100, 1000});
  Literal want = Literal::FromVector<float>(
      {2, 4, 3}, {1, 2, 3, 10, 20, 30, 700,  800,  900,  7000,  8000,  9000,
                  4, 5, 6, 40, 50, 60, 1000, 1100, 1200, 10000, 11000, 12000});
  EXPECT_EQ(RunOne(Opcode::kConvolution, {lhs, rhs}, ConvAttrs("size=1", "bf0_oi0->bf0", 1, 2)),
            want);
}

TEST(ConvolutionKernelTest, HandComputed1D) {
  // x = [1,2,3,4], w = [1,10], stride 1, pad 1_0: [0*1+1*10... ] = 10, 1+20, 2+30, 3+40.
  Literal x = Literal::FromVector<float>({1, 1, 4}, {1, 2, 3, 4});
  Literal w = Literal::FromVector<float>({1, 1, 2}, {1, 10});
  EXPECT_EQ(RunOne(Opcode::kConvolution, {x, w}, ConvAttrs("size=2 pad=1_0", "bf0_io0->bf0")),
            Literal::FromVector<float>({1, 1, 4}, {10, 21, 32, 43}));
  // lhs_dilate=2: x becomes [1,0,2,0,3,0,4]; window 2, stride 2 -> 1*1+0, 2, 3, (4 alone).
  EXPECT_EQ(RunOne(Opcode::kConvolution, {x, w},
                   ConvAttrs("size=2 stride=2 lhs_dilate=2", "bf0_io0->bf0")),
            Literal::FromVector<float>({1, 1, 3}, {1, 2, 3}));
  // rhs_reversal: w read as [10, 1].
  EXPECT_EQ(
      RunOne(Opcode::kConvolution, {x, w}, ConvAttrs("size=2 rhs_reversal=1", "bf0_io0->bf0")),
      Literal::FromVector<float>({1, 1, 3}, {12, 23, 34}));
}

struct ConvCase {
  std::string labels;
  std::string window;
  int64_t fgc = 1, bgc = 1;
  int64_t batch = 2, features = 3, out_features = 4;
  std::vector<int64_t> spatial, kernel;
};

TEST(ConvolutionKernelTest, MatchesNaiveLoop) {
  std::mt19937 rng(7);
  const std::vector<ConvCase> cases = {
      {"b01f_01io->b01f", "size=3x3 pad=1_1x1_1", 1, 1, 2, 3, 4, {7, 5}, {3, 3}},
      {"b01f_01io->b01f", "size=3x3 stride=2x2 pad=0_1x0_1", 1, 1, 3, 2, 5, {7, 8}, {3, 3}},
      {"f01b_i01o->01bf", "size=4x3 pad=0_1x0_1 rhs_dilate=2x2", 1, 1, 3, 2, 4, {9, 7}, {4, 3}},
      {"b01f_01oi->b01f", "size=3x3 pad=2_1x2_1 lhs_dilate=2x2", 1, 1, 2, 3, 2, {4, 4}, {3, 3}},
      {"bf0_oi0->bf0", "size=3 stride=2 pad=2_-1 rhs_reversal=1", 1, 1, 2, 3, 2, {11}, {3}},
      {"b01f_01io->b01f", "size=2x3 pad=1_0x0_2", 3, 1, 2, 6, 9, {5, 6}, {2, 3}},
      {"bf0_oi0->bf0", "size=2 pad=1_1", 1, 2, 4, 3, 6, {5}, {2}},
      {"0bf_o0i->f0b", "size=3 stride=3 lhs_dilate=3 rhs_dilate=2", 2, 1, 3, 4, 4, {6}, {3}},
      {"bf_io->bf", "", 1, 1, 600, 30, 7, {}, {}},  // a plain GEMM with several row blocks
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.labels + " " + c.window);
    OpAttributes a = ConvAttrs(c.window, c.labels, c.fgc, c.bgc);
    const ConvolutionDimensionNumbers& d = a.convolution;
    const int64_t rank = static_cast<int64_t>(c.spatial.size()) + 2;
    std::vector<int64_t> ldims(rank), rdims(rank);
    ldims[d.input_batch_dimension] = c.batch;
    ldims[d.input_feature_dimension] = c.features;
    rdims[d.kernel_input_feature_dimension] = c.features / c.fgc;
    rdims[d.kernel_output_feature_dimension] = c.out_features;
    for (size_t s = 0; s < c.spatial.size(); ++s) {
      ldims[d.input_spatial_dimensions[s]] = c.spatial[s];
      rdims[d.kernel_spatial_dimensions[s]] = c.kernel[s];
    }
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kS32}) {
      Literal lhs = Random(Shape(dtype, ldims), rng);
      Literal rhs = Random(Shape(dtype, rdims), rng);
      const Shape out_shape = InferConvolutionShape(lhs.shape(), rhs.shape(), a, dtype).value();
      const Literal want = NaiveConvolution(lhs, rhs, a, out_shape);
      const Literal got = RunOne(Opcode::kConvolution, {lhs, rhs}, a);
      // Inputs are multiples of 0.5 in [-2, 2] (s32 keeps their whole parts): exact in f32, f64
      // and s32; bf16 and f16 round each result to 8 and 11 significant bits.
      ExpectNear(got, want,
                 dtype == DType::kBF16 || dtype == DType::kF16 ? 1e-2
                 : dtype == DType::kS32                        ? 0
                                                               : 1e-6);
      EXPECT_EQ(RunOne(Opcode::kConvolution, {lhs, rhs}, a, 4), got) << "thread count changed bits";
    }
  }
}

TEST(ReduceWindowKernelTest, CumsumMaxPoolAndPadding) {
  // cumsum as JAX lowers it: window size=1x4 pad=0_0x3_0 over f32[2,4].
  Literal x = Literal::FromVector<float>({2, 4}, {1, 2, 3, 4, 10, 20, 30, 40});
  OpAttributes a;
  a.window = Window("size=1x4 pad=0_0x3_0");
  EXPECT_EQ(RunOne(Opcode::kReduceWindow, {x, Literal::Scalar<float>(0)}, a),
            Literal::FromVector<float>({2, 4}, {1, 3, 6, 10, 10, 30, 60, 100}));
  // 3-wide max pool, stride 2, pad 0_2 over [5,1,4,2,3]: windows {5,1,4} {4,2,3} {3,pad,pad}.
  Literal y = Literal::FromVector<float>({1, 5}, {5, 1, 4, 2, 3});
  a.window = Window("size=1x3 stride=1x2 pad=0_0x0_2");
  a.reduce_kind = ReduceKind::kMaximum;
  EXPECT_EQ(RunOne(Opcode::kReduceWindow, {y, Literal::Scalar<float>(-INFINITY)}, a),
            Literal::FromVector<float>({1, 3}, {5, 4, 3}));
  // Integers, base dilation (holes skipped) and a window dilation.
  Literal z = Literal::FromVector<int32_t>({4}, {1, 2, 3, 4});
  a.window = Window("size=2 lhs_dilate=2");  // [1,_,2,_,3,_,4]: pairs hold one element each
  a.reduce_kind = ReduceKind::kAdd;
  EXPECT_EQ(RunOne(Opcode::kReduceWindow, {z, Literal::Scalar<int32_t>(0)}, a),
            Literal::FromVector<int32_t>({6}, {1, 2, 2, 3, 3, 4}));
  a.window = Window("size=2 rhs_dilate=2");  // x[i] + x[i+2]
  EXPECT_EQ(RunOne(Opcode::kReduceWindow, {z, Literal::Scalar<int32_t>(0)}, a),
            Literal::FromVector<int32_t>({2}, {4, 6}));
}

TEST(ReduceWindowKernelTest, MatchesNaiveLoopAcrossThreads) {
  std::mt19937 rng(3);
  const Shape shape(DType::kF32, {3, 40, 50});
  Literal x = Random(shape, rng);
  OpAttributes a;
  a.window = Window("size=1x3x4 stride=1x2x3 pad=0_0x1_2x3_0 rhs_dilate=1x2x1");
  a.reduce_kind = ReduceKind::kAdd;
  const Shape out = InferReduceWindowShape(shape, Shape(DType::kF32, {}), a).value();
  Literal want(out);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const std::vector<int64_t> oi = Unravel(i, out.dims());
    double sum = 0;
    for (int64_t k1 = 0; k1 < 3; ++k1) {
      for (int64_t k2 = 0; k2 < 4; ++k2) {
        const int64_t r1 = Read(a.window[1], 40, oi[1], k1), r2 = Read(a.window[2], 50, oi[2], k2);
        if (r1 >= 0 && r2 >= 0) sum += x.GetAsDouble(Ravel({oi[0], r1, r2}, shape.dims()));
      }
    }
    want.SetFromDouble(i, sum);
  }
  const Literal got = RunOne(Opcode::kReduceWindow, {x, Literal::Scalar<float>(0)}, a);
  ExpectNear(got, want, 1e-6);
  EXPECT_EQ(RunOne(Opcode::kReduceWindow, {x, Literal::Scalar<float>(0)}, a, 4), got);
}

TEST(SelectAndScatterKernelTest, TiesAndOverlap) {
  // Windows of 2, stride 1 over [3,3,1]: GE keeps the first maximum, GT moves to the last.
  Literal x = Literal::FromVector<float>({3}, {3, 3, 1});
  Literal source = Literal::FromVector<float>({2}, {10, 100});
  OpAttributes a;
  a.window = Window("size=2");
  a.comparison_direction = ComparisonDirection::kGe;
  a.reduce_kind = ReduceKind::kAdd;
  EXPECT_EQ(RunOne(Opcode::kSelectAndScatter, {x, source, Literal::Scalar<float>(0)}, a),
            Literal::FromVector<float>({3}, {10, 100, 0}));
  a.comparison_direction = ComparisonDirection::kGt;
  EXPECT_EQ(RunOne(Opcode::kSelectAndScatter, {x, source, Literal::Scalar<float>(0)}, a),
            Literal::FromVector<float>({3}, {0, 110, 0}));
  // Max-pool gradient, 2x2 stride 2 with a padded edge; init 1 shows where nothing lands.
  Literal y = Literal::FromVector<float>({2, 3}, {1, 5, 2, 4, 3, 9});
  Literal g = Literal::FromVector<float>({1, 2}, {7, 8});
  a.window = Window("size=2x2 stride=2x2 pad=0_0x0_1");
  a.comparison_direction = ComparisonDirection::kGe;
  EXPECT_EQ(RunOne(Opcode::kSelectAndScatter, {y, g, Literal::Scalar<float>(1)}, a),
            Literal::FromVector<float>({2, 3}, {1, 8, 1, 1, 1, 9}));
  // LE selects minima.
  a.comparison_direction = ComparisonDirection::kLe;
  EXPECT_EQ(RunOne(Opcode::kSelectAndScatter, {y, g, Literal::Scalar<float>(0)}, a),
            Literal::FromVector<float>({2, 3}, {7, 0, 8, 0, 0, 0}));
}

TEST(ReverseKernelTest, ReversesListedDims) {
  Literal x = Literal::FromVector<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  OpAttributes a;
  a.dimensions = {1};
  EXPECT_EQ(RunOne(Opcode::kReverse, {x}, a),
            Literal::FromVector<int32_t>({2, 3}, {3, 2, 1, 6, 5, 4}));
  a.dimensions = {0, 1};
  EXPECT_EQ(RunOne(Opcode::kReverse, {x}, a),
            Literal::FromVector<int32_t>({2, 3}, {6, 5, 4, 3, 2, 1}));
  a.dimensions = {};
  EXPECT_EQ(RunOne(Opcode::kReverse, {x}, a), x);
}

}  // namespace
}  // namespace tessel
