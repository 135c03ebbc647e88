// Trains a small classifier sharded over 4 in-process devices (a 2 x 2 mesh: the batch over
// "data", the hidden layer Megatron-style over "model") with Tessel's installed headers and
// libraries, and prints the loss of each step, the per-device memory and the collectives.
// Exit code 0 when the loss went down, 1 on an error or when it did not.
#include <cstdio>
#include <random>

#include "tessel/core/status_macros.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/runtime/local_mesh.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/train.h"
#include "tessel/spmd/mark_sharding.h"
#include "tessel/version.h"

using tessel::Literal;
using tessel::Shape;
using tessel::Tensor;
using tessel::spmd::kNone;

// A batch of `n` points in 16 dims with a label that is a fixed function of them (the sign
// pattern of two coordinates: 4 classes), so the model can learn it.
void MakeBatch(int64_t n, std::mt19937_64& rng, Literal& images, Literal& labels) {
  std::normal_distribution<float> normal;
  images = Literal(Shape(tessel::DType::kF32, {n, 16}));
  labels = Literal(Shape(tessel::DType::kS32, {n}));
  for (int64_t i = 0; i < n; ++i) {
    float* row = images.data<float>().data() + i * 16;
    for (int64_t j = 0; j < 16; ++j) row[j] = normal(rng);
    labels.data<int32_t>()[i] = (row[0] > 0 ? 1 : 0) + (row[1] > 0 ? 2 : 0);
  }
}

absl::Status Train(bool& improved) {
  TESSEL_ASSIGN_OR_RETURN(auto local, tessel::mesh::LocalMesh::Create(4));
  TESSEL_ASSIGN_OR_RETURN(tessel::spmd::Mesh mesh, local->MakeMesh({2, 2}, {"data", "model"}));
  TESSEL_ASSIGN_OR_RETURN(tessel::nn::Mlp model, tessel::nn::Mlp::Create({16, 64, 4}, 0));
  auto& layers = model.layers();
  TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(layers[0].weight(), mesh, {kNone, "model"}));
  TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(layers[0].bias(), mesh, {"model"}));
  TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(layers[1].weight(), mesh, {"model", kNone}));
  tessel::nn::Adam adam({.lr = 1e-2});
  std::mt19937_64 rng(1);
  double first_loss = 0, loss = 0;
  for (int step = 0; step < 30; ++step) {
    Literal images, labels;
    MakeBatch(64, rng, images, labels);
    Tensor x = Tensor::FromLiteral(images), y = Tensor::FromLiteral(labels);
    TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(x, mesh, {"data", kNone}));
    TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(y, mesh, {"data"}));
    TESSEL_ASSIGN_OR_RETURN(tessel::nn::StepResult r, tessel::nn::TrainStep(model, adam, x, y));
    if (step == 0) first_loss = r.loss;
    loss = r.loss;
    if (step % 5 == 0 || step == 29) {
      std::printf("step %2d  loss %.4f  accuracy %.3f\n", step, r.loss,
                  static_cast<double>(r.num_correct) / static_cast<double>(r.batch_size));
    }
  }
  // The first layer's weight, read back as a host array (gathered from the 2 model shards).
  TESSEL_ASSIGN_OR_RETURN(Literal w0, layers[0].weight().ToLiteral());
  std::printf("layer 0 weight %s, sharding %s\n", w0.shape().ToString().c_str(),
              layers[0].weight().sharding().c_str());
  const tessel::mesh::RuntimeMetrics metrics = local->runtime().metrics();
  std::printf("compiles %lld, cache hits %lld, peak bytes per device %lld\n",
              static_cast<long long>(metrics.compiles), static_cast<long long>(metrics.cache_hits),
              static_cast<long long>(metrics.peak_device_bytes));
  std::printf("collectives:\n%s\n", metrics.collectives.ToString().c_str());
  improved = loss < first_loss;
  return absl::OkStatus();
}

int main() {
  std::printf("tessel %s on 4 in-process devices\n", TESSEL_VERSION_STRING);
  bool improved = false;
  if (absl::Status status = Train(improved); !status.ok()) {
    std::fprintf(stderr, "consumer: %s\n", status.ToString().c_str());
    return 1;
  }
  std::printf(improved ? "the loss went down\n" : "the loss did not go down\n");
  return improved ? 0 : 1;
}
