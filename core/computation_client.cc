#include "tessel/core/computation_client.h"

#include "absl/strings/str_cat.h"
#include "tessel/core/status_macros.h"

namespace tessel {

const std::string& DeviceData::sharding() const {
  static const std::string* const kWhole = new std::string();
  return *kWhole;
}

absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> LocalComputationClient::Execute(
    const std::shared_ptr<const Graph>& graph, uint64_t /*fingerprint*/,
    absl::Span<const std::shared_ptr<const DeviceData>> arguments, ExecutionStats* stats) {
  std::vector<const Literal*> literals;
  literals.reserve(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* whole = dynamic_cast<const LiteralData*>(arguments[i].get());
    if (whole == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", i, " of ", graph->name(),
          " holds data of another computation client (sharding ", arguments[i]->sharding(),
          "); the local executor takes whole literals only"));
    }
    literals.push_back(&whole->literal());
  }
  Executor executor(options_);
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> results,
                          executor.RunBorrowed(*graph, literals, stats));
  std::vector<std::shared_ptr<const DeviceData>> values;
  values.reserve(results.size());
  for (Literal& r : results) values.push_back(std::make_shared<const LiteralData>(std::move(r)));
  return values;
}

absl::StatusOr<Literal> LocalComputationClient::TransferFromDevice(const DeviceData& data) {
  const auto* whole = dynamic_cast<const LiteralData*>(&data);
  if (whole == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the local client cannot read a value of another computation client (sharding ",
        data.sharding(), ")"));
  }
  return whole->literal();
}

}  // namespace tessel
