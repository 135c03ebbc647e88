// Chrome trace-event JSON (the format Perfetto and chrome://tracing open): one writer for every
// timeline Tessel produces, the simulator's predicted step and the host runtime's measured one.
//
//   TraceEventWriter trace;
//   trace.AddProcess(/*pid=*/0, "host 0");
//   trace.AddThread(/*pid=*/0, /*tid=*/3, "device 3");
//   trace.AddComplete({.pid = 0, .tid = 3, .name = "dot.7", .category = "execute",
//                      .start_us = 12.5, .duration_us = 40.0, .args = {{"bytes", 1024}}});
//   TESSEL_RETURN_IF_ERROR(trace.WriteFile("step.json"));
//
// Events: process_name and thread_name metadata ("ph":"M") name the tracks; complete events
// ("ph":"X") carry a start and a duration in microseconds. Output is one JSON object
// {"displayTimeUnit":"ms","traceEvents":[...]}, metadata first, then events in insertion order.
// Source: the Trace Event Format document (Google, "Trace Event Format", JSON Object Format,
// Complete Events and Metadata Events).
#ifndef TESSEL_CORE_TRACE_EVENTS_H_
#define TESSEL_CORE_TRACE_EVENTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace tessel {

// One complete event ("ph":"X"). Times in microseconds from the trace's origin; `args` become
// the event's "args" object (omitted when empty).
struct TraceCompleteEvent {
  int64_t pid = 0;
  int64_t tid = 0;
  std::string name;
  std::string category;  // "cat"
  double start_us = 0;
  double duration_us = 0;
  std::vector<std::pair<std::string, std::variant<int64_t, double, std::string>>> args;
};

class TraceEventWriter {
 public:
  // Names process `pid` (a track group: a host, or the simulated step).
  void AddProcess(int64_t pid, std::string name);
  // Names thread `tid` of process `pid` (a track: a device, a device class, a link).
  void AddThread(int64_t pid, int64_t tid, std::string name);
  void AddComplete(TraceCompleteEvent event);

  int64_t num_events() const { return static_cast<int64_t>(events_.size()); }

  // The whole trace as one JSON document.
  [[nodiscard]] std::string ToJson() const;

  // Writes ToJson() to `path` atomically (WriteFileAtomically, core/file_util.h): to a temporary
  // file beside it, flushed, then renamed over `path`, so a reader or a crash never sees a torn
  // trace.
  // Errors: kInvalidArgument naming `path` when it cannot be written or renamed.
  [[nodiscard]] absl::Status WriteFile(const std::string& path) const;

 private:
  struct Name {
    int64_t pid = 0;
    int64_t tid = -1;  // -1: a process name
    std::string name;
  };
  std::vector<Name> names_;
  std::vector<TraceCompleteEvent> events_;
};

}  // namespace tessel

#endif  // TESSEL_CORE_TRACE_EVENTS_H_
