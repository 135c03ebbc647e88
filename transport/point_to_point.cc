// Communicator::Send, Recv and Rendezvous: the messages outside the collective sequence.
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tessel/core/status_macros.h"
#include "tessel/transport/communicator.h"
#include "tessel/transport/internal/host_state.h"
#include "tessel/transport/internal/wire.h"

namespace tessel::transport {

using internal::Channel;
using internal::MailKey;
using internal::Message;
using internal::WireHeader;

namespace {

absl::Status CheckEndpoints(const Communicator& comm, const char* what, int64_t local,
                            int64_t remote) {
  const int64_t n = comm.device_map().num_devices();
  if (local < 0 || local >= n || comm.device_map().host_of_device[local] != comm.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": device ", local, " is not owned by host ", comm.rank()));
  }
  if (remote < 0 || remote >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": device ", remote, " is outside the job's ", n, " devices"));
  }
  return absl::OkStatus();
}

// Delivers `header` + payload to device `dst_device`: in memory on this host, else via the
// link (copied: the caller may reuse its buffer when Send returns).
absl::Status Deliver(internal::HostState& host, const WireHeader& header, int64_t dst_host,
                     const void* payload, size_t bytes) {
  if (dst_host == host.rank()) {
    Message message;
    message.header = header;
    if (bytes > 0) {
      std::unique_ptr<internal::PooledBuffer> buffer = host.pool().Acquire(bytes);
      std::memcpy(buffer->mutable_data(), payload, bytes);
      message.payload = std::move(buffer);
    }
    host.mailbox().Deliver(std::move(message));
    return host.mailbox().failure();
  }
  return host.link()->Send(dst_host, header, payload, bytes, /*tracker=*/nullptr,
                           absl::Now() + host.options().collective_timeout);
}

LinkClass ClassifyHosts(const DeviceMap& map, int64_t a, int64_t b,
                        const std::vector<int64_t>& first_device_of_host) {
  if (a == b) return LinkClass::kLocal;
  return map.slice_of_device[first_device_of_host[a]] ==
                 map.slice_of_device[first_device_of_host[b]]
             ? LinkClass::kIci
             : LinkClass::kDcn;
}

}  // namespace

absl::Status Communicator::Send(int64_t src_device, int64_t dst_device, int64_t tag, DType dtype,
                                const void* data, int64_t element_count) {
  TESSEL_RETURN_IF_ERROR(CheckEndpoints(*this, "send", src_device, dst_device));
  if (element_count < 0 || (element_count > 0 && data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("send: bad buffer (element_count ", element_count, ")"));
  }
  TESSEL_RETURN_IF_ERROR(state_->mailbox().failure());
  internal::DeviceState* device = state_->device(src_device);
  WireHeader header;
  header.channel = Channel::kPointToPoint;
  header.sequence = static_cast<uint64_t>(tag);
  header.src = src_device;
  header.dst = dst_device;
  header.src_host = static_cast<int32_t>(rank_);
  header.step = device->p2p_sent[{dst_device, tag}]++;
  header.signature.kind = CollectiveKind::kSendRecv;
  header.signature.dtype = dtype;
  header.signature.element_count = element_count;
  const size_t bytes = static_cast<size_t>(element_count * ByteWidth(dtype));
  header.payload_bytes = bytes;
  state_->stats().CountCall(CollectiveKind::kSendRecv);
  state_->stats().Record(CollectiveKind::kSendRecv, state_->Classify(src_device, dst_device),
                         static_cast<int64_t>(bytes));
  absl::Status status =
      Deliver(*state_, header, device_map_.host_of_device[dst_device], data, bytes);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("send from device ", src_device, " to device ", dst_device,
                                     " tag ", tag, ": ", status.message()));
  }
  return status;
}

absl::Status Communicator::Recv(int64_t dst_device, int64_t src_device, int64_t tag, DType dtype,
                                void* data, int64_t element_count) {
  TESSEL_RETURN_IF_ERROR(CheckEndpoints(*this, "recv", dst_device, src_device));
  if (element_count < 0 || (element_count > 0 && data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("recv: bad buffer (element_count ", element_count, ")"));
  }
  internal::DeviceState* device = state_->device(dst_device);
  const uint32_t step = device->p2p_received[{src_device, tag}]++;
  const MailKey key{
      Channel::kPointToPoint, dst_device, src_device, static_cast<uint64_t>(tag), 0, step, 0};
  const std::string what = absl::StrCat("recv on device ", dst_device, " (host ", rank_,
                                        ") from device ", src_device, " tag ", tag);
  absl::StatusOr<Message> message = state_->mailbox().Take(
      key, device_map_.host_of_device[src_device], absl::Now() + options_.collective_timeout);
  if (!message.ok()) {
    if (absl::IsDeadlineExceeded(message.status()) && state_->mailbox().failure().ok()) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": nothing arrived for ", absl::FormatDuration(options_.collective_timeout)));
    }
    return absl::Status(message.status().code(),
                        absl::StrCat(what, ": ", message.status().message()));
  }
  const auto& sig = message->header.signature;
  if (sig.dtype != dtype || sig.element_count != element_count) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: send-recv mismatch: device %d sent %s x %d, device %d expects %s x %d",
                        what, src_device, DTypeName(sig.dtype), sig.element_count, dst_device,
                        DTypeName(dtype), element_count));
  }
  if (message->size() > 0) std::memcpy(data, message->data(), message->size());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Communicator::Rendezvous(const std::string& tag,
                                                                  const std::string& payload) {
  const uint64_t sequence = state_->next_rendezvous++;
  const std::string what = absl::StrCat("rendezvous #", sequence, " \"", tag, "\" on host ", rank_);
  std::vector<std::string> result(size_);
  result[rank_] = payload;
  if (size_ == 1) return result;
  TESSEL_RETURN_IF_ERROR(state_->mailbox().failure());
  std::vector<int64_t> first_device(size_, 0);
  for (int64_t d = device_map_.num_devices() - 1; d >= 0; --d) {
    first_device[device_map_.host_of_device[d]] = d;
  }
  // Body: u32 tag length, tag bytes, payload bytes.
  std::string body(4, '\0');
  const uint32_t tag_bytes = static_cast<uint32_t>(tag.size());
  std::memcpy(body.data(), &tag_bytes, 4);
  body += tag;
  body += payload;
  state_->stats().CountCall(CollectiveKind::kRendezvous);
  for (int64_t h = 0; h < size_; ++h) {
    if (h == rank_) continue;
    WireHeader header;
    header.channel = Channel::kRendezvous;
    header.sequence = sequence;
    header.src = rank_;
    header.dst = h;
    header.src_host = static_cast<int32_t>(rank_);
    header.signature.kind = CollectiveKind::kRendezvous;
    header.signature.element_count = static_cast<int64_t>(body.size());
    header.payload_bytes = body.size();
    state_->stats().Record(CollectiveKind::kRendezvous,
                           ClassifyHosts(device_map_, rank_, h, first_device),
                           static_cast<int64_t>(body.size()));
    absl::Status status = state_->link()->Send(h, header, body.data(), body.size(), nullptr,
                                               absl::Now() + options_.collective_timeout);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
    }
  }
  for (int64_t h = 0; h < size_; ++h) {
    if (h == rank_) continue;
    const MailKey key{Channel::kRendezvous, rank_, h, sequence, 0, 0, 0};
    absl::StatusOr<Message> message =
        state_->mailbox().Take(key, h, absl::Now() + options_.collective_timeout);
    if (!message.ok()) {
      absl::Status status = message.status();
      if (absl::IsDeadlineExceeded(status) && state_->mailbox().failure().ok()) {
        status = absl::DeadlineExceededError(absl::StrCat(
            "host ", h, " sent nothing for ", absl::FormatDuration(options_.collective_timeout)));
      }
      absl::Status annotated(status.code(), absl::StrCat(what, ": ", status.message()));
      state_->mailbox().Fail(annotated, /*broadcast=*/true);
      return annotated;
    }
    const std::byte* data = message->data();
    const size_t size = message->size();
    uint32_t their_tag_bytes = 0;
    if (size >= 4) std::memcpy(&their_tag_bytes, data, 4);
    if (size < 4 || size - 4 < their_tag_bytes) {
      return absl::InternalError(absl::StrCat(what, ": malformed message from host ", h));
    }
    const std::string their_tag(reinterpret_cast<const char*>(data) + 4, their_tag_bytes);
    if (their_tag != tag) {
      absl::Status mismatch = absl::FailedPreconditionError(
          absl::StrCat(what, ": rendezvous mismatch: host ", rank_, " called tag \"", tag,
                       "\" but host ", h, " called tag \"", their_tag, "\""));
      state_->mailbox().Fail(mismatch, /*broadcast=*/true);
      return mismatch;
    }
    result[h].assign(reinterpret_cast<const char*>(data) + 4 + their_tag_bytes,
                     size - 4 - their_tag_bytes);
  }
  return result;
}

}  // namespace tessel::transport
