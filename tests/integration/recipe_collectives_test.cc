// The textbook collectives of each sharding recipe on a generated transformer step
// (nn::BuildTransformerStep, as `tessel simulate --model gpt --recipe R` builds it), checked on
// the partitioned program per weight and per layer. The expected table and its sources (GSPMD,
// arXiv 2105.04663; Megatron-LM, arXiv 1909.08053 and 2205.05198; ZeRO, arXiv 1910.02054; the
// JAX scaling book) are in docs/partitioner.md, "What each recipe should partition into".
//
// Collectives are matched to weights by shape: the model's dims are chosen so that no weight
// shape, shard shape or activation shape coincides with another kind's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/mesh/cost/cost_model.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/nn/transformer.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/spmd/mesh.h"

namespace tessel {
namespace {

using Dims = std::vector<int64_t>;

struct Collective {
  Opcode opcode;
  Dims dims;  // local result dims
  std::vector<std::vector<int64_t>> groups;
  std::string name;
};

std::string ToString(const Collective& c) {
  return absl::StrCat(OpcodeName(c.opcode), " [", absl::StrJoin(c.dims, ","), "] groups of ",
                      c.groups.empty() ? 0 : c.groups[0].size(), " (", c.name, ")");
}

std::vector<Collective> CollectivesOf(const Graph& program) {
  std::vector<Collective> out;
  for (const Node* node : program.nodes()) {
    if (!IsCollective(node->opcode())) continue;
    Collective c{node->opcode(), node->shape().dims(), {}, node->name()};
    for (const auto& g : node->attrs().replica_groups) c.groups.push_back(g);
    out.push_back(std::move(c));
  }
  return out;
}

std::string Dump(const std::vector<Collective>& cs) {
  std::ostringstream os;
  for (const Collective& c : cs) os << "  " << ToString(c) << "\n";
  return os.str();
}

// One trainable parameter: global dims, and local dims in the partitioned program.
struct WeightInfo {
  Dims global;
  Dims local;
  bool sharded() const { return global != local; }
};

struct Partitioned {
  nn::TransformerStep step;
  partitioner::SpmdProgram program;
  std::vector<WeightInfo> weights;
  std::vector<Collective> collectives;
  double global_flops = 0;
  double local_flops = 0;
};

Partitioned Build(const nn::TransformerConfig& config, const spmd::Mesh& mesh,
                  nn::ShardingRecipe recipe) {
  Partitioned p;
  absl::StatusOr<nn::TransformerStep> step = nn::BuildTransformerStep(config, mesh, recipe);
  EXPECT_TRUE(step.ok()) << step.status();
  if (!step.ok()) return p;
  p.step = *std::move(step);
  absl::StatusOr<partitioner::SpmdProgram> program =
      partitioner::Partition(*p.step.graph, mesh.size());
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return p;
  p.program = *std::move(program);
  std::map<int64_t, Dims> local_params;
  for (const Node* node : p.program.program->nodes()) {
    if (node->opcode() == Opcode::kParameter) {
      local_params[node->attrs().parameter_number] = node->shape().dims();
    }
  }
  for (int64_t number : p.step.weight_parameters) {
    p.weights.push_back({p.program.parameters[number].global_shape.dims(), local_params[number]});
  }
  p.collectives = CollectivesOf(*p.program.program);
  if (std::getenv("RECIPE_DUMP") != nullptr) std::cout << PrintHloModule(*p.program.program);
  for (const Node* node : p.step.graph->nodes()) p.global_flops += mesh::CostModel::Flops(*node);
  for (const Node* node : p.program.program->nodes()) {
    p.local_flops += mesh::CostModel::Flops(*node);
  }
  return p;
}

int64_t Count(const std::vector<Collective>& cs, Opcode op, const Dims& dims) {
  int64_t n = 0;
  for (const Collective& c : cs) n += (c.opcode == op && c.dims == dims) ? 1 : 0;
  return n;
}

// Small GPT with pairwise distinct weight shapes: d_model 64, ffn 192, vocab 96, seq 24.
nn::TransformerConfig SmallGpt() {
  nn::TransformerConfig c;
  c.arch = nn::TransformerArch::kGpt;
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.ffn = 192;
  c.vocab = 96;
  c.seq_len = 24;
  c.batch = 8;
  return c;
}

Dims Unordered(Dims dims) {
  std::sort(dims.begin(), dims.end());
  return dims;
}

// Megatron's regime (Shoeybi et al. 2019, table 1: hidden 3072 to 8192): a width at which the
// cost model (DefaultCostModel) finds reducing partial sums faster than gathering activations
// and repeating the product on every tensor rank; at toy widths the gather is the faster program.
nn::TransformerConfig MegatronGpt() {
  nn::TransformerConfig c = SmallGpt();
  c.d_model = 4096;
  c.heads = 32;
  c.ffn = 16384;
  c.vocab = 32000;
  c.seq_len = 2048;
  return c;
}

spmd::Mesh MakeMesh(Dims shape, std::vector<std::string> names) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Dims ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  absl::StatusOr<spmd::Mesh> mesh = spmd::Mesh::Create(ids, shape, names);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *mesh;
}

// FSDP (ZeRO-3): every sharded weight is all-gathered for the forward and (at most once more)
// for the backward, its gradient is reduce-scattered exactly once into the weight's shard, and
// no weight gradient is all-reduced: the only all-reduces are of the scalar loss and of the
// gradients of the small replicated vectors (norm scales and biases).
void ExpectFsdpCollectives(const Partitioned& p, const Dims& position_dims) {
  std::map<std::pair<Dims, Dims>, int64_t> sharded;  // (global, local) -> number of weights
  std::map<Dims, int64_t> sharded_by_global;
  std::map<Dims, int64_t> sharded_by_local;  // counted in both orientations (below)
  std::set<Dims> replicated_shapes;
  for (const WeightInfo& w : p.weights) {
    if (w.sharded()) {
      ++sharded[{w.global, w.local}];
      ++sharded_by_global[w.global];
      ++sharded_by_local[w.local];
      Dims transposed(w.local.rbegin(), w.local.rend());
      if (transposed != w.local) ++sharded_by_local[transposed];
    } else {
      replicated_shapes.insert(w.global);
    }
  }
  ASSERT_FALSE(sharded.empty());
  for (const auto& [dims, n] : sharded_by_global) {
    const std::string what = absl::StrCat("weights of shape [", absl::StrJoin(dims, ","), "]");
    int64_t gathers = Count(p.collectives, Opcode::kAllGather, dims);
    // The position table only meets activations through a broadcast over the batch; the
    // partitioner broadcasts the local shard and moves the d_model tiling onto the batch with
    // one all-to-all of the same bytes as the gather.
    if (dims == position_dims) {
      for (const Collective& c : p.collectives) gathers += c.opcode == Opcode::kAllToAll ? 1 : 0;
    }
    EXPECT_GE(gathers, n) << what << "\n" << Dump(p.collectives);
    EXPECT_LE(gathers, 2 * n) << what << "\n" << Dump(p.collectives);
    EXPECT_EQ(Count(p.collectives, Opcode::kAllReduce, dims), 0)
        << what << ": no all-reduce of a weight gradient\n"
        << Dump(p.collectives);
  }
  for (const auto& [shapes, n] : sharded) {
    // Autodiff computes a matrix gradient as dot(dy, x) transposed or not, so the shard may
    // be reduce-scattered in either orientation.
    Dims transposed(shapes.second.rbegin(), shapes.second.rend());
    int64_t scatters = Count(p.collectives, Opcode::kReduceScatter, shapes.second);
    if (transposed != shapes.second) {
      scatters += Count(p.collectives, Opcode::kReduceScatter, transposed);
    }
    EXPECT_EQ(scatters, sharded_by_local[shapes.second])
        << "weights of shape [" << absl::StrJoin(shapes.first, ",") << "] held as ["
        << absl::StrJoin(shapes.second, ",") << "]: one reduce-scatter of each gradient\n"
        << Dump(p.collectives);
  }
  for (const Collective& c : p.collectives) {
    if (c.opcode != Opcode::kAllReduce) continue;
    EXPECT_TRUE(c.dims.empty() || replicated_shapes.contains(c.dims))
        << "unexpected all-reduce " << ToString(c);
  }
}

TEST(RecipeCollectivesTest, FsdpGathersWeightsAndReduceScattersGradients) {
  spmd::Mesh mesh = MakeMesh({2, 2, 2}, {"data", "fsdp", "tensor"});
  nn::TransformerConfig config = SmallGpt();
  Partitioned p = Build(config, mesh, nn::ShardingRecipe::kFsdp);
  ExpectFsdpCollectives(p, {config.seq_len, config.d_model});
}

// Megatron tensor parallelism (Shoeybi et al. 2019, section 3) x data parallelism: inside a
// tensor group, the only all-reduces are of the block outputs (attention and MLP, forward) and
// of the gradients of the block inputs (backward), of the vocab-parallel embedding's output and
// of the LM head's input gradient, plus the [batch, seq] statistics of the vocab-parallel
// cross-entropy; nothing is all-gathered, and every device does 1/devices of the FLOPs.
TEST(RecipeCollectivesTest, TensorParallelReducesOnlyBlockOutputs) {
  nn::TransformerConfig config = MegatronGpt();
  spmd::Mesh mesh = MakeMesh({2, 4}, {"data", "tensor"});
  Partitioned p = Build(config, mesh, nn::ShardingRecipe::kTp);
  const Dims act = {config.batch / 2, config.seq_len, config.d_model};
  const Dims stats = {config.batch / 2, config.seq_len};
  int64_t block_reductions = 0;
  for (const Collective& c : p.collectives) {
    EXPECT_NE(c.opcode, Opcode::kAllGather) << ToString(c);
    EXPECT_NE(c.opcode, Opcode::kAllToAll) << ToString(c);
    if (c.opcode != Opcode::kAllReduce || c.groups.empty() || c.groups[0].size() != 4) continue;
    EXPECT_TRUE(c.dims == act || c.dims == stats || c.dims.empty())
        << "unexpected tensor-group all-reduce " << ToString(c);
    if (c.dims == act) ++block_reductions;
  }
  // Per layer: two block outputs forward, two block-input gradients backward (Megatron's g and
  // f operators); outside the layers the embedding's output and the head's input gradient.
  EXPECT_EQ(block_reductions, 4 * config.layers + 2) << Dump(p.collectives);
  EXPECT_NEAR(p.local_flops / (p.global_flops / 8), 1.0, 0.02)
      << "local " << p.local_flops << " global " << p.global_flops;
}

// FSDP x TP (MaxText fsdp + tensor): the FSDP part as above on the fsdp axis (each weight's
// gradient reduce-scattered, no weight-gradient all-reduce), no global-batch all-gather.
TEST(RecipeCollectivesTest, FsdpTpReduceScattersGradients) {
  nn::TransformerConfig config = MegatronGpt();
  spmd::Mesh mesh = MakeMesh({2, 2, 2}, {"data", "fsdp", "tensor"});
  Partitioned p = Build(config, mesh, nn::ShardingRecipe::kFsdpTp);
  for (const WeightInfo& w : p.weights) {
    if (!w.sharded() || w.global.size() != 2) continue;
    EXPECT_EQ(Count(p.collectives, Opcode::kAllReduce, w.global), 0)
        << "weight [" << absl::StrJoin(w.global, ",") << "]\n"
        << Dump(p.collectives);
    EXPECT_GE(Count(p.collectives, Opcode::kReduceScatter, w.local), 1)
        << "weight [" << absl::StrJoin(w.global, ",") << "]\n"
        << Dump(p.collectives);
  }
  EXPECT_NEAR(p.local_flops / (p.global_flops / 8), 1.0, 0.02)
      << "local " << p.local_flops << " global " << p.global_flops;
}

// Grouped-query attention (kv_heads < heads) under TP: grouping query heads over the kv heads
// keeps the batch tiling, so no collective carries a global-batch activation.
TEST(RecipeCollectivesTest, GqaAddsNoGlobalBatchGather) {
  nn::TransformerConfig config = SmallGpt();
  config.arch = nn::TransformerArch::kLlama;
  config.heads = 8;
  config.kv_heads = 2;
  spmd::Mesh mesh = MakeMesh({2, 4}, {"data", "tensor"});
  Partitioned p = Build(config, mesh, nn::ShardingRecipe::kTp);
  for (const Collective& c : p.collectives) {
    EXPECT_FALSE(c.dims.size() >= 3 && c.dims[0] == config.batch)
        << "global-batch collective " << ToString(c);
  }
}

// Multi-slice data parallel over two slices (MaxText dcn_data_parallelism): FSDP inside each
// slice, and the DCN carries one reduction of each weight's gradient shard per step (plus the
// scalar loss), nothing else.
TEST(RecipeCollectivesTest, MultisliceDpCrossesDcnOncePerGradient) {
  absl::StatusOr<mesh::Topology> topology = mesh::MakeUniformTopology(2, {2, 2, 1}, 1);
  ASSERT_TRUE(topology.ok()) << topology.status();
  absl::StatusOr<spmd::HybridMesh> mesh =
      spmd::HybridMesh::Create({1, 2, 2}, {2, 1, 1}, {"data", "fsdp", "tensor"}, *topology);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  Partitioned p = Build(SmallGpt(), *mesh, nn::ShardingRecipe::kMultisliceDp);
  auto slice_of = [&](int64_t id) { return topology->device(id).slice; };
  std::map<Dims, int64_t> dcn_reductions;
  for (const Collective& c : p.collectives) {
    bool crosses = false;
    for (const auto& g : c.groups) {
      for (int64_t id : g) crosses |= slice_of(id) != slice_of(g[0]);
    }
    if (c.groups.empty()) crosses = true;
    if (!crosses) continue;
    EXPECT_EQ(c.opcode, Opcode::kAllReduce) << "over DCN: " << ToString(c);
    if (!c.dims.empty()) ++dcn_reductions[Unordered(c.dims)];
  }
  // Matrix gradients may be reduced transposed (see ExpectFsdpCollectives), so shapes are
  // compared as multisets of dims.
  std::map<Dims, int64_t> expected;
  for (const WeightInfo& w : p.weights) ++expected[Unordered(w.local)];
  EXPECT_EQ(dcn_reductions, expected) << Dump(p.collectives);
}

}  // namespace
}  // namespace tessel
