// Tests of partitioner/verify.h: inputs, the comparison rule, and whole verifications, including a
// hand-broken SPMD program that must be reported as a mismatch of the right output.
#include "tessel/partitioner/verify.h"

#include <cmath>
#include <limits>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/hlo_text.h"

namespace tessel::partitioner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A module with four outputs over `n` devices: a dot whose contracting dim is split (partial
// sums, then a reduce-scatter to rows), the column sums of that dot over its split rows (an
// all-reduce), a dynamic-slice at a start index read from a parameter, and an integer
// elementwise result. 9 rows are uneven on 2 and 4 devices.
std::string Module(int64_t n) {
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  const std::string devices = absl::StrJoin(ids, ",");
  return absl::StrReplaceAll(R"(HloModule verify_ok
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (x: f32[9,12], w: f32[12,5], i: s32[], k: s32[9,12]) -> (f32[9,5], f32[5], f32[4,12], s32[9,12]) {
  %x = f32[9,12] parameter(0), sharding={devices=[1,N]DEVICES}
  %w = f32[12,5] parameter(1), sharding={devices=[N,1]DEVICES}
  %i = s32[] parameter(2)
  %k = s32[9,12] parameter(3), sharding={devices=[N,1]DEVICES}
  %d = f32[9,5] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[N,1]DEVICES}
  %zero = f32[] constant(0)
  %r = f32[5] reduce(%d, %zero), dimensions={0}, to_apply=%add, sharding={replicated}
  %z = s32[] constant(0)
  %s = f32[4,12] dynamic-slice(%x, %i, %z), dynamic_slice_sizes={4,12}
  %t = s32[9,12] multiply(%k, %k)
  ROOT %out = (f32[9,5], f32[5], f32[4,12], s32[9,12]) tuple(%d, %r, %s, %t)
})",
                             {{"[1,N]", absl::StrCat("[1,", n, "]")},
                              {"[N,1]", absl::StrCat("[", n, ",1]")},
                              {"DEVICES", devices}});
}

std::unique_ptr<Graph> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloModule(text);
  EXPECT_TRUE(graph.ok()) << graph.status() << "\n" << text;
  return graph.ok() ? *std::move(graph) : std::make_unique<Graph>();
}

TEST(VerifyTest, ModuleVerifiesOnOneTwoAndFourDevices) {
  for (int64_t n : {1, 2, 4}) {
    SCOPED_TRACE(absl::StrCat(n, " devices"));
    std::unique_ptr<Graph> graph = Parse(Module(n));
    absl::StatusOr<VerifyReport> report = VerifyPartitioning(*graph, n);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok());
    EXPECT_EQ(report->first_mismatch(), std::nullopt);
    EXPECT_EQ(report->num_devices, n);
    ASSERT_EQ(report->outputs.size(), 4u);
    for (const OutputCheck& output : report->outputs) {
      SCOPED_TRACE(absl::StrCat("output ", output.index));
      EXPECT_TRUE(output.ok);
      EXPECT_EQ(output.mismatched_elements, 0);
      EXPECT_EQ(output.first_mismatch_element, -1);
      EXPECT_LE(output.max_abs_error, output.tolerance.atol * output.scale);
    }
    EXPECT_EQ(report->outputs[0].global_shape.ToString(), "f32[9,5]");
    EXPECT_EQ(report->outputs[0].local_shape.ToString(),
              absl::StrCat("f32[", (9 + n - 1) / n, ",5]"));
    EXPECT_EQ(report->outputs[3].max_abs_error, 0);  // integers: exact
    EXPECT_EQ(report->outputs[3].tolerance.atol, 0);
    if (n == 1) {
      EXPECT_TRUE(report->collectives.empty());
    } else {
      EXPECT_EQ(report->collectives["all-reduce"].count, 1);
      EXPECT_EQ(report->collectives["reduce-scatter"].count, 1);
      EXPECT_GT(report->collectives["reduce-scatter"].result_bytes, 0);
    }
  }
}

// Drops every all-reduce of `text` (an SPMD program) by turning it into a copy of its operand.
std::string DropAllReduces(const std::string& text) {
  static const std::regex kAllReduce(R"((=\s*\S+\s+)all-reduce\((%[^,)]+)\)[^\n]*)");
  return std::regex_replace(text, kAllReduce, "$1copy($2)");
}

TEST(VerifyTest, ProgramWithoutItsAllReduceIsAMismatchOfTheOutputThatNeedsIt) {
  std::unique_ptr<Graph> graph = Parse(Module(4));
  absl::StatusOr<SpmdProgram> program = Partition(*graph, 4);
  ASSERT_TRUE(program.ok()) << program.status();
  std::string text = PrintHloModule(*program->program);
  std::string broken_text = DropAllReduces(text);
  ASSERT_NE(broken_text, text) << text;
  ASSERT_THAT(broken_text, Not(HasSubstr(" all-reduce(")));
  SpmdProgram broken;
  broken.program = Parse(broken_text);
  broken.num_devices = 4;
  broken.parameters = program->parameters;
  broken.outputs = program->outputs;
  EXPECT_TRUE(CountCollectives(*broken.program).count("all-reduce") == 0);

  absl::StatusOr<VerifyReport> report = VerifyProgram(*graph, broken);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok());
  ASSERT_EQ(report->first_mismatch(), 1) << broken_text;
  // Only the column sums needed the all-reduce; the other outputs are still exact or close.
  EXPECT_TRUE(report->outputs[0].ok);
  EXPECT_FALSE(report->outputs[1].ok);
  EXPECT_TRUE(report->outputs[2].ok);
  EXPECT_TRUE(report->outputs[3].ok);
  EXPECT_GT(report->outputs[1].mismatched_elements, 0);
  EXPECT_GE(report->outputs[1].first_mismatch_element, 0);
  EXPECT_GT(report->outputs[1].max_abs_error, 1e-3);

  // The untouched program verifies on the same inputs.
  absl::StatusOr<VerifyReport> good = VerifyProgram(*graph, *program);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->ok());
}

TEST(VerifyTest, InputsAreDeterministicInTheSeedAndStartIndicesStayInRange) {
  std::unique_ptr<Graph> graph = Parse(Module(2));
  absl::StatusOr<std::vector<Literal>> a = MakeVerifyInputs(*graph, 3);
  absl::StatusOr<std::vector<Literal>> b = MakeVerifyInputs(*graph, 3);
  absl::StatusOr<std::vector<Literal>> c = MakeVerifyInputs(*graph, 4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->size(), 4u);
  EXPECT_EQ(*a, *b);
  EXPECT_NE((*a)[0], (*c)[0]);
  for (double v : (*a)[0].ToDoubles()) {
    EXPECT_GE(v, -1.0);
    EXPECT_LT(v, 1.0);
  }
  for (double v : (*a)[3].ToDoubles()) {
    EXPECT_GE(v, -8.0);
    EXPECT_LE(v, 8.0);
  }
  // %i starts a window of 4 rows in 9: every seed gives a start in [0, 5], and several differ.
  std::set<int32_t> starts;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    absl::StatusOr<std::vector<Literal>> inputs = MakeVerifyInputs(*graph, seed);
    ASSERT_TRUE(inputs.ok());
    int32_t start = (*inputs)[2].data<int32_t>()[0];
    EXPECT_GE(start, 0);
    EXPECT_LE(start, 5);
    starts.insert(start);
  }
  EXPECT_GT(starts.size(), 3u);
}

TEST(VerifyTest, DynamicUpdateSliceStartsKeepTheUpdateInside) {
  std::unique_ptr<Graph> graph = Parse(R"(HloModule dus
ENTRY %main (x: f32[6,3], u: f32[4,3], i: s64[], j: s32[]) -> f32[6,3] {
  %x = f32[6,3] parameter(0)
  %u = f32[4,3] parameter(1)
  %i = s64[] parameter(2)
  %j = s32[] parameter(3)
  ROOT %y = f32[6,3] dynamic-update-slice(%x, %u, %i, %j)
})");
  for (uint64_t seed = 0; seed < 32; ++seed) {
    absl::StatusOr<std::vector<Literal>> inputs = MakeVerifyInputs(*graph, seed);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    EXPECT_GE((*inputs)[2].data<int64_t>()[0], 0);
    EXPECT_LE((*inputs)[2].data<int64_t>()[0], 2);
    EXPECT_EQ((*inputs)[3].data<int32_t>()[0], 0);
  }
}

TEST(VerifyTest, CompareOutputRule) {
  const Tolerance f32 = DefaultTolerance(DType::kF32);
  EXPECT_EQ(f32.rtol, 1e-5);
  EXPECT_EQ(DefaultTolerance(DType::kS32).atol, 0);
  EXPECT_GT(DefaultTolerance(DType::kBF16).rtol, DefaultTolerance(DType::kF16).rtol);

  // The absolute term is scaled by the output's largest magnitude: near-zero entries of a
  // large output may be off by atol * scale.
  Literal expected = Literal::FromVector<float>({3}, {1000.0f, 0.0f, -2.0f});
  Literal got = Literal::FromVector<float>({3}, {1000.001f, 0.005f, -2.0f});
  OutputCheck check = CompareOutput(got, expected, f32);
  EXPECT_TRUE(check.ok);
  EXPECT_FLOAT_EQ(check.scale, 1000.0);
  EXPECT_NEAR(check.max_abs_error, 0.005, 1e-6);
  EXPECT_NEAR(check.max_rel_error, 1e-6, 1e-7);  // the zero does not count
  Literal far = Literal::FromVector<float>({3}, {1000.0f, 0.5f, -2.0f});
  check = CompareOutput(far, expected, f32);
  EXPECT_FALSE(check.ok);
  EXPECT_EQ(check.mismatched_elements, 1);
  EXPECT_EQ(check.first_mismatch_element, 1);

  // NaN equals NaN; NaN against a number and different infinities fail with infinite error.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Literal special = Literal::FromVector<float>({2}, {nan, inf});
  EXPECT_TRUE(CompareOutput(special, special, f32).ok);
  check = CompareOutput(Literal::FromVector<float>({2}, {1.0f, inf}), special, f32);
  EXPECT_FALSE(check.ok);
  EXPECT_TRUE(std::isinf(check.max_abs_error));
  EXPECT_FALSE(CompareOutput(Literal::FromVector<float>({2}, {nan, -inf}), special, f32).ok);

  // Integers compare exactly, also where doubles could not tell them apart.
  const int64_t big = (int64_t{1} << 60) + 1;
  check = CompareOutput(Literal::FromVector<int64_t>({1}, {big}),
                        Literal::FromVector<int64_t>({1}, {big - 1}), {0, 0});
  EXPECT_FALSE(check.ok);
  EXPECT_EQ(check.max_abs_error, 1);
  EXPECT_TRUE(CompareOutput(Literal::FromVector<int64_t>({1}, {big}),
                            Literal::FromVector<int64_t>({1}, {big - 1}), {0, 1})
                  .ok);
  Literal pred = Literal::FromVector<bool>({2}, {true, false});
  EXPECT_FALSE(CompareOutput(Literal::FromVector<bool>({2}, {true, true}), pred, {0, 0}).ok);

  // Another shape is a failed check, not an error.
  check = CompareOutput(Literal::FromVector<float>({2}, {1, 2}), expected, f32);
  EXPECT_FALSE(check.ok);
  EXPECT_TRUE(std::isinf(check.max_abs_error));
}

TEST(VerifyTest, ToleranceOverridesApplyToEveryOutput) {
  std::unique_ptr<Graph> graph = Parse(Module(2));
  VerifyOptions options;
  options.rtol = 0.5;
  options.atol = 0.25;
  absl::StatusOr<VerifyReport> report = VerifyPartitioning(*graph, 2, options);
  ASSERT_TRUE(report.ok()) << report.status();
  for (const OutputCheck& output : report->outputs) {
    EXPECT_EQ(output.tolerance.rtol, 0.5);
    EXPECT_EQ(output.tolerance.atol, 0.25);
  }
}

TEST(VerifyTest, Errors) {
  std::unique_ptr<Graph> graph = Parse(Module(2));
  absl::StatusOr<VerifyReport> report = VerifyPartitioning(*graph, 0);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  // A sharding over 2 devices partitioned for 3.
  report = VerifyPartitioning(*graph, 3);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(report.status().message(), HasSubstr("%x: sharding="));

  absl::StatusOr<SpmdProgram> program = Partition(*graph, 2);
  ASSERT_TRUE(program.ok());
  absl::StatusOr<std::vector<Literal>> got = RunPartitioned(*program, {});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("4 parameters but 0 inputs"));
  std::vector<Literal> wrong(4, Literal::FromVector<float>({1}, {1}));
  got = RunPartitioned(*program, wrong);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("parameter 0: "));
  EXPECT_EQ(RunPartitioned(SpmdProgram{}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessel::partitioner
