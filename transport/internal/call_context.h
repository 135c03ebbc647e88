// One device's view of one collective call: its identity (device, sequence number, signature),
// typed point-to-point messages to the other members, traffic accounting, and the error text.
//
//   CallContext ctx(host, /*device=*/2, /*sequence=*/7, signature, &groups, nullptr);
//   TESSEL_RETURN_IF_ERROR(ctx.Begin());
//   absl::Status s = ctx.Send(/*dst_device=*/3, /*phase=*/0, /*step=*/0, /*segment=*/0,
//                             data, bytes, /*stable=*/true);
//   ...
//   return ctx.Finish(s);   // waits for zero-copy sends, names the call in any error
#ifndef TESSEL_TRANSPORT_INTERNAL_CALL_CONTEXT_H_
#define TESSEL_TRANSPORT_INTERNAL_CALL_CONTEXT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessel/transport/communicator.h"
#include "tessel/transport/internal/host_link.h"
#include "tessel/transport/internal/host_state.h"
#include "tessel/transport/internal/mailbox.h"
#include "tessel/transport/internal/wire.h"

namespace tessel::transport::internal {

class CallContext {
 public:
  // `groups` / `pairs` (either may be null) are only read to describe the call in errors and
  // must outlive the context.
  CallContext(HostState& host, int64_t device, uint64_t sequence, const CallSignature& signature,
              const ReplicaGroups* groups, const SourceTargetPairs* pairs);
  ~CallContext();
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;

  // Counts the call and registers it with the mailbox (which checks early arrivals).
  [[nodiscard]] absl::Status Begin();
  // Waits for zero-copy sends, leaves the call; on error prefixes the call's description,
  // fails the job (telling the other hosts) and returns the annotated status.
  [[nodiscard]] absl::Status Finish(absl::Status status);

  // Sends payload[0, bytes) to `dst_device` tagged (phase, step, segment). `stable`: the
  // region stays unchanged until WaitSendsReleased() or Finish(), so the link may send it
  // zero-copy; otherwise it is copied. Same-host destinations get an in-memory copy.
  [[nodiscard]] absl::Status Send(int64_t dst_device, uint8_t phase, uint32_t step,
                                  uint32_t segment, const void* payload, size_t bytes, bool stable);
  // Waits for the message tagged (phase, step, segment) from `src_device`. Errors: the job's
  // failure; kFailedPrecondition if its signature or size differ (names both sides);
  // kDeadlineExceeded naming the peer after collective_timeout.
  [[nodiscard]] absl::StatusOr<Message> Recv(int64_t src_device, uint8_t phase, uint32_t step,
                                             uint32_t segment, size_t expected_bytes);
  // Like Send with stable = true, for a region that stays unchanged until Finish(), not only
  // until the next WaitSendsReleased(): WaitSendsReleased() does not wait for these sends
  // (Finish() does), so a caller can overwrite the other regions it sent from while these are
  // still in flight.
  [[nodiscard]] absl::Status SendFinal(int64_t dst_device, uint8_t phase, uint32_t step,
                                       uint32_t segment, const void* payload, size_t bytes);
  // Waits until the link no longer reads any region sent with stable = true (SendFinal regions
  // excepted).
  [[nodiscard]] absl::Status WaitSendsReleased();

  const CallSignature& signature() const { return signature_; }
  DType dtype() const { return signature_.dtype; }
  int64_t width() const { return width_; }
  ReduceKind reduce_kind() const { return static_cast<ReduceKind>(signature_.reduce_kind); }
  const CommunicatorOptions& options() const { return host_.options(); }
  BufferPool& pool() { return host_.pool(); }
  int64_t device() const { return device_; }
  // Bytes per pipelined segment: pipeline_chunk_bytes rounded down to whole elements (>= 1).
  int64_t segment_bytes() const { return segment_bytes_; }

  // "all-reduce #7 on device 2 (host 1), replica_groups={{0,1,2,3}}".
  std::string Describe() const;

 private:
  // Send with the tracker of zero-copy sends to use (null: always copied).
  absl::Status SendTracked(int64_t dst_device, uint8_t phase, uint32_t step, uint32_t segment,
                           const void* payload, size_t bytes, SendTracker* tracker);
  // Waits for the zero-copy sends of `tracker`.
  absl::Status WaitReleased(SendTracker& tracker);

  HostState& host_;
  const int64_t device_;
  const uint64_t sequence_;
  const CallSignature signature_;
  const ReplicaGroups* groups_;
  const SourceTargetPairs* pairs_;
  const int64_t width_;
  const int64_t segment_bytes_;
  bool begun_ = false;
  bool finished_ = false;
  SendTracker tracker_;        // stable sends
  SendTracker final_tracker_;  // SendFinal
};

}  // namespace tessel::transport::internal

#endif  // TESSEL_TRANSPORT_INTERNAL_CALL_CONTEXT_H_
