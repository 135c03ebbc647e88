// Collective algorithms, written once for both transports in terms of CallContext messages.
// Each function is run by every member of the group (the calling device is
// view.members[view.index]) and writes only the caller's output.
//
//   all-reduce      < small_message_bytes: recursive doubling (Rabenseifner & Thakur's
//                   non-power-of-two fold); < direct_max_bytes with 3+ members: direct
//                   (chunk j to member j, folded in group order, result to all); else ring
//                   reduce-scatter then ring all-gather, with pipelined segments;
//                   hierarchical when the group spans slices.
//   all-gather      < small, or < direct_max_bytes with 3+ members (output bytes): direct
//                   sends; else recursive doubling when the group size is a power of two
//                   >= 8, ring otherwise; hierarchical when the group spans slices (each
//                   member's block across DCN once per other slice, then direct in the slice).
//   reduce-scatter  < small (input bytes): direct sends, folded in group order; else ring;
//                   hierarchical when the group spans slices (the slice's sums of each
//                   member's chunks inside the slice, then one chunk per other slice across DCN).
//   all-to-all      direct, pipelined segments (segment g to every member, then from every
//                   member).
//   broadcast       < small: binomial tree; else pipelined chain.
//   barrier         dissemination (Hensgen, Finkel, Manber 1988).
// The ring and recursive-doubling loops run segment by segment across steps (every step of
// segment g before segment g+1, NCCL's order) and send at most
// CommunicatorOptions::pipeline_depth segments ahead of what they receive, so a link carries a
// few segments at a time.
// Sources: Thakur, Rabenseifner, Gropp, "Optimization of Collective Communication Operations
// in MPICH" (2005); Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms" (2009).
#ifndef TESSEL_TRANSPORT_INTERNAL_ALGORITHMS_H_
#define TESSEL_TRANSPORT_INTERNAL_ALGORITHMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tessel/transport/communicator.h"
#include "tessel/transport/internal/call_context.h"
#include "tessel/transport/internal/groups.h"

namespace tessel::transport::internal {

// Shapes and semantics as the Communicator methods of the same name; arguments already
// validated.
[[nodiscard]] absl::Status RunAllReduce(CallContext& ctx, const GroupView& view,
                                        const DeviceMap& map, const void* input, void* output,
                                        int64_t element_count);
[[nodiscard]] absl::Status RunAllGather(CallContext& ctx, const GroupView& view,
                                        const DeviceMap& map, const void* input, void* output,
                                        int64_t element_count);
[[nodiscard]] absl::Status RunReduceScatter(CallContext& ctx, const GroupView& view,
                                            const DeviceMap& map, const void* input, void* output,
                                            int64_t element_count);
[[nodiscard]] absl::Status RunAllToAll(CallContext& ctx, const GroupView& view, const void* input,
                                       void* output, int64_t element_count);
// `source` / `target`: the device whose input this device receives / that receives this
// device's input, -1 for none.
[[nodiscard]] absl::Status RunCollectivePermute(CallContext& ctx, int64_t source, int64_t target,
                                                const void* input, void* output,
                                                int64_t element_count);
[[nodiscard]] absl::Status RunBroadcast(CallContext& ctx, const GroupView& view, int64_t root_index,
                                        void* buffer, int64_t element_count);
[[nodiscard]] absl::Status RunBarrier(CallContext& ctx, const GroupView& view);

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_ALGORITHMS_H_
