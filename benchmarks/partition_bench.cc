// Propagation + SPMD partitioning time for a generated GPT-style transformer (forward, backward
// and an Adam update in one graph) on a 3D mesh (data=2, fsdp=2, tensor=2), FSDP x tensor
// parallel shardings set with mark_sharding. Reports the graph's node count and the time per
// node, so the two sizes (24 and 96 layers) show whether the cost grows linearly.
//
//   build/benchmarks/partition_bench --benchmark_min_time=0.01
#include <vector>

#include "benchmark/benchmark.h"
#include "core/tensor.h"
#include "nn/functional.h"
#include "partitioner/partitioner.h"
#include "spmd/mark_sharding.h"
#include "spmd/mesh.h"

namespace tessel {
namespace {

using spmd::Axes;
using spmd::kNone;
using spmd::PartitionSpec;

constexpr int64_t kBatch = 8, kSeq = 16, kModel = 64, kHeads = 4, kFfn = 256;
constexpr int64_t kHeadDim = kModel / kHeads;

Tensor Param(std::vector<int64_t> dims, const spmd::Mesh& mesh, const PartitionSpec& spec) {
  Tensor t = Tensor::FromLiteral(Literal(Shape(DType::kF32, std::move(dims))));
  TESSEL_CHECK_OK(spmd::mark_sharding(t, mesh, spec));
  return t;
}

DotDimensionNumbers Batched(int64_t lhs_contract, int64_t rhs_contract) {
  DotDimensionNumbers dn;
  dn.lhs_batch_dims = {0, 1};
  dn.rhs_batch_dims = {0, 1};
  dn.lhs_contracting_dims = {lhs_contract};
  dn.rhs_contracting_dims = {rhs_contract};
  return dn;
}

// The traced training step of an `layers`-layer transformer.
std::unique_ptr<Graph> BuildTransformer(int64_t layers, const spmd::Mesh& mesh) {
  std::vector<Tensor> params;
  Tensor x = Param({kBatch, kSeq, kModel}, mesh, PartitionSpec{Axes{"data", "fsdp"}, kNone, kNone});
  Tensor h = x;
  for (int64_t l = 0; l < layers; ++l) {
    Tensor g1 = Param({kModel}, mesh, PartitionSpec{kNone});
    Tensor b1 = Param({kModel}, mesh, PartitionSpec{kNone});
    Tensor wqkv = Param({kModel, 3 * kModel}, mesh, PartitionSpec{"fsdp", "tensor"});
    Tensor bqkv = Param({3 * kModel}, mesh, PartitionSpec{"tensor"});
    Tensor wo = Param({kModel, kModel}, mesh, PartitionSpec{"tensor", "fsdp"});
    Tensor bo = Param({kModel}, mesh, PartitionSpec{kNone});
    Tensor g2 = Param({kModel}, mesh, PartitionSpec{kNone});
    Tensor b2 = Param({kModel}, mesh, PartitionSpec{kNone});
    Tensor w1 = Param({kModel, kFfn}, mesh, PartitionSpec{"fsdp", "tensor"});
    Tensor bf1 = Param({kFfn}, mesh, PartitionSpec{"tensor"});
    Tensor w2 = Param({kFfn, kModel}, mesh, PartitionSpec{"tensor", "fsdp"});
    Tensor bf2 = Param({kModel}, mesh, PartitionSpec{kNone});
    params.insert(params.end(), {g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, bf1, w2, bf2});
    auto linear = [](const Tensor& in, const Tensor& w, const Tensor& bias) {
      Tensor y = MatMul(in, w);
      return y + BroadcastTo(bias, y.shape().dims());
    };
    Tensor a = nn::LayerNormalize(h, g1, b1);
    Tensor qkv = linear(a, wqkv, bqkv);  // [B, S, 3D]
    auto heads = [&](int64_t part) {
      Tensor t = Slice(qkv, {0, 0, part * kModel}, {kBatch, kSeq, (part + 1) * kModel});
      return Transpose(Reshape(t, {kBatch, kSeq, kHeads, kHeadDim}), {0, 2, 1, 3});
    };
    Tensor q = heads(0), k = heads(1), v = heads(2);                  // [B, H, S, Dh]
    Tensor scores = Dot(q, k, Batched(3, 3)) * (1.0 / 4.0);           // [B, H, S, S]
    Tensor context = Dot(nn::Softmax(scores, -1), v, Batched(3, 2));  // [B, H, S, Dh]
    Tensor merged = Reshape(Transpose(context, {0, 2, 1, 3}), {kBatch, kSeq, kModel});
    h = h + linear(merged, wo, bo);
    Tensor m = nn::Gelu(linear(nn::LayerNormalize(h, g2, b2), w1, bf1));
    h = h + linear(m, w2, bf2);
  }
  Tensor loss = ReduceMean(h * h, {0, 1, 2});
  std::vector<Tensor> grads = Grad(loss, params);
  // Adam (Kingma & Ba 2015) with its moments as inputs sharded like the parameters.
  std::vector<Tensor> outputs = {loss};
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor m = Tensor::FromLiteral(Literal(params[i].shape()));
    Tensor v = Tensor::FromLiteral(Literal(params[i].shape()));
    m.SetSharding(params[i].sharding());
    v.SetSharding(params[i].sharding());
    Tensor m1 = m * 0.9 + grads[i] * 0.1;
    Tensor v1 = v * 0.999 + grads[i] * grads[i] * 0.001;
    outputs.push_back(params[i] - m1 * 1e-3 / (Sqrt(v1) + 1e-8));
    outputs.push_back(m1);
    outputs.push_back(v1);
  }
  absl::StatusOr<TracedGraph> traced = TraceGraph(outputs, "transformer");
  TESSEL_CHECK_OK(traced);
  return std::move(traced->graph);
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
