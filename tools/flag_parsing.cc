#include "tools/flag_parsing.h"

#include <cctype>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tessel/core/file_util.h"
#include "tessel/core/status_macros.h"

namespace tessel::tools {

namespace {

std::string Trim(absl::string_view piece) {
  std::string s(piece);
  s.erase(0, s.find_first_not_of(' '));
  s.erase(s.find_last_not_of(' ') + 1);
  return s;
}

}  // namespace

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
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": expected comma-separated integers of at most 15 digits, got \"", text, "\""));
    }
    values.push_back(std::stoll(s));
  }
  return values;
}

absl::StatusOr<std::vector<int64_t>> DefaultDeviceIds(const std::vector<int64_t>& shape,
                                                      const std::string& flag) {
  constexpr int64_t kMaxListedDevices = int64_t{1} << 24;
  int64_t size = 1;
  for (int64_t d : shape) {
    if (d <= 0) continue;
    if (size > kMaxListedDevices / d) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": the mesh holds more than ",
                                                     kMaxListedDevices,
                                                     " devices, the limit without --device-ids"));
    }
    size *= d;
  }
  std::vector<int64_t> ids(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) ids[static_cast<size_t>(i)] = i;
  return ids;
}

absl::flat_hash_map<std::string, int> EntryLines(const std::string& path) {
  absl::flat_hash_map<std::string, int> lines;
  std::ifstream in(path);
  std::string line;
  bool entry = false;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.rfind("ENTRY", 0) == 0) {
      entry = true;
      continue;
    }
    if (!entry) continue;
    if (line.rfind("}", 0) == 0) break;
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    if (line.compare(start, 5, "ROOT ") == 0) start = line.find_first_not_of(' ', start + 5);
    if (start == std::string::npos) continue;
    if (line[start] == '%') ++start;
    const size_t end = line.find_first_of(" =", start);
    if (end == std::string::npos || end == start) continue;
    lines.emplace(line.substr(start, end - start), number);
  }
  return lines;
}

absl::Status WithHloLine(const std::string& path, const absl::Status& status) {
  const std::string message(status.message());
  if (status.ok() || message.empty() || message[0] != '%') return status;
  const size_t end = message.find(':');
  if (end == std::string::npos) return status;
  const absl::flat_hash_map<std::string, int> lines = EntryLines(path);
  auto it = lines.find(std::string(message.substr(1, end - 1)));
  if (it == lines.end()) return status;
  return absl::Status(status.code(), absl::StrCat(path, ": line ", it->second, ": ", message));
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
  // Read again as LoadTopology read it (a regular file of bounded size, just parsed).
  TESSEL_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, "a JSON file", int64_t{64} << 20));
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
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
