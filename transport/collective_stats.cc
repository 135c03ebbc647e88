#include "tessel/transport/collective_stats.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessel::transport {
namespace {

std::string Traffic(const LinkTraffic& t) {
  return absl::StrFormat("%.3f MB in %d messages", static_cast<double>(t.bytes) / 1e6, t.messages);
}

}  // namespace

const std::string& CollectiveKindName(CollectiveKind kind) {
  static const auto* const kNames = new std::array<std::string, kNumCollectiveKinds>{
      "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
      "broadcast",  "barrier",    "rendezvous",     "send-recv"};
  return (*kNames)[static_cast<int>(kind)];
}

const std::string& LinkClassName(LinkClass link) {
  static const auto* const kNames = new std::array<std::string, 3>{"local", "ICI", "DCN"};
  return (*kNames)[static_cast<int>(link)];
}

KindStats& KindStats::operator+=(const KindStats& other) {
  calls += other.calls;
  local += other.local;
  ici += other.ici;
  dcn += other.dcn;
  return *this;
}

const LinkTraffic& CollectiveStats::Link(LinkClass link) const {
  switch (link) {
    case LinkClass::kLocal:
      return local;
    case LinkClass::kIci:
      return ici;
    case LinkClass::kDcn:
      break;
  }
  return dcn;
}

void CollectiveStats::Record(CollectiveKind kind, LinkClass link, int64_t bytes) {
  KindStats& k = Kind(kind);
  LinkTraffic* total = &dcn;
  LinkTraffic* per_kind = &k.dcn;
  if (link == LinkClass::kLocal) {
    total = &local;
    per_kind = &k.local;
  } else if (link == LinkClass::kIci) {
    total = &ici;
    per_kind = &k.ici;
  }
  total->bytes += bytes;
  ++total->messages;
  per_kind->bytes += bytes;
  ++per_kind->messages;
}

CollectiveStats& CollectiveStats::operator+=(const CollectiveStats& other) {
  local += other.local;
  ici += other.ici;
  dcn += other.dcn;
  for (int i = 0; i < kNumCollectiveKinds; ++i) per_kind[i] += other.per_kind[i];
  return *this;
}

std::string CollectiveStats::ToString() const {
  std::string out =
      absl::StrCat("local: ", Traffic(local), "; ICI: ", Traffic(ici), "; DCN: ", Traffic(dcn));
  for (int i = 0; i < kNumCollectiveKinds; ++i) {
    const KindStats& k = per_kind[i];
    if (k.calls == 0 && k.local.messages == 0 && k.ici.messages == 0 && k.dcn.messages == 0) {
      continue;
    }
    absl::StrAppend(&out, "\n", CollectiveKindName(static_cast<CollectiveKind>(i)), ": ", k.calls,
                    " calls; local ", Traffic(k.local), "; ICI ", Traffic(k.ici), "; DCN ",
                    Traffic(k.dcn));
  }
  return out;
}

}  // namespace tessel::transport
