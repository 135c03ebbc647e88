#include "tessel/core/computation_client.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel {

const std::string& DeviceData::sharding() const {
  static const std::string* const kWhole = new std::string();
  return *kWhole;
}

namespace {

// One donation flag per argument, or kInvalidArgument naming the graph and both counts.
absl::Status CheckDonationFlags(const Graph& graph, size_t flags, size_t arguments) {
  if (flags == arguments) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("execute ", graph.name(), ": ", flags,
                                                 " donation flags for ", arguments, " arguments"));
}

}  // namespace

absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> ComputationClient::ExecuteDonated(
    const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
    absl::Span<const std::shared_ptr<const DeviceData>> arguments, const std::vector<bool>& donated,
    ExecutionStats* stats) {
  TESSEL_RETURN_IF_ERROR(CheckDonationFlags(*graph, donated.size(), arguments.size()));
  return Execute(graph, fingerprint, arguments, stats);
}

absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> LocalComputationClient::Execute(
    const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
    absl::Span<const std::shared_ptr<const DeviceData>> arguments, ExecutionStats* stats) {
  return ExecuteDonated(graph, fingerprint, arguments, std::vector<bool>(arguments.size(), false),
                        stats);
}

absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>>
LocalComputationClient::ExecuteDonated(
    const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
    absl::Span<const std::shared_ptr<const DeviceData>> arguments, const std::vector<bool>& donated,
    ExecutionStats* stats) {
  TESSEL_RETURN_IF_ERROR(CheckDonationFlags(*graph, donated.size(), arguments.size()));
  std::vector<const Literal*> literals;
  std::vector<Literal*> donated_literals;
  std::vector<const LiteralData*> donated_data;
  literals.reserve(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* whole = dynamic_cast<const LiteralData*>(arguments[i].get());
    if (whole == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", i, " of ", graph->name(),
          " holds data of another computation client (sharding ", arguments[i]->sharding(),
          "); the local executor takes whole literals only"));
    }
    if (whole->donated()) {
      return absl::FailedPreconditionError(
          absl::StrCat("parameter ", i, " of ", graph->name(),
                       " was donated to an earlier execution; its value is gone"));
    }
    literals.push_back(&whole->literal());
    if (std::find(donated.begin(), donated.end(), true) != donated.end()) {
      donated_literals.push_back(donated[i] ? whole->literal_for_donation() : nullptr);
      if (donated[i]) donated_data.push_back(whole);
    }
  }
  ExecutorOptions options;
  {
    std::lock_guard<std::mutex> lock(mu_);
    options = options_;
  }
  Executor executor(options);
  ExecutionDonation donation{.literals = donated_literals};
  TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedProgram> program,
                          Prepared(executor, graph, fingerprint));
  absl::StatusOr<std::vector<Literal>> run =
      program != nullptr ? executor.RunBorrowed(*program, literals, stats, &donation)
                         : executor.RunBorrowed(*graph, literals, stats, &donation);
  // Taken buffers are spent whether or not the run then succeeded.
  if (donation.taken) {
    for (const LiteralData* data : donated_data) data->MarkDonated();
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> results, std::move(run));
  std::vector<std::shared_ptr<const DeviceData>> values;
  values.reserve(results.size());
  for (Literal& r : results) values.push_back(std::make_shared<const LiteralData>(std::move(r)));
  return values;
}

absl::StatusOr<std::shared_ptr<const PreparedProgram>> LocalComputationClient::Prepared(
    const Executor& executor, const std::shared_ptr<const Graph>& graph, uint64_t fingerprint) {
  TESSEL_ASSIGN_OR_RETURN(bool reuse, ReusePreparedPrograms());
  if (!reuse) return std::shared_ptr<const PreparedProgram>();
  const bool fusion = executor.options().fusion;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = prepared_.find(fingerprint);
      it != prepared_.end() && it->second.graph == graph && it->second.fusion == fusion) {
    return it->second.program;
  }
  // Argument errors must come before node errors (as an unprepared run reports them): a graph
  // that does not prepare runs unprepared, which reports its errors in that order.
  absl::StatusOr<std::shared_ptr<const PreparedProgram>> program = executor.Prepare(*graph);
  if (!program.ok()) return std::shared_ptr<const PreparedProgram>();
  if (prepared_.size() >= kMaxPreparedPrograms) prepared_.clear();
  prepared_[fingerprint] = PreparedEntry{graph, fusion, *program};
  return *std::move(program);
}

absl::StatusOr<Literal> LocalComputationClient::TransferFromDevice(const DeviceData& data) {
  const auto* whole = dynamic_cast<const LiteralData*>(&data);
  if (whole == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the local client cannot read a value of another computation client (sharding ",
        data.sharding(), ")"));
  }
  if (whole->donated()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read a value of shape ",
                                                      data.shape().ToString(),
                                                      ": it was donated to an execution"));
  }
  return whole->literal();
}

}  // namespace tessel
