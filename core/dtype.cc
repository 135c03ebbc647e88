#include "tessel/core/dtype.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tessel {

const std::string& DTypeName(DType dtype) {
  static const std::string* const kNames =
      new std::string[10]{"pred", "u8", "s32", "s64", "bf16", "f16", "f32", "f64", "u32", "u64"};
  return kNames[static_cast<int>(dtype)];
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kPred, DType::kU8, DType::kS32, DType::kS64, DType::kBF16, DType::kF16,
                  DType::kF32, DType::kF64, DType::kU32, DType::kU64}) {
    if (DTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown element type \"", std::string(name),
                   "\"; expected one of pred, u8, s32, s64, u32, u64, bf16, f16, f32, f64"));
}

int64_t ByteWidth(DType dtype) {
  switch (dtype) {
    case DType::kPred:
    case DType::kU8:
      return 1;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kS32:
    case DType::kU32:
    case DType::kF32:
      return 4;
    case DType::kS64:
    case DType::kU64:
    case DType::kF64:
      return 8;
  }
  return 0;
}

bool IsFloating(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32 ||
         dtype == DType::kF64;
}

bool IsInteger(DType dtype) {
  return dtype == DType::kS32 || dtype == DType::kS64 || dtype == DType::kU8 ||
         dtype == DType::kU32 || dtype == DType::kU64;
}

}  // namespace tessel
