#include "tessel/mesh/sim/inline_control_flow.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/while_loop_analysis.h"

namespace tessel::mesh {
namespace {

// Copies computations into one flat graph.
class Inliner {
 public:
  Inliner(Graph& out, const std::function<double(const Node&)>& node_seconds,
          std::optional<int64_t> assumed_trip_count)
      : out_(out), node_seconds_(node_seconds), assumed_trip_count_(assumed_trip_count) {}

  // Copies `comp` into the flat graph with its parameter k bound to args[k] (the entry: args
  // empty, parameters copied); returns the copy of its root. Names carry `prefix` so a body's
  // iterations stay apart in the trace.
  absl::StatusOr<Node*> Copy(const Graph& comp, const std::vector<Node*>& args,
                             const std::string& prefix) {
    absl::flat_hash_map<const Node*, Node*> copies;
    for (const Node* node : comp.nodes()) {
      std::vector<Node*> operands;
      for (const Node* operand : node->operands()) operands.push_back(copies.at(operand));
      Node* copy = nullptr;
      if (node->opcode() == Opcode::kParameter && !args.empty()) {
        copy = args.at(node->attrs().parameter_number);
      } else if (node->opcode() == Opcode::kWhile) {
        TESSEL_ASSIGN_OR_RETURN(copy, Loop(*node, operands[0], prefix));
      } else if (node->opcode() == Opcode::kConditional) {
        TESSEL_ASSIGN_OR_RETURN(copy, Branch(*node, operands, prefix));
      } else {
        copy = out_.AddNodeUnchecked(node->opcode(), node->shape(), std::move(operands),
                                     node->attrs(), absl::StrCat(prefix, node->name()));
        copy->set_sharding(node->sharding());
      }
      copies[node] = copy;
    }
    return copies.at(comp.root());
  }

  // The number of nodes the flat copy of `comp` would hold, or an error naming the first loop
  // that takes it past kMaxInlinedNodes. Counted before copying: a trip count of 2^31 would
  // otherwise copy the body until memory runs out.
  absl::StatusOr<int64_t> FlatNodes(const Graph& comp) {
    int64_t total = 0;
    for (const Node* node : comp.nodes()) {
      int64_t count = 1;
      const auto& called = node->attrs().called_computations;
      if (node->opcode() == Opcode::kWhile) {
        TESSEL_ASSIGN_OR_RETURN(int64_t trips, TripCount(*node));
        TESSEL_ASSIGN_OR_RETURN(int64_t condition, FlatNodes(*called[0]));
        TESSEL_ASSIGN_OR_RETURN(int64_t body, FlatNodes(*called[1]));
        // (trips + 1) conditions and trips bodies; each factor is at most kMaxInlinedNodes, so
        // the division keeps the product in range.
        const int64_t per_trip = condition + body;
        if (trips > (kMaxInlinedNodes - condition) / std::max<int64_t>(per_trip, 1)) {
          return absl::InvalidArgumentError(
              absl::StrCat("while %", node->name(), ": ", trips, " iterations of ", per_trip,
                           " nodes would make a straight-line program of more than ",
                           kMaxInlinedNodes, " nodes, the simulator's limit"));
        }
        count = trips * per_trip + condition;
      } else if (node->opcode() == Opcode::kConditional) {
        count = 0;
        for (const auto& branch : called) {
          TESSEL_ASSIGN_OR_RETURN(int64_t n, FlatNodes(*branch));
          count = std::max(count, n);
        }
      }
      total += count;
      if (total > kMaxInlinedNodes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "%", comp.name(), ": its loops would make a straight-line program of more than ",
            kMaxInlinedNodes, " nodes, the simulator's limit"));
      }
    }
    return total;
  }

  // The cost of `comp` with its nested control flow (the costlier branch, trip count x body).
  absl::StatusOr<double> Seconds(const Graph& comp) {
    double total = 0;
    for (const Node* node : comp.nodes()) {
      const auto& called = node->attrs().called_computations;
      if (node->opcode() == Opcode::kWhile) {
        TESSEL_ASSIGN_OR_RETURN(int64_t trips, TripCount(*node));
        TESSEL_ASSIGN_OR_RETURN(double condition, Seconds(*called[0]));
        TESSEL_ASSIGN_OR_RETURN(double body, Seconds(*called[1]));
        total += static_cast<double>(trips) * (condition + body) + condition;
      } else if (node->opcode() == Opcode::kConditional) {
        double costliest = 0;
        for (const auto& branch : called) {
          TESSEL_ASSIGN_OR_RETURN(double s, Seconds(*branch));
          costliest = std::max(costliest, s);
        }
        total += costliest;
      } else {
        total += node_seconds_(*node);
      }
    }
    return total;
  }

 private:
  absl::StatusOr<int64_t> TripCount(const Node& loop) {
    std::optional<int64_t> trips = ComputeWhileLoopTripCount(loop);
    if (trips.has_value()) return *trips;
    if (assumed_trip_count_.has_value()) return *assumed_trip_count_;
    return absl::FailedPreconditionError(absl::StrCat(
        "while %", loop.name(),
        ": unknown trip count (no known_trip_count in its backend_config and not a counted loop:"
        " a state element with a constant init, += constant in the body, compared with a "
        "constant in the condition); give one to assume (tessel simulate --assume-trip-count N, "
        "tessel.simulate(assume_trip_count=N))"));
  }

  absl::StatusOr<Node*> Loop(const Node& loop, Node* init, const std::string& prefix) {
    TESSEL_ASSIGN_OR_RETURN(int64_t trips, TripCount(loop));
    const Graph& condition = *loop.attrs().called_computations[0];
    const Graph& body = *loop.attrs().called_computations[1];
    Node* state = init;
    for (int64_t i = 0; i <= trips; ++i) {
      const std::string iteration = absl::StrCat(prefix, loop.name(), ".", i, "/");
      TESSEL_ASSIGN_OR_RETURN(Node * unused, Copy(condition, {state}, iteration));
      (void)unused;
      if (i == trips) break;
      TESSEL_ASSIGN_OR_RETURN(state, Copy(body, {state}, iteration));
    }
    return state;
  }

  absl::StatusOr<Node*> Branch(const Node& node, const std::vector<Node*>& operands,
                               const std::string& prefix) {
    const auto& branches = node.attrs().called_computations;
    size_t costliest = 0;
    double most = -1;
    for (size_t k = 0; k < branches.size(); ++k) {
      TESSEL_ASSIGN_OR_RETURN(double s, Seconds(*branches[k]));
      if (s > most) {
        most = s;
        costliest = k;
      }
    }
    return Copy(*branches[costliest], {operands[costliest + 1]},
                absl::StrCat(prefix, node.name(), ".branch", costliest, "/"));
  }

  Graph& out_;
  const std::function<double(const Node&)>& node_seconds_;
  std::optional<int64_t> assumed_trip_count_;
};

}  // namespace

bool HasControlFlow(const Graph& graph) {
  for (const Node* node : graph.nodes()) {
    if (node->opcode() == Opcode::kWhile || node->opcode() == Opcode::kConditional) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Graph>> InlineControlFlow(
    const Graph& program, const std::function<double(const Node&)>& node_seconds,
    std::optional<int64_t> assumed_trip_count) {
  auto flat = std::make_unique<Graph>(program.name());
  Inliner inliner(*flat, node_seconds, assumed_trip_count);
  TESSEL_RETURN_IF_ERROR(inliner.FlatNodes(program).status());
  TESSEL_ASSIGN_OR_RETURN(Node * root, inliner.Copy(program, {}, ""));
  flat->set_root(root);
  return flat;
}

}  // namespace tessel::mesh
