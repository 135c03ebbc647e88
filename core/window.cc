#include "tessel/core/window.h"

#include <algorithm>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tessel/core/status_macros.h"

namespace tessel {

namespace {

absl::Status OpError(Opcode opcode, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(OpcodeName(opcode), ": ", why));
}

// Parses "3x3" (or "1_1x0_2" for pad) into one string per dim.
std::vector<std::string> SplitDims(std::string_view value) {
  std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(value.data(), value.size()), 'x');
  return parts;
}

absl::Status BadField(std::string_view field, std::string_view value, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("window field ", std::string(field), "=",
                                                 std::string(value), ": ", std::string(why)));
}

// Applies one "name=value" field of a window to `window` (already sized by `size`).
absl::Status ApplyWindowField(std::string_view name, std::string_view value,
                              std::vector<WindowDim>& window) {
  std::vector<std::string> parts = SplitDims(value);
  if (parts.size() != window.size()) {
    return BadField(name, value,
                    absl::StrCat("has ", parts.size(), " dims but size has ", window.size()));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    WindowDim& d = window[i];
    if (name == "pad") {
      std::vector<std::string> lh = absl::StrSplit(parts[i], '_');
      if (lh.size() != 2 || !absl::SimpleAtoi(lh[0], &d.padding_low) ||
          !absl::SimpleAtoi(lh[1], &d.padding_high)) {
        return BadField(name, value, absl::StrCat("expected low_high, got \"", parts[i], "\""));
      }
      continue;
    }
    int64_t v = 0;
    if (!absl::SimpleAtoi(parts[i], &v)) {
      return BadField(name, value, absl::StrCat("expected an integer, got \"", parts[i], "\""));
    }
    if (name == "rhs_reversal") {
      if (v != 0 && v != 1) return BadField(name, value, "expected 0 or 1 per dim");
      d.window_reversal = v == 1;
      continue;
    }
    if (v < 1) return BadField(name, value, "every value must be >= 1");
    if (name == "stride") {
      d.stride = v;
    } else if (name == "lhs_dilate") {
      d.base_dilation = v;
    } else if (name == "rhs_dilate") {
      d.window_dilation = v;
    } else {
      return BadField(name, value,
                      "unknown field; expected size, stride, pad, lhs_dilate, rhs_dilate or "
                      "rhs_reversal");
    }
  }
  return absl::OkStatus();
}

// Positions of the labels of one dim_labels part: `a`/`b` (b/f or i/o) and the spatial digits.
struct LabelPart {
  int64_t first = -1;
  int64_t second = -1;
  std::vector<int64_t> spatial;
};

absl::StatusOr<LabelPart> ParseLabelPart(std::string_view part, char first, char second,
                                         std::string_view whole) {
  LabelPart out;
  std::vector<int64_t> spatial_at(part.size(), -1);
  auto error = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("dim_labels=", std::string(whole), ": part \"",
                                                   std::string(part), "\" ", std::string(why)));
  };
  for (size_t pos = 0; pos < part.size(); ++pos) {
    const char c = part[pos];
    const int64_t p = static_cast<int64_t>(pos);
    if (c == first || c == second) {
      int64_t& slot = c == first ? out.first : out.second;
      if (slot >= 0) return error(absl::StrCat("repeats '", std::string(1, c), "'"));
      slot = p;
    } else if (c >= '0' && c <= '9') {
      const int64_t k = c - '0';
      if (static_cast<int64_t>(out.spatial.size()) <= k) out.spatial.resize(k + 1, -1);
      if (out.spatial[k] >= 0) return error(absl::StrCat("repeats '", std::string(1, c), "'"));
      out.spatial[k] = p;
    } else {
      return error(absl::StrCat("has unknown label '", std::string(1, c), "'; expected ",
                                std::string(1, first), ", ", std::string(1, second),
                                " or spatial digits"));
    }
  }
  if (out.first < 0 || out.second < 0) {
    return error(absl::StrCat("needs both '", std::string(1, first), "' and '",
                              std::string(1, second), "'"));
  }
  for (size_t k = 0; k < out.spatial.size(); ++k) {
    if (out.spatial[k] < 0) return error(absl::StrCat("lacks spatial dim ", k));
  }
  return out;
}

std::string LabelsOf(int64_t rank, int64_t first_dim, char first, int64_t second_dim, char second,
                     absl::Span<const int64_t> spatial) {
  std::string s(rank, '?');
  if (first_dim >= 0 && first_dim < rank) s[first_dim] = first;
  if (second_dim >= 0 && second_dim < rank) s[second_dim] = second;
  for (size_t k = 0; k < spatial.size(); ++k) {
    if (spatial[k] >= 0 && spatial[k] < rank) s[spatial[k]] = static_cast<char>('0' + k % 10);
  }
  return s;
}

// Checks that {first, second, spatial...} is a permutation of [0, rank).
absl::Status CheckConvDims(std::string_view what, const Shape& shape, int64_t a, int64_t b,
                           absl::Span<const int64_t> spatial) {
  std::vector<int64_t> all = {a, b};
  all.insert(all.end(), spatial.begin(), spatial.end());
  if (static_cast<int64_t>(all.size()) != shape.rank()) {
    return OpError(Opcode::kConvolution,
                   absl::StrCat(std::string(what), " has rank ", shape.rank(), " (",
                                shape.ToString(), ") but dim_labels name ", all.size(), " dims"));
  }
  std::vector<bool> seen(shape.rank(), false);
  for (int64_t d : all) {
    if (d < 0 || d >= shape.rank() || seen[d]) {
      return OpError(Opcode::kConvolution,
                     absl::StrCat(std::string(what), " dims {", absl::StrJoin(all, ","),
                                  "} are not a permutation of rank ", shape.rank()));
    }
    seen[d] = true;
  }
  return absl::OkStatus();
}

absl::Status CheckWindow(Opcode opcode, absl::Span<const WindowDim> window, int64_t rank,
                         const Shape& operand) {
  if (static_cast<int64_t>(window.size()) != rank) {
    return OpError(opcode, absl::StrCat("window has ", window.size(), " dims but the operand ",
                                        operand.ToString(), " needs ", rank));
  }
  for (size_t i = 0; i < window.size(); ++i) {
    const WindowDim& w = window[i];
    if (w.size < 1 || w.stride < 1 || w.window_dilation < 1 || w.base_dilation < 1) {
      return OpError(opcode, absl::StrCat("window dim ", i,
                                          ": size, stride and dilations must be >= 1, got window={",
                                          WindowToString(window), "}"));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> WindowedDims(const Shape& operand, absl::Span<const WindowDim> window) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    dims.push_back(WindowOutputSize(window[d], operand.dim(d)));
  }
  return dims;
}

}  // namespace

std::string WindowToString(absl::Span<const WindowDim> window) {
  if (window.empty()) return "";
  auto join = [&](auto field) {
    return absl::StrJoin(
        window, "x", [&](std::string* out, const WindowDim& d) { absl::StrAppend(out, field(d)); });
  };
  std::vector<std::string> fields = {
      absl::StrCat("size=", join([](const WindowDim& d) { return absl::StrCat(d.size); }))};
  auto any = [&](auto pred) { return std::any_of(window.begin(), window.end(), pred); };
  if (any([](const WindowDim& d) { return d.stride != 1; })) {
    fields.push_back(
        absl::StrCat("stride=", join([](const WindowDim& d) { return absl::StrCat(d.stride); })));
  }
  if (any([](const WindowDim& d) { return d.padding_low != 0 || d.padding_high != 0; })) {
    fields.push_back(absl::StrCat("pad=", join([](const WindowDim& d) {
                                    return absl::StrCat(d.padding_low, "_", d.padding_high);
                                  })));
  }
  if (any([](const WindowDim& d) { return d.base_dilation != 1; })) {
    fields.push_back(absl::StrCat(
        "lhs_dilate=", join([](const WindowDim& d) { return absl::StrCat(d.base_dilation); })));
  }
  if (any([](const WindowDim& d) { return d.window_dilation != 1; })) {
    fields.push_back(absl::StrCat(
        "rhs_dilate=", join([](const WindowDim& d) { return absl::StrCat(d.window_dilation); })));
  }
  if (any([](const WindowDim& d) { return d.window_reversal; })) {
    fields.push_back(absl::StrCat("rhs_reversal=", join([](const WindowDim& d) {
                                    return absl::StrCat(d.window_reversal ? 1 : 0);
                                  })));
  }
  return absl::StrJoin(fields, " ");
}

absl::StatusOr<std::vector<WindowDim>> ParseWindow(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (absl::string_view field :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ' ', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[1].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("window field \"", field, "\": expected name=value"));
    }
    for (const auto& [name, value] : fields) {
      if (name == kv[0]) {
        return absl::InvalidArgumentError(absl::StrCat("window field ", name, " appears twice"));
      }
    }
    fields.emplace_back(kv[0], kv[1]);
  }
  std::vector<WindowDim> window;
  if (fields.empty()) return window;
  auto size =
      std::find_if(fields.begin(), fields.end(), [](const auto& f) { return f.first == "size"; });
  if (size == fields.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("window {", std::string(text), "} has no size field"));
  }
  for (const std::string& part : SplitDims(size->second)) {
    WindowDim d;
    if (!absl::SimpleAtoi(part, &d.size) || d.size < 1) {
      return BadField("size", size->second,
                      absl::StrCat("expected a positive integer, got \"", part, "\""));
    }
    window.push_back(d);
  }
  for (const auto& [name, value] : fields) {
    if (name == "size") continue;
    TESSEL_RETURN_IF_ERROR(ApplyWindowField(name, value, window));
  }
  return window;
}

std::string DimLabelsToString(const ConvolutionDimensionNumbers& d) {
  const int64_t rank = static_cast<int64_t>(d.input_spatial_dimensions.size()) + 2;
  return absl::StrCat(LabelsOf(rank, d.input_batch_dimension, 'b', d.input_feature_dimension, 'f',
                               d.input_spatial_dimensions),
                      "_",
                      LabelsOf(rank, d.kernel_input_feature_dimension, 'i',
                               d.kernel_output_feature_dimension, 'o', d.kernel_spatial_dimensions),
                      "->",
                      LabelsOf(rank, d.output_batch_dimension, 'b', d.output_feature_dimension, 'f',
                               d.output_spatial_dimensions));
}

absl::StatusOr<ConvolutionDimensionNumbers> ParseDimLabels(std::string_view text) {
  const size_t arrow = text.find("->");
  const size_t underscore = text.find('_');
  if (arrow == std::string_view::npos || underscore == std::string_view::npos ||
      underscore > arrow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dim_labels=", std::string(text), ": expected LHS_RHS->OUT, e.g. b01f_01io->b01f"));
  }
  TESSEL_ASSIGN_OR_RETURN(LabelPart lhs,
                          ParseLabelPart(text.substr(0, underscore), 'b', 'f', text));
  TESSEL_ASSIGN_OR_RETURN(
      LabelPart rhs,
      ParseLabelPart(text.substr(underscore + 1, arrow - underscore - 1), 'i', 'o', text));
  TESSEL_ASSIGN_OR_RETURN(LabelPart out, ParseLabelPart(text.substr(arrow + 2), 'b', 'f', text));
  if (lhs.spatial.size() != rhs.spatial.size() || lhs.spatial.size() != out.spatial.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dim_labels=", std::string(text), ": lhs, rhs and output have ", lhs.spatial.size(), ", ",
        rhs.spatial.size(), " and ", out.spatial.size(), " spatial dims; they must agree"));
  }
  ConvolutionDimensionNumbers d;
  d.input_batch_dimension = lhs.first;
  d.input_feature_dimension = lhs.second;
  d.input_spatial_dimensions = lhs.spatial;
  d.kernel_input_feature_dimension = rhs.first;
  d.kernel_output_feature_dimension = rhs.second;
  d.kernel_spatial_dimensions = rhs.spatial;
  d.output_batch_dimension = out.first;
  d.output_feature_dimension = out.second;
  d.output_spatial_dimensions = out.spatial;
  return d;
}

int64_t DilatedBound(int64_t size, int64_t dilation) {
  return size == 0 ? 0 : (size - 1) * dilation + 1;
}

int64_t WindowOutputSize(const WindowDim& dim, int64_t operand_size) {
  const int64_t padded =
      dim.padding_low + DilatedBound(operand_size, dim.base_dilation) + dim.padding_high;
  const int64_t window = DilatedBound(dim.size, dim.window_dilation);
  if (padded < window) return 0;
  return (padded - window) / dim.stride + 1;
}

bool IsTrivialWindowDim(const WindowDim& dim) {
  return dim.size == 1 && dim.stride == 1 && dim.padding_low == 0 && dim.padding_high == 0 &&
         dim.window_dilation == 1 && dim.base_dilation == 1 && !dim.window_reversal;
}

absl::StatusOr<Shape> InferConvolutionShape(const Shape& lhs, const Shape& rhs,
                                            const OpAttributes& attrs, DType result_dtype) {
  const Opcode op = Opcode::kConvolution;
  const ConvolutionDimensionNumbers& d = attrs.convolution;
  if (lhs.dtype() != rhs.dtype()) {
    return OpError(op,
                   absl::StrCat("operand types differ: ", lhs.ToString(), " vs ", rhs.ToString()));
  }
  const int64_t num_spatial = static_cast<int64_t>(d.input_spatial_dimensions.size());
  if (d.kernel_spatial_dimensions.size() != d.input_spatial_dimensions.size() ||
      d.output_spatial_dimensions.size() != d.input_spatial_dimensions.size()) {
    return OpError(op, "lhs, rhs and output have different numbers of spatial dims");
  }
  TESSEL_RETURN_IF_ERROR(CheckConvDims("lhs", lhs, d.input_batch_dimension,
                                       d.input_feature_dimension, d.input_spatial_dimensions));
  TESSEL_RETURN_IF_ERROR(CheckConvDims("rhs", rhs, d.kernel_input_feature_dimension,
                                       d.kernel_output_feature_dimension,
                                       d.kernel_spatial_dimensions));
  TESSEL_RETURN_IF_ERROR(CheckWindow(op, attrs.window, num_spatial, lhs));
  const int64_t fgc = attrs.feature_group_count, bgc = attrs.batch_group_count;
  if (fgc < 1 || bgc < 1) {
    return OpError(op, absl::StrCat("feature_group_count=", fgc, " and batch_group_count=", bgc,
                                    " must be >= 1"));
  }
  if (fgc > 1 && bgc > 1) {
    return OpError(op, absl::StrCat("feature_group_count=", fgc, " and batch_group_count=", bgc,
                                    " cannot both exceed 1"));
  }
  const int64_t batch = lhs.dim(d.input_batch_dimension);
  const int64_t in_features = lhs.dim(d.input_feature_dimension);
  const int64_t kernel_in = rhs.dim(d.kernel_input_feature_dimension);
  const int64_t kernel_out = rhs.dim(d.kernel_output_feature_dimension);
  if (in_features % fgc != 0 || in_features / fgc != kernel_in) {
    return OpError(
        op, absl::StrCat("lhs feature dim ", d.input_feature_dimension, " has size ", in_features,
                         " but rhs input feature dim ", d.kernel_input_feature_dimension,
                         " has size ", kernel_in, " times feature_group_count=", fgc));
  }
  if (kernel_out % fgc != 0 || kernel_out % bgc != 0) {
    return OpError(
        op, absl::StrCat("rhs output feature dim ", d.kernel_output_feature_dimension, " has size ",
                         kernel_out, ", not a multiple of feature_group_count=", fgc,
                         " and batch_group_count=", bgc));
  }
  if (batch % bgc != 0) {
    return OpError(op, absl::StrCat("lhs batch dim ", d.input_batch_dimension, " has size ", batch,
                                    ", not a multiple of batch_group_count=", bgc));
  }
  // The output's labels must name each of its num_spatial + 2 dims once before they index it.
  std::vector<int64_t> out_labels = {d.output_batch_dimension, d.output_feature_dimension};
  out_labels.insert(out_labels.end(), d.output_spatial_dimensions.begin(),
                    d.output_spatial_dimensions.end());
  std::vector<bool> seen(num_spatial + 2, false);
  for (int64_t o : out_labels) {
    if (o < 0 || o >= num_spatial + 2 || seen[o]) {
      return OpError(op, absl::StrCat("output dims {", absl::StrJoin(out_labels, ","),
                                      "} are not a permutation of rank ", num_spatial + 2));
    }
    seen[o] = true;
  }
  std::vector<int64_t> dims(num_spatial + 2, 0);
  dims[d.output_batch_dimension] = batch / bgc;
  dims[d.output_feature_dimension] = kernel_out;
  for (int64_t k = 0; k < num_spatial; ++k) {
    const int64_t window_size = rhs.dim(d.kernel_spatial_dimensions[k]);
    if (attrs.window[k].size != window_size) {
      return OpError(op, absl::StrCat("window dim ", k, " has size ", attrs.window[k].size,
                                      " but rhs spatial dim ", d.kernel_spatial_dimensions[k],
                                      " has size ", window_size));
    }
    dims[d.output_spatial_dimensions[k]] =
        WindowOutputSize(attrs.window[k], lhs.dim(d.input_spatial_dimensions[k]));
  }
  return Shape(result_dtype, dims);
}

absl::StatusOr<Shape> InferReduceWindowShape(const Shape& operand, const Shape& init,
                                             const OpAttributes& attrs) {
  const Opcode op = Opcode::kReduceWindow;
  if (init.rank() != 0 || init.dtype() != operand.dtype()) {
    return OpError(op, absl::StrCat("init value must be a ", DTypeName(operand.dtype()),
                                    " scalar, got ", init.ToString()));
  }
  TESSEL_RETURN_IF_ERROR(CheckWindow(op, attrs.window, operand.rank(), operand));
  const bool logical =
      attrs.reduce_kind == ReduceKind::kAnd || attrs.reduce_kind == ReduceKind::kOr;
  if (logical && IsFloating(operand.dtype())) {
    return OpError(op, absl::StrCat("to_apply=", ReduceKindName(attrs.reduce_kind),
                                    " needs pred or integer operands, got ", operand.ToString()));
  }
  if (!logical && operand.dtype() == DType::kPred) {
    return OpError(op, absl::StrCat("to_apply=", ReduceKindName(attrs.reduce_kind),
                                    " does not apply to pred"));
  }
  return Shape(operand.dtype(), WindowedDims(operand, attrs.window));
}

absl::StatusOr<Shape> InferSelectAndScatterShape(const Shape& operand, const Shape& source,
                                                 const Shape& init, const OpAttributes& attrs) {
  const Opcode op = Opcode::kSelectAndScatter;
  TESSEL_RETURN_IF_ERROR(CheckWindow(op, attrs.window, operand.rank(), operand));
  if (source.dtype() != operand.dtype() || init.dtype() != operand.dtype() || init.rank() != 0) {
    return OpError(op, absl::StrCat("source ", source.ToString(), " and init ", init.ToString(),
                                    " must have the operand's type ", DTypeName(operand.dtype()),
                                    " (init a scalar)"));
  }
  const Shape windowed(operand.dtype(), WindowedDims(operand, attrs.window));
  if (source != windowed) {
    return OpError(op, absl::StrCat("source has shape ", source.ToString(),
                                    " but the window over the operand ", operand.ToString(),
                                    " gives ", windowed.ToString()));
  }
  switch (attrs.comparison_direction) {
    case ComparisonDirection::kEq:
    case ComparisonDirection::kNe:
      return OpError(
          op, absl::StrCat("select direction ", ComparisonDirectionName(attrs.comparison_direction),
                           " does not pick an element; expected GE, GT, LE or LT"));
    default:
      break;
  }
  if (operand.dtype() == DType::kPred) return OpError(op, "pred operands are not supported");
  for (const WindowDim& w : attrs.window) {
    if (w.base_dilation != 1 || w.window_dilation != 1 || w.window_reversal) {
      return OpError(op, absl::StrCat("window={", WindowToString(attrs.window),
                                      "}: dilation and reversal are not allowed (XLA)"));
    }
  }
  return operand;
}

absl::StatusOr<Shape> InferReverseShape(const Shape& operand, const OpAttributes& attrs) {
  std::vector<bool> seen(operand.rank(), false);
  for (int64_t d : attrs.dimensions) {
    if (d < 0 || d >= operand.rank() || seen[d]) {
      return OpError(Opcode::kReverse,
                     absl::StrCat("dimensions={", absl::StrJoin(attrs.dimensions, ","), "}: dim ",
                                  d, " is out of range or repeated for ", operand.ToString()));
    }
    seen[d] = true;
  }
  return operand;
}

}  // namespace tessel
