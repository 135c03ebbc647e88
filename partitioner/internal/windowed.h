// The spatial-dim strategy of the windowed ops (convolution, reduce-window, select-and-scatter),
// internal to the partitioner; one function, so a halo exchange can replace it in one place.
//
//   PartitionSpatialDimsByReplicating({devices=[2,4,1,1]<=[8]}, 4, {1, 2})
//     == {devices=[2,1,1,1,4]<=[8] last_tile_dim_replicate}: dim 1 gathered, dim 0 kept.
//
// The fallback: every windowed dim (window size > 1, stride > 1, padding or dilation) that is
// sharded is made whole on each device (all-gather), the op runs locally on whole windowed dims,
// and the driver slices the result back to its target: correct for any window, more bytes than
// needed. convolution and reduce-window take halo exchange instead where it moves fewer bytes
// (handlers/windowed.cc, internal/halo.h WindowedOpHalo; for a convolution also with base
// dilation, BaseDilatedConvHalo, and the weight gradient's kernel-tiled partial sums,
// KernelTiledConvHalo); select-and-scatter and reverse always take this fallback.
//
// What a halo strategy needs (GSPMD: spmd_partitioner.cc HandleReduceWindow,
// convolution_handler.cc PartitionConvolutionWithSpatialDimensionHaloExchangeOnLHS,
// ExchangeHaloAndGetValidData), per windowed dim d of the operand (lhs) with local size s:
//   - the window: size, window_dilation (dilated size (size-1)*window_dilation+1), stride;
//   - padding_low / padding_high and base_dilation (lhs_dilate) of that dim;
//   - for output shard k (output offset o_k = k * ceil(out/tiles)), the operand range it reads:
//     [o_k*stride - padding_low, (o_k + out_local - 1)*stride - padding_low + dilated size) in
//     the base-dilated coordinates; minus the shard's own range gives the left and right halo
//     sizes (may differ per shard: uneven sizes, padding only at the global edges);
//   - a collective-permute of the left halo from shard k-1 and the right halo from k+1 (more
//     than one hop when a halo exceeds a shard), concatenated to the local shard, the global
//     padding applied only by the first and last shards (a select on the tile offset), and the
//     local window's padding_low set to 0 (resp. to the first shard's padding) so that output
//     shard k starts exactly at o_k;
//   - for select-and-scatter, the same halos for the operand, the source's halo of the windows
//     that overlap the shard, and a reverse exchange (add) of what was scattered into halos.
#ifndef TESSEL_PARTITIONER_INTERNAL_WINDOWED_H_
#define TESSEL_PARTITIONER_INTERNAL_WINDOWED_H_

#include <cstdint>
#include <vector>

#include "tessel/spmd/sharding.h"

namespace tessel::partitioner::internal {

// The layout a windowed op runs in: `sharding` (replicated when it is not a plain tiling, e.g.
// a partial sum) with the tiles of `windowed_dims` moved into replication. `rank` is the rank
// of the value (or iteration space) `sharding` describes.
[[nodiscard]] spmd::Sharding PartitionSpatialDimsByReplicating(
    const spmd::Sharding& sharding, int64_t rank, const std::vector<int64_t>& windowed_dims);

}  // namespace tessel::partitioner::internal

#endif  // TESSEL_PARTITIONER_INTERNAL_WINDOWED_H_
