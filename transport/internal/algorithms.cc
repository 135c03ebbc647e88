#include "tessel/transport/internal/algorithms.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessel/core/status_macros.h"
#include "tessel/transport/internal/reduce.h"

namespace tessel::transport::internal {
namespace {

// Phases keep the messages of the sub-steps of one call apart.
constexpr uint8_t kPhaseReduceScatter = 0;
constexpr uint8_t kPhaseAllGather = 1;
constexpr uint8_t kPhaseCrossReduceScatter = 2;
constexpr uint8_t kPhaseCrossAllGather = 3;
constexpr uint8_t kPhaseCrossDoubling = 4;
constexpr uint8_t kPhaseCrossGather = 5;
constexpr uint8_t kPhaseSliceGather = 6;
constexpr uint8_t kPhaseSliceReduce = 7;
constexpr uint8_t kPhaseCrossReduce = 8;

// Element offsets of n nearly equal chunks of `count`: the first count % n chunks get one more.
std::vector<int64_t> EvenOffsets(int64_t count, int64_t n) {
  std::vector<int64_t> offsets(n + 1, 0);
  const int64_t base = count / n;
  const int64_t extra = count % n;
  for (int64_t i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + base + (i < extra ? 1 : 0);
  return offsets;
}

std::vector<int64_t> BlockOffsets(int64_t count, int64_t n) {
  std::vector<int64_t> offsets(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + count;
  return offsets;
}

int64_t Mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

// Segments of a byte range [0, bytes): count and size of segment g.
struct Segments {
  int64_t bytes;
  int64_t segment_bytes;
  uint32_t count() const {
    return bytes == 0 ? 0 : static_cast<uint32_t>((bytes + segment_bytes - 1) / segment_bytes);
  }
  int64_t offset(uint32_t g) const { return static_cast<int64_t>(g) * segment_bytes; }
  int64_t size(uint32_t g) const { return std::min(segment_bytes, bytes - offset(g)); }
};

absl::Status SendSegments(CallContext& ctx, int64_t dst, uint8_t phase, uint32_t step,
                          const std::byte* data, int64_t bytes) {
  const Segments segs{bytes, ctx.segment_bytes()};
  for (uint32_t g = 0; g < segs.count(); ++g) {
    TESSEL_RETURN_IF_ERROR(
        ctx.Send(dst, phase, step, g, data + segs.offset(g), segs.size(g), /*stable=*/true));
  }
  return absl::OkStatus();
}

absl::Status RecvSegments(CallContext& ctx, int64_t src, uint8_t phase, uint32_t step,
                          std::byte* data, int64_t bytes) {
  const Segments segs{bytes, ctx.segment_bytes()};
  for (uint32_t g = 0; g < segs.count(); ++g) {
    TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(src, phase, step, g, segs.size(g)));
    std::memcpy(data + segs.offset(g), m.data(), segs.size(g));
  }
  return absl::OkStatus();
}

// The segments of one region sent to one member, at most CommunicatorOptions::pipeline_depth
// segments ahead of the loop that paces them (0: all at once): the caller calls Pace(g) before
// it handles segment g of what it receives, so a link holds a few segments in flight and the
// receiver's shared-memory slots do not overflow into the socket. The region must stay
// unchanged until the call finishes (`final`, SendFinal) or the next WaitSendsReleased().
class PacedSend {
 public:
  PacedSend(CallContext& ctx, int64_t dst, uint8_t phase, uint32_t step, const std::byte* data,
            int64_t bytes, bool final = false)
      : ctx_(ctx),
        dst_(dst),
        phase_(phase),
        step_(step),
        data_(data),
        segs_{bytes, ctx.segment_bytes()},
        final_(final) {}

  // Sends every segment below g + pipeline_depth (every segment if the depth is 0).
  absl::Status Pace(uint32_t g) {
    const int64_t depth = ctx_.options().pipeline_depth;
    const uint32_t count = segs_.count();
    return SendBelow(depth == 0 ? count
                                : static_cast<uint32_t>(std::min<int64_t>(count, g + depth)));
  }
  // Sends the segments not sent yet.
  absl::Status Rest() { return SendBelow(segs_.count()); }

 private:
  absl::Status SendBelow(uint32_t end) {
    for (; sent_ < end; ++sent_) {
      const std::byte* p = data_ + segs_.offset(sent_);
      const int64_t len = segs_.size(sent_);
      TESSEL_RETURN_IF_ERROR(final_ ? ctx_.SendFinal(dst_, phase_, step_, sent_, p, len)
                                    : ctx_.Send(dst_, phase_, step_, sent_, p, len, true));
    }
    return absl::OkStatus();
  }

  CallContext& ctx_;
  const int64_t dst_;
  const uint8_t phase_;
  const uint32_t step_;
  const std::byte* data_;
  const Segments segs_;
  const bool final_;
  uint32_t sent_ = 0;
};

// The most segments of any chunk of `offsets` (elements of `width` bytes).
uint32_t MaxSegments(const CallContext& ctx, const std::vector<int64_t>& offsets) {
  uint32_t most = 0;
  for (size_t c = 0; c + 1 < offsets.size(); ++c) {
    most = std::max(
        most, Segments{(offsets[c + 1] - offsets[c]) * ctx.width(), ctx.segment_bytes()}.count());
  }
  return most;
}

// The loop both rings share, over `members` (`buf` cut at element `offsets`, members.size() + 1
// entries). Step 0 sends `step0_bytes` from `step0` to the right (and, if `step0_copy_to` is not
// null, copies them there while the first messages are in flight); at step s member r receives
// chunk r-s-`shift` from the left, hands each segment to `take(chunk, segment offset, message,
// destination in buf, bytes)`, and forwards the destination to the right at step s+1 (every
// step but the last). The loops run segment by segment: every step of segment g before segment
// g+1 (NCCL's order), so each link carries a few segments at a time (PacedSend). Forwarded
// regions must stay unchanged until the next WaitSendsReleased().
template <typename Take>
absl::Status RingSteps(CallContext& ctx, const std::vector<int64_t>& members, int64_t me,
                       std::byte* buf, const std::vector<int64_t>& offsets, uint8_t phase,
                       const std::byte* step0, int64_t step0_bytes, int64_t shift,
                       std::byte* step0_copy_to, Take take) {
  const int64_t n = static_cast<int64_t>(members.size());
  const int64_t w = ctx.width();
  const int64_t right = members[Mod(me + 1, n)];
  const int64_t left = members[Mod(me - 1, n)];
  PacedSend first(ctx, right, phase, 0, step0, step0_bytes);
  TESSEL_RETURN_IF_ERROR(first.Pace(0));
  if (step0_copy_to != nullptr) std::memcpy(step0_copy_to, step0, step0_bytes);
  const uint32_t segments = MaxSegments(ctx, offsets);
  for (uint32_t g = 0; g < segments; ++g) {
    TESSEL_RETURN_IF_ERROR(first.Pace(g));
    for (int64_t s = 0; s + 1 < n; ++s) {
      const int64_t c = Mod(me - s - shift, n);
      const Segments segs{(offsets[c + 1] - offsets[c]) * w, ctx.segment_bytes()};
      if (g >= segs.count()) continue;
      std::byte* p = buf + offsets[c] * w + segs.offset(g);
      const int64_t len = segs.size(g);
      TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(left, phase, static_cast<uint32_t>(s), g, len));
      take(c, segs.offset(g), m.data(), p, len);
      if (s + 2 < n) {
        TESSEL_RETURN_IF_ERROR(
            ctx.Send(right, phase, static_cast<uint32_t>(s + 1), g, p, len, /*stable=*/true));
      }
    }
  }
  return first.Rest();
}

// Ring reduce-scatter over `members` from `src` into `buf` (both cut at element `offsets`,
// members.size() + 1 entries; `src` may equal `buf`, else it must stay unchanged until the
// call finishes). At step s member r sends chunk r-s-1 (step 0 straight from `src`) and folds
// the received chunk r-s-2 as (received op own) into `buf`, forwarding it at step s+1,
// segment by segment across steps (RingSteps). Afterwards member r holds chunk r folded over
// all members: ((x[r+1] op x[r+2]) op ...) op x[r]. Every chunk of `buf` but r-1 is written.
absl::Status RingReduceScatter(CallContext& ctx, const std::vector<int64_t>& members, int64_t me,
                               const std::byte* src, std::byte* buf,
                               const std::vector<int64_t>& offsets, uint8_t phase) {
  const int64_t n = static_cast<int64_t>(members.size());
  if (n == 1) return absl::OkStatus();
  const int64_t w = ctx.width();
  const int64_t first = Mod(me - 1, n);
  return RingSteps(
      ctx, members, me, buf, offsets, phase, src + offsets[first] * w,
      (offsets[first + 1] - offsets[first]) * w, /*shift=*/2, nullptr,
      [&](int64_t c, int64_t at, const std::byte* received, std::byte* p, int64_t len) {
        Combine(ctx.reduce_kind(), ctx.dtype(), received, src + offsets[c] * w + at, p, len / w);
      });
}

// Ring all-gather: member r starts with chunk r and at step s forwards chunk r-s, receiving
// chunk r-s-1, segment by segment across steps (RingSteps). `own`: where step 0 sends chunk r
// from (null: from `buf`; otherwise a region that stays unchanged until the call finishes,
// copied into chunk r while the first messages are in flight).
absl::Status RingAllGather(CallContext& ctx, const std::vector<int64_t>& members, int64_t me,
                           std::byte* buf, const std::vector<int64_t>& offsets, uint8_t phase,
                           const std::byte* own = nullptr) {
  const int64_t n = static_cast<int64_t>(members.size());
  if (n == 1) return absl::OkStatus();
  const int64_t w = ctx.width();
  std::byte* mine = buf + offsets[me] * w;
  return RingSteps(ctx, members, me, buf, offsets, phase, own != nullptr ? own : mine,
                   (offsets[me + 1] - offsets[me]) * w, /*shift=*/1,
                   own != nullptr && own != mine ? mine : nullptr,
                   [](int64_t, int64_t, const std::byte* received, std::byte* p, int64_t len) {
                     std::memcpy(p, received, len);
                   });
}

// Recursive-doubling all-gather for a power-of-two group, in place on `buf` (n blocks of
// `block_bytes`, block r already holding member r's input). At round k member r holds the 2^k
// blocks [r & ~(2^k - 1), +2^k) and exchanges them with member r ^ 2^k, which holds the adjacent
// 2^k blocks: log2(n) hops instead of the ring's n-1, the same bytes per member. Sent regions are
// never written again in the call, so they go zero-copy. Source: Thakur, Rabenseifner, Gropp
// (2005), MPICH's recursive-doubling allgather.
absl::Status RecursiveDoublingAllGather(CallContext& ctx, const std::vector<int64_t>& members,
                                        int64_t me, std::byte* buf, int64_t block_bytes,
                                        uint8_t phase) {
  const int64_t n = static_cast<int64_t>(members.size());
  uint32_t round = 0;
  for (int64_t mask = 1; mask < n; mask <<= 1, ++round) {
    const int64_t partner = me ^ mask;
    const int64_t mine = me & ~(mask - 1);
    const int64_t theirs = partner & ~(mask - 1);
    PacedSend out(ctx, members[partner], phase, round, buf + mine * block_bytes,
                  mask * block_bytes);
    std::byte* in = buf + theirs * block_bytes;
    const Segments segs{mask * block_bytes, ctx.segment_bytes()};
    for (uint32_t g = 0; g < segs.count(); ++g) {
      TESSEL_RETURN_IF_ERROR(out.Pace(g));
      TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(members[partner], phase, round, g, segs.size(g)));
      std::memcpy(in + segs.offset(g), m.data(), segs.size(g));
    }
    TESSEL_RETURN_IF_ERROR(out.Rest());
  }
  return absl::OkStatus();
}

// Recursive doubling all-reduce in place on `buf` (one message per round). With p the largest
// power of two <= n and rem = n - p, members 2i and 2i+1 (i < rem) first fold into 2i+1
// (x[2i] op x[2i+1]); the p survivors exchange whole buffers for log2(p) rounds, each partner
// computing (lower op higher); then 2i+1 sends the result back to 2i.
absl::Status RecursiveDoubling(CallContext& ctx, const std::vector<int64_t>& members, int64_t me,
                               std::byte* buf, int64_t count, uint8_t phase) {
  const int64_t n = static_cast<int64_t>(members.size());
  if (n == 1 || count == 0) return absl::OkStatus();
  const int64_t bytes = count * ctx.width();
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  const int64_t rem = n - p;
  const ReduceKind kind = ctx.reduce_kind();
  const DType dtype = ctx.dtype();
  int64_t new_index;
  if (me < 2 * rem) {
    if (me % 2 == 0) {
      TESSEL_RETURN_IF_ERROR(ctx.Send(members[me + 1], phase, 0, 0, buf, bytes, false));
      new_index = -1;
    } else {
      TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(members[me - 1], phase, 0, 0, bytes));
      Combine(kind, dtype, m.data(), buf, buf, count);
      new_index = me / 2;
    }
  } else {
    new_index = me - rem;
  }
  uint32_t round = 1;
  if (new_index >= 0) {
    for (int64_t mask = 1; mask < p; mask <<= 1, ++round) {
      const int64_t partner_new = new_index ^ mask;
      const int64_t partner = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
      TESSEL_RETURN_IF_ERROR(ctx.Send(members[partner], phase, round, 0, buf, bytes, false));
      TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(members[partner], phase, round, 0, bytes));
      if (partner_new < new_index) {
        Combine(kind, dtype, m.data(), buf, buf, count);
      } else {
        Combine(kind, dtype, buf, m.data(), buf, count);
      }
    }
  } else {
    for (int64_t mask = 1; mask < p; mask <<= 1) ++round;
  }
  if (me < 2 * rem) {
    if (me % 2 == 1) {
      TESSEL_RETURN_IF_ERROR(ctx.Send(members[me - 1], phase, round, 0, buf, bytes, false));
    } else {
      TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(members[me + 1], phase, round, 0, bytes));
      std::memcpy(buf, m.data(), bytes);
    }
  }
  return absl::OkStatus();
}

// Direct all-reduce of `src` into `buf` (`src` may equal `buf`, else it must stay unchanged
// until the call finishes), for groups of n >= 3 at moderate sizes: 2 hops instead of the
// ring's 2(n-1), the same bytes per member (2 (n-1)/n of the buffer). Chunk j (EvenOffsets)
// goes from every member straight to member j, which folds it in group order
// ((x[0] op x[1]) op ...) op x[n-1] segment by segment and sends each final segment straight
// to every other member.
absl::Status DirectAllReduce(CallContext& ctx, const std::vector<int64_t>& members, int64_t me,
                             const std::byte* src, std::byte* buf, int64_t count, uint8_t rs_phase,
                             uint8_t ag_phase) {
  const int64_t n = static_cast<int64_t>(members.size());
  const int64_t w = ctx.width();
  const std::vector<int64_t> offsets = EvenOffsets(count, n);
  auto chunk_bytes = [&](int64_t c) { return (offsets[c + 1] - offsets[c]) * w; };
  for (int64_t d = 1; d < n; ++d) {
    const int64_t j = Mod(me + d, n);
    TESSEL_RETURN_IF_ERROR(
        SendSegments(ctx, members[j], rs_phase, 0, src + offsets[j] * w, chunk_bytes(j)));
  }
  const Segments segs{chunk_bytes(me), ctx.segment_bytes()};
  for (uint32_t g = 0; g < segs.count(); ++g) {
    const int64_t at = offsets[me] * w + segs.offset(g);
    const int64_t len = segs.size(g);
    std::byte* acc = buf + at;
    const std::byte* own = src + at;
    std::unique_ptr<PooledBuffer> own_copy;
    if (own == acc && me >= 2) {
      // In place: the folds before this member's turn overwrite its own block.
      own_copy = ctx.pool().Acquire(len);
      std::memcpy(own_copy->mutable_data(), own, len);
      own = own_copy->data();
    }
    Message first_message;  // keeps the first block alive until the first fold
    const std::byte* first = nullptr;
    for (int64_t j = 0; j < n; ++j) {
      const std::byte* block = own;
      Message m;
      if (j != me) {
        TESSEL_ASSIGN_OR_RETURN(m, ctx.Recv(members[j], rs_phase, 0, g, len));
        block = m.data();
      }
      if (j == 0) {
        first = block;
        first_message = std::move(m);
      } else {
        Combine(ctx.reduce_kind(), ctx.dtype(), j == 1 ? first : acc, block, acc, len / w);
      }
    }
    for (int64_t d = 1; d < n; ++d) {
      TESSEL_RETURN_IF_ERROR(ctx.SendFinal(members[Mod(me + d, n)], ag_phase, 0, g, acc, len));
    }
  }
  // The all-gather writes the other chunks, which an in-place call sent zero-copy above.
  TESSEL_RETURN_IF_ERROR(ctx.WaitSendsReleased());
  for (int64_t d = 1; d < n; ++d) {
    const int64_t j = Mod(me - d, n);
    TESSEL_RETURN_IF_ERROR(
        RecvSegments(ctx, members[j], ag_phase, 0, buf + offsets[j] * w, chunk_bytes(j)));
  }
  return absl::OkStatus();
}

// Ring or recursive doubling over `members` of `src` into `buf` (`src` may equal `buf`, else it
// must stay unchanged until the call finishes).
absl::Status FlatAllReduce(CallContext& ctx, const std::vector<int64_t>& members, int64_t me,
                           const std::byte* src, std::byte* buf, int64_t count, uint8_t rs_phase,
                           uint8_t ag_phase, uint8_t rd_phase) {
  const int64_t n = static_cast<int64_t>(members.size());
  const int64_t bytes = count * ctx.width();
  if (n == 1 || count == 0 || bytes < ctx.options().small_message_bytes) {
    if (src != buf && bytes > 0) std::memcpy(buf, src, bytes);
    if (n == 1 || count == 0) return absl::OkStatus();
    return RecursiveDoubling(ctx, members, me, buf, count, rd_phase);
  }
  if (n >= 3 && bytes < ctx.options().direct_max_bytes) {
    return DirectAllReduce(ctx, members, me, src, buf, count, rs_phase, ag_phase);
  }
  const std::vector<int64_t> offsets = EvenOffsets(count, n);
  // No copy of `src` into `buf` first: the reduce-scatter reads `src` and writes every chunk
  // but r-1, which the all-gather then receives. The all-gather starts when the reduce-scatter
  // is done: sending each segment of this member's chunk as soon as it is reduced overlaps the
  // two, but the receiver takes those segments only after its own reduce-scatter, so up to a
  // whole chunk waits on the link (over ipc: overflows the shared-memory slots into the
  // socket). Measured slower at 2 ranks and 16-64 MiB (docs/PERFORMANCE.md, "Paced segments").
  TESSEL_RETURN_IF_ERROR(RingReduceScatter(ctx, members, me, src, buf, offsets, rs_phase));
  // The all-gather overwrites the other chunks, which this member sent zero-copy during the
  // reduce-scatter.
  TESSEL_RETURN_IF_ERROR(ctx.WaitSendsReleased());
  return RingAllGather(ctx, members, me, buf, offsets, ag_phase);
}

// Hierarchical all-gather of a group spanning slices with k >= 2 members in each (`slices` from
// SplitBySlice): (1) each member sends its block to the members with its local index in the
// other slices (DCN: S - 1 blocks per member, the least that must cross, and what the cost
// model's hierarchical all-gather counts); (2) each member sends the S blocks it then holds to
// its k - 1 slice mates (ICI). The flat direct and ring forms send k times as much over DCN.
// Every block lands at its group position, so the result is the flat one, bit for bit.
absl::Status HierarchicalAllGather(CallContext& ctx, const GroupView& view,
                                   const std::vector<std::vector<int64_t>>& slices,
                                   int64_t my_slice, int64_t my_local, const std::byte* in,
                                   std::byte* out, int64_t bytes) {
  auto block = [&](int64_t device) {
    const auto it = std::find(view.members.begin(), view.members.end(), device);
    return out + (it - view.members.begin()) * bytes;
  };
  const int64_t num_slices = static_cast<int64_t>(slices.size());
  const std::vector<int64_t>& slice = slices[my_slice];
  for (int64_t t = 0; t < num_slices; ++t) {
    if (t == my_slice) continue;
    TESSEL_RETURN_IF_ERROR(SendSegments(ctx, slices[t][my_local], kPhaseCrossGather, 0, in, bytes));
  }
  std::byte* mine = out + view.index * bytes;
  if (mine != in) std::memcpy(mine, in, bytes);
  for (int64_t t = 0; t < num_slices; ++t) {
    if (t == my_slice) continue;
    const int64_t peer = slices[t][my_local];
    TESSEL_RETURN_IF_ERROR(RecvSegments(ctx, peer, kPhaseCrossGather, 0, block(peer), bytes));
  }
  const int64_t k = static_cast<int64_t>(slice.size());
  for (int64_t l = 0; l < k; ++l) {
    if (l == my_local) continue;
    for (int64_t t = 0; t < num_slices; ++t) {
      TESSEL_RETURN_IF_ERROR(SendSegments(ctx, slice[l], kPhaseSliceGather,
                                          static_cast<uint32_t>(t), block(slices[t][my_local]),
                                          bytes));
    }
  }
  for (int64_t l = 0; l < k; ++l) {
    if (l == my_local) continue;
    for (int64_t t = 0; t < num_slices; ++t) {
      TESSEL_RETURN_IF_ERROR(RecvSegments(ctx, slice[l], kPhaseSliceGather,
                                          static_cast<uint32_t>(t), block(slices[t][l]), bytes));
    }
  }
  return absl::OkStatus();
}

// Hierarchical reduce-scatter of a group spanning slices with k >= 2 members in each: (1) inside
// the slice, member l receives from every slice mate the S chunks owned by the members with local
// index l (one per slice) and folds them in slice order (ICI); (2) it sends each of those slice
// sums to its owner in the other slices and folds what it receives for its own chunk in slice
// order (DCN: S - 1 chunks per member, as the cost model's hierarchical reduce-scatter counts;
// the flat forms send k times as much across). Every chunk is reduced by its owner alone, in an
// order fixed by the group and the device map.
absl::Status HierarchicalReduceScatter(CallContext& ctx, const GroupView& view,
                                       const std::vector<std::vector<int64_t>>& slices,
                                       int64_t my_slice, int64_t my_local, const std::byte* in,
                                       std::byte* out, int64_t element_count) {
  const int64_t bytes = element_count * ctx.width();
  auto chunk = [&](int64_t device) {
    const auto it = std::find(view.members.begin(), view.members.end(), device);
    return in + (it - view.members.begin()) * bytes;
  };
  const int64_t num_slices = static_cast<int64_t>(slices.size());
  const std::vector<int64_t>& slice = slices[my_slice];
  const int64_t k = static_cast<int64_t>(slice.size());
  for (int64_t l = 0; l < k; ++l) {
    if (l == my_local) continue;
    for (int64_t t = 0; t < num_slices; ++t) {
      TESSEL_RETURN_IF_ERROR(SendSegments(ctx, slice[l], kPhaseSliceReduce,
                                          static_cast<uint32_t>(t), chunk(slices[t][l]), bytes));
    }
  }
  // sums[t]: this slice's sum of the chunk owned by member my_local of slice t.
  std::unique_ptr<PooledBuffer> sums = ctx.pool().Acquire(bytes * num_slices);
  std::unique_ptr<PooledBuffer> received = ctx.pool().Acquire(bytes);
  for (int64_t t = 0; t < num_slices; ++t) {
    std::byte* acc = sums->mutable_data() + t * bytes;
    for (int64_t l = 0; l < k; ++l) {
      const std::byte* block = chunk(slices[t][my_local]);
      if (l != my_local) {
        TESSEL_RETURN_IF_ERROR(RecvSegments(ctx, slice[l], kPhaseSliceReduce,
                                            static_cast<uint32_t>(t), received->mutable_data(),
                                            bytes));
        block = received->data();
      }
      if (l == 0) {
        std::memcpy(acc, block, bytes);
      } else {
        Combine(ctx.reduce_kind(), ctx.dtype(), acc, block, acc, element_count);
      }
    }
  }
  for (int64_t t = 0; t < num_slices; ++t) {
    if (t == my_slice) continue;
    TESSEL_RETURN_IF_ERROR(SendSegments(ctx, slices[t][my_local], kPhaseCrossReduce, 0,
                                        sums->data() + t * bytes, bytes));
  }
  std::unique_ptr<PooledBuffer> result = ctx.pool().Acquire(bytes);
  for (int64_t t = 0; t < num_slices; ++t) {
    const std::byte* block = sums->data() + my_slice * bytes;
    if (t != my_slice) {
      TESSEL_RETURN_IF_ERROR(RecvSegments(ctx, slices[t][my_local], kPhaseCrossReduce, 0,
                                          received->mutable_data(), bytes));
      block = received->data();
    }
    if (t == 0) {
      std::memcpy(result->mutable_data(), block, bytes);
    } else {
      Combine(ctx.reduce_kind(), ctx.dtype(), result->data(), block, result->mutable_data(),
              element_count);
    }
  }
  // The sends read `in` and `sums` in place, and `out` may alias `in`.
  TESSEL_RETURN_IF_ERROR(ctx.WaitSendsReleased());
  std::memcpy(out, result->data(), bytes);
  return absl::OkStatus();
}

}  // namespace

absl::Status RunAllReduce(CallContext& ctx, const GroupView& view, const DeviceMap& map,
                          const void* input, void* output, int64_t element_count) {
  const int64_t bytes = element_count * ctx.width();
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  if (view.size() == 1 || element_count == 0) {
    if (in != out && bytes > 0) std::memcpy(out, in, bytes);
    return absl::OkStatus();
  }
  std::vector<std::vector<int64_t>> slices;
  int64_t my_slice = 0;
  int64_t my_local = 0;
  if (ctx.options().hierarchical_all_reduce &&
      SplitBySlice(view, map, &slices, &my_slice, &my_local)) {
    // Reduce-scatter inside the slice (ICI), all-reduce of this member's chunk across slices
    // (DCN, 1/k of the data), all-gather inside the slice.
    const int64_t k = static_cast<int64_t>(slices[0].size());
    const std::vector<int64_t> offsets = EvenOffsets(element_count, k);
    const std::vector<int64_t>& slice = slices[my_slice];
    TESSEL_RETURN_IF_ERROR(
        RingReduceScatter(ctx, slice, my_local, in, out, offsets, kPhaseReduceScatter));
    std::vector<int64_t> column;
    for (const auto& s : slices) column.push_back(s[my_local]);
    std::byte* mine = out + offsets[my_local] * ctx.width();
    TESSEL_RETURN_IF_ERROR(
        FlatAllReduce(ctx, column, my_slice, mine, mine, offsets[my_local + 1] - offsets[my_local],
                      kPhaseCrossReduceScatter, kPhaseCrossAllGather, kPhaseCrossDoubling));
    TESSEL_RETURN_IF_ERROR(ctx.WaitSendsReleased());
    return RingAllGather(ctx, slice, my_local, out, offsets, kPhaseAllGather);
  }
  return FlatAllReduce(ctx, view.members, view.index, in, out, element_count, kPhaseReduceScatter,
                       kPhaseAllGather, kPhaseCrossDoubling);
}

absl::Status RunAllGather(CallContext& ctx, const GroupView& view, const DeviceMap& map,
                          const void* input, void* output, int64_t element_count) {
  const int64_t n = view.size();
  const int64_t me = view.index;
  const int64_t bytes = element_count * ctx.width();
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  std::byte* mine = out + me * bytes;
  if (bytes == 0) return absl::OkStatus();
  if (n == 1) {
    if (mine != in) std::memcpy(mine, in, bytes);
    return absl::OkStatus();
  }
  std::vector<std::vector<int64_t>> slices;
  int64_t my_slice = 0;
  int64_t my_local = 0;
  if (ctx.options().hierarchical_all_gather &&
      SplitBySlice(view, map, &slices, &my_slice, &my_local)) {
    return HierarchicalAllGather(ctx, view, slices, my_slice, my_local, in, out, bytes);
  }
  const int64_t total = bytes * n;
  if (total < ctx.options().small_message_bytes ||
      (n >= 3 && total < ctx.options().direct_max_bytes)) {
    // Direct: this member's block goes to every other member at once (one hop), straight from
    // the input; it is copied into the output while the messages are in flight.
    for (int64_t d = 1; d < n; ++d) {
      TESSEL_RETURN_IF_ERROR(SendSegments(ctx, view.members[Mod(me + d, n)], 0, 0, in, bytes));
    }
    if (mine != in) std::memcpy(mine, in, bytes);
    for (int64_t d = 1; d < n; ++d) {
      const int64_t j = Mod(me - d, n);
      TESSEL_RETURN_IF_ERROR(RecvSegments(ctx, view.members[j], 0, 0, out + j * bytes, bytes));
    }
    return absl::OkStatus();
  }
  // Power-of-two groups of 8 or more: recursive doubling saves n-1-log2(n) hops (4 at n = 8),
  // which outweighs losing the ring's pipelining across steps; at n = 4 it saves one hop and
  // measured no better than the ring (docs/transport.md).
  if (n >= 8 && (n & (n - 1)) == 0) {
    if (mine != in) std::memcpy(mine, in, bytes);
    return RecursiveDoublingAllGather(ctx, view.members, me, out, bytes, kPhaseAllGather);
  }
  // The ring sends this member's block straight from the input and copies it into the output
  // while the first messages are in flight.
  return RingAllGather(ctx, view.members, me, out, BlockOffsets(element_count, n), kPhaseAllGather,
                       in);
}

absl::Status RunReduceScatter(CallContext& ctx, const GroupView& view, const DeviceMap& map,
                              const void* input, void* output, int64_t element_count) {
  const int64_t n = view.size();
  const int64_t me = view.index;
  const int64_t bytes = element_count * ctx.width();
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  if (bytes == 0) return absl::OkStatus();
  if (n == 1) {
    std::memcpy(out, in, bytes);
    return absl::OkStatus();
  }
  std::vector<std::vector<int64_t>> slices;
  int64_t my_slice = 0;
  int64_t my_local = 0;
  if (ctx.options().hierarchical_reduce_scatter &&
      SplitBySlice(view, map, &slices, &my_slice, &my_local)) {
    return HierarchicalReduceScatter(ctx, view, slices, my_slice, my_local, in, out, element_count);
  }
  if (bytes * n < ctx.options().small_message_bytes) {
    // Direct: block j goes to member j, which folds in group order.
    for (int64_t d = 1; d < n; ++d) {
      const int64_t j = Mod(me + d, n);
      TESSEL_RETURN_IF_ERROR(
          ctx.Send(view.members[j], 0, 0, 0, in + j * bytes, bytes, /*stable=*/true));
    }
    const std::byte* mine = in + me * bytes;
    for (int64_t j = 0; j < n; ++j) {
      const std::byte* block = mine;
      Message m;
      if (j != me) {
        TESSEL_ASSIGN_OR_RETURN(m, ctx.Recv(view.members[j], 0, 0, 0, bytes));
        block = m.data();
      }
      if (j == 0) {
        std::memcpy(out, block, bytes);
      } else {
        Combine(ctx.reduce_kind(), ctx.dtype(), out, block, out, element_count);
      }
    }
    return absl::OkStatus();
  }
  // Ring from the input into a pooled work buffer; member r ends holding block r.
  std::unique_ptr<PooledBuffer> work = ctx.pool().Acquire(bytes * n);
  absl::Status status = RingReduceScatter(ctx, view.members, me, in, work->mutable_data(),
                                          BlockOffsets(element_count, n), kPhaseReduceScatter);
  // The work buffer goes back to the pool: the link must be done reading it.
  absl::Status released = ctx.WaitSendsReleased();
  TESSEL_RETURN_IF_ERROR(status);
  TESSEL_RETURN_IF_ERROR(released);
  std::memcpy(out, work->data() + me * bytes, bytes);
  return absl::OkStatus();
}

absl::Status RunAllToAll(CallContext& ctx, const GroupView& view, const void* input, void* output,
                         int64_t element_count) {
  const int64_t n = view.size();
  const int64_t me = view.index;
  const int64_t bytes = element_count * ctx.width();
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  if (bytes == 0) return absl::OkStatus();
  // Block j to member j, segment by segment: segment g to every member, then segment g from
  // every member, each send paced (PacedSend) against the receives.
  std::vector<PacedSend> sends;
  sends.reserve(n);
  for (int64_t d = 1; d < n; ++d) {
    const int64_t j = Mod(me + d, n);
    sends.emplace_back(ctx, view.members[j], 0, 0, in + j * bytes, bytes);
    TESSEL_RETURN_IF_ERROR(sends.back().Pace(0));
  }
  std::memcpy(out + me * bytes, in + me * bytes, bytes);
  const Segments segs{bytes, ctx.segment_bytes()};
  for (uint32_t g = 0; g < segs.count(); ++g) {
    for (PacedSend& send : sends) TESSEL_RETURN_IF_ERROR(send.Pace(g));
    for (int64_t d = 1; d < n; ++d) {
      const int64_t j = Mod(me - d, n);
      TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(view.members[j], 0, 0, g, segs.size(g)));
      std::memcpy(out + j * bytes + segs.offset(g), m.data(), segs.size(g));
    }
  }
  for (PacedSend& send : sends) TESSEL_RETURN_IF_ERROR(send.Rest());
  return absl::OkStatus();
}

absl::Status RunCollectivePermute(CallContext& ctx, int64_t source, int64_t target,
                                  const void* input, void* output, int64_t element_count) {
  const int64_t bytes = element_count * ctx.width();
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  if (bytes == 0) return absl::OkStatus();
  const int64_t me = ctx.device();
  const bool send = target >= 0 && target != me;
  PacedSend out_send(ctx, target, 0, 0, in, send ? bytes : 0);
  TESSEL_RETURN_IF_ERROR(out_send.Pace(0));
  if (source < 0) {
    std::memset(out, 0, bytes);
  } else if (source == me) {
    if (in != out) std::memcpy(out, in, bytes);
  } else {
    // Paced against the receives: in a cycle of pairs every member sends and receives alike.
    const Segments segs{bytes, ctx.segment_bytes()};
    for (uint32_t g = 0; g < segs.count(); ++g) {
      TESSEL_RETURN_IF_ERROR(out_send.Pace(g));
      TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(source, 0, 0, g, segs.size(g)));
      std::memcpy(out + segs.offset(g), m.data(), segs.size(g));
    }
  }
  return out_send.Rest();
}

absl::Status RunBroadcast(CallContext& ctx, const GroupView& view, int64_t root_index, void* buffer,
                          int64_t element_count) {
  const int64_t n = view.size();
  const int64_t bytes = element_count * ctx.width();
  auto* buf = static_cast<std::byte*>(buffer);
  if (n == 1 || bytes == 0) return absl::OkStatus();
  const int64_t rel = Mod(view.index - root_index, n);
  auto member = [&](int64_t r) { return view.members[Mod(r + root_index, n)]; };
  if (bytes < ctx.options().small_message_bytes) {
    // Binomial tree (MPICH): receive from rel - mask at the lowest set bit, then send to
    // rel + mask for every smaller mask.
    int64_t mask = 1;
    while (mask < n) {
      if (rel & mask) {
        TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(member(rel - mask), 0, 0, 0, bytes));
        std::memcpy(buf, m.data(), bytes);
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (rel + mask < n) {
        TESSEL_RETURN_IF_ERROR(ctx.Send(member(rel + mask), 0, 0, 0, buf, bytes, true));
      }
    }
    return absl::OkStatus();
  }
  // Pipelined chain root -> rel 1 -> rel 2 ...: each segment is forwarded as it arrives.
  const Segments segs{bytes, ctx.segment_bytes()};
  for (uint32_t g = 0; g < segs.count(); ++g) {
    std::byte* p = buf + segs.offset(g);
    if (rel > 0) {
      TESSEL_ASSIGN_OR_RETURN(Message m, ctx.Recv(member(rel - 1), 0, 0, g, segs.size(g)));
      std::memcpy(p, m.data(), segs.size(g));
    }
    if (rel + 1 < n) {
      TESSEL_RETURN_IF_ERROR(ctx.Send(member(rel + 1), 0, 0, g, p, segs.size(g), true));
    }
  }
  return absl::OkStatus();
}

absl::Status RunBarrier(CallContext& ctx, const GroupView& view) {
  const int64_t n = view.size();
  uint32_t round = 0;
  for (int64_t distance = 1; distance < n; distance <<= 1, ++round) {
    TESSEL_RETURN_IF_ERROR(
        ctx.Send(view.members[Mod(view.index + distance, n)], 0, round, 0, nullptr, 0, false));
    TESSEL_ASSIGN_OR_RETURN(Message m,
                            ctx.Recv(view.members[Mod(view.index - distance, n)], 0, round, 0, 0));
  }
  return absl::OkStatus();
}

}  // namespace tessel::transport::internal
