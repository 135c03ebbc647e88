#include "tessel/core/format.h"

#include <cmath>
#include <iterator>

#include "absl/strings/str_format.h"

namespace tessel {

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const char* sign = bytes < 0 ? "-" : "";
  double value = std::fabs(bytes);
  if (!(value >= 1024.0)) return absl::StrFormat("%s%.0f B", sign, value);
  int unit = -1;
  while (value >= 1024.0 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%s%.2f %s", sign, value, kUnits[unit]);
}

}  // namespace tessel
