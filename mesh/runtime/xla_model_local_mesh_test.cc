// nn/xla_model.h's collectives on 8 devices (mesh::LocalMesh, mesh ["data"=4, "model"=2]):
// every device's result against a hand computation on the global array, and a data-parallel
// SGD step written by hand in a manual region (per-device loss, optimizer_step averaging the
// gradients over "data") against the full-batch gradient computed by hand.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/runtime/local_mesh.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/xla_model.h"
#include "tessel/spmd/mark_sharding.h"

namespace tessel::mesh {
namespace {

using spmd::kNone;

// x[i][j] = values that tell rows and columns apart, f32[8,4].
Literal Input() {
  Literal x(Shape(DType::kF32, {8, 4}));
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 4; ++j) x.SetFromDouble(i * 4 + j, 10.0 * i + j + 0.25 * (i % 3));
  }
  return x;
}

double At(const Literal& x, int64_t i, int64_t j) {
  return x.GetAsDouble(i * x.shape().dim(1) + j);
}

Literal Read(const absl::StatusOr<Tensor>& t) {
  EXPECT_TRUE(t.ok()) << t.status();
  absl::StatusOr<Literal> value = t->ToLiteral();
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *std::move(value) : Literal(Shape(DType::kF32, {}));
}

TEST(XlaModelLocalMeshTest, CollectivesOnPerDeviceValuesMatchTheHandComputation) {
  auto local = LocalMesh::Create(8).value();
  spmd::Mesh mesh = local->MakeMesh({4, 2}, {"data", "model"}).value();
  const CollectiveDeviceList data = nn::replica_groups(mesh, {"data"}).value();
  const CollectiveDeviceList model = nn::replica_groups(mesh, {"model"}).value();
  const Literal xv = Input();
  Tensor x = Tensor::FromLiteral(xv);
  // Device (d, m) holds rows [2d, 2d + 2): block d.
  Tensor rows = spmd::enable_manual_sharding(x, {"data", kNone}, mesh).value();
  ASSERT_EQ(rows.shape(), Shape(DType::kF32, {2, 4}));

  // all_reduce: the 4 blocks summed, times 0.5, on every device.
  Tensor summed = nn::all_reduce(ReduceKind::kAdd, {rows}, 0.5, data)[0];
  Literal got = Read(spmd::disable_manual_sharding(summed, {"data", kNone}, {8, 4}, mesh));
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      double want = 0;
      for (int64_t d = 0; d < 4; ++d) want += At(xv, 2 * d + i % 2, j);
      EXPECT_EQ(At(got, i, j), 0.5 * want) << "all_reduce [" << i << "," << j << "]";
    }
  }

  // all_gather over "model": the two column halves of a block put back together.
  Tensor tile = spmd::enable_manual_sharding(x, {"data", "model"}, mesh).value();
  ASSERT_EQ(tile.shape(), Shape(DType::kF32, {2, 2}));
  Tensor gathered = nn::all_gather(tile, 1, model);
  got = Read(spmd::disable_manual_sharding(gathered, {"data", kNone}, {8, 4}, mesh));
  for (int64_t k = 0; k < 32; ++k) EXPECT_EQ(got.GetAsDouble(k), xv.GetAsDouble(k)) << k;

  // reduce_scatter over "data" on columns: device (d, m) keeps column d of the sum of blocks.
  Tensor scattered = nn::reduce_scatter(ReduceKind::kAdd, rows, 1.0, 1, 4, data);
  ASSERT_EQ(scattered.shape(), Shape(DType::kF32, {2, 1}));
  got = Read(spmd::disable_manual_sharding(scattered, {kNone, "data"}, {2, 4}, mesh));
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      double want = 0;
      for (int64_t d = 0; d < 4; ++d) want += At(xv, 2 * d + r, c);
      EXPECT_EQ(At(got, r, c), want) << "reduce_scatter [" << r << "," << c << "]";
    }
  }

  // all_to_all over "data", split columns, concat rows: device (d, m) receives column d of every
  // block, in block order, i.e. column d of x: laid out over "data" on columns it is x again.
  Tensor exchanged = nn::all_to_all(rows, 1, 0, 4, data);
  ASSERT_EQ(exchanged.shape(), Shape(DType::kF32, {8, 1}));
  got = Read(spmd::disable_manual_sharding(exchanged, {kNone, "data"}, {8, 4}, mesh));
  for (int64_t k = 0; k < 32; ++k) EXPECT_EQ(got.GetAsDouble(k), xv.GetAsDouble(k)) << k;
}

// One SGD step of least squares, data parallel by hand: each device's loss is the mean over its
// 2 rows, optimizer_step averages the 4 data groups' gradients (all_reduce, scale 1/4), which is
// the full batch's gradient 2/8 X^T (X w - y).
TEST(XlaModelLocalMeshTest, HandWrittenDataParallelStepEqualsTheFullBatchStep) {
  auto local = LocalMesh::Create(8).value();
  spmd::Mesh mesh = local->MakeMesh({4, 2}, {"data", "model"}).value();
  const Literal xv = Input();
  Literal yv(Shape(DType::kF32, {8, 1}));
  for (int64_t i = 0; i < 8; ++i) yv.SetFromDouble(i, std::sin(static_cast<double>(i)));
  const std::vector<float> w0 = {0.01f, -0.02f, 0.03f, 0.005f};
  const double lr = 1e-4;

  Tensor xl = spmd::enable_manual_sharding(Tensor::FromLiteral(xv), {"data", kNone}, mesh).value();
  Tensor yl = spmd::enable_manual_sharding(Tensor::FromLiteral(yv), {"data", kNone}, mesh).value();
  Tensor w = spmd::enable_manual_sharding(
                 Tensor::FromLiteral(Literal::FromVector<float>({4, 1}, w0)), {kNone, kNone}, mesh)
                 .value();
  Tensor err = MatMul(xl, w) - yl;
  Tensor loss = ReduceMean(err * err, {0, 1});
  std::vector<Tensor> grads = Grad(loss, {w});
  nn::Sgd sgd({.lr = lr});
  std::vector<Tensor*> params = {&w};
  absl::StatusOr<Tensor> norm = nn::optimizer_step(
      sgd, params, grads,
      {.groups = nn::replica_groups(mesh, {"data"}).value(), .max_grad_norm = 0});
  ASSERT_TRUE(norm.ok()) << norm.status();
  Literal got = Read(spmd::disable_manual_sharding(w, {kNone, kNone}, {4, 1}, mesh));

  std::vector<double> residual(8);
  for (int64_t i = 0; i < 8; ++i) {
    residual[i] = -yv.GetAsDouble(i);
    for (int64_t j = 0; j < 4; ++j) residual[i] += At(xv, i, j) * w0[j];
  }
  for (int64_t j = 0; j < 4; ++j) {
    double grad = 0;
    for (int64_t i = 0; i < 8; ++i) grad += 2.0 / 8.0 * At(xv, i, j) * residual[i];
    const double want = w0[j] - lr * grad;
    EXPECT_NEAR(got.GetAsDouble(j), want, 1e-5 * std::abs(want) + 1e-7) << "w[" << j << "]";
  }
}

}  // namespace
}  // namespace tessel::mesh
