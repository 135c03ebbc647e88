// Buffer donation through Sync (core/tensor.h): the old value of a tensor a step replaces is
// donated to the execution and the executor writes the new value into its buffer; a value that
// anything else can still read is never donated; results are bitwise those without donation.
#include <cstdlib>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/core/computation_client.h"
#include "tessel/core/tensor.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

Literal Ramp(std::vector<int64_t> dims, float scale) {
  Literal lit(Shape(DType::kF32, std::move(dims)));
  absl::Span<float> values = lit.data<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = scale * static_cast<float>((i * 37) % 101) / 101.0f - 0.25f;
  }
  return lit;
}

// The address of the buffer holding `t`'s value (the handle is dropped before returning, so
// asking does not keep the value from being donated).
const void* BufferOf(const Tensor& t) {
  std::shared_ptr<const DeviceData> data = t.device_data();
  const auto* whole = dynamic_cast<const LiteralData*>(data.get());
  return whole == nullptr ? nullptr : whole->literal().raw_data();
}

// Sets TESSEL_DONATE_PARAMS for one scope.
class DonateParams {
 public:
  explicit DonateParams(const char* value) { setenv("TESSEL_DONATE_PARAMS", value, 1); }
  ~DonateParams() { unsetenv("TESSEL_DONATE_PARAMS"); }
};

TEST(DonationTest, ReplacedValueIsWrittenInPlace) {
  ResetLazyMetrics();
  Tensor p = Tensor::FromLiteral(Ramp({4096}, 1));
  Tensor g = Tensor::FromLiteral(Ramp({4096}, 2));
  for (int step = 0; step < 3; ++step) {
    const void* before = BufferOf(p);
    p = p * 0.5 + g * 0.25;
    ASSERT_TRUE(Sync().ok());
    EXPECT_EQ(BufferOf(p), before) << "step " << step;
  }
  // g is still held by the test: read, never donated. p's value is donated every step.
  EXPECT_EQ(GetLazyMetrics().donated_arguments, 3);
  EXPECT_EQ(GetLazyMetrics().donated_in_place, 3);
  absl::StatusOr<Literal> g_value = g.ToLiteral();
  ASSERT_TRUE(g_value.ok()) << g_value.status();
  EXPECT_EQ(*g_value, Ramp({4096}, 2));
}

TEST(DonationTest, KeptOldValueIsNeverClobbered) {
  ResetLazyMetrics();
  Tensor p = Tensor::FromLiteral(Ramp({4096}, 1));
  Tensor old = p;  // the user keeps the pre-step value
  const void* before = BufferOf(p);
  p = p * 2.0 + 1.0;
  ASSERT_TRUE(Sync().ok());
  EXPECT_NE(BufferOf(p), before);
  EXPECT_EQ(GetLazyMetrics().donated_arguments, 0);
  absl::StatusOr<Literal> old_value = old.ToLiteral();
  ASSERT_TRUE(old_value.ok()) << old_value.status();
  EXPECT_EQ(*old_value, Ramp({4096}, 1));
  EXPECT_EQ(p.ToLiteral()->data<float>()[5], Ramp({4096}, 1).data<float>()[5] * 2.0f + 1.0f);
}

TEST(DonationTest, DeviceDataHeldByTheCallerIsNeverDonated) {
  ResetLazyMetrics();
  Tensor p = Tensor::FromLiteral(Ramp({4096}, 1));
  std::shared_ptr<const DeviceData> held = p.device_data();
  p = p * 2.0 + 1.0;
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(GetLazyMetrics().donated_arguments, 0);
  EXPECT_EQ(dynamic_cast<const LiteralData&>(*held).literal(), Ramp({4096}, 1));
}

TEST(DonationTest, PendingTensorLeftOutOfTheSyncKeepsItsInput) {
  ResetLazyMetrics();
  Tensor p = Tensor::FromLiteral(Ramp({4096}, 1));
  Tensor later = p + 1.0;  // reads the old p, synced after p's step
  p = p * 3.0 + 0.5;
  ASSERT_TRUE(Sync({p}).ok());
  EXPECT_EQ(GetLazyMetrics().donated_arguments, 0);
  absl::StatusOr<Literal> value = later.ToLiteral();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->data<float>()[7], Ramp({4096}, 1).data<float>()[7] + 1.0f);
}

TEST(DonationTest, ValueSharedByTwoParametersOfTheGraphIsNotDonated) {
  ResetLazyMetrics();
  Tensor a = Tensor::FromLiteral(Ramp({4096}, 1));
  // Two leaves over one value: donating one would clobber what the other reads.
  Tensor b = Tensor::FromDeviceData(a.device_data());
  a = a * 2.0 + b * 0.5;
  b = Tensor();
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(GetLazyMetrics().donated_arguments, 0);
  EXPECT_EQ(a.ToLiteral()->data<float>()[9], Ramp({4096}, 1).data<float>()[9] * 2.5f);
}

// A few Adam steps (moments and parameters replaced every step) of a linear model with a
// dot-based gradient, plus an SGD-updated second weight (the dot update runs in its GEMM).
std::vector<Literal> TrainLinear(int steps) {
  Tensor w = Tensor::FromLiteral(Ramp({53, 37}, 1));
  Tensor u = Tensor::FromLiteral(Ramp({37, 11}, 1));
  Tensor m = Tensor::FromLiteral(Literal(Shape(DType::kF32, {53, 37})));
  Tensor v = Tensor::FromLiteral(Literal(Shape(DType::kF32, {53, 37})));
  Tensor loss;
  for (int step = 0; step < steps; ++step) {
    {
      Tensor x = Tensor::FromLiteral(Ramp({29, 53}, 0.5f + static_cast<float>(step)));
      Tensor h = MatMul(x, w);
      Tensor y = MatMul(h, u);
      loss = ReduceSum(y * y, {0, 1});
      std::vector<Tensor> grads = Grad(loss, {w, u});
      m = m * 0.9 + grads[0] * 0.1;
      v = v * 0.999 + grads[0] * grads[0] * 0.001;
      w = w - 1e-3 * m / (Sqrt(v) + 1e-8);
      u = u - grads[1] * 1e-4;
    }
    EXPECT_TRUE(Sync().ok());
  }
  return {*w.ToLiteral(), *u.ToLiteral(), *m.ToLiteral(), *v.ToLiteral(), *loss.ToLiteral()};
}

TEST(DonationTest, ResultsAreBitwiseThoseWithoutDonation) {
  std::vector<Literal> without;
  {
    DonateParams off("0");
    ResetLazyMetrics();
    without = TrainLinear(4);
    EXPECT_EQ(GetLazyMetrics().donated_arguments, 0);
  }
  ResetLazyMetrics();
  std::vector<Literal> with = TrainLinear(4);
  // w, u, m, v and x each step (x: moved into the step scope, dead after it).
  EXPECT_EQ(GetLazyMetrics().donated_arguments, 4 * 5);
  // w, m and v in their fused updates, u in its dot update; x is read by dots only.
  EXPECT_EQ(GetLazyMetrics().donated_in_place, 4 * 4);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) EXPECT_EQ(with[i], without[i]) << "output " << i;
}

TEST(DonationTest, MalformedSwitchIsAnError) {
  DonateParams bad("sometimes");
  Tensor p = Tensor::FromLiteral(Ramp({16}, 1));
  p = p * 2.0;
  absl::Status status = Sync();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("TESSEL_DONATE_PARAMS=\"sometimes\""));
  EXPECT_FALSE(p.is_data());  // nothing ran
}

// A client that fails every execution, after consuming the donated values or before.
class FailingClient final : public ComputationClient {
 public:
  explicit FailingClient(bool consume) : consume_(consume) {}
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> Execute(
      const std::shared_ptr<const Graph>&, uint64_t,
      absl::Span<const std::shared_ptr<const DeviceData>>, ExecutionStats*) override {
    return absl::UnavailableError("device lost");
  }
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> ExecuteDonated(
      const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
      absl::Span<const std::shared_ptr<const DeviceData>> arguments,
      const std::vector<bool>& donated, ExecutionStats* stats) override {
    for (size_t i = 0; i < arguments.size(); ++i) {
      const auto* data = dynamic_cast<const LiteralData*>(arguments[i].get());
      if (consume_ && donated[i] && data != nullptr) {
        Literal taken = std::move(*data->literal_for_donation());
        data->MarkDonated();
      }
    }
    return Execute(graph, fingerprint, arguments, stats);
  }
  absl::StatusOr<Literal> TransferFromDevice(const DeviceData&) override {
    return absl::UnimplementedError("no transfers");
  }

 private:
  bool consume_;
};

TEST(DonationTest, FailureBeforeTheValuesAreTakenLeavesTensorsUnchanged) {
  Tensor p = Tensor::FromLiteral(Ramp({4096}, 1));
  p = p * 2.0 + 1.0;
  SetComputationClient(std::make_shared<FailingClient>(/*consume=*/false));
  absl::Status status = Sync();
  SetComputationClient(nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(p.status().ok());
  // The step runs again, on the old value given back to its leaf.
  absl::StatusOr<Literal> value = p.ToLiteral();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->data<float>()[3], Ramp({4096}, 1).data<float>()[3] * 2.0f + 1.0f);
}

TEST(DonationTest, FailureAfterTheValuesAreTakenKeepsTheError) {
  Tensor p = Tensor::FromLiteral(Ramp({4096}, 1));
  p = p * 2.0 + 1.0;
  SetComputationClient(std::make_shared<FailingClient>(/*consume=*/true));
  absl::Status status = Sync();
  SetComputationClient(nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("device lost"));
  EXPECT_THAT(status.message(), HasSubstr("TESSEL_DONATE_PARAMS=0"));
  // The step's input is gone: the tensor reports the error instead of running again.
  EXPECT_EQ(p.status(), status);
  EXPECT_EQ(p.ToLiteral().status(), status);
  EXPECT_TRUE(Sync().ok());  // errored tensors are not part of later steps
}

}  // namespace
}  // namespace tessel
