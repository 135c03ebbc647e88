#include "tessel/transport/internal/wire.h"

#include <bit>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessel::transport::internal {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; add byte swaps for this platform");

template <typename T>
void Put(std::byte* out, size_t offset, T value) {
  std::memcpy(out + offset, &value, sizeof(T));
}

template <typename T>
T Get(const std::byte* in, size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof(T));
  return value;
}

}  // namespace

std::string CallSignature::ToString() const {
  std::string reduce;
  if (reduce_kind != 0xff) {
    reduce = absl::StrCat(ReduceKindName(static_cast<ReduceKind>(reduce_kind)), ", ");
  }
  return absl::StrFormat("%s(%s%s, %d elements, groups #%016x)", CollectiveKindName(kind), reduce,
                         DTypeName(dtype), element_count, group_id);
}

void EncodeHeader(const WireHeader& h, std::byte* out) {
  std::memset(out, 0, kWireHeaderBytes);
  Put<uint32_t>(out, 0, h.magic);
  Put<uint16_t>(out, 4, h.version);
  Put<uint8_t>(out, 6, static_cast<uint8_t>(h.type));
  Put<uint8_t>(out, 7, static_cast<uint8_t>(h.channel));
  Put<uint64_t>(out, 8, h.sequence);
  Put<int64_t>(out, 16, h.src);
  Put<int64_t>(out, 24, h.dst);
  Put<int32_t>(out, 32, h.src_host);
  Put<uint8_t>(out, 36, h.phase);
  Put<uint32_t>(out, 40, h.step);
  Put<uint32_t>(out, 44, h.segment);
  Put<uint8_t>(out, 48, static_cast<uint8_t>(h.signature.kind));
  Put<uint8_t>(out, 49, static_cast<uint8_t>(h.signature.dtype));
  Put<uint8_t>(out, 50, h.signature.reduce_kind);
  Put<int64_t>(out, 56, h.signature.element_count);
  Put<uint64_t>(out, 64, h.signature.group_id);
  Put<uint64_t>(out, 72, h.payload_bytes);
  Put<uint64_t>(out, 80, h.checksum);
}

absl::StatusOr<WirePrefix> DecodePrefix(const std::byte* data, size_t size) {
  if (size < 8) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: header frame of ", size,
                                                   " bytes, expected ", kWireHeaderBytes));
  }
  WirePrefix p;
  p.magic = Get<uint32_t>(data, 0);
  if (p.magic != kWireMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("malformed message: magic 0x%08x, expected 0x%08x (not a tessel peer)",
                        p.magic, kWireMagic));
  }
  p.version = Get<uint16_t>(data, 4);
  p.type = Get<uint8_t>(data, 6);
  p.channel = Get<uint8_t>(data, 7);
  return p;
}

absl::StatusOr<WireHeader> DecodeHeader(const std::byte* data, size_t size) {
  if (size < 8) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: header frame of ", size,
                                                   " bytes, expected ", kWireHeaderBytes));
  }
  WireHeader h;
  h.magic = Get<uint32_t>(data, 0);
  if (h.magic != kWireMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("malformed message: magic 0x%08x, expected 0x%08x (not a tessel peer)",
                        h.magic, kWireMagic));
  }
  h.version = Get<uint16_t>(data, 4);
  if (h.version != kProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("peer speaks tessel transport protocol version ", h.version,
                     ", this host speaks version ", kProtocolVersion));
  }
  if (size != kWireHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: header frame of ", size,
                                                   " bytes, expected ", kWireHeaderBytes));
  }
  const uint8_t type = Get<uint8_t>(data, 6);
  if (type < 1 || type > 8) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: unknown type ", type));
  }
  h.type = static_cast<MessageType>(type);
  const uint8_t channel = Get<uint8_t>(data, 7);
  if (channel > 3) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: unknown channel ", channel));
  }
  h.channel = static_cast<Channel>(channel);
  h.sequence = Get<uint64_t>(data, 8);
  h.src = Get<int64_t>(data, 16);
  h.dst = Get<int64_t>(data, 24);
  h.src_host = Get<int32_t>(data, 32);
  h.phase = Get<uint8_t>(data, 36);
  h.step = Get<uint32_t>(data, 40);
  h.segment = Get<uint32_t>(data, 44);
  const uint8_t kind = Get<uint8_t>(data, 48);
  if (kind >= kNumCollectiveKinds) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed message: unknown collective kind ", kind));
  }
  h.signature.kind = static_cast<CollectiveKind>(kind);
  const uint8_t dtype = Get<uint8_t>(data, 49);
  if (dtype > static_cast<uint8_t>(DType::kU64)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: unknown dtype ", dtype));
  }
  h.signature.dtype = static_cast<DType>(dtype);
  h.signature.reduce_kind = Get<uint8_t>(data, 50);
  if (h.signature.reduce_kind != 0xff &&
      h.signature.reduce_kind > static_cast<uint8_t>(ReduceKind::kOr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed message: unknown reduction ", h.signature.reduce_kind));
  }
  h.signature.element_count = Get<int64_t>(data, 56);
  h.signature.group_id = Get<uint64_t>(data, 64);
  h.payload_bytes = Get<uint64_t>(data, 72);
  h.checksum = Get<uint64_t>(data, 80);
  return h;
}

}  // namespace tessel::transport::internal
