// gather and scatter (XLA GSPMD's gather_scatter_handler.cc ideas, the two cheap strategies).
//
// - Index-parallel (gather): the indices keep their tiling along batch dims (not
//   index_vector_dim, not a start_indices_batching_dim), the operand is replicated; each device
//   gathers its own rows and the output is tiled along the matching output dims. No collective.
// - Passthrough (gather and scatter): operand dims that are whole windows and not indexed keep
//   their tiling; the indices are replicated (scatter: the updates take the same tiling along
//   the matching window dims); the window size becomes the local size. No collective.
// - Otherwise (fallback): every operand is replicated (all-gathers) and the op runs whole on
//   every device; the driver cuts the result to the target.
// Missing: the operand-parallel masked lookup for an operand tiled along an indexed dim
// (vocab-sharded embeddings: local lookup, mask, all-reduce), and index-parallel scatter.
#include <algorithm>

#include "core/shape_inference.h"
#include "core/status_macros.h"
#include "partitioner/internal/context.h"
#include "partitioner/sharding_util.h"

namespace tessel::partitioner::internal {
namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The dims of a rank-`rank` value not in `keep`.
std::vector<int64_t> Complement(int64_t rank, const std::vector<int64_t>& keep) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d) {
    if (!Contains(keep, d)) out.push_back(d);
  }
  return out;
}

// `s` with tiles only on `dims` (others moved into replication), or nullopt when that leaves
// no tiling or `s` is no plain tiling.
std::optional<Sharding> KeepTiles(const Sharding& s, int64_t rank,
                                  const std::vector<int64_t>& dims) {
  if (s.IsTileMaximal() || !IsPlainTiling(s) || dims.empty()) return std::nullopt;
  Sharding kept = PartiallyReplicate(s, rank, Complement(rank, dims));
  if (kept.IsTileMaximal() || Project(kept, dims).IsReplicated()) return std::nullopt;
  return kept;
}

// Operand dims a gather (or scatter, through its gather) passes through whole: window dims with
// the full size that no start index moves.
std::vector<int64_t> PassthroughDims(const Shape& operand, const GatherDimensionNumbers& g,
                                     const GatherDimMap& map) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (map.operand_to_output[d] >= 0 && g.slice_sizes[d] == operand.dim(d) &&
        !Contains(g.start_index_map, d)) {
      dims.push_back(d);
    }
  }
  return dims;
}

// `from`'s tiling of `from_dims`, placed at `to_dims` of a rank-`rank` value.
Sharding Move(const Sharding& from, const std::vector<int64_t>& from_dims, int64_t rank,
              const std::vector<int64_t>& to_dims) {
  return Embed(Project(from, from_dims), rank, to_dims);
}

absl::StatusOr<PValue> Fallback(Context& ctx, const Node& node,
                                const std::vector<PValue>& operands) {
  std::vector<Node*> locals;
  for (const PValue& operand : operands) {
    TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operand, Sharding::Replicate()));
    locals.push_back(local);
  }
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(node.opcode(), std::move(locals), node.attrs()));
  return PValue{result, Sharding::Replicate(), node.shape(), {}};
}

}  // namespace

absl::StatusOr<PValue> HandleGather(Context& ctx, const Node& node,
                                    const std::vector<PValue>& operands, const Sharding& target) {
  const Shape& operand = node.operand(0)->shape();
  const Shape& indices = node.operand(1)->shape();
  const GatherDimensionNumbers& g = node.attrs().gather;
  const GatherDimMap map = MapGatherDims(operand.rank(), indices.rank(), g);
  const int64_t rank = node.shape().rank();
  // Index-parallel candidate.
  std::vector<int64_t> batch_dims, batch_out;
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (map.indices_to_output[d] < 0 || Contains(g.start_indices_batching_dims, d)) continue;
    batch_dims.push_back(d);
    batch_out.push_back(map.indices_to_output[d]);
  }
  std::optional<Sharding> by_index = KeepTiles(operands[1].sharding, indices.rank(), batch_dims);
  // Passthrough candidate.
  std::vector<int64_t> pass = PassthroughDims(operand, g, map);
  std::vector<int64_t> pass_out;
  for (int64_t d : pass) pass_out.push_back(map.operand_to_output[d]);
  std::optional<Sharding> by_operand = KeepTiles(operands[0].sharding, operand.rank(), pass);
  if (by_index && (!by_operand || by_index->NumTiles() >= by_operand->NumTiles())) {
    TESSEL_ASSIGN_OR_RETURN(Node * local_operand, ctx.Reshard(operands[0], Sharding::Replicate()));
    TESSEL_ASSIGN_OR_RETURN(Node * local_indices, ctx.Reshard(operands[1], *by_index));
    TESSEL_ASSIGN_OR_RETURN(Node * result,
                            ctx.Add(Opcode::kGather, {local_operand, local_indices}, node.attrs()));
    return PValue{result, Move(*by_index, batch_dims, rank, batch_out), node.shape(), {}};
  }
  if (by_operand) {
    TESSEL_ASSIGN_OR_RETURN(Node * local_operand, ctx.Reshard(operands[0], *by_operand));
    TESSEL_ASSIGN_OR_RETURN(Node * local_indices, ctx.Reshard(operands[1], Sharding::Replicate()));
    OpAttributes attrs = node.attrs();
    for (int64_t d : pass) attrs.gather.slice_sizes[d] = local_operand->shape().dim(d);
    TESSEL_ASSIGN_OR_RETURN(Node * result,
                            ctx.Add(Opcode::kGather, {local_operand, local_indices}, attrs));
    return PValue{result, Move(*by_operand, pass, rank, pass_out), node.shape(), {}};
  }
  return Fallback(ctx, node, operands);
}

absl::StatusOr<PValue> HandleScatter(Context& ctx, const Node& node,
                                     const std::vector<PValue>& operands, const Sharding& target) {
  const Shape& operand = node.operand(0)->shape();
  const Shape& indices = node.operand(1)->shape();
  const Shape& updates = node.operand(2)->shape();
  const GatherDimensionNumbers g = ScatterAsGather(node.attrs().scatter, operand, updates);
  const GatherDimMap map = MapGatherDims(operand.rank(), indices.rank(), g);
  std::vector<int64_t> pass = PassthroughDims(operand, g, map);
  std::vector<int64_t> pass_updates;
  for (int64_t d : pass) pass_updates.push_back(map.operand_to_output[d]);
  std::optional<Sharding> by_operand = KeepTiles(operands[0].sharding, operand.rank(), pass);
  if (!by_operand) return Fallback(ctx, node, operands);
  TESSEL_ASSIGN_OR_RETURN(Node * local_operand, ctx.Reshard(operands[0], *by_operand));
  TESSEL_ASSIGN_OR_RETURN(Node * local_indices, ctx.Reshard(operands[1], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(
      Node * local_updates,
      ctx.Reshard(operands[2], Move(*by_operand, pass, updates.rank(), pass_updates)));
  TESSEL_ASSIGN_OR_RETURN(
      Node * result,
      ctx.Add(Opcode::kScatter, {local_operand, local_indices, local_updates}, node.attrs()));
  return PValue{result, *by_operand, node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
