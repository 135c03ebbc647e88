// Halo exchange (internal to the partitioner): gives every device a window of a sharded value
// along some dims by moving only the boundary elements its neighbours hold, with
// `collective-permute`s, instead of all-gathering the dims.
//
//   // f32[16] over 4 devices ({devices=[4]0,1,2,3}), shard size 4. Each device wants the 6
//   // elements starting one before its own shard (a window of size 3 convolution, say):
//   HaloWindow w{/*dim=*/0, /*start=*/{-1, 3, 7, 11}, /*size=*/6, /*valid_begin=*/0,
//                /*valid_end=*/16};
//   HaloPlan plan = PlanHalo(sharding, Shape(DType::kF32, {16}), {w}, 4).value();
//   // plan.dims[0].pieces: hop -1 sends local [3:4) with pairs {0->1, 1->2, 2->3},
//   //                      hop 0 is the device's own [0:4),
//   //                      hop +1 sends local [0:1) with pairs {1->0, 2->1, 3->2}.
//   // plan.bytes_per_device == 8 (two f32 elements received).
//   HaloResult r = ExchangeHalo(ctx, local, sharding, plan, /*want_mask=*/true).value();
//   // r.local is f32[6]; r.in_range is false at device 0's first element (global index -1).
//
// Terms (one dim d of a value of global extent N tiled into T tiles): shard size s = ceil(N/T)
// (Tessel's uneven rule, spmd/sharding.h: the trailing tiles are short and padded); the device
// with tile index k holds global [k*s, (k+1)*s) at local [0, s). Its window is global
// [start[k], start[k] + size); the window may reach past its own shard by any number of shards
// on either side (the "hops"), and past [0, N).
//
// What moves: for each hop h != 0 (source tile = target tile + h) one collective-permute of
// the union of the boundary ranges the targets need from that hop, with pairs only between
// devices that hold the same tile of every other dim and the same position in the replicated
// subgroup (partially replicated copies exchange within their own copy), and only to targets
// that need something from that hop. The received pieces and the device's own shard are
// concatenated in global order; the window is then cut out at a per-device offset
// (dynamic-slice indexed by partition-id, or a static slice when every device's offset is the
// same). Window elements outside [valid_begin, valid_end) are unspecified: zeros from a
// collective-permute that had no source, or another shard's padding; `in_range` marks them.
// Several dims are exchanged one after the other, the later ones carrying the earlier dims'
// windows (so corner elements travel too).
//
// Source: XLA spmd_partitioner_util.cc ExchangeHalo / ExchangeHaloAndGetValidData, and the
// GSPMD paper (arXiv 2105.04663) section 3.3, written for Tessel's uneven-tile rule.
#ifndef TESSEL_PARTITIONER_INTERNAL_HALO_H_
#define TESSEL_PARTITIONER_INTERNAL_HALO_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tessel/core/graph.h"
#include "tessel/core/shape.h"
#include "tessel/partitioner/internal/context.h"
#include "tessel/spmd/sharding.h"

namespace tessel::partitioner::internal {

// The window one dim must have on every device, in global element indices.
struct HaloWindow {
  int64_t dim = 0;
  // Global index of the window's first element, one entry per tile index along `dim` (entry k
  // is for the devices with tile index k); may be negative or past the dim.
  std::vector<int64_t> start;
  // Window length in elements, the same on every device (SPMD: one local shape).
  int64_t size = 0;
  // The global range whose elements the caller reads; the exchange only moves elements inside
  // it. Must lie inside [0, N).
  int64_t valid_begin = 0;
  int64_t valid_end = 0;
};

// One piece of the concatenated buffer: the source's local range [begin, end) along the dim,
// taken from tile (own tile + hop).
struct HaloPiece {
  int64_t hop = 0;
  int64_t begin = 0;
  int64_t end = 0;
  // Global device ids, source -> target. Empty for hop 0 (the device's own data) and for a hop
  // no device needs (the piece is then zeros of the right size, never read).
  std::vector<std::pair<int64_t, int64_t>> pairs;
};

struct HaloDimPlan {
  HaloWindow window;
  // Local extent along the dim before the exchange: ceil(N / T).
  int64_t shard_size = 0;
  // In global order (increasing hop); concatenated along the dim.
  std::vector<HaloPiece> pieces;
  // Padding added around the concatenation so every device's window lies inside it (its
  // elements are outside the valid range, hence never read unmasked).
  int64_t pad_low = 0;
  int64_t pad_high = 0;
  // Start of each device's window in the padded concatenation, indexed by global device id.
  std::vector<int64_t> offset_by_device;
  // True when some device's window reaches outside [valid_begin, valid_end).
  bool needs_mask = false;
};

struct HaloPlan {
  std::vector<HaloDimPlan> dims;
  // Bytes one device receives at most: the sum of the pieces that travel (each piece's shape
  // with the earlier dims already at their window size).
  int64_t bytes_per_device = 0;
};

// Plans the exchange of a value of `global` (array shape) sharded by `s` on devices
// 0..num_devices-1, for the windows `windows` (distinct dims, applied in this order).
// Shapes: `global` is the unpartitioned shape; local extents follow LocalShape(global, s).
// Errors: kInvalidArgument when a window's dim is out of range or not tiled by `s` (one tile:
// nothing to exchange), its `start` has not one entry per tile, its size is < 1, or the valid
// range is empty or outside [0, N); kUnimplemented when `s` is not a plain tiling.
[[nodiscard]] absl::StatusOr<HaloPlan> PlanHalo(const spmd::Sharding& s, const Shape& global,
                                                const std::vector<HaloWindow>& windows,
                                                int64_t num_devices);

// The one place that picks halo exchange over the all-gather fallback, for every op that has
// both paths: true when the halo path's bytes received per device (resharding the operands to
// its layout plus HaloPlan::bytes_per_device) are strictly fewer than the fallback's
// (resharding to the layout with the exchanged dims whole, and its result to the target). A tie
// keeps the fallback: it then moves no more and its program is simpler.
[[nodiscard]] bool UseHalo(int64_t halo_bytes, int64_t gather_bytes);

// The window a windowed op (reduce-window, a convolution's input) needs along one dim tiled into
// `tiles` tiles so that each device computes its own output tile with a local op whose padding
// along the dim is 0: output element i reads input elements i * stride - padding_low +
// j * window_dilation for j < window_size (input elements outside [0, input_size) are the
// padding: the caller masks them to the op's padding value). With s_out = ceil(output_size /
// tiles): start[k] = k * s_out * stride - padding_low, size = (s_out - 1) * stride +
// (window_size - 1) * window_dilation + 1, valid range [0, input_size); the local op then yields
// s_out elements. Precondition: base (lhs) dilation 1, every argument >= 1 but padding_low.
// Source: XLA spmd_partitioner.cc HandleReduceWindow and convolution_handler.cc (the halo
// sizes of the spatial dims), written with window starts instead of left/right halo functions.
[[nodiscard]] HaloWindow WindowedOpHalo(int64_t dim, int64_t tiles, int64_t input_size,
                                        int64_t output_size, int64_t window_size, int64_t stride,
                                        int64_t padding_low, int64_t window_dilation);

// A convolution's lhs window along one spatial dim together with the local conv's window there:
// after the exchange each device runs the conv on `window.size` lhs elements with this size and
// padding (stride, dilations and reversal stay the global ones).
struct ConvLhsHalo {
  HaloWindow window;
  int64_t window_size = 0;
  int64_t padding_low = 0;
  int64_t padding_high = 0;
};

// The output-tiled halo of a base-dilated (lhs_dilate > 1, the input gradient of a strided
// conv) spatial dim tiled into `tiles`: output tile k (s_out = ceil(output_size / tiles)
// elements) reads the dilated positions [D_k, D_k + W) with D_k = k * s_out * stride -
// padding_low and W = (s_out - 1) * stride + (window_size - 1) * window_dilation + 1; lhs
// element e sits at position e * base_dilation, the holes between elements and the padding are
// zeros. Each device fetches the lhs elements inside its range (start[k] = ceil(D_k / bd), the
// same count on every device) and runs the conv with the same base dilation, padding_low the
// distance from D_k to its first element and padding_high the rest of W, so that it yields its
// s_out outputs. nullopt when the devices would need different local padding (D_k mod bd
// differs: s_out * stride is not a multiple of bd) or a window holds no element. With bd 1 it is
// WindowedOpHalo with zero local padding. Source: XLA convolution_handler.cc (spatial halo
// exchange on the lhs, whose halo sizes account for lhs dilation), as offsets instead of halo
// size functions.
[[nodiscard]] std::optional<ConvLhsHalo> BaseDilatedConvHalo(int64_t dim, int64_t tiles,
                                                             int64_t input_size,
                                                             int64_t output_size,
                                                             const WindowDim& w);

// The kernel-tiled halo of a spatial dim whose kernel (the rhs) is tiled into `tiles` along the
// matching kernel spatial dim: the weight-gradient convolution, where the "kernel" is the output
// gradient and the window spans the whole image. Device k holds kernel elements [k * s_k,
// (k + 1) * s_k) (s_k = ceil(kernel_size / tiles)) and computes every output element's partial
// sum over them: output o reads lhs element o * stride - padding_low + j * window_dilation for
// its kernel elements j, so start[k] = k * s_k * window_dilation - padding_low, size = (s_k - 1)
// * window_dilation + (output_size - 1) * stride + 1, valid range [0, input_size); the local
// conv has window size s_k and no padding, and yields all output_size outputs (partial sums,
// all-reduced by the caller). Precondition: base dilation 1, no reversal. Source: XLA
// convolution_handler.cc PartitionConvolutionWithSpatialDimensionHaloExchangeOnRHS (partial
// sums of the full output, then an all-reduce), with the halo taken on the lhs.
[[nodiscard]] ConvLhsHalo KernelTiledConvHalo(int64_t dim, int64_t tiles, int64_t input_size,
                                              int64_t kernel_size, int64_t output_size,
                                              const WindowDim& w);

struct HaloResult {
  // Each device's windows: local extent plan.dims[i].window.size along each exchanged dim.
  Node* local = nullptr;
  // pred, local's shape: true where every exchanged dim's global index lies in its valid range.
  // nullptr when not asked for or when every element is in range.
  Node* in_range = nullptr;
};

// Emits `plan` on `local` (the device's shard of the value, local shape LocalShape(global, s)).
// With `want_mask` also builds `in_range` (iota + per-device window start, compared with the
// valid range). Errors: whatever adding the nodes returns (kInternal on a shape mismatch,
// which would be a planning bug).
[[nodiscard]] absl::StatusOr<HaloResult> ExchangeHalo(Context& ctx, Node* local,
                                                      const spmd::Sharding& s, const HaloPlan& plan,
                                                      bool want_mask);

}  // namespace tessel::partitioner::internal

#endif  // TESSEL_PARTITIONER_INTERNAL_HALO_H_
