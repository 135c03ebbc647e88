// Propagation + SPMD partitioning time for a generated GPT-style transformer (forward, backward
// and an Adam update in one graph, nn::BuildTransformerStep) on a 3D mesh (data=2, fsdp=2,
// tensor=2), the fsdp_tp recipe. Reports the graph's node count and the time per
// node, so the two sizes (24 and 96 layers) show whether the cost grows linearly.
//
// BM_TesselPartitionJax does what `tessel partition` does (parse the HLO text, propagate and
// partition, print the per-device program) on the largest JAX fixture, gpt_train_f32 (a real
// JAX-lowered training step: 1705 instructions, lax.scan loops, Shardy annotations), repeated
// 1-8 times side by side in one entry computation; the per-instruction time shows whether
// `tessel partition` stays linear in module size on real input.
//
//   build/benchmarks/partition_bench --benchmark_min_time=0.01
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "benchmark/benchmark.h"
#include "tessel/core/hlo_text.h"
#include "tessel/nn/transformer.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/spmd/mesh.h"

namespace tessel {
namespace {

// The traced training step of an `layers`-layer GPT (nn/transformer.h), FSDP x TP.
std::unique_ptr<Graph> BuildTransformer(int64_t layers, const spmd::Mesh& mesh) {
  nn::TransformerConfig config;
  config.arch = nn::TransformerArch::kGpt;
  config.layers = layers;
  config.batch = 8;
  config.seq_len = 16;
  config.d_model = 64;
  config.heads = 4;
  config.ffn = 256;
  config.vocab = 128;
  config.dtype = DType::kF32;
  config.param_dtype = DType::kF32;
  absl::StatusOr<nn::TransformerStep> step =
      nn::BuildTransformerStep(config, mesh, nn::ShardingRecipe::kFsdpTp);
  TESSEL_CHECK_OK(step);
  return std::move(step->graph);
}

void BM_PropagateAndPartition(benchmark::State& state) {
  const int64_t layers = state.range(0);
  std::vector<int64_t> ids(8);
  for (int64_t i = 0; i < 8; ++i) ids[i] = i;
  spmd::Mesh mesh = *spmd::Mesh::Create(ids, {2, 2, 2}, {"data", "fsdp", "tensor"});
  std::unique_ptr<Graph> graph = BuildTransformer(layers, mesh);
  int64_t local_nodes = 0;
  for (auto _ : state) {
    absl::StatusOr<partitioner::SpmdProgram> program = partitioner::Partition(*graph, 8);
    TESSEL_CHECK_OK(program);
    local_nodes = program->program->num_nodes();
    benchmark::DoNotOptimize(local_nodes);
  }
  state.counters["nodes"] = static_cast<double>(graph->num_nodes());
  state.counters["local_nodes"] = static_cast<double>(local_nodes);
  state.counters["us_per_node"] = benchmark::Counter(
      static_cast<double>(graph->num_nodes()) * 1e-6,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PropagateAndPartition)->Arg(24)->Arg(48)->Arg(96)->Unit(benchmark::kMillisecond);

// `copies` independent copies of `graph`'s entry in one graph: copy k's parameter i is parameter
// k * P + i, with its sharding; called computations (loop bodies) are shared, as a module that
// reuses a layer's body would share them. The root is one tuple of every copy's outputs.
std::unique_ptr<Graph> Repeat(const Graph& graph, int64_t copies) {
  auto out = std::make_unique<Graph>(graph.name());
  const int64_t num_parameters = static_cast<int64_t>(graph.parameters().size());
  std::vector<Node*> outputs;
  for (int64_t k = 0; k < copies; ++k) {
    absl::flat_hash_map<const Node*, Node*> map;
    for (const Node* node : graph.nodes()) {
      Node* copy;
      if (node->opcode() == Opcode::kParameter) {
        const int64_t number = k * num_parameters + node->attrs().parameter_number;
        absl::StatusOr<Node*> p = out->AddParameter(number, node->shape());
        TESSEL_CHECK_OK(p);
        copy = *p;
      } else {
        std::vector<Node*> operands;
        for (const Node* operand : node->operands()) operands.push_back(map.at(operand));
        copy = out->AddNodeUnchecked(node->opcode(), node->shape(), std::move(operands),
                                     node->attrs());
      }
      copy->set_sharding(node->sharding());
      map[node] = copy;
    }
    const Node* root = graph.root();
    if (root->opcode() == Opcode::kTuple) {
      for (const Node* element : root->operands()) outputs.push_back(map.at(element));
    } else {
      outputs.push_back(map.at(root));
    }
  }
  std::vector<Shape> shapes;
  for (const Node* o : outputs) shapes.push_back(o->shape());
  out->set_root(out->AddNodeUnchecked(Opcode::kTuple, Shape::Tuple(shapes), outputs, {}));
  return out;
}

void BM_TesselPartitionJax(benchmark::State& state) {
  const std::string path = std::string(TESSEL_SOURCE_DIR) + "/tests/fixtures/jax/gpt_train_f32.hlo";
  absl::StatusOr<std::unique_ptr<Graph>> fixture = ParseHloFile(path);
  TESSEL_CHECK_OK(fixture);
  const std::string text = PrintHloModule(*Repeat(**fixture, state.range(0)));
  int64_t instructions = 0;
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<Graph>> graph = ParseHloModule(text);
    TESSEL_CHECK_OK(graph);
    instructions = (*graph)->num_nodes();
    absl::StatusOr<partitioner::SpmdProgram> program = partitioner::Partition(**graph, 8);
    TESSEL_CHECK_OK(program);
    std::string printed = PrintHloModule(*program->program);
    benchmark::DoNotOptimize(printed);
  }
  state.counters["instructions"] = static_cast<double>(instructions);
  state.counters["us_per_instruction"] = benchmark::Counter(
      static_cast<double>(instructions) * 1e-6,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TesselPartitionJax)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessel
