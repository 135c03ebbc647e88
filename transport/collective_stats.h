// Traffic accounting of a Communicator: bytes and messages per link class and per collective
// kind, in the spirit of PyTorch DTensor's CommDebugMode.
//
//   CollectiveStats s = comm.stats();
//   s.dcn.bytes;                                        // payload bytes this host sent over DCN
//   s.Kind(CollectiveKind::kAllReduce).dcn.messages;    // of which by all-reduces
//   s.ToString();  // "local: 1.0 MB in 12 messages; ICI: ...; DCN: 12.3 MB in 40 messages;
//                  //  all-reduce: 40 calls, ..."
//
// Counted on the sending side, once per message: `bytes` is payload only (the 88-byte wire
// header and ZeroMQ framing are not counted). The link class of a message is decided by the
// sending and receiving devices: the same host = local (an in-memory copy, never a socket),
// else the same slice = ICI, else DCN. Summing the stats of every host gives the job's traffic.
#ifndef TESSEL_TRANSPORT_COLLECTIVE_STATS_H_
#define TESSEL_TRANSPORT_COLLECTIVE_STATS_H_

#include <array>
#include <cstdint>
#include <string>

namespace tessel::transport {

// The operation a message belongs to (also the key of per-kind statistics).
enum class CollectiveKind : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  kBroadcast,
  kBarrier,
  kRendezvous,
  kSendRecv,
};
inline constexpr int kNumCollectiveKinds = 9;

// XLA-style name: "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
// "collective-permute", "broadcast", "barrier", "rendezvous", "send-recv".
[[nodiscard]] const std::string& CollectiveKindName(CollectiveKind kind);

// The class of link a message travels on.
enum class LinkClass : uint8_t {
  kLocal,  // two devices of one host: in-memory copy
  kIci,    // two hosts of one slice (inter-chip interconnect)
  kDcn,    // two slices (data-center network)
};

// Payload bytes and message count on one link class.
struct LinkTraffic {
  int64_t bytes = 0;
  int64_t messages = 0;

  LinkTraffic& operator+=(const LinkTraffic& other) {
    bytes += other.bytes;
    messages += other.messages;
    return *this;
  }
  bool operator==(const LinkTraffic&) const = default;
};

// The traffic of one collective kind.
struct KindStats {
  int64_t calls = 0;  // device-level calls on this host (one per participating device)
  LinkTraffic local;
  LinkTraffic ici;
  LinkTraffic dcn;

  KindStats& operator+=(const KindStats& other);
  bool operator==(const KindStats&) const = default;
};

// A snapshot of a host's (or, summed with +=, a job's) traffic.
struct CollectiveStats {
  LinkTraffic local;
  LinkTraffic ici;
  LinkTraffic dcn;
  std::array<KindStats, kNumCollectiveKinds> per_kind{};  // indexed by CollectiveKind

  const KindStats& Kind(CollectiveKind kind) const { return per_kind[static_cast<int>(kind)]; }
  KindStats& Kind(CollectiveKind kind) { return per_kind[static_cast<int>(kind)]; }
  const LinkTraffic& Link(LinkClass link) const;

  // Adds one message of `bytes` payload bytes sent by a call of `kind` over `link`.
  void Record(CollectiveKind kind, LinkClass link, int64_t bytes);

  CollectiveStats& operator+=(const CollectiveStats& other);
  bool operator==(const CollectiveStats&) const = default;

  // One line per link class and per kind that saw traffic or calls, bytes in decimal MB:
  // "DCN: 12.3 MB in 40 messages".
  std::string ToString() const;
};

// "local", "ICI", "DCN".
const std::string& LinkClassName(LinkClass link);

}  // namespace tessel::transport

#endif  // TESSEL_TRANSPORT_COLLECTIVE_STATS_H_
