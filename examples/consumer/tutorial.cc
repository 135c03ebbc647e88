// The program of docs/tutorial.md, step by step: a mesh of 4 in-process devices, an MLP whose
// layers are sharded Megatron-style, a batch sharded over "data", 30 Adam steps, then a look
// inside: the layout of a weight, the collectives and memory of the step, its timeline and the
// partitioned program, and last an HLO module run on the same devices.
//
//   tutorial [OUT_DIR]     writes OUT_DIR/trace.json and the partitioned programs under
//                          OUT_DIR/dump (default OUT_DIR: tutorial-out, created if missing)
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tessel/core/status_macros.h"
#include "tessel/core/tensor.h"
#include "tessel/mesh/runtime/local_mesh.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/optim.h"
#include "tessel/nn/train.h"
#include "tessel/spmd/mark_sharding.h"
#include "tessel/spmd/sharding.h"
#include "tessel/spmd/visualize.h"

namespace {

using tessel::Literal;
using tessel::Shape;
using tessel::Tensor;
using tessel::spmd::kNone;

// 16 features, 4 classes: the label is the sign pattern of the first two features.
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

// The Megatron MLP block of the tutorial's last step, as JAX would lower it (2 x 2 mesh).
constexpr char kMlpHlo[] = R"(HloModule mlp, num_partitions=4

ENTRY %main (x: f32[8,16], w1: f32[16,32], w2: f32[32,16]) -> f32[8,16] {
  %x = f32[8,16] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  %w1 = f32[16,32] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}
  %w2 = f32[32,16] parameter(2), sharding={devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}
  %h = f32[8,32] dot(%x, %w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %zero = f32[] constant(0)
  %zeros = f32[8,32] broadcast(%zero), dimensions={}
  %relu = f32[8,32] maximum(%h, %zeros)
  ROOT %y = f32[8,16] dot(%relu, %w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";

absl::Status Tutorial(const std::string& out_dir) {
  // Step 1: four devices in this process, and a 2 x 2 mesh over them.
  std::filesystem::create_directories(out_dir + "/dump");
  TESSEL_ASSIGN_OR_RETURN(auto local,
                          tessel::mesh::LocalMesh::Create(4, {.dump_to = out_dir + "/dump"}));
  TESSEL_ASSIGN_OR_RETURN(tessel::spmd::Mesh mesh, local->MakeMesh({2, 2}, {"data", "model"}));
  std::printf("mesh: %s\n", mesh.ToString().c_str());

  // Step 2: the model, and where its weights live.
  TESSEL_ASSIGN_OR_RETURN(tessel::nn::Mlp model, tessel::nn::Mlp::Create({16, 64, 4}, 0));
  auto& layers = model.layers();
  TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(layers[0].weight(), mesh, {kNone, "model"}));
  TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(layers[0].bias(), mesh, {"model"}));
  TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(layers[1].weight(), mesh, {"model", kNone}));
  const std::string w0_sharding = layers[0].weight().sharding();
  TESSEL_ASSIGN_OR_RETURN(tessel::spmd::Sharding sharding,
                          tessel::spmd::ParseSharding(w0_sharding));
  TESSEL_ASSIGN_OR_RETURN(std::string table,
                          tessel::spmd::VisualizeSharding(layers[0].weight().shape(), sharding, 4));
  std::printf("layer 0 weight %s %s\n%s", layers[0].weight().shape().ToString().c_str(),
              w0_sharding.c_str(), table.c_str());

  // Step 3: train. Each step is one graph (forward, backward, Adam), partitioned once.
  tessel::nn::Adam adam({.lr = 1e-2});
  std::mt19937_64 rng(1);
  for (int step = 0; step < 30; ++step) {
    Literal images, labels;
    MakeBatch(64, rng, images, labels);
    Tensor x = Tensor::FromLiteral(images), y = Tensor::FromLiteral(labels);
    TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(x, mesh, {"data", kNone}));
    TESSEL_RETURN_IF_ERROR(tessel::spmd::mark_sharding(y, mesh, {"data"}));
    if (step == 29) local->runtime().EnableTracing(true);  // Step 5 looks at the last step
    TESSEL_ASSIGN_OR_RETURN(tessel::nn::StepResult r, tessel::nn::TrainStep(model, adam, x, y));
    if (step % 10 == 0 || step == 29) {
      std::printf("step %2d  loss %.4f  accuracy %.3f\n", step, r.loss,
                  static_cast<double>(r.num_correct) / static_cast<double>(r.batch_size));
    }
  }

  // Step 4: read a weight back as a host array; the runtime's counters.
  TESSEL_ASSIGN_OR_RETURN(Literal w0, layers[0].weight().ToLiteral());
  std::printf("layer 0 weight read back: %s, w[0][0] = %.6f\n", w0.shape().ToString().c_str(),
              w0.data<float>()[0]);
  std::printf("%s", local->runtime().MetricsReport().c_str());

  // Step 5: the last step's timeline (open it in https://ui.perfetto.dev).
  TESSEL_ASSIGN_OR_RETURN(tessel::TraceEventWriter trace, local->runtime().CollectTrace());
  TESSEL_RETURN_IF_ERROR(trace.WriteFile(out_dir + "/trace.json"));
  std::printf("timeline: %s/trace.json\n", out_dir.c_str());

  // Step 6: a module in HLO text on the same devices.
  std::vector<Literal> inputs;
  for (std::vector<int64_t> dims : {std::vector<int64_t>{8, 16}, {16, 32}, {32, 16}}) {
    Literal value(Shape(tessel::DType::kF32, dims));
    for (float& v : value.data<float>()) v = 0.25f;
    inputs.push_back(std::move(value));
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> outputs, local->RunHlo(kMlpHlo, inputs));
  // Every element is 32 * relu(16 * 0.25 * 0.25) * 0.25 = 8.
  std::printf("HLO module: %s, y[0][0] = %.1f\n", outputs[0].shape().ToString().c_str(),
              outputs[0].data<float>()[0]);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out_dir = argc > 1 ? argv[1] : "tutorial-out";
  if (absl::Status status = Tutorial(out_dir); !status.ok()) {
    std::fprintf(stderr, "tutorial: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
