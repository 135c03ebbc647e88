#include "tessel/core/trace_events.h"

#include "nlohmann/json.hpp"
#include "tessel/core/file_util.h"

namespace tessel {

void TraceEventWriter::AddProcess(int64_t pid, std::string name) {
  names_.push_back({pid, -1, std::move(name)});
}

void TraceEventWriter::AddThread(int64_t pid, int64_t tid, std::string name) {
  names_.push_back({pid, tid, std::move(name)});
}

void TraceEventWriter::AddComplete(TraceCompleteEvent event) {
  events_.push_back(std::move(event));
}

std::string TraceEventWriter::ToJson() const {
  nlohmann::json events = nlohmann::json::array();
  for (const Name& n : names_) {
    nlohmann::json m = {{"ph", "M"},
                        {"name", n.tid < 0 ? "process_name" : "thread_name"},
                        {"pid", n.pid},
                        {"args", {{"name", n.name}}}};
    if (n.tid >= 0) m["tid"] = n.tid;
    events.push_back(std::move(m));
  }
  for (const TraceCompleteEvent& e : events_) {
    nlohmann::json x = {{"ph", "X"},           {"pid", e.pid},      {"tid", e.tid},
                        {"name", e.name},      {"cat", e.category}, {"ts", e.start_us},
                        {"dur", e.duration_us}};
    if (!e.args.empty()) {
      nlohmann::json args = nlohmann::json::object();
      for (const auto& arg : e.args) {
        std::visit([&](const auto& v) { args[arg.first] = v; }, arg.second);
      }
      x["args"] = std::move(args);
    }
    events.push_back(std::move(x));
  }
  return nlohmann::json({{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}}).dump();
}

absl::Status TraceEventWriter::WriteFile(const std::string& path) const {
  return WriteFileAtomically(path, ToJson() + "\n", "trace file");
}

}  // namespace tessel
