// Human-readable quantities for reports and command-line output.
//
//   FormatBytes(1536.0)                == "1.50 KiB"
//   FormatBytes(34359738368.0)         == "32.00 GiB"
//   FormatBytes(100.0)                 == "100 B"
//
// Source: the binary prefixes of IEC 80000-13 (KiB = 1024 bytes, MiB = 1024^2 bytes, ...).
#ifndef TESSEL_CORE_FORMAT_H_
#define TESSEL_CORE_FORMAT_H_

#include <string>

namespace tessel {

// `bytes` in the largest binary unit (KiB, MiB, GiB, TiB, PiB, EiB) that keeps the number at
// least 1, with two decimals ("1.50 GiB"); below 1 KiB a whole number of bytes ("100 B").
// Units: `bytes` is a byte count (a double, so averages and totals above 2^63 fit). Negative
// counts are formatted by their magnitude with a leading "-". Never fails.
[[nodiscard]] std::string FormatBytes(double bytes);

}  // namespace tessel

#endif  // TESSEL_CORE_FORMAT_H_
