#include "tessel/transport/inproc_transport.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/transport/internal/host_link.h"
#include "tessel/transport/internal/host_state.h"

namespace tessel::transport {

using internal::Message;
using internal::WireHeader;

// The link of one in-process host: a message to another host is copied into that host's
// mailbox.
class InProcLink : public internal::HostLink {
 public:
  InProcLink(InProcTransport* job, int64_t rank, internal::HostState* state)
      : job_(job), rank_(rank), state_(state) {}

  absl::Status Send(int64_t dst_host, const WireHeader& header, const void* payload, size_t bytes,
                    internal::SendTracker* tracker, absl::Time deadline) override;
  void BroadcastAbort(const absl::Status& status) override;
  size_t zero_copy_min_bytes() const override { return SIZE_MAX; }

 private:
  InProcTransport* job_;
  int64_t rank_;
  internal::HostState* state_;
};

class InProcTransport::Host : public Communicator {
 public:
  Host(InProcTransport* job, int64_t rank, int64_t size, DeviceMap map, CommunicatorOptions options)
      : Communicator(rank, size, std::move(map), options), link_(job, rank, &host_state()) {
    set_link(&link_);
    host_state().mailbox().set_abort_callback(
        [this](const absl::Status& status) { link_.BroadcastAbort(status); });
  }

  internal::HostState& state() { return host_state(); }

 private:
  InProcLink link_;
};

absl::Status InProcLink::Send(int64_t dst_host, const WireHeader& header, const void* payload,
                              size_t bytes, internal::SendTracker* tracker, absl::Time deadline) {
  TESSEL_RETURN_IF_ERROR(state_->mailbox().failure());
  internal::HostState& dst = job_->hosts_[dst_host]->state();
  Message message;
  message.header = header;
  if (bytes > 0) {
    std::unique_ptr<internal::PooledBuffer> buffer = dst.pool().Acquire(bytes);
    std::memcpy(buffer->mutable_data(), payload, bytes);
    message.payload = std::move(buffer);
  }
  dst.mailbox().Deliver(std::move(message));
  return absl::OkStatus();
}

void InProcLink::BroadcastAbort(const absl::Status& status) {
  for (int64_t h = 0; h < job_->num_hosts(); ++h) {
    if (h == rank_) continue;
    job_->hosts_[h]->state().mailbox().Fail(
        absl::Status(status.code(),
                     absl::StrCat("host ", rank_, " aborted the job: ", status.message())),
        /*broadcast=*/false);
  }
}

absl::Status ValidateOptions(const CommunicatorOptions& options) {
  if (options.pipeline_chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline_chunk_bytes must be >= 1, got ", options.pipeline_chunk_bytes));
  }
  if (options.pipeline_depth < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline_depth must be >= 0, got ", options.pipeline_depth));
  }
  if (options.direct_max_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("direct_max_bytes must be >= 0, got ", options.direct_max_bytes));
  }
  if (options.small_message_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("small_message_bytes must be >= 0, got ", options.small_message_bytes));
  }
  if (options.collective_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective_timeout must be positive, got ",
                     absl::FormatDuration(options.collective_timeout)));
  }
  if (options.spin_wait.has_value() && *options.spin_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spin_wait must be >= 0, got ", absl::FormatDuration(*options.spin_wait)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<InProcTransport>> InProcTransport::Create(
    int64_t num_hosts, DeviceMap device_map, CommunicatorOptions options) {
  TESSEL_RETURN_IF_ERROR(device_map.Validate(num_hosts));
  TESSEL_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<InProcTransport> job(new InProcTransport());
  for (int64_t h = 0; h < num_hosts; ++h) {
    CommunicatorOptions resolved = options;  // every device of the job runs in this process
    resolved.spin_wait = EffectiveSpinWait(options, device_map.num_devices());
    job->hosts_.push_back(std::make_unique<Host>(job.get(), h, num_hosts, device_map, resolved));
  }
  return job;
}

InProcTransport::~InProcTransport() = default;

Communicator& InProcTransport::host(int64_t rank) {
  TESSEL_CHECK(rank >= 0 && rank < num_hosts());
  return *hosts_[rank];
}

Communicator& InProcTransport::host_of_device(int64_t device_id) {
  return host(hosts_[0]->device_map().host_of_device[device_id]);
}

CollectiveStats InProcTransport::TotalStats() const {
  CollectiveStats total;
  for (const auto& h : hosts_) total += h->stats();
  return total;
}

void InProcTransport::ResetStats() {
  for (auto& h : hosts_) h->ResetStats();
}

void InProcTransport::SimulateHostLoss(int64_t rank) {
  for (int64_t h = 0; h < num_hosts(); ++h) {
    if (h == rank) continue;
    hosts_[h]->state().mailbox().Fail(
        absl::UnavailableError(absl::StrCat("lost host ", rank, ": simulated host loss")),
        /*broadcast=*/false);
  }
}

}  // namespace tessel::transport
