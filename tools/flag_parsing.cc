#include "tools/flag_parsing.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tessel/core/status_macros.h"

namespace tessel::tools {

namespace {

std::string Trim(absl::string_view piece) {
  std::string s(piece);
  s.erase(0, s.find_first_not_of(' '));
  s.erase(s.find_last_not_of(' ') + 1);
  return s;
}

// `text` as a finite number, or nullopt. CLI11 converts the text to the flag's type after the
// checks, so this only decides the sign; the conversion refuses what does not fit the type.
std::optional<long double> FiniteNumber(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  long double value = std::strtold(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

CLI::Validator SignCheck(bool allow_zero) {
  const char* bound = allow_zero ? ">= 0" : "> 0";
  return CLI::Validator(
      [allow_zero, bound](std::string& text) -> std::string {
        std::optional<long double> value = FiniteNumber(text);
        if (!value || *value < 0 || (!allow_zero && *value == 0)) {
          return absl::StrCat("must be a number ", bound, ", got \"", text, "\"");
        }
        return std::string();
      },
      allow_zero ? "NONNEGATIVE" : "POSITIVE");
}

}  // namespace

CLI::Validator Positive() { return SignCheck(/*allow_zero=*/false); }
CLI::Validator NonNegative() { return SignCheck(/*allow_zero=*/true); }

absl::StatusOr<std::vector<int64_t>> ParseInts(const std::string& text, const std::string& flag) {
  std::vector<int64_t> values;
  if (text.find_first_not_of(' ') == std::string::npos) return values;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    std::string s = Trim(piece);
    size_t digits = (!s.empty() && s[0] == '-') ? 1 : 0;
    bool ok = s.size() > digits && s.size() <= 15;
    for (size_t i = digits; ok && i < s.size(); ++i) {
      ok = std::isdigit(static_cast<unsigned char>(s[i]));
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": expected comma-separated integers, got \"", text, "\""));
    }
    values.push_back(std::stoll(s));
  }
  return values;
}

std::vector<std::string> ParseNames(const std::string& text) {
  std::vector<std::string> names;
  if (text.find_first_not_of(' ') == std::string::npos) return names;
  for (absl::string_view piece : absl::StrSplit(text, ',')) names.push_back(Trim(piece));
  return names;
}

absl::StatusOr<mesh::Topology> LoadSlices(const std::string& path, int64_t num_slices) {
  TESSEL_ASSIGN_OR_RETURN(mesh::Topology one, mesh::LoadTopology(path));
  if (num_slices <= 1) return one;
  if (one.num_slices() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--num-slices ", num_slices, ": ", path, " has ",
                                                   one.num_slices(), " slices; it must have one"));
  }
  // Checked before the slices are copied: a huge N would otherwise build N JSON slices (a hang
  // or an out-of-memory) before ParseTopology's own device bound could refuse them.
  if (num_slices > mesh::kMaxDevices / one.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num-slices ", num_slices, ": ", num_slices, " copies of ", path, " (", one.num_devices(),
        " devices each) exceed the limit of ", mesh::kMaxDevices, " devices"));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.contains("slices") || !json["slices"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read its slices"));
  }
  nlohmann::json slices = nlohmann::json::array();
  for (int64_t i = 0; i < num_slices; ++i) slices.push_back(json["slices"][0]);
  json["slices"] = slices;
  json["name"] = absl::StrCat(num_slices, "x ", one.name());
  return mesh::ParseTopology(json.dump(), path);
}

}  // namespace tessel::tools
