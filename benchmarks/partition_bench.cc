// Propagation + SPMD partitioning time for a generated GPT-style transformer (forward, backward
// and an Adam update in one graph, nn::BuildTransformerStep) on a 3D mesh (data=2, fsdp=2,
// tensor=2), the fsdp_tp recipe. Reports the graph's node count and the time per
// node, so the two sizes (24 and 96 layers) show whether the cost grows linearly.
//
//   build/benchmarks/partition_bench --benchmark_min_time=0.01
#include <vector>

#include "benchmark/benchmark.h"
#include "nn/transformer.h"
#include "partitioner/partitioner.h"
#include "spmd/mesh.h"

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

}  // namespace
}  // namespace tessel
