// convolution, reduce-window, select-and-scatter, reverse.
//
// convolution follows GSPMD's convolution handler on the non-spatial dims, through the same
// iteration-space costing as the dot handler (MakeConvSpace in internal/op_dims.h): candidates
// from the target, the lhs, the rhs and their merge, each costed in bytes received; batch and
// output-feature tilings need no collective, a tiled input feature (contracting) dim gives
// partial sums that the driver all-reduces, and feature / batch groups tile with the groups
// (local group count = count / tiles) when the tiles divide the group count; spatial dims with
// a trivial window (size 1, stride 1, no padding or dilation) keep their tiling, as the batch.
//
// Spatial (windowed) dims of convolution and reduce-window: halo exchange (partitioner/internal/
// halo.h, GSPMD's ExchangeHaloAndGetValidData) when UseHalo finds it moves fewer bytes: the
// output keeps its spatial tiling, the operand (the conv's lhs) is tiled alike and each device
// fetches from its neighbours the elements its output tile's windows read (WindowedOpHalo;
// for a conv with base (lhs) dilation, the input gradient of a strided conv,
// BaseDilatedConvHalo), positions outside the operand are set to the padding value (zero for
// convolution, the init value for reduce-window), and the local op runs with the local padding
// the halo geometry gives.
//
// Weight-gradient convolutions (the "kernel" is the output gradient, tiled along the image like
// the activation, and the window spans the image): the kernel-tiled rule keeps the kernel's
// spatial tiling, exchanges the activation's halo around each kernel tile
// (KernelTiledConvHalo) and makes partial sums of the whole (small) output, all-reduced like a
// tiled contracting dim: XLA's convolution handler for lhs and rhs both tiled along spatial dims.
//
// Base dilation on reduce-window, select-and-scatter and reverse use the fallback,
// PartitionSpatialDimsByReplicating (partitioner/internal/windowed.h): every windowed dim whole
// on each device before the local op, the result cut to the target with a local slice; correct
// for any window.
#include "tessel/partitioner/internal/windowed.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "tessel/core/status_macros.h"
#include "tessel/core/window.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/partitioner/internal/halo.h"
#include "tessel/partitioner/internal/op_dims.h"
#include "tessel/partitioner/sharding_util.h"

namespace tessel::partitioner::internal {

namespace {

Sharding Plain(const Sharding& s) { return IsPlainTiling(s) ? s : Sharding::Replicate(); }

// The reduce-window dims halo exchange serves: every window, stride, padding and window
// dilation; not base (lhs) dilation, whose holes put the operand's elements at other positions
// (convolution serves it where the local padding is the same on every device,
// BaseDilatedConvHalo).
bool HaloServes(const WindowDim& w) { return w.base_dilation == 1; }

// The conv's local layout for a candidate space sharding: the windowed dims in `whole_windowed`
// whole (all of them: the fallback), kernel spatial and other `whole` dims whole but those in
// `tiled_kernel` (the kernel-tiled partial-sum rule), the group dim only tiled by a divisor of
// the group count.
Sharding ConvLayout(const ConvSpace& s, const Sharding& candidate,
                    const std::vector<int64_t>& whole_windowed,
                    const std::vector<int64_t>& tiled_kernel = {}) {
  Sharding space = PartitionSpatialDimsByReplicating(candidate, s.rank, whole_windowed);
  std::vector<int64_t> whole;
  for (int64_t dim : s.whole) {
    if (std::find(tiled_kernel.begin(), tiled_kernel.end(), dim) == tiled_kernel.end()) {
      whole.push_back(dim);
    }
  }
  space = PartiallyReplicate(space, s.rank, whole);
  if (s.group_dim >= 0 && space.IsTiled() && s.group_count % space.num_tiles(s.group_dim) != 0) {
    space = PartiallyReplicate(space, s.rank, {s.group_dim});
  }
  return space;
}

// The result of the local conv under `space`: output dims tiled as in space, the tiles of the
// contracting dim (and the always-whole kernel spatial dims after it) as an unreduced subgroup
// (partial sums), the rest replicated. Same construction as the dot handler's.
Sharding PartialSumResult(const Sharding& space, const ConvSpace& s) {
  if (!space.IsTiled()) return space;
  const spmd::DeviceArray& ta = space.tile_assignment();
  std::vector<int64_t> dims = ta.dims();
  if (space.NumSubgroupDims() == 0) dims.push_back(1);
  spmd::DeviceArray full = ta.Reshape(dims);
  int64_t contracting_tiles = 1;
  for (int64_t d = s.output_rank; d < s.rank; ++d) contracting_tiles *= full.dim(d);
  std::vector<int64_t> new_dims(full.dims().begin(), full.dims().begin() + s.output_rank);
  new_dims.push_back(contracting_tiles);
  new_dims.push_back(full.dim(s.rank));
  return Sharding::Subgroup(full.Reshape(new_dims),
                            {spmd::SubgroupType::kUnreduced, spmd::SubgroupType::kReplicated});
}

// Dims of a reduce-window / select-and-scatter whose window is not trivial.
std::vector<int64_t> WindowedDims(const OpAttributes& attrs) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < attrs.window.size(); ++d) {
    if (!IsTrivialWindowDim(attrs.window[d])) dims.push_back(static_cast<int64_t>(d));
  }
  return dims;
}

// reduce-window with its windowed dims tiled like the target: each device fetches the rows its
// output tile's windows cover from its neighbours (WindowedOpHalo), sets the positions outside
// the operand to the init value (XLA pads reduce-window with it), and reduces with no padding
// along those dims. nullopt when the target tiles no such dim or UseHalo prefers `fallback`
// (the operand with the windowed dims whole, then its result cut to the target).
absl::StatusOr<std::optional<PValue>> ReduceWindowWithHalo(Context& ctx, const Node& node,
                                                           const std::vector<PValue>& operands,
                                                           const Sharding& target,
                                                           const Sharding& fallback) {
  const Sharding plain = Plain(target);
  if (!plain.IsTiled()) return std::nullopt;
  const int64_t rank = node.shape().rank();
  const Shape& in = operands[0].global_shape;
  const Shape& out = node.shape();
  std::vector<HaloWindow> windows;
  std::vector<int64_t> whole;
  for (int64_t d : WindowedDims(node.attrs())) {
    const WindowDim& w = node.attrs().window[d];
    if (plain.num_tiles(d) > 1 && HaloServes(w) && in.dim(d) > 0 && out.dim(d) > 0) {
      windows.push_back(WindowedOpHalo(d, plain.num_tiles(d), in.dim(d), out.dim(d), w.size,
                                       w.stride, w.padding_low, w.window_dilation));
    } else {
      whole.push_back(d);
    }
  }
  if (windows.empty()) return std::nullopt;
  const Sharding layout = PartiallyReplicate(plain, rank, whole);
  TESSEL_ASSIGN_OR_RETURN(HaloPlan plan, PlanHalo(layout, in, windows, ctx.num_devices()));
  TESSEL_ASSIGN_OR_RETURN(int64_t to_layout, ctx.ReshardBytes(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(int64_t to_fallback, ctx.ReshardBytes(operands[0], fallback));
  TESSEL_ASSIGN_OR_RETURN(int64_t fallback_out,
                          ctx.ReshardBytes(PValue{nullptr, fallback, out, {}}, target));
  if (!UseHalo(to_layout + plan.bytes_per_device, to_fallback + fallback_out)) {
    return std::nullopt;
  }
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * init, ctx.Reshard(operands[1], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(HaloResult halo, ExchangeHalo(ctx, local, layout, plan, true));
  local = halo.local;
  if (halo.in_range != nullptr) {
    TESSEL_ASSIGN_OR_RETURN(Node * fill, ctx.Add(Opcode::kBroadcast, local->shape(), {init}));
    TESSEL_ASSIGN_OR_RETURN(local, ctx.Add(Opcode::kSelect, {halo.in_range, local, fill}));
  }
  OpAttributes attrs = node.attrs();
  for (const HaloWindow& w : windows) {
    attrs.window[w.dim].padding_low = 0;
    attrs.window[w.dim].padding_high = 0;
  }
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kReduceWindow, {local, init}, attrs));
  return PValue{result, layout, out, {}};
}

// A convolution's chosen layout: the iteration-space sharding; the space dim of each lhs dim
// (s.lhs_to_space, except that the kernel-tiled rule maps an lhs spatial dim to its kernel
// spatial dim); the lhs halo exchange, with the local window of each exchanged spatial dim
// (window index, then the halo); and the kernel spatial dims the rule tiles (rhs dims, whose
// padding the local conv must read as zeros).
struct ConvChoice {
  Sharding space;
  std::vector<int64_t> lhs_to_space;
  std::optional<HaloPlan> plan;
  std::vector<std::pair<size_t, ConvLhsHalo>> local_window;
  std::vector<int64_t> tiled_kernel_dims;
};

bool IsWindowed(const ConvSpace& s, int64_t space_dim) {
  return std::find(s.windowed.begin(), s.windowed.end(), space_dim) != s.windowed.end();
}

// Plans the lhs exchange of `halos` under `choice.space` (projected through
// choice.lhs_to_space); nullopt when the lhs layout does not tile an exchanged dim as the halo
// expects (the candidate's tiling did not survive the layout).
absl::StatusOr<std::optional<ConvChoice>> WithLhsHalo(
    Context& ctx, ConvChoice choice, std::vector<std::pair<size_t, ConvLhsHalo>> halos,
    const Shape& lhs_shape) {
  if (halos.empty() || !choice.space.IsTiled()) return std::nullopt;
  const Sharding lhs_layout = Project(choice.space, choice.lhs_to_space);
  std::vector<HaloWindow> windows;
  for (const auto& [k, halo] : halos) {
    if (lhs_layout.num_tiles(halo.window.dim) != static_cast<int64_t>(halo.window.start.size())) {
      return std::nullopt;
    }
    windows.push_back(halo.window);
  }
  TESSEL_ASSIGN_OR_RETURN(choice.plan, PlanHalo(lhs_layout, lhs_shape, windows, ctx.num_devices()));
  choice.local_window = std::move(halos);
  return choice;
}

// The output-tiled halo variant of `candidate`: its tiled output spatial dims stay tiled (the
// lhs is then tiled alike along its spatial dims and fetches the elements each output tile's
// windows read, BaseDilatedConvHalo; with base dilation 1 that is WindowedOpHalo); the windowed
// dims it cannot serve (a base dilation whose local padding would differ between devices) are
// whole. nullopt when no spatial dim stays tiled.
absl::StatusOr<std::optional<ConvChoice>> ConvHaloChoice(Context& ctx, const Node& node,
                                                         const ConvSpace& s,
                                                         const Sharding& candidate,
                                                         const Shape& lhs_shape) {
  const ConvolutionDimensionNumbers& d = node.attrs().convolution;
  const std::vector<WindowDim>& window = node.attrs().window;
  const Sharding plain = Plain(candidate);
  std::vector<int64_t> whole_windowed;
  std::vector<std::pair<size_t, ConvLhsHalo>> halos;
  for (size_t k = 0; k < window.size(); ++k) {
    const int64_t out_dim = d.output_spatial_dimensions[k];
    // Trivial window dims are not in s.windowed: they keep their tiling with no halo.
    if (!IsWindowed(s, out_dim)) continue;
    const int64_t tiles = plain.IsTiled() ? plain.num_tiles(out_dim) : 1;
    const int64_t in = lhs_shape.dim(d.input_spatial_dimensions[k]);
    const int64_t out = node.shape().dim(out_dim);
    std::optional<ConvLhsHalo> halo;
    if (tiles > 1 && in >= 1 && out >= 1) {
      halo = BaseDilatedConvHalo(d.input_spatial_dimensions[k], tiles, in, out, window[k]);
    }
    if (halo.has_value()) {
      halos.emplace_back(k, *std::move(halo));
    } else {
      whole_windowed.push_back(out_dim);
    }
  }
  ConvChoice choice{ConvLayout(s, plain, whole_windowed), s.lhs_to_space, std::nullopt, {}, {}};
  return WithLhsHalo(ctx, std::move(choice), std::move(halos), lhs_shape);
}

// The spatial dims the kernel-tiled rule may serve: windowed, no base dilation, no reversal.
std::vector<size_t> KernelTileableDims(const Node& node, const ConvSpace& s) {
  const ConvolutionDimensionNumbers& d = node.attrs().convolution;
  std::vector<size_t> dims;
  for (size_t k = 0; k < node.attrs().window.size(); ++k) {
    const WindowDim& w = node.attrs().window[k];
    if (IsWindowed(s, d.output_spatial_dimensions[k]) && w.base_dilation == 1 &&
        !w.window_reversal) {
      dims.push_back(k);
    }
  }
  return dims;
}

// The kernel-tiled (partial-sum) variant of `candidate`, a space sharding in which kernel
// spatial dims may be tiled: the weight-gradient convolution, whose "kernel" is the output
// gradient tiled along the image like the activation (the lhs). Each device convolves its
// kernel tile with the lhs rows it reads (its own tile plus a halo, KernelTiledConvHalo) into
// the whole output, partial sums over the kernel tiles that the driver all-reduces like those
// of a tiled input feature dim. Output spatial dims are whole. `lhs_to_space` maps the served
// lhs spatial dims to their kernel dims. nullopt when no served kernel dim is tiled.
absl::StatusOr<std::optional<ConvChoice>> ConvKernelTiledChoice(
    Context& ctx, const Node& node, const ConvSpace& s, const Sharding& candidate,
    const std::vector<int64_t>& lhs_to_space, const std::vector<size_t>& served,
    const Shape& lhs_shape, const Shape& rhs_shape) {
  const ConvolutionDimensionNumbers& d = node.attrs().convolution;
  std::vector<int64_t> kernel_space_dims;
  for (size_t k : served) kernel_space_dims.push_back(s.output_rank + 1 + k);
  ConvChoice choice{ConvLayout(s, Plain(candidate), s.windowed, kernel_space_dims),
                    lhs_to_space,
                    std::nullopt,
                    {},
                    {}};
  if (!choice.space.IsTiled()) return std::nullopt;
  std::vector<std::pair<size_t, ConvLhsHalo>> halos;
  for (size_t k : served) {
    const int64_t tiles = choice.space.num_tiles(s.output_rank + 1 + k);
    const int64_t in = lhs_shape.dim(d.input_spatial_dimensions[k]);
    const int64_t kernel = rhs_shape.dim(d.kernel_spatial_dimensions[k]);
    const int64_t out = node.shape().dim(d.output_spatial_dimensions[k]);
    if (tiles <= 1 || in < 1 || out < 1 || kernel < 1) continue;
    halos.emplace_back(k, KernelTiledConvHalo(d.input_spatial_dimensions[k], tiles, in, kernel, out,
                                              node.attrs().window[k]));
    choice.tiled_kernel_dims.push_back(d.kernel_spatial_dimensions[k]);
  }
  return WithLhsHalo(ctx, std::move(choice), std::move(halos), lhs_shape);
}

// Bytes received per device under `choice`: the operands resharded to its layouts, the halo,
// and its result (partial sums over the contracting and tiled kernel dims) resharded to
// `target`.
absl::StatusOr<int64_t> ConvChoiceBytes(Context& ctx, const Node& node, const ConvSpace& s,
                                        const PValue& lhs, const PValue& rhs,
                                        const Sharding& target, const ConvChoice& choice) {
  TESSEL_ASSIGN_OR_RETURN(int64_t lhs_bytes,
                          ctx.ReshardBytes(lhs, Project(choice.space, choice.lhs_to_space)));
  TESSEL_ASSIGN_OR_RETURN(int64_t rhs_bytes,
                          ctx.ReshardBytes(rhs, Project(choice.space, s.rhs_to_space)));
  PValue out{nullptr, PartialSumResult(choice.space, s), node.shape(), {}};
  TESSEL_ASSIGN_OR_RETURN(int64_t out_bytes, ctx.ReshardBytes(out, target));
  const int64_t halo_bytes = choice.plan.has_value() ? choice.plan->bytes_per_device : 0;
  return lhs_bytes + rhs_bytes + out_bytes + halo_bytes;
}

// Candidate iteration-space shardings of a convolution, each costed in bytes received per
// device with its spatial dims whole (the fallback) and, where the candidate tiles output
// spatial dims that halo exchange serves, with them kept tiled and the lhs halos exchanged;
// UseHalo decides between the two per candidate. Then the kernel-tiled candidates (from the
// rhs, from the lhs with its spatial dims read as kernel dims, and their merge). The cheapest
// wins; ties keep the earliest (the target's layout).
absl::StatusOr<ConvChoice> ChooseConvLayout(Context& ctx, const Node& node, const ConvSpace& s,
                                            const PValue& lhs, const PValue& rhs,
                                            const Sharding& target) {
  std::vector<Sharding> candidates;
  candidates.push_back(Embed(Plain(target), s.rank, Iota(s.output_rank)));
  const Sharding from_lhs = Embed(Plain(lhs.sharding), s.rank, s.lhs_to_space);
  const Sharding from_rhs = Embed(Plain(rhs.sharding), s.rank, s.rhs_to_space);
  candidates.push_back(from_lhs);
  candidates.push_back(from_rhs);
  if (auto merged = MergeShardings(from_lhs, from_rhs, s.rank, ctx.num_devices())) {
    candidates.push_back(*merged);
  }
  int64_t best_cost = -1;
  ConvChoice best;
  auto consider = [&](ConvChoice choice, int64_t cost) {
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = std::move(choice);
    }
  };
  for (const Sharding& candidate : candidates) {
    ConvChoice choice{ConvLayout(s, candidate, s.windowed), s.lhs_to_space, std::nullopt, {}, {}};
    TESSEL_ASSIGN_OR_RETURN(int64_t cost, ConvChoiceBytes(ctx, node, s, lhs, rhs, target, choice));
    TESSEL_ASSIGN_OR_RETURN(std::optional<ConvChoice> halo,
                            ConvHaloChoice(ctx, node, s, candidate, lhs.global_shape));
    if (halo.has_value()) {
      TESSEL_ASSIGN_OR_RETURN(int64_t halo_cost,
                              ConvChoiceBytes(ctx, node, s, lhs, rhs, target, *halo));
      if (UseHalo(halo_cost, cost)) {
        choice = *std::move(halo);
        cost = halo_cost;
      }
    }
    consider(std::move(choice), cost);
  }
  const std::vector<size_t> served = KernelTileableDims(node, s);
  if (served.empty()) return best;
  std::vector<int64_t> lhs_to_kernel = s.lhs_to_space;
  for (size_t k : served) {
    lhs_to_kernel[node.attrs().convolution.input_spatial_dimensions[k]] = s.output_rank + 1 + k;
  }
  std::vector<Sharding> kernel_candidates = {from_rhs,
                                             Embed(Plain(lhs.sharding), s.rank, lhs_to_kernel)};
  if (auto merged =
          MergeShardings(kernel_candidates[0], kernel_candidates[1], s.rank, ctx.num_devices())) {
    kernel_candidates.push_back(*merged);
  }
  for (const Sharding& candidate : kernel_candidates) {
    TESSEL_ASSIGN_OR_RETURN(std::optional<ConvChoice> choice,
                            ConvKernelTiledChoice(ctx, node, s, candidate, lhs_to_kernel, served,
                                                  lhs.global_shape, rhs.global_shape));
    if (!choice.has_value()) continue;
    TESSEL_ASSIGN_OR_RETURN(int64_t cost, ConvChoiceBytes(ctx, node, s, lhs, rhs, target, *choice));
    consider(*std::move(choice), cost);
  }
  return best;
}

}  // namespace

Sharding PartitionSpatialDimsByReplicating(const Sharding& sharding, int64_t rank,
                                           const std::vector<int64_t>& windowed_dims) {
  return PartiallyReplicate(Plain(sharding), rank, windowed_dims);
}

absl::StatusOr<PValue> HandleConvolution(Context& ctx, const Node& node,
                                         const std::vector<PValue>& operands,
                                         const Sharding& target) {
  const ConvSpace s = MakeConvSpace(node);
  const PValue& lhs = operands[0];
  const PValue& rhs = operands[1];
  TESSEL_ASSIGN_OR_RETURN(ConvChoice best, ChooseConvLayout(ctx, node, s, lhs, rhs, target));
  const Sharding lhs_layout = Project(best.space, best.lhs_to_space);
  const Sharding rhs_layout = Project(best.space, s.rhs_to_space);
  TESSEL_ASSIGN_OR_RETURN(Node * lhs_local, ctx.Reshard(lhs, lhs_layout));
  TESSEL_ASSIGN_OR_RETURN(Node * rhs_local, ctx.Reshard(rhs, rhs_layout));
  const ConvolutionDimensionNumbers& d = node.attrs().convolution;
  OpAttributes attrs = node.attrs();
  if (attrs.feature_group_count == 1) {
    // The input feature dim is the contracting one (also under batch groups): the padding of an
    // unevenly tiled one would enter the partial sums, so it is zeroed on both sides (it may
    // hold inf or NaN, and 0 * inf is NaN).
    TESSEL_ASSIGN_OR_RETURN(lhs_local, ctx.MaskPadding(lhs_local, lhs_layout, lhs.global_shape,
                                                       {d.input_feature_dimension}, 0));
    TESSEL_ASSIGN_OR_RETURN(rhs_local, ctx.MaskPadding(rhs_local, rhs_layout, rhs.global_shape,
                                                       {d.kernel_input_feature_dimension}, 0));
  }
  if (!best.tiled_kernel_dims.empty()) {
    // The last kernel tiles of an uneven kernel dim hold padding, which would add to every
    // output's partial sum.
    TESSEL_ASSIGN_OR_RETURN(rhs_local, ctx.MaskPadding(rhs_local, rhs_layout, rhs.global_shape,
                                                       best.tiled_kernel_dims, 0));
  }
  if (s.group_dim >= 0 && best.space.IsTiled()) {
    const int64_t group_tiles = best.space.num_tiles(s.group_dim);
    if (attrs.feature_group_count > 1) attrs.feature_group_count /= group_tiles;
    if (attrs.batch_group_count > 1) attrs.batch_group_count /= group_tiles;
  }
  if (best.plan.has_value()) {
    // The lhs elements each device's windows read, from its neighbours; positions outside the
    // lhs are the conv's zero padding, so the local window pads only what the halo geometry
    // says (ConvLhsHalo).
    TESSEL_ASSIGN_OR_RETURN(HaloResult halo,
                            ExchangeHalo(ctx, lhs_local, lhs_layout, *best.plan, true));
    lhs_local = halo.local;
    if (halo.in_range != nullptr) {
      TESSEL_ASSIGN_OR_RETURN(Node * zeros,
                              ctx.Add(Opcode::kBroadcast, lhs_local->shape(),
                                      {ctx.ScalarConstant(lhs_local->shape().dtype(), 0)}));
      TESSEL_ASSIGN_OR_RETURN(lhs_local,
                              ctx.Add(Opcode::kSelect, {halo.in_range, lhs_local, zeros}));
    }
    for (const auto& [k, local] : best.local_window) {
      attrs.window[k].size = local.window_size;
      attrs.window[k].padding_low = local.padding_low;
      attrs.window[k].padding_high = local.padding_high;
    }
  }
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(Opcode::kConvolution, {lhs_local, rhs_local}, attrs));
  return PValue{result, PartialSumResult(best.space, s), node.shape(), {}};
}

absl::StatusOr<PValue> HandleReduceWindow(Context& ctx, const Node& node,
                                          const std::vector<PValue>& operands,
                                          const Sharding& target) {
  const int64_t rank = node.shape().rank();
  const Sharding layout =
      PartitionSpatialDimsByReplicating(operands[0].sharding, rank, WindowedDims(node.attrs()));
  TESSEL_ASSIGN_OR_RETURN(std::optional<PValue> halo,
                          ReduceWindowWithHalo(ctx, node, operands, target, layout));
  if (halo.has_value()) return *std::move(halo);
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * init, ctx.Reshard(operands[1], Sharding::Replicate()));
  // Trivial window dims (size 1, stride 1, no padding or dilation) map element to element, so
  // the global attributes hold for the local shard; windowed dims are whole.
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(Opcode::kReduceWindow, {local, init}, node.attrs()));
  (void)target;
  return PValue{result, layout, node.shape(), {}};
}

absl::StatusOr<PValue> HandleSelectAndScatter(Context& ctx, const Node& node,
                                              const std::vector<PValue>& operands,
                                              const Sharding& target) {
  const int64_t rank = node.shape().rank();
  const Sharding layout =
      PartitionSpatialDimsByReplicating(operands[0].sharding, rank, WindowedDims(node.attrs()));
  // The source is laid out like the operand: on trivial dims its elements are the operand's.
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * source, ctx.Reshard(operands[1], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * init, ctx.Reshard(operands[2], Sharding::Replicate()));
  TESSEL_ASSIGN_OR_RETURN(Node * result,
                          ctx.Add(Opcode::kSelectAndScatter, {local, source, init}, node.attrs()));
  (void)target;
  return PValue{result, layout, node.shape(), {}};
}

absl::StatusOr<PValue> HandleReverse(Context& ctx, const Node& node,
                                     const std::vector<PValue>& operands, const Sharding& target) {
  // A reversed dim's tile k holds global tile n-1-k's data (and padding moves to the front):
  // those dims are made whole, the others keep the target's tiling.
  const Sharding layout =
      PartiallyReplicate(Plain(target), node.shape().rank(), node.attrs().dimensions);
  TESSEL_ASSIGN_OR_RETURN(Node * local, ctx.Reshard(operands[0], layout));
  TESSEL_ASSIGN_OR_RETURN(Node * result, ctx.Add(Opcode::kReverse, {local}, node.attrs()));
  return PValue{result, layout, node.shape(), {}};
}

}  // namespace tessel::partitioner::internal
