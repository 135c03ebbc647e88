#include "tessel/mesh/sim/simulator.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <queue>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tessel/core/format.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/trace_events.h"
#include "tessel/mesh/sim/inline_control_flow.h"

namespace tessel::mesh {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64-style combine.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h;
}

// The number of distinct values in `values` (sorted in place).
int64_t CountDistinct(std::vector<int64_t>& values) {
  std::sort(values.begin(), values.end());
  return std::unique(values.begin(), values.end()) - values.begin();
}

// What a replica group spans, seen from the slice of `members[0]`: the link-class signature.
uint64_t GroupSignature(const Topology& topology, const std::vector<int64_t>& members) {
  const Device& first = topology.device(members[0]);
  const Slice& slice = topology.slice(first.slice);
  const int64_t rank = static_cast<int64_t>(slice.shape.size());
  std::vector<int64_t> values;
  values.reserve(members.size());
  for (int64_t id : members) values.push_back(topology.device(id).slice);
  const int64_t num_slices = CountDistinct(values);
  int64_t local = 0;
  for (int64_t id : members) local += topology.device(id).slice == first.slice ? 1 : 0;
  uint64_t h = Mix(static_cast<uint64_t>(num_slices), static_cast<uint64_t>(local));
  for (int64_t i = 0; i < rank; ++i) {
    values.clear();
    for (int64_t id : members) {
      const Device& d = topology.device(id);
      if (d.slice == first.slice) values.push_back(d.coords[i]);
    }
    const int64_t k = CountDistinct(values);
    const bool closed = k == slice.shape[i] && slice.wraparound[i] && k > 2;
    h = Mix(h, static_cast<uint64_t>(k * 2 + (closed ? 1 : 0)));
  }
  return h;
}

int64_t TorusHops(const Topology& topology, int64_t a, int64_t b) {
  const Device& da = topology.device(a);
  const Device& db = topology.device(b);
  if (da.slice != db.slice) return -1;
  const Slice& slice = topology.slice(da.slice);
  int64_t hops = 0;
  for (size_t d = 0; d < slice.shape.size(); ++d) {
    int64_t delta = std::abs(da.coords[d] - db.coords[d]);
    if (slice.wraparound[d]) delta = std::min(delta, slice.shape[d] - delta);
    hops += delta;
  }
  return hops;
}

bool Materialized(const Node& node) {
  const Opcode op = node.opcode();
  if (op == Opcode::kTuple || op == Opcode::kGetTupleElement) return false;
  if (op == Opcode::kParameter) return true;
  return !KeptOnChip(node);
}

// Groups devices into classes (see the header): a running signature per device over every
// collective, then one class per distinct signature. Fills `classes` (representative and
// size) and returns each device's class index.
absl::StatusOr<std::vector<int32_t>> ClassifyDevices(const Topology& topology,
                                                     const std::vector<Node*>& nodes,
                                                     std::vector<DeviceClass>& classes) {
  const int64_t num_devices = topology.num_devices();
  std::vector<uint64_t> signature(num_devices, 0);
  // Each distinct replica-group list (CollectiveDeviceList::identity: the partitioner shares
  // one list among the collectives that use it) is read once; `member_signature[d]` is the
  // signature of d's group, 0 when d is in none.
  std::unordered_map<const void*, std::vector<uint64_t>> list_signatures;
  auto signatures_of = [&](const Node& node) -> absl::StatusOr<const std::vector<uint64_t>*> {
    const CollectiveDeviceList& list = node.attrs().replica_groups;
    auto it = list_signatures.find(list.identity());
    if (it != list_signatures.end()) return &it->second;
    std::vector<uint64_t> member_signature(num_devices, 0);
    if (list.empty()) {
      std::vector<int64_t> all_devices(num_devices);
      std::iota(all_devices.begin(), all_devices.end(), 0);
      const uint64_t sig = GroupSignature(topology, all_devices) | 1;
      std::fill(member_signature.begin(), member_signature.end(), sig);
    }
    for (const std::vector<int64_t>& group : list) {
      for (int64_t id : group) {
        if (id < 0 || id >= num_devices) {
          return absl::InvalidArgumentError(absl::StrCat(
              node.name(), ": replica group names device ", id, " outside 0..", num_devices - 1));
        }
      }
      if (group.empty()) continue;
      const uint64_t sig = GroupSignature(topology, group) | 1;  // never 0 (= no group)
      for (int64_t id : group) member_signature[id] = sig;
    }
    return &list_signatures.emplace(list.identity(), std::move(member_signature)).first->second;
  };
  for (const Node* node : nodes) {
    if (!IsCollective(node->opcode())) continue;
    if (node->opcode() == Opcode::kCollectivePermute) {
      for (const auto& [source, target] : node->attrs().source_target_pairs) {
        if (source < 0 || source >= num_devices || target < 0 || target >= num_devices) {
          return absl::InvalidArgumentError(absl::StrCat(
              node->name(), ": source_target_pairs name a device outside 0..", num_devices - 1));
        }
        // Sender and receiver differ in what they wait for, so they mix different values.
        const uint64_t hops = static_cast<uint64_t>(TorusHops(topology, source, target) + 2);
        signature[source] = Mix(signature[source], hops);
        signature[target] = Mix(signature[target], hops + (uint64_t{1} << 32));
      }
      continue;
    }
    TESSEL_ASSIGN_OR_RETURN(const std::vector<uint64_t>* member_signature, signatures_of(*node));
    for (int64_t d = 0; d < num_devices; ++d) {
      if ((*member_signature)[d] != 0) signature[d] = Mix(signature[d], (*member_signature)[d]);
    }
  }
  std::unordered_map<uint64_t, int64_t> class_index;
  std::vector<int32_t> class_of(num_devices);
  for (int64_t d = 0; d < num_devices; ++d) {
    auto [it, inserted] = class_index.emplace(signature[d], static_cast<int64_t>(classes.size()));
    if (inserted) {
      DeviceClass c;
      c.representative_device = d;
      classes.push_back(c);
    }
    class_of[d] = static_cast<int32_t>(it->second);
    ++classes[it->second].num_devices;
  }
  return class_of;
}

// Every node's cost: local ops once (all devices run the same local program), collectives once
// per class (their links differ), with the classes each collective waits for.
struct ProgramCosts {
  int64_t num_classes = 0;
  std::vector<NodeCost> local;             // per node; unused for collectives
  std::vector<int64_t> collective_index;   // per node: k for the k-th collective, else -1
  std::vector<NodeCost> collective;        // [k * num_classes + c]
  std::vector<std::vector<int32_t>> sync;  // [k * num_classes + c]: classes c waits for
  // Per collective k: it runs on the compute stream instead of the collective one (XLA:TPU's
  // reduce-scatter fusion, CostModel::ReduceScatterRunsAsAllReduce).
  std::vector<bool> holds_compute;

  int64_t num_nodes() const { return static_cast<int64_t>(local.size()); }
  bool is_collective(int64_t i) const { return collective_index[i] >= 0; }
  bool holds_compute_stream(int64_t i) const {
    return collective_index[i] >= 0 && holds_compute[collective_index[i]];
  }
  const NodeCost& of(int64_t i, int64_t c) const {
    return collective_index[i] < 0 ? local[i] : collective[collective_index[i] * num_classes + c];
  }
};

ProgramCosts CostProgram(const CostModel& model, const std::vector<Node*>& nodes,
                         const std::vector<DeviceClass>& classes,
                         const std::vector<int32_t>& class_of,
                         const std::function<bool(const Node&)>& costed_elsewhere,
                         const std::function<bool(const Node&)>& unquantized) {
  ProgramCosts costs;
  const int64_t n = static_cast<int64_t>(nodes.size());
  const int64_t num_classes = static_cast<int64_t>(classes.size());
  costs.num_classes = num_classes;
  costs.local.resize(n);
  costs.collective_index.assign(n, -1);
  int64_t num_collectives = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Node& node = *nodes[i];
    if (!IsCollective(node.opcode())) {
      if (!(costed_elsewhere && costed_elsewhere(node))) {
        costs.local[i] = model.Cost(node, 0, !(unquantized && unquantized(node)));
      }
      continue;
    }
    costs.collective_index[i] = num_collectives++;
    costs.holds_compute.push_back(node.opcode() == Opcode::kReduceScatter &&
                                  model.ReduceScatterRunsAsAllReduce());
    for (int64_t c = 0; c < num_classes; ++c) {
      const int64_t rep = classes[c].representative_device;
      costs.collective.push_back(model.Cost(node, rep));
      std::vector<int32_t> sync = {static_cast<int32_t>(c)};
      if (node.opcode() == Opcode::kCollectivePermute) {
        for (const auto& [source, target] : node.attrs().source_target_pairs) {
          if (source == rep) sync.push_back(class_of[target]);
          if (target == rep) sync.push_back(class_of[source]);
        }
      } else if (node.attrs().replica_groups.empty()) {
        for (int64_t k = 0; k < num_classes; ++k) sync.push_back(static_cast<int32_t>(k));
      } else {
        // Every member of a class has the same group shape, so the representative's group
        // names the classes the whole class waits for.
        for (const std::vector<int64_t>& group : node.attrs().replica_groups) {
          if (std::find(group.begin(), group.end(), rep) == group.end()) continue;
          for (int64_t id : group) sync.push_back(class_of[id]);
          break;
        }
      }
      std::sort(sync.begin(), sync.end());
      sync.erase(std::unique(sync.begin(), sync.end()), sync.end());
      costs.sync.push_back(std::move(sync));
    }
  }
  return costs;
}

// Start times per [node * num_classes + class], kept only when a trace is recorded.
struct Schedules {
  std::vector<double> in_order_start;
  std::vector<double> overlap_start;
};

// The program's edges by position: node i's operands are
// operand_index[operand_begin[i] .. operand_begin[i + 1]), its users likewise (one entry per
// operand slot, so an op that reads a value twice appears twice).
struct Edges {
  std::vector<int64_t> operand_begin, operand_index;
  std::vector<int64_t> user_begin, user_index;
};

Edges ProgramEdges(const std::vector<Node*>& nodes) {
  const int64_t n = static_cast<int64_t>(nodes.size());
  std::unordered_map<const Node*, int64_t> position;
  position.reserve(nodes.size());
  for (int64_t i = 0; i < n; ++i) position[nodes[i]] = i;
  Edges e;
  e.operand_begin.reserve(n + 1);
  e.operand_begin.push_back(0);
  std::vector<int64_t> num_users(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (const Node* operand : nodes[i]->operands()) {
      const int64_t p = position.at(operand);
      e.operand_index.push_back(p);
      ++num_users[p];
    }
    e.operand_begin.push_back(static_cast<int64_t>(e.operand_index.size()));
  }
  e.user_begin.assign(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) e.user_begin[i + 1] = e.user_begin[i] + num_users[i];
  e.user_index.resize(e.operand_index.size());
  std::vector<int64_t> fill(e.user_begin.begin(), e.user_begin.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = e.operand_begin[i]; k < e.operand_begin[i + 1]; ++k) {
      e.user_index[fill[e.operand_index[k]]++] = i;
    }
  }
  return e;
}

// Local ops whose result feeds a collective, directly or through local ops that feed only
// collectives (the gradient's convert / transpose / reshape before its reduce-scatter, and the
// dot that produces it). Program order is topological, so one backward pass suffices.
std::vector<bool> FeedsCollective(const ProgramCosts& costs, const Edges& e) {
  const int64_t n = costs.num_nodes();
  std::vector<bool> feeds(n, false), only_feeds(n, false);
  for (int64_t i = n - 1; i >= 0; --i) {
    if (costs.is_collective(i)) continue;
    bool any = false, all = e.user_begin[i + 1] > e.user_begin[i];
    for (int64_t k = e.user_begin[i]; k < e.user_begin[i + 1]; ++k) {
      const int64_t u = e.user_index[k];
      const bool towards = costs.is_collective(u) || only_feeds[u];
      any = any || towards;
      all = all && towards;
    }
    feeds[i] = any;
    only_feeds[i] = all;
  }
  return feeds;
}

// The order in which the overlapped schedule issues nodes, shared by every device class (one
// SPMD program, as XLA compiles one schedule for all devices). A list scheduler over class 0's
// costs, in the spirit of XLA's latency-hiding scheduler: collectives keep program order on
// their stream and are issued as soon as their operands are; when the compute stream is free,
// a ready local op that feeds a collective (FeedsCollective) goes first, lowest position first;
// otherwise the next other local op in program order, waiting for its operands if it must, unless
// a collective feeder becomes ready before it can start. A feeder that waits on a collective's
// result is therefore not pulled ahead of compute that is ready (it would stall the stream).
// Free nodes (parameters, tuples, fused producers) take no stream and are issued when ready.
// O(n log n).
std::vector<int64_t> OverlapOrder(const ProgramCosts& costs, const Edges& e) {
  const int64_t n = costs.num_nodes();
  const std::vector<bool> feeds = FeedsCollective(costs, e);
  std::vector<int64_t> order, plain, collectives;
  order.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (costs.is_collective(i)) {
      collectives.push_back(i);
    } else if (costs.local[i].seconds > 0 && !feeds[i]) {
      plain.push_back(i);
    }
  }
  std::vector<int64_t> waiting(n);
  for (int64_t i = 0; i < n; ++i) waiting[i] = e.operand_begin[i + 1] - e.operand_begin[i];
  std::vector<double> ready(n, 0.0), done(n, 0.0);
  using Timed = std::pair<double, int64_t>;
  // Feeders whose operands are issued: `pending` by ready time, `runnable` (ready by now) by
  // position.
  std::priority_queue<Timed, std::vector<Timed>, std::greater<>> pending;
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> runnable;
  std::vector<int64_t> free_nodes;
  size_t next_plain = 0, next_collective = 0;
  double compute_free = 0, comm_free = 0;
  auto issue = [&](int64_t i, double start) {
    done[i] = start + costs.of(i, 0).seconds;
    order.push_back(i);
    for (int64_t k = e.user_begin[i]; k < e.user_begin[i + 1]; ++k) {
      const int64_t u = e.user_index[k];
      ready[u] = std::max(ready[u], done[i]);
      if (--waiting[u] != 0) continue;
      if (!costs.is_collective(u) && costs.local[u].seconds <= 0) {
        free_nodes.push_back(u);
      } else if (!costs.is_collective(u) && feeds[u]) {
        pending.emplace(ready[u], u);
      }
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    if (waiting[i] == 0 && !costs.is_collective(i)) {
      if (costs.local[i].seconds <= 0) {
        free_nodes.push_back(i);
      } else if (feeds[i]) {
        pending.emplace(0.0, i);
      }
    }
  }
  while (static_cast<int64_t>(order.size()) < n) {
    // Issue everything that takes no compute-stream decision.
    bool progress = true;
    while (progress) {
      progress = false;
      while (!free_nodes.empty()) {
        const int64_t i = free_nodes.back();
        free_nodes.pop_back();
        issue(i, ready[i]);
        progress = true;
      }
      if (next_collective < collectives.size() && waiting[collectives[next_collective]] == 0) {
        const int64_t i = collectives[next_collective++];
        if (costs.holds_compute_stream(i)) {
          issue(i, std::max(ready[i], compute_free));
          compute_free = done[i];
        } else {
          issue(i, std::max(ready[i], comm_free));
          comm_free = done[i];
        }
        progress = true;
      }
    }
    if (static_cast<int64_t>(order.size()) == n) break;
    while (!pending.empty() && pending.top().first <= compute_free) {
      runnable.push(pending.top().second);
      pending.pop();
    }
    const bool plain_issuable = next_plain < plain.size() && waiting[plain[next_plain]] == 0;
    const double plain_start =
        plain_issuable ? std::max(ready[plain[next_plain]], compute_free) : 0.0;
    int64_t pick = -1;
    double start = compute_free;
    if (!runnable.empty()) {
      pick = runnable.top();
      runnable.pop();
    } else if (!pending.empty() && (!plain_issuable || pending.top().first < plain_start)) {
      pick = pending.top().second;
      start = pending.top().first;
      pending.pop();
    } else {
      TESSEL_CHECK(plain_issuable);  // the lowest unissued node is always issuable
      pick = plain[next_plain++];
      start = plain_start;
    }
    issue(pick, start);
    compute_free = done[pick];
  }
  return order;
}

// Adds one collective's link seconds and bytes on a class to its totals.
void CountTraffic(const NodeCost& cost, DeviceClass& dc) {
  dc.ici_seconds += cost.ici_seconds;
  dc.dcn_seconds += cost.dcn_seconds;
  dc.ici_bytes += cost.ici_bytes;
  dc.dcn_bytes += cost.dcn_bytes;
}

// The in-order schedule (program order, a collective waits for every class of its group to
// reach it), with each class's compute and link totals.
void ScheduleInOrder(const ProgramCosts& costs, bool record_trace, Schedules& schedules,
                     std::vector<DeviceClass>& classes) {
  const int64_t n = costs.num_nodes();
  const int64_t num_classes = costs.num_classes;
  if (record_trace) schedules.in_order_start.resize(n * num_classes);
  std::vector<double> in_order(num_classes, 0.0), begin(num_classes);
  for (int64_t i = 0; i < n; ++i) {
    if (costs.is_collective(i)) {
      const int64_t k = costs.collective_index[i];
      for (int64_t c = 0; c < num_classes; ++c) {
        double b = 0;
        for (int32_t other : costs.sync[k * num_classes + c]) b = std::max(b, in_order[other]);
        begin[c] = b;
      }
      for (int64_t c = 0; c < num_classes; ++c) {
        const NodeCost& cost = costs.of(i, c);
        if (record_trace) schedules.in_order_start[i * num_classes + c] = begin[c];
        in_order[c] = begin[c] + cost.seconds;
        CountTraffic(cost, classes[c]);
      }
      continue;
    }
    const double seconds = costs.local[i].seconds;
    for (int64_t c = 0; c < num_classes; ++c) {
      if (record_trace) schedules.in_order_start[i * num_classes + c] = in_order[c];
      in_order[c] += seconds;
      classes[c].compute_seconds += seconds;
    }
  }
  for (int64_t c = 0; c < num_classes; ++c) classes[c].in_order_seconds = in_order[c];
}

// The overlapped schedule: nodes issued in `order` (OverlapOrder) on one compute and one
// collective stream per class; a node starts when its operands are done and its stream is free,
// a collective also when the collective streams of the classes it waits for are; one that holds
// the compute stream (ProgramCosts::holds_compute) takes the compute streams instead.
void ScheduleOverlapped(const ProgramCosts& costs, const Edges& e,
                        const std::vector<int64_t>& order, bool record_trace, Schedules& schedules,
                        std::vector<DeviceClass>& classes) {
  const int64_t n = costs.num_nodes();
  const int64_t num_classes = costs.num_classes;
  if (record_trace) schedules.overlap_start.resize(n * num_classes);
  std::vector<double> compute_free(num_classes, 0.0), comm_free(num_classes, 0.0);
  std::vector<double> done(static_cast<size_t>(n * num_classes), 0.0);
  std::vector<double> ready(num_classes), begin(num_classes), end(num_classes, 0.0);
  for (const int64_t i : order) {
    std::fill(ready.begin(), ready.end(), 0.0);
    for (int64_t k = e.operand_begin[i]; k < e.operand_begin[i + 1]; ++k) {
      const double* operand_done = &done[e.operand_index[k] * num_classes];
      for (int64_t c = 0; c < num_classes; ++c) ready[c] = std::max(ready[c], operand_done[c]);
    }
    double* node_done = &done[i * num_classes];
    if (costs.is_collective(i)) {
      const int64_t k = costs.collective_index[i];
      // A collective that holds the compute stream is a kernel on it (XLA:TPU's reduce-scatter
      // fusion), not a transfer queued behind the async collectives in flight.
      std::vector<double>& stream_free = costs.holds_compute[k] ? compute_free : comm_free;
      for (int64_t c = 0; c < num_classes; ++c) {
        double b = 0;
        for (int32_t other : costs.sync[k * num_classes + c]) {
          b = std::max({b, ready[other], stream_free[other]});
        }
        begin[c] = b;
      }
      for (int64_t c = 0; c < num_classes; ++c) {
        if (record_trace) schedules.overlap_start[i * num_classes + c] = begin[c];
        node_done[c] = begin[c] + costs.of(i, c).seconds;
        stream_free[c] = node_done[c];
        end[c] = std::max(end[c], node_done[c]);
      }
      continue;
    }
    const double seconds = costs.local[i].seconds;
    for (int64_t c = 0; c < num_classes; ++c) {
      // A free node (a fused or aliasing one) does not occupy the compute stream.
      const double s = seconds > 0 ? std::max(ready[c], compute_free[c]) : ready[c];
      if (record_trace) schedules.overlap_start[i * num_classes + c] = s;
      node_done[c] = s + seconds;
      if (seconds > 0) compute_free[c] = node_done[c];
      end[c] = std::max(end[c], node_done[c]);
    }
  }
  for (int64_t c = 0; c < num_classes; ++c) classes[c].overlapped_seconds = end[c];
}

// Runs both schedules of the header comment for all classes in lockstep, and accumulates each
// class's step times, compute and link seconds and bytes into `classes`.
Schedules ScheduleClasses(const std::vector<Node*>& nodes, const ProgramCosts& costs,
                          bool record_trace, std::vector<DeviceClass>& classes) {
  Schedules schedules;
  ScheduleInOrder(costs, record_trace, schedules, classes);
  const Edges edges = ProgramEdges(nodes);
  ScheduleOverlapped(costs, edges, OverlapOrder(costs, edges), record_trace, schedules, classes);
  return schedules;
}

// Fills the step time, breakdown and traffic from the slowest class of the chosen schedule;
// returns that class.
int64_t Summarize(bool overlap, SimulationReport& report) {
  auto step = [&](const DeviceClass& x) {
    return overlap ? x.overlapped_seconds : x.in_order_seconds;
  };
  int64_t slowest = 0;
  for (int64_t c = 0; c < static_cast<int64_t>(report.classes.size()); ++c) {
    const DeviceClass& dc = report.classes[c];
    report.in_order_seconds = std::max(report.in_order_seconds, dc.in_order_seconds);
    report.overlapped_seconds = std::max(report.overlapped_seconds, dc.overlapped_seconds);
    if (step(dc) > step(report.classes[slowest])) slowest = c;
    report.ici_bytes_total += dc.ici_bytes * dc.num_devices;
    report.dcn_bytes_total += dc.dcn_bytes * dc.num_devices;
  }
  const DeviceClass& worst = report.classes[slowest];
  report.step_seconds = overlap ? report.overlapped_seconds : report.in_order_seconds;
  report.compute_seconds = worst.compute_seconds;
  report.ici_seconds = worst.ici_seconds;
  report.dcn_seconds = worst.dcn_seconds;
  report.exposed_comm_seconds = std::max(0.0, report.step_seconds - worst.compute_seconds);
  report.ici_bytes_per_device = worst.ici_bytes;
  report.dcn_bytes_per_device = worst.dcn_bytes;
  return slowest;
}

// Peak and parameter memory, the HBM check, and the cost model's notes as warnings.
void ReportMemory(const CostModel& model, const Graph& graph, SimulationReport& report) {
  for (const std::string& note : model.notes()) report.warnings.push_back(note);
  report.hbm_bytes = model.topology().device_spec().hbm_bytes;
  report.peak_memory_bytes = PeakLiveBytes(graph);
  for (const Node* p : graph.parameters()) report.parameter_bytes += p->shape().byte_size();
  if (report.peak_memory_bytes > report.hbm_bytes) {
    report.exceeds_hbm = true;
    report.warnings.push_back(
        absl::StrFormat("error: peak memory %s per device exceeds the HBM of %s (%s)",
                        FormatBytes(static_cast<double>(report.peak_memory_bytes)),
                        report.device_name.empty() ? "the device" : report.device_name,
                        FormatBytes(static_cast<double>(report.hbm_bytes))));
  }
}

// The top_k most expensive local ops and collectives on class `slowest`, ties by program order.
void ReportTopOps(const std::vector<Node*>& nodes, const ProgramCosts& costs, int64_t slowest,
                  int64_t top_k, SimulationReport& report) {
  std::vector<int64_t> locals, collectives;
  for (int64_t i = 0; i < costs.num_nodes(); ++i) {
    if (costs.is_collective(i)) {
      collectives.push_back(i);
    } else if (costs.local[i].seconds > 0) {
      locals.push_back(i);
    }
  }
  auto top = [&](std::vector<int64_t>& indices, std::vector<OpEntry>& out) {
    const size_t k = std::min<size_t>(indices.size(), static_cast<size_t>(top_k));
    std::partial_sort(indices.begin(), indices.begin() + k, indices.end(),
                      [&](int64_t a, int64_t b) {
                        const double sa = costs.of(a, slowest).seconds;
                        const double sb = costs.of(b, slowest).seconds;
                        return sa != sb ? sa > sb : a < b;
                      });
    for (size_t j = 0; j < k; ++j) {
      const Node& node = *nodes[indices[j]];
      const NodeCost& cost = costs.of(indices[j], slowest);
      OpEntry e;
      e.name = node.name();
      e.opcode = OpcodeName(node.opcode());
      e.shape = node.shape().ToString();
      e.seconds = cost.seconds;
      e.flops = cost.flops;
      e.bytes = IsCollective(node.opcode()) ? cost.ici_bytes + cost.dcn_bytes : cost.bytes_accessed;
      out.push_back(std::move(e));
    }
  };
  top(locals, report.top_ops);
  top(collectives, report.top_collectives);
}

// One trace event per node that takes time, per class, at the chosen schedule's start times.
void RecordTrace(const std::vector<Node*>& nodes, const ProgramCosts& costs,
                 const std::vector<double>& starts, SimulationReport& report) {
  for (int64_t c = 0; c < costs.num_classes; ++c) {
    for (int64_t i = 0; i < costs.num_nodes(); ++i) {
      const NodeCost& cost = costs.of(i, c);
      if (cost.seconds <= 0) continue;
      TraceEvent e;
      e.device_class = c;
      e.name = nodes[i]->name();
      e.opcode = OpcodeName(nodes[i]->opcode());
      e.start_seconds = starts[i * costs.num_classes + c];
      e.seconds = cost.seconds;
      e.ici_seconds = cost.ici_seconds;
      e.dcn_seconds = cost.dcn_seconds;
      report.trace.push_back(std::move(e));
    }
  }
}

}  // namespace

int64_t PeakLiveBytes(const Graph& program) {
  const std::vector<Node*>& nodes = program.nodes();
  const int64_t n = static_cast<int64_t>(nodes.size());
  std::unordered_map<const Node*, int64_t> position;
  position.reserve(nodes.size());
  for (int64_t i = 0; i < n; ++i) position[nodes[i]] = i;
  // last_use[i]: position after which node i's buffer is free (n: live to the end).
  std::vector<int64_t> last_use(n, -1);
  for (int64_t i = 0; i < n; ++i) {
    for (const Node* operand : nodes[i]->operands()) {
      int64_t p = position.at(operand);
      last_use[p] = std::max(last_use[p], i);
    }
  }
  auto keep_to_end = [&](const Node* node) { last_use[position.at(node)] = n; };
  if (const Node* root = program.root()) {
    keep_to_end(root);
    if (root->opcode() == Opcode::kTuple) {
      for (const Node* e : root->operands()) keep_to_end(e);
    }
  }
  // A tuple or get-tuple-element aliases its operands, and a fused (not materialized) value is
  // computed inside its consumer: extend their operands' lifetime to their own.
  for (int64_t i = n - 1; i >= 0; --i) {
    if (Materialized(*nodes[i])) continue;
    for (const Node* operand : nodes[i]->operands()) {
      int64_t p = position.at(operand);
      last_use[p] = std::max(last_use[p], last_use[i]);
    }
  }
  std::vector<int64_t> size(n, 0);
  int64_t live = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!Materialized(*nodes[i]) || nodes[i]->shape().is_tuple()) continue;
    size[i] = nodes[i]->shape().byte_size();
    if (nodes[i]->opcode() == Opcode::kParameter) live += size[i];  // resident from the start
  }
  // frees[i]: bytes released after node i.
  std::vector<int64_t> frees(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (size[i] == 0) continue;
    // A value with no use is freed right after it is produced.
    int64_t end = last_use[i] < 0 ? i : last_use[i];
    frees[std::min(end, n)] += size[i];
  }
  int64_t peak = live;
  for (int64_t i = 0; i < n; ++i) {
    if (nodes[i]->opcode() != Opcode::kParameter) live += size[i];
    peak = std::max(peak, live);
    live -= frees[i];
  }
  return peak;
}

absl::StatusOr<Simulator> Simulator::Create(const Topology& topology, SimulatorOptions options) {
  TESSEL_ASSIGN_OR_RETURN(CostModel model, CostModel::Create(topology, options.cost));
  return Simulator(std::move(model), std::move(options));
}

absl::StatusOr<SimulationReport> Simulator::Run(const partitioner::SpmdProgram& program) const {
  const Topology& topology = cost_model_.topology();
  const int64_t num_devices = topology.num_devices();
  if (program.num_devices != num_devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("the program is partitioned for ", program.num_devices,
                     " devices but the topology \"", topology.name(), "\" has ", num_devices));
  }
  std::unique_ptr<Graph> flat;
  if (HasControlFlow(*program.program)) {
    TESSEL_ASSIGN_OR_RETURN(
        flat, InlineControlFlow(
                  *program.program,
                  [this](const Node& node) { return cost_model_.Cost(node, 0).seconds; },
                  options_.assumed_trip_count));
  }
  const Graph& graph = flat != nullptr ? *flat : *program.program;
  SimulationReport report;
  report.device_name = topology.device_spec().name;
  report.num_devices = num_devices;
  report.overlap = options_.overlap;
  // Classes are found from the replica groups alone, then each class is costed and scheduled
  // once: the work is O(nodes x classes + group members), never O(nodes x devices).
  TESSEL_ASSIGN_OR_RETURN(std::vector<int32_t> class_of,
                          ClassifyDevices(topology, graph.nodes(), report.classes));
  const ProgramCosts costs = CostProgram(cost_model_, graph.nodes(), report.classes, class_of,
                                         options_.costed_elsewhere, options_.unquantized);
  class_of = {};  // O(devices); the schedule needs only the classes
  const Schedules schedules =
      ScheduleClasses(graph.nodes(), costs, options_.record_trace, report.classes);
  const int64_t slowest = Summarize(options_.overlap, report);
  for (int64_t i = 0; i < costs.num_nodes(); ++i) report.flops_per_device += costs.local[i].flops;
  ReportMemory(cost_model_, graph, report);
  ReportTopOps(graph.nodes(), costs, slowest, options_.top_k, report);
  if (options_.record_trace) {
    RecordTrace(graph.nodes(), costs,
                options_.overlap ? schedules.overlap_start : schedules.in_order_start, report);
  }
  return report;
}

absl::Status WriteChromeTrace(const SimulationReport& report, const std::string& path) {
  if (report.trace.empty() && !report.classes.empty()) {
    return absl::FailedPreconditionError(
        "the simulation kept no trace; run it with SimulatorOptions::record_trace");
  }
  TraceEventWriter trace;
  const int64_t num_classes = static_cast<int64_t>(report.classes.size());
  const int64_t ici_track = num_classes, dcn_track = num_classes + 1;
  trace.AddProcess(0, absl::StrCat("simulated step on ", report.num_devices, " ",
                                   report.device_name.empty() ? "devices" : report.device_name));
  for (int64_t c = 0; c < num_classes; ++c) {
    const DeviceClass& dc = report.classes[c];
    trace.AddThread(0, c,
                    absl::StrCat("class ", c, ": ", dc.num_devices, " devices (e.g. device ",
                                 dc.representative_device, ")"));
  }
  trace.AddThread(0, ici_track, "ICI (class 0)");
  trace.AddThread(0, dcn_track, "DCN (class 0)");
  for (const TraceEvent& e : report.trace) {
    auto emit = [&](int64_t tid, double start_seconds, double seconds) {
      trace.AddComplete({.pid = 0,
                         .tid = tid,
                         .name = e.name,
                         .category = e.opcode,
                         .start_us = start_seconds * 1e6,
                         .duration_us = seconds * 1e6,
                         .args = {{"op", e.opcode}}});
    };
    emit(e.device_class, e.start_seconds, e.seconds);
    // The link tracks show class 0's collectives split into their ICI and DCN phases.
    if (e.device_class != 0) continue;
    if (e.ici_seconds > 0) emit(ici_track, e.start_seconds, e.ici_seconds);
    if (e.dcn_seconds > 0) emit(dcn_track, e.start_seconds + e.ici_seconds, e.dcn_seconds);
  }
  return trace.WriteFile(path);
}

}  // namespace tessel::mesh
