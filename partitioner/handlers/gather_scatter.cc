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
// - Operand-parallel (gather): an operand tiled along a single-row indexed dim (vocab-sharded
//   embeddings) stays tiled; a masked local lookup and an all-reduce replace gathering it. Its
//   passthrough dims keep their tiling too when it combines with the indices' (WithPassTiles).
// - Operand-parallel (scatter): its transpose, for the embedding gradient; with the ids tiled,
//   a scatter into zeros, an all-reduce over the devices holding the same rows, one add.
// - Batching dims (take_along_axis and its gradient): kept tiled with the operand-parallel
//   strategies when the operand's and the indices' tilings agree on them.
// - Batch-parallel (gather and scatter): the operand and the indices tiled alike along the
//   explicit batching dims only; local op, no collective.
// Missing: index-parallel scatter.
#include <algorithm>
#include <map>
#include <optional>

#include "tessel/core/shape_inference.h"
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/sharding_util.h"

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

// The operand-parallel (masked) gather of GSPMD, for an operand tiled along one indexed dim whose
// window is a single row (the vocabulary dim of an embedding table): each device looks up only
// the ids that fall in its rows (ids made relative to its tile, out-of-tile rows masked to zero)
// and an all-reduce over the devices that hold the same ids adds the pieces. The table is never
// gathered. Applies when the index vector has one component (`take`, embedding lookups) and the
// devices with a common indices tile hold every operand tile exactly once; nullopt otherwise.
// Source: XLA gather_scatter_handler.cc, PartitionGatherTrivialSlicedOperandDimensions.
//
// Explicit batching dims (operand_batching_dims with start_indices_batching_dims, as in
// take_along_axis) may stay tiled on both sides when the two tilings put every device on the
// same batch tile: each device then looks up within its own batch rows, and the groups only
// span the row tiles (XLA: the parallel dims of gather_scatter_handler.cc, grouped with the
// operand-parallel strategy).
struct OperandParallelPlan {
  Sharding operand;                          // tiled along `dim` (and batching dims) only
  Sharding indices;                          // tiled along batch (and batching) dims, or replicated
  int64_t dim = -1;                          // the operand dim split across devices
  std::vector<std::vector<int64_t>> groups;  // devices whose pieces add up to one lookup
  int64_t replicas = 1;                      // holders of each row tile per indices tile
  bool batching_tiled = false;               // the batching dims kept their (aligned) tiling
  bool ids_tiled_beyond_batching = false;    // indices tiled along non-batching batch dims
  std::vector<int64_t> pass;                 // passthrough dims kept tiled (the groups share them)
};

// Whether every device holds the same tile of operand batching dim i and of indices batching
// dim i, for all i, and some such dim is tiled.
bool BatchingAligned(int64_t num_devices, const Sharding& operand, const Sharding& indices,
                     const GatherDimensionNumbers& g) {
  if (g.operand_batching_dims.empty() || operand.IsTileMaximal() || indices.IsTileMaximal()) {
    return false;
  }
  bool tiled = false;
  for (size_t i = 0; i < g.operand_batching_dims.size(); ++i) {
    const int64_t tiles = operand.num_tiles(g.operand_batching_dims[i]);
    if (tiles != indices.num_tiles(g.start_indices_batching_dims[i])) return false;
    tiled |= tiles > 1;
  }
  for (int64_t d = 0; d < num_devices && tiled; ++d) {
    std::optional<std::vector<int64_t>> a = operand.TileIndexOf(d);
    std::optional<std::vector<int64_t>> b = indices.TileIndexOf(d);
    if (!a || !b) return false;
    for (size_t i = 0; i < g.operand_batching_dims.size(); ++i) {
      if ((*a)[g.operand_batching_dims[i]] != (*b)[g.start_indices_batching_dims[i]]) return false;
    }
  }
  return tiled;
}

std::optional<OperandParallelPlan> PlanOperandParallel(int64_t num_devices,
                                                       const std::vector<PValue>& operands,
                                                       const Shape& operand, const Shape& indices,
                                                       const GatherDimensionNumbers& g,
                                                       const std::vector<int64_t>& batch_dims,
                                                       const std::vector<int64_t>& pass = {}) {
  const bool one_component =
      g.index_vector_dim == indices.rank() || indices.dim(g.index_vector_dim) == 1;
  if (!one_component || g.start_index_map.size() != 1) return std::nullopt;
  const int64_t dim = g.start_index_map[0];
  if (g.slice_sizes[dim] != 1) return std::nullopt;
  std::vector<int64_t> row_and_pass = {dim};
  row_and_pass.insert(row_and_pass.end(), pass.begin(), pass.end());
  std::vector<int64_t> row_and_batching = row_and_pass;
  row_and_batching.insert(row_and_batching.end(), g.operand_batching_dims.begin(),
                          g.operand_batching_dims.end());
  std::vector<int64_t> ids_and_batching = batch_dims;
  ids_and_batching.insert(ids_and_batching.end(), g.start_indices_batching_dims.begin(),
                          g.start_indices_batching_dims.end());
  std::optional<Sharding> by_rows;
  std::optional<Sharding> ids_tiling;
  std::optional<Sharding> with_batching =
      KeepTiles(operands[0].sharding, operand.rank(), row_and_batching);
  std::optional<Sharding> ids_with_batching =
      KeepTiles(operands[1].sharding, indices.rank(), ids_and_batching);
  OperandParallelPlan plan;
  if (with_batching && ids_with_batching && with_batching->num_tiles(dim) > 1 &&
      BatchingAligned(num_devices, *with_batching, *ids_with_batching, g)) {
    by_rows = with_batching;
    ids_tiling = ids_with_batching;
    plan.batching_tiled = true;
  } else {
    by_rows = KeepTiles(operands[0].sharding, operand.rank(), row_and_pass);
    ids_tiling = KeepTiles(operands[1].sharding, indices.rank(), batch_dims);
  }
  if (!by_rows || by_rows->num_tiles(dim) <= 1) return std::nullopt;
  plan.operand = *by_rows;
  plan.dim = dim;
  plan.pass = pass;
  plan.indices = ids_tiling.value_or(Sharding::Replicate());
  for (int64_t d : batch_dims) {
    plan.ids_tiled_beyond_batching |= plan.indices.IsTiled() && plan.indices.num_tiles(d) > 1;
  }
  // Group the devices by the indices tile they hold, then split each such set into groups that
  // hold every row tile exactly once (the k-th holder of each row tile goes to group k), or the
  // all-reduce would miss rows or count them twice. A partially replicated operand (each row
  // tile held r times among the devices of one ids tile) gives r groups, as XLA's replica
  // groups for PartitionGatherTrivialSlicedOperandDimensions do.
  const int64_t row_tiles = plan.operand.num_tiles(dim);
  std::map<std::pair<std::vector<int64_t>, int64_t>, std::vector<int64_t>> by_ids;
  std::map<std::pair<std::vector<int64_t>, int64_t>, int64_t> holders;  // (ids, row tile) -> count
  for (int64_t d = 0; d < num_devices; ++d) {
    std::optional<std::vector<int64_t>> rows = plan.operand.TileIndexOf(d);
    if (!rows) return std::nullopt;
    std::vector<int64_t> ids;
    if (!plan.indices.IsTileMaximal()) {
      std::optional<std::vector<int64_t>> tile = plan.indices.TileIndexOf(d);
      if (!tile) return std::nullopt;
      ids = *tile;
    }
    for (int64_t p : pass) ids.push_back((*rows)[p]);
    const int64_t k = holders[{ids, (*rows)[dim]}]++;
    plan.replicas = std::max(plan.replicas, k + 1);
    by_ids[{std::move(ids), k}].push_back(d);
  }
  for (auto& [key, devices] : by_ids) {
    if (static_cast<int64_t>(devices.size()) != row_tiles) return std::nullopt;
    plan.groups.push_back(std::move(devices));
  }
  return plan;
}

// The layout of an operand-parallel gather's output (or a scatter's updates): `by_ids` (the
// indices' tiling on the output's batch dims) with the plan's passthrough tiles of the operand
// on their output dims `pass_out`. nullopt when the two do not combine into one tiling.
std::optional<Sharding> WithPassTiles(const Sharding& by_ids, const OperandParallelPlan& plan,
                                      int64_t rank, const std::vector<int64_t>& pass_out,
                                      int64_t num_devices) {
  bool tiled = false;
  for (int64_t p : plan.pass) tiled |= plan.operand.num_tiles(p) > 1;
  if (!tiled) return by_ids;
  return MergeShardings(by_ids, Move(plan.operand, plan.pass, rank, pass_out), rank, num_devices);
}

absl::StatusOr<PValue> GatherOperandParallel(Context& ctx, const Node& node,
                                             const std::vector<PValue>& operands,
                                             const OperandParallelPlan& plan,
                                             const Sharding& result_sharding) {
  const Shape& operand = node.operand(0)->shape();
  const GatherDimensionNumbers& g = node.attrs().gather;
  TESSEL_ASSIGN_OR_RETURN(Node * table, ctx.Reshard(operands[0], plan.operand));
  TESSEL_ASSIGN_OR_RETURN(Node * ids, ctx.Reshard(operands[1], plan.indices));
  const DType index_type = ids->shape().dtype();
  const int64_t rows = operand.dim(plan.dim);
  const int64_t tile_rows = table->shape().dim(plan.dim);
  // This device's first row and its number of real rows (the last tile of an uneven dim is
  // short; its padding rows must never be read).
  std::vector<int64_t> first(ctx.num_devices(), 0), count(ctx.num_devices(), 0);
  for (int64_t d = 0; d < ctx.num_devices(); ++d) {
    first[d] = (*plan.operand.TileIndexOf(d))[plan.dim] * tile_rows;
    count[d] = std::clamp<int64_t>(rows - first[d], 0, tile_rows);
  }
  auto per_device = [&](const std::vector<int64_t>& values) -> absl::StatusOr<Node*> {
    TESSEL_ASSIGN_OR_RETURN(Node * scalar, ctx.PerDeviceScalar(values));
    if (index_type != DType::kS32) {
      TESSEL_ASSIGN_OR_RETURN(scalar, ctx.Add(Opcode::kConvert, Shape(index_type, {}), {scalar}));
    }
    OpAttributes b;  // broadcast of a scalar: no operand dims
    return ctx.Add(Opcode::kBroadcast, ids->shape(), {scalar}, b);
  };
  // XLA clamps a start index into the operand first, so the row a global id reads is fixed
  // before it is made relative to a tile.
  TESSEL_ASSIGN_OR_RETURN(Node * clamped, ctx.Add(Opcode::kClamp, ids->shape(),
                                                  {ctx.ScalarConstant(index_type, 0), ids,
                                                   ctx.ScalarConstant(index_type, rows - 1)}));
  TESSEL_ASSIGN_OR_RETURN(Node * offset, per_device(first));
  TESSEL_ASSIGN_OR_RETURN(Node * local_ids, ctx.Add(Opcode::kSubtract, {clamped, offset}));
  TESSEL_ASSIGN_OR_RETURN(Node * limit, per_device(count));
  OpAttributes ge, lt;
  ge.comparison_direction = ComparisonDirection::kGe;
  lt.comparison_direction = ComparisonDirection::kLt;
  TESSEL_ASSIGN_OR_RETURN(Node * zero_ids, per_device(std::vector<int64_t>(ctx.num_devices(), 0)));
  TESSEL_ASSIGN_OR_RETURN(Node * above, ctx.Add(Opcode::kCompare, {local_ids, zero_ids}, ge));
  TESSEL_ASSIGN_OR_RETURN(Node * below, ctx.Add(Opcode::kCompare, {local_ids, limit}, lt));
  TESSEL_ASSIGN_OR_RETURN(Node * mine, ctx.Add(Opcode::kAnd, {above, below}));
  OpAttributes local_attrs = node.attrs();
  for (int64_t p : plan.pass) local_attrs.gather.slice_sizes[p] = table->shape().dim(p);
  TESSEL_ASSIGN_OR_RETURN(Node * looked_up,
                          ctx.Add(Opcode::kGather, {table, local_ids}, local_attrs));
  // The mask runs over the ids' batch dims; drop a size-1 index vector dim, then broadcast it
  // along the window dims of the output.
  const Shape& id_shape = mine->shape();
  std::vector<int64_t> mask_dims, mask_to_output;
  const GatherDimMap map = MapGatherDims(operand.rank(), id_shape.rank(), g);
  for (int64_t d = 0; d < id_shape.rank(); ++d) {
    if (d == g.index_vector_dim) continue;
    mask_dims.push_back(id_shape.dim(d));
    mask_to_output.push_back(map.indices_to_output[d]);
  }
  if (static_cast<int64_t>(mask_dims.size()) != id_shape.rank()) {
    TESSEL_ASSIGN_OR_RETURN(mine,
                            ctx.Add(Opcode::kReshape, Shape(DType::kPred, mask_dims), {mine}));
  }
  OpAttributes along;
  along.dimensions = mask_to_output;
  const Shape& out = looked_up->shape();
  TESSEL_ASSIGN_OR_RETURN(Node * mask,
                          ctx.Add(Opcode::kBroadcast, out.WithDType(DType::kPred), {mine}, along));
  TESSEL_ASSIGN_OR_RETURN(
      Node * zeros,
      ctx.Add(Opcode::kBroadcast, out, {ctx.ScalarConstant(out.dtype(), 0)}, OpAttributes()));
  TESSEL_ASSIGN_OR_RETURN(Node * masked, ctx.Add(Opcode::kSelect, {mask, looked_up, zeros}));
  TESSEL_ASSIGN_OR_RETURN(
      Node * summed,
      ctx.AllReduce(masked, CollectiveDeviceList(plan.groups),
                    out.dtype() == DType::kPred ? ReduceKind::kOr : ReduceKind::kAdd));
  return PValue{summed, result_sharding, node.shape(), {}};
}

// The operand-parallel scatter, the transpose of the gather above (the gradient of a
// vocab-sharded embedding): each device applies the updates whose ids fall in its rows (the
// others are sent out of bounds, which scatter skips, as XLA's does). With the ids tiled too,
// each device sees only its ids' updates: they are scattered into zeros, summed over the devices
// that hold the same rows, and added to the operand once. Needs an add combiner then; with
// replicated ids every combiner works. Same plan and preconditions as the gather.
absl::StatusOr<std::optional<PValue>> ScatterOperandParallel(Context& ctx, const Node& node,
                                                             const std::vector<PValue>& operands,
                                                             const OperandParallelPlan& plan,
                                                             const Sharding& updates_layout) {
  // Ids tiled only along batching dims aligned with the operand's touch only the device's own
  // batch rows: no partial sums (`partial_sums` false).
  const bool ids_tiled = !plan.indices.IsTileMaximal();
  const bool partial_sums = plan.ids_tiled_beyond_batching;
  const OpAttributes& attrs = node.attrs();
  if (partial_sums && (attrs.scatter_overwrite || attrs.reduce_kind != ReduceKind::kAdd)) {
    return std::optional<PValue>();
  }
  // With tiled ids the partial scatters are summed over the devices holding the same rows; a
  // replicated operand would count each ids tile once per replica there.
  if (partial_sums && plan.replicas > 1) return std::optional<PValue>();
  const Shape& operand = node.operand(0)->shape();
  TESSEL_ASSIGN_OR_RETURN(Node * table, ctx.Reshard(operands[0], plan.operand));
  TESSEL_ASSIGN_OR_RETURN(Node * ids, ctx.Reshard(operands[1], plan.indices));
  TESSEL_ASSIGN_OR_RETURN(Node * local_updates, ctx.Reshard(operands[2], updates_layout));
  const DType index_type = ids->shape().dtype();
  const int64_t rows = operand.dim(plan.dim);
  const int64_t tile_rows = table->shape().dim(plan.dim);
  if (ids_tiled) {
    // An uneven ids tile is padded, and the padding's ids and updates are garbage: give those
    // positions the id `rows`, which no device owns, so every device skips them (a gather's
    // padding only reaches output padding; a scatter's would land in real rows).
    std::vector<int64_t> all_dims(ids->shape().rank());
    for (int64_t d = 0; d < ids->shape().rank(); ++d) all_dims[d] = d;
    TESSEL_ASSIGN_OR_RETURN(ids, ctx.MaskPadding(ids, plan.indices, node.operand(1)->shape(),
                                                 all_dims, static_cast<double>(rows)));
  }
  std::vector<int64_t> first(ctx.num_devices(), 0), end(ctx.num_devices(), 0);
  for (int64_t d = 0; d < ctx.num_devices(); ++d) {
    first[d] = (*plan.operand.TileIndexOf(d))[plan.dim] * tile_rows;
    end[d] = std::min(first[d] + tile_rows, rows);
  }
  auto per_device = [&](const std::vector<int64_t>& values) -> absl::StatusOr<Node*> {
    TESSEL_ASSIGN_OR_RETURN(Node * scalar, ctx.PerDeviceScalar(values));
    if (index_type != DType::kS32) {
      TESSEL_ASSIGN_OR_RETURN(scalar, ctx.Add(Opcode::kConvert, Shape(index_type, {}), {scalar}));
    }
    return ctx.Add(Opcode::kBroadcast, ids->shape(), {scalar}, OpAttributes());
  };
  TESSEL_ASSIGN_OR_RETURN(Node * lo, per_device(first));
  TESSEL_ASSIGN_OR_RETURN(Node * hi, per_device(end));
  OpAttributes ge, lt;
  ge.comparison_direction = ComparisonDirection::kGe;
  lt.comparison_direction = ComparisonDirection::kLt;
  TESSEL_ASSIGN_OR_RETURN(Node * above, ctx.Add(Opcode::kCompare, {ids, lo}, ge));
  TESSEL_ASSIGN_OR_RETURN(Node * below, ctx.Add(Opcode::kCompare, {ids, hi}, lt));
  TESSEL_ASSIGN_OR_RETURN(Node * mine, ctx.Add(Opcode::kAnd, {above, below}));
  TESSEL_ASSIGN_OR_RETURN(Node * relative, ctx.Add(Opcode::kSubtract, {ids, lo}));
  // tile_rows is one past this device's buffer: a window starting there is skipped.
  TESSEL_ASSIGN_OR_RETURN(Node * skip,
                          ctx.Add(Opcode::kBroadcast, ids->shape(),
                                  {ctx.ScalarConstant(index_type, tile_rows)}, OpAttributes()));
  TESSEL_ASSIGN_OR_RETURN(Node * local_ids, ctx.Add(Opcode::kSelect, {mine, relative, skip}));
  if (!partial_sums) {
    TESSEL_ASSIGN_OR_RETURN(Node * result,
                            ctx.Add(Opcode::kScatter, {table, local_ids, local_updates}, attrs));
    return std::optional<PValue>(PValue{result, plan.operand, node.shape(), {}});
  }
  TESSEL_ASSIGN_OR_RETURN(Node * zeros,
                          ctx.Add(Opcode::kBroadcast, table->shape(),
                                  {ctx.ScalarConstant(table->shape().dtype(), 0)}, OpAttributes()));
  TESSEL_ASSIGN_OR_RETURN(Node * partial,
                          ctx.Add(Opcode::kScatter, {zeros, local_ids, local_updates}, attrs));
  // The devices that hold the same rows hold every ids tile once (the plan's check, seen from
  // the other side), so their partial sums add up to every update exactly once.
  // Same rows: the same row tile and, when the batching dims stay tiled, the same batch tile.
  std::map<std::vector<int64_t>, std::vector<int64_t>> same_rows;
  for (int64_t d = 0; d < ctx.num_devices(); ++d) {
    const std::vector<int64_t> tile = *plan.operand.TileIndexOf(d);
    std::vector<int64_t> key = {tile[plan.dim]};
    for (int64_t b : node.attrs().scatter.input_batching_dims) key.push_back(tile[b]);
    for (int64_t p : plan.pass) key.push_back(tile[p]);
    same_rows[std::move(key)].push_back(d);
  }
  std::vector<std::vector<int64_t>> groups;
  for (auto& [tile, devices] : same_rows) groups.push_back(std::move(devices));
  TESSEL_ASSIGN_OR_RETURN(Node * summed,
                          ctx.AllReduce(partial, CollectiveDeviceList(groups), ReduceKind::kAdd));
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kAdd, {table, summed}));
  return std::optional<PValue>(PValue{result, plan.operand, node.shape(), {}});
}

// The batch-parallel layout of explicit batching dims (take_along_axis, and the one_hot-style
// scatters of its gradient): the operand tiled along operand_batching_dims only and the indices
// along start_indices_batching_dims only, every device on the same batch tile of both, so the
// op runs locally on its batch rows with no collective. Taken from the two tilings when they
// agree, else from the indices' (the operand follows), else from the operand's. nullopt when
// there are no batching dims or neither side tiles them. Source: XLA gather_scatter_handler.cc
// (partitioning over explicit batch / parallel dims).
struct BatchParallelPlan {
  Sharding operand;
  Sharding indices;
};

std::optional<BatchParallelPlan> PlanBatchParallel(int64_t num_devices,
                                                   const std::vector<PValue>& operands,
                                                   const Shape& operand, const Shape& indices,
                                                   const GatherDimensionNumbers& g) {
  if (g.operand_batching_dims.empty()) return std::nullopt;
  std::optional<Sharding> op =
      KeepTiles(operands[0].sharding, operand.rank(), g.operand_batching_dims);
  std::optional<Sharding> ids =
      KeepTiles(operands[1].sharding, indices.rank(), g.start_indices_batching_dims);
  if (op && ids && BatchingAligned(num_devices, *op, *ids, g)) {
    return BatchParallelPlan{*op, *ids};
  }
  if (ids) {
    return BatchParallelPlan{
        Move(*ids, g.start_indices_batching_dims, operand.rank(), g.operand_batching_dims), *ids};
  }
  if (op) {
    return BatchParallelPlan{
        *op, Move(*op, g.operand_batching_dims, indices.rank(), g.start_indices_batching_dims)};
  }
  return std::nullopt;
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
  // Operand-parallel first, as GSPMD orders it: a table tiled along its indexed dim stays tiled
  // (1/t of it in memory per device) where index-parallel or the fallback would all-gather it.
  // With the passthrough dims kept tiled first (the embedding table's model dim), then without.
  std::vector<int64_t> ids_dims = batch_dims, ids_out = batch_out;
  for (int64_t d : g.start_indices_batching_dims) {
    ids_dims.push_back(d);
    ids_out.push_back(map.indices_to_output[d]);
  }
  for (const std::vector<int64_t>& kept : {pass, std::vector<int64_t>{}}) {
    std::optional<OperandParallelPlan> plan =
        PlanOperandParallel(ctx.num_devices(), operands, operand, indices, g, batch_dims, kept);
    if (!plan) continue;
    std::optional<Sharding> result = WithPassTiles(Move(plan->indices, ids_dims, rank, ids_out),
                                                   *plan, rank, pass_out, ctx.num_devices());
    if (!result) continue;
    return GatherOperandParallel(ctx, node, operands, *plan, *result);
  }
  if (std::optional<BatchParallelPlan> plan =
          PlanBatchParallel(ctx.num_devices(), operands, operand, indices, g)) {
    TESSEL_ASSIGN_OR_RETURN(Node * local_operand, ctx.Reshard(operands[0], plan->operand));
    TESSEL_ASSIGN_OR_RETURN(Node * local_indices, ctx.Reshard(operands[1], plan->indices));
    TESSEL_ASSIGN_OR_RETURN(Node * result,
                            ctx.Add(Opcode::kGather, {local_operand, local_indices}, node.attrs()));
    std::vector<int64_t> out;
    for (int64_t d : g.start_indices_batching_dims) out.push_back(map.indices_to_output[d]);
    return PValue{
        result, Move(plan->indices, g.start_indices_batching_dims, rank, out), node.shape(), {}};
  }
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
  std::vector<int64_t> batch_dims, batch_updates;
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (map.indices_to_output[d] < 0 || Contains(g.start_indices_batching_dims, d)) continue;
    batch_dims.push_back(d);
    batch_updates.push_back(map.indices_to_output[d]);
  }
  // The rows may be tiled on the operand or only on the result (the gradient of an embedding
  // scatters into zeros that nothing has sharded yet; cutting them is free): try both.
  std::vector<PValue> as_target = operands;
  as_target[0].sharding = target;
  std::vector<int64_t> ids_dims = batch_dims, ids_updates = batch_updates;
  for (int64_t d : g.start_indices_batching_dims) {
    ids_dims.push_back(d);
    ids_updates.push_back(map.indices_to_output[d]);
  }
  const std::vector<int64_t> pass = PassthroughDims(operand, g, map);
  std::vector<int64_t> pass_updates;
  for (int64_t d : pass) pass_updates.push_back(map.operand_to_output[d]);
  for (const std::vector<PValue>* view :
       {&operands, static_cast<const std::vector<PValue>*>(&as_target)}) {
    for (const std::vector<int64_t>& kept : {pass, std::vector<int64_t>{}}) {
      std::optional<OperandParallelPlan> plan =
          PlanOperandParallel(ctx.num_devices(), *view, operand, indices, g, batch_dims, kept);
      if (!plan) continue;
      std::optional<Sharding> updates_layout =
          WithPassTiles(Move(plan->indices, ids_dims, updates.rank(), ids_updates), *plan,
                        updates.rank(), pass_updates, ctx.num_devices());
      if (!updates_layout) continue;
      TESSEL_ASSIGN_OR_RETURN(std::optional<PValue> done,
                              ScatterOperandParallel(ctx, node, operands, *plan, *updates_layout));
      if (done) return *std::move(done);
    }
  }
  if (std::optional<BatchParallelPlan> plan =
          PlanBatchParallel(ctx.num_devices(), operands, operand, indices, g)) {
    std::vector<int64_t> on_updates;
    for (int64_t d : g.start_indices_batching_dims) on_updates.push_back(map.indices_to_output[d]);
    TESSEL_ASSIGN_OR_RETURN(Node * local_operand, ctx.Reshard(operands[0], plan->operand));
    TESSEL_ASSIGN_OR_RETURN(Node * local_indices, ctx.Reshard(operands[1], plan->indices));
    TESSEL_ASSIGN_OR_RETURN(
        Node * local_updates,
        ctx.Reshard(operands[2], Move(plan->indices, g.start_indices_batching_dims, updates.rank(),
                                      on_updates)));
    // The padding of an uneven batch tile scatters into the operand's own padding rows (the
    // batch tiles agree), never into real ones.
    TESSEL_ASSIGN_OR_RETURN(
        Node * result,
        ctx.Add(Opcode::kScatter, {local_operand, local_indices, local_updates}, node.attrs()));
    return PValue{result, plan->operand, node.shape(), {}};
  }
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
