// FormatPartitionExplanation (partitioner.h): the text of `tessel partition --explain`.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tessel/partitioner/partitioner.h"

namespace tessel::partitioner {

namespace {

// Seconds with three significant digits: the cost model's estimates are not exact, and
// a fixed format keeps the text identical on every host.
std::string Seconds(double seconds) { return absl::StrFormat("%.3g s", seconds); }

std::string Where(const std::string& computation, const std::string& entry) {
  return computation == entry ? std::string() : absl::StrCat("in %", computation, ": ");
}

}  // namespace

std::string FormatPartitionExplanation(const Graph& graph,
                                       const std::vector<spmd::Sharding>& shardings,
                                       const PartitionExplanation& explanation,
                                       const absl::flat_hash_map<std::string, int>& line_of) {
  std::string out = "// why each sharding:\n";
  absl::StrAppend(&out,
                  FormatShardingExplanation(graph, shardings, explanation.propagation, line_of));
  absl::StrAppend(&out,
                  "// dot strategies (iteration-space sharding; seconds = resharding both operands "
                  "+ the local dot + moving the result to its target):\n");
  if (explanation.dots.empty()) absl::StrAppend(&out, "//   none\n");
  for (const PartitionExplanation::DotChoice& dot : explanation.dots) {
    absl::StrAppend(&out, Where(dot.computation, graph.name()), "%", dot.instruction, ": chose ",
                    dot.candidates[dot.chosen], " ", dot.spaces[dot.chosen].ToString(), " ",
                    Seconds(dot.seconds[dot.chosen]), "\n");
    for (size_t i = 0; i < dot.candidates.size(); ++i) {
      if (static_cast<int64_t>(i) == dot.chosen) continue;
      absl::StrAppend(&out, "  over ", dot.candidates[i], " ", dot.spaces[i].ToString(), " ",
                      Seconds(dot.seconds[i]), "\n");
    }
  }
  absl::StrAppend(&out,
                  "// collectives (bytes of each device's result; seconds on the cost model):\n");
  if (explanation.collectives.empty()) absl::StrAppend(&out, "//   none\n");
  for (const PartitionExplanation::Collective& c : explanation.collectives) {
    absl::StrAppend(&out, Where(c.computation, graph.name()), "%", c.name, " = ", c.kind, " for %",
                    c.instruction, " (", c.opcode, "): ", c.reason, "; ", c.bytes, " bytes, ",
                    Seconds(c.seconds), "\n");
  }
  return out;
}

}  // namespace tessel::partitioner
