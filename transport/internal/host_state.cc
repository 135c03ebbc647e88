#include "tessel/transport/internal/host_state.h"

namespace tessel::transport::internal {

namespace {
constexpr int64_t kMaxPooledBytes = int64_t{512} << 20;
}  // namespace

HostState::HostState(int64_t rank, int64_t size, const DeviceMap& device_map,
                     const CommunicatorOptions& options, const std::vector<int64_t>& local_devices)
    : rank_(rank),
      size_(size),
      device_map_(device_map),
      options_(options),
      pool_(kMaxPooledBytes),
      mailbox_(rank, local_devices, options.spin_wait.value_or(absl::ZeroDuration())) {
  for (int64_t d : local_devices) devices_[d] = DeviceState();
}

LinkClass HostState::Classify(int64_t src_device, int64_t dst_device) const {
  if (device_map_.host_of_device[src_device] == device_map_.host_of_device[dst_device]) {
    return LinkClass::kLocal;
  }
  if (device_map_.slice_of_device[src_device] == device_map_.slice_of_device[dst_device]) {
    return LinkClass::kIci;
  }
  return LinkClass::kDcn;
}

}  // namespace tessel::transport::internal
