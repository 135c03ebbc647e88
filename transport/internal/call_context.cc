#include "tessel/transport/internal/call_context.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tessel/core/status_macros.h"
#include "tessel/transport/internal/groups.h"

namespace tessel::transport::internal {

CallContext::CallContext(HostState& host, int64_t device, uint64_t sequence,
                         const CallSignature& signature, const ReplicaGroups* groups,
                         const SourceTargetPairs* pairs)
    : host_(host),
      device_(device),
      sequence_(sequence),
      signature_(signature),
      groups_(groups),
      pairs_(pairs),
      width_(ByteWidth(signature.dtype)),
      segment_bytes_(
          std::max<int64_t>(width_, host.options().pipeline_chunk_bytes / width_ * width_)) {}

CallContext::~CallContext() {
  // A context left without Finish() (never expected) must still not return while the link
  // reads the caller's buffers.
  if (!finished_) {
    const absl::Time deadline = absl::Now() + host_.options().collective_timeout;
    tracker_.WaitAllReleased(deadline);
    final_tracker_.WaitAllReleased(deadline);
  }
}

std::string CallContext::Describe() const {
  std::string out = absl::StrCat(CollectiveKindName(signature_.kind), " #", sequence_,
                                 " on device ", device_, " (host ", host_.rank(), ")");
  if (groups_ != nullptr) absl::StrAppend(&out, ", replica_groups=", GroupsToString(*groups_));
  if (pairs_ != nullptr) {
    absl::StrAppend(&out, ", source_target_pairs=", PairsToString(*pairs_));
  }
  return out;
}

absl::Status CallContext::Begin() {
  host_.stats().CountCall(signature_.kind);
  begun_ = true;
  return host_.mailbox().BeginCall(device_, sequence_, signature_);
}

absl::Status CallContext::Finish(absl::Status status) {
  absl::Status released = WaitReleased(tracker_);
  absl::Status final_released = WaitReleased(final_tracker_);
  if (status.ok()) status = released;
  if (status.ok()) status = final_released;
  if (begun_) host_.mailbox().EndCall(device_);
  finished_ = true;
  if (status.ok()) return status;
  absl::Status annotated(status.code(), absl::StrCat(Describe(), ": ", status.message()));
  host_.mailbox().Fail(annotated, /*broadcast=*/true);
  return annotated;
}

absl::Status CallContext::Send(int64_t dst_device, uint8_t phase, uint32_t step, uint32_t segment,
                               const void* payload, size_t bytes, bool stable) {
  return SendTracked(dst_device, phase, step, segment, payload, bytes,
                     stable ? &tracker_ : nullptr);
}

absl::Status CallContext::SendFinal(int64_t dst_device, uint8_t phase, uint32_t step,
                                    uint32_t segment, const void* payload, size_t bytes) {
  return SendTracked(dst_device, phase, step, segment, payload, bytes, &final_tracker_);
}

absl::Status CallContext::SendTracked(int64_t dst_device, uint8_t phase, uint32_t step,
                                      uint32_t segment, const void* payload, size_t bytes,
                                      SendTracker* tracker) {
  WireHeader header;
  header.type = MessageType::kData;
  header.channel = Channel::kCollective;
  header.sequence = sequence_;
  header.src = device_;
  header.dst = dst_device;
  header.src_host = static_cast<int32_t>(host_.rank());
  header.phase = phase;
  header.step = step;
  header.segment = segment;
  header.signature = signature_;
  header.payload_bytes = bytes;
  const LinkClass link_class = host_.Classify(device_, dst_device);
  host_.stats().Record(signature_.kind, link_class, static_cast<int64_t>(bytes));
  if (link_class == LinkClass::kLocal) {
    Message message;
    message.header = header;
    if (bytes > 0) {
      std::unique_ptr<PooledBuffer> buffer = host_.pool().Acquire(bytes);
      std::memcpy(buffer->mutable_data(), payload, bytes);
      message.payload = std::move(buffer);
    }
    host_.mailbox().Deliver(std::move(message));
    return absl::OkStatus();
  }
  HostLink* link = host_.link();
  const bool zero_copy = tracker != nullptr && bytes >= link->zero_copy_min_bytes();
  return link->Send(host_.host_of(dst_device), header, payload, bytes,
                    zero_copy ? tracker : nullptr,
                    absl::Now() + host_.options().collective_timeout);
}

absl::StatusOr<Message> CallContext::Recv(int64_t src_device, uint8_t phase, uint32_t step,
                                          uint32_t segment, size_t expected_bytes) {
  const MailKey key{Channel::kCollective, device_, src_device, sequence_, phase, step, segment};
  const absl::Duration timeout = host_.options().collective_timeout;
  absl::StatusOr<Message> message =
      host_.mailbox().Take(key, host_.host_of(src_device), absl::Now() + timeout);
  if (!message.ok()) {
    if (absl::IsDeadlineExceeded(message.status()) && host_.mailbox().failure().ok()) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "no message from device %d (host %d) for %s (phase %d, step %d, segment %d): the "
          "peer is alive but has not reached this call, or is stuck",
          src_device, host_.host_of(src_device), absl::FormatDuration(timeout), phase, step,
          segment));
    }
    return message.status();
  }
  const WireHeader& h = message->header;
  if (!(h.signature == signature_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("collective mismatch at call #", sequence_, ": device ", device_, " (host ",
                     host_.rank(), ") called ", signature_.ToString(), " but device ", src_device,
                     " (host ", h.src_host, ") called ", h.signature.ToString()));
  }
  if (message->size() != expected_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collective mismatch at call #", sequence_, ": device ", src_device, " (host ", h.src_host,
        ") sent ", message->size(), " bytes in phase ", phase, " step ", step, " segment ", segment,
        ", device ", device_, " expected ", expected_bytes));
  }
  return message;
}

absl::Status CallContext::WaitSendsReleased() { return WaitReleased(tracker_); }

absl::Status CallContext::WaitReleased(SendTracker& tracker) {
  if (tracker.WaitAllReleased(absl::Now() + host_.options().collective_timeout,
                              host_.options().spin_wait.value_or(absl::ZeroDuration()))) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(
      absl::StrCat(tracker.outstanding(), " zero-copy sends were not released by the link"));
}

}  // namespace tessel::transport::internal
