#include "partitioner/verify.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/collectives.h"
#include "core/executor.h"
#include "core/rng.h"
#include "core/status_macros.h"
#include "spmd/sharded_tensor.h"

namespace tessel::partitioner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// SplitMix64's finalizer (Steele et al., 2014): a bijective 64-bit mix.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// For each scalar integer parameter that is directly a start index of a dynamic-slice or a
// dynamic-update-slice: the largest start that keeps every window it places inside its operand.
std::map<int64_t, int64_t> MaxStartIndices(const Graph& graph) {
  std::map<int64_t, int64_t> max_start;
  for (const Node* node : graph.nodes()) {
    int64_t first_index = 0;
    std::vector<int64_t> window;
    if (node->opcode() == Opcode::kDynamicSlice) {
      first_index = 1;
      window = node->attrs().dynamic_slice_sizes;
    } else if (node->opcode() == Opcode::kDynamicUpdateSlice) {
      first_index = 2;
      window = node->operand(1)->shape().dims();
    } else {
      continue;
    }
    const Shape& operand = node->operand(0)->shape();
    for (int64_t d = 0; d < operand.rank(); ++d) {
      if (first_index + d >= node->operand_count() || d >= static_cast<int64_t>(window.size())) {
        break;
      }
      const Node* start = node->operand(first_index + d);
      if (start->opcode() != Opcode::kParameter || start->shape().is_tuple() ||
          start->shape().rank() != 0 || !IsInteger(start->shape().dtype())) {
        continue;
      }
      int64_t limit = std::max<int64_t>(0, operand.dim(d) - window[d]);
      auto [it, inserted] = max_start.emplace(start->attrs().parameter_number, limit);
      if (!inserted) it->second = std::min(it->second, limit);
    }
  }
  return max_start;
}

template <typename T>
double ToDoubleValue(T value) {
  if constexpr (std::is_integral_v<T> || std::is_same_v<T, double>) {
    return static_cast<double>(value);
  } else {
    return static_cast<double>(static_cast<float>(value));
  }
}

// |got - expected| of one element: exact for integers (the difference is taken in 64 bits, so
// large s64 values that round alike as doubles still differ); 0 for NaN and NaN or equal
// infinities; +inf for any other pair involving a NaN or an infinity.
template <typename T>
double ElementError(T got, T expected) {
  if constexpr (std::is_integral_v<T>) {
    if (got == expected) return 0;
    uint64_t high = static_cast<uint64_t>(std::max(got, expected));
    uint64_t low = static_cast<uint64_t>(std::min(got, expected));
    return static_cast<double>(high - low);
  } else {
    double g = ToDoubleValue(got), e = ToDoubleValue(expected);
    if (g == e || (std::isnan(g) && std::isnan(e))) return 0;
    if (!std::isfinite(g) || !std::isfinite(e)) return kInf;
    return std::fabs(g - e);
  }
}

template <typename T>
void CompareElements(absl::Span<const T> got, absl::Span<const T> expected, OutputCheck& check) {
  double scale = 1;
  for (T e : expected) {
    double magnitude = std::fabs(ToDoubleValue(e));
    if (std::isfinite(magnitude)) scale = std::max(scale, magnitude);
  }
  check.scale = scale;
  const double abs_bound = check.tolerance.atol * scale;
  for (size_t i = 0; i < expected.size(); ++i) {
    double error = ElementError(got[i], expected[i]);
    double magnitude = std::fabs(ToDoubleValue(expected[i]));
    check.max_abs_error = std::max(check.max_abs_error, error);
    if (magnitude != 0 && std::isfinite(magnitude)) {
      check.max_rel_error = std::max(check.max_rel_error, error / magnitude);
    }
    bool within = error == 0 ||
                  (std::isfinite(error) && error <= abs_bound + check.tolerance.rtol * magnitude);
    if (!within) {
      if (check.first_mismatch_element < 0) {
        check.first_mismatch_element = static_cast<int64_t>(i);
      }
      ++check.mismatched_elements;
    }
  }
}

// Splits every global input by its parameter's sharding: per device, its local arguments.
absl::StatusOr<std::vector<std::vector<Literal>>> SplitInputs(
    const SpmdProgram& program, absl::Span<const Literal> global_inputs) {
  const int64_t n = program.num_devices;
  if (global_inputs.size() != program.parameters.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the program has ", program.parameters.size(),
                                                   " parameters but ", global_inputs.size(),
                                                   " inputs were given"));
  }
  std::vector<std::vector<Literal>> args(n);
  for (size_t p = 0; p < program.parameters.size(); ++p) {
    const ShardedValue& value = program.parameters[p];
    auto where = [&](const absl::Status& s) {
      return Prefixed(absl::StrCat("parameter ", p, ": "), s);
    };
    absl::StatusOr<spmd::ShardedTensor> layout =
        spmd::ShardedTensor::Create(value.global_shape, value.sharding, n);
    if (!layout.ok()) return where(layout.status());
    absl::StatusOr<std::vector<Literal>> pieces = layout->Split(global_inputs[p]);
    if (!pieces.ok()) return where(pieces.status());
    for (int64_t d = 0; d < n; ++d) args[d].emplace_back();
    for (size_t i = 0; i < layout->shards().size(); ++i) {
      args[layout->shards()[i].device_id][p] = std::move((*pieces)[i]);
    }
    // A device that holds no piece (only a maximal sharding leaves devices out) gets zeros.
    for (int64_t d = 0; d < n; ++d) {
      if (layout->shard_for(d) == nullptr) args[d][p] = Literal(layout->local_shape());
    }
  }
  return args;
}

// Assembles output `o` of the program from every device's results.
absl::StatusOr<Literal> AssembleOutput(const SpmdProgram& program, size_t o,
                                       const std::vector<std::vector<Literal>>& per_device) {
  const ShardedValue& value = program.outputs[o];
  TESSEL_ASSIGN_OR_RETURN(
      spmd::ShardedTensor layout,
      spmd::ShardedTensor::Create(value.global_shape, value.sharding, program.num_devices));
  std::vector<Literal> locals;
  locals.reserve(layout.shards().size());
  for (const spmd::Shard& shard : layout.shards()) {
    locals.push_back(per_device[shard.device_id][o]);
  }
  return layout.Assemble(locals);
}

}  // namespace

Tolerance DefaultTolerance(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return {1e-12, 1e-12};
    case DType::kF32:
      return {1e-5, 1e-5};
    case DType::kF16:
      return {5e-3, 5e-3};
    case DType::kBF16:
      return {4e-2, 4e-2};
    case DType::kPred:
    case DType::kU8:
    case DType::kS32:
    case DType::kS64:
      return {0, 0};
  }
  return {0, 0};
}

absl::StatusOr<std::vector<Literal>> MakeVerifyInputs(const Graph& graph, uint64_t seed) {
  const std::map<int64_t, int64_t> max_start = MaxStartIndices(graph);
  std::vector<Literal> inputs;
  for (const Node* parameter : graph.parameters()) {
    const Shape& shape = parameter->shape();
    if (shape.is_tuple()) {
      return absl::UnimplementedError(absl::StrCat("%", parameter->name(),
                                                   ": tuple-shaped parameters are not supported (",
                                                   shape.ToString(), ")"));
    }
    const int64_t number = parameter->attrs().parameter_number;
    const uint64_t key = Mix(seed ^ Mix(static_cast<uint64_t>(number)));
    auto index_limit = max_start.find(number);
    const DType dtype = shape.dtype();
    Literal input(shape);
    for (int64_t i = 0; i < input.num_elements(); ++i) {
      double u = RngUniform01(key, static_cast<uint64_t>(i));
      double value;
      if (index_limit != max_start.end()) {
        value = std::floor(u * static_cast<double>(index_limit->second + 1));
      } else if (IsFloating(dtype)) {
        value = 2 * u - 1;
      } else if (dtype == DType::kPred) {
        value = u < 0.5 ? 1 : 0;
      } else if (dtype == DType::kU8) {
        value = std::floor(u * 9);
      } else {
        value = std::floor(u * 17) - 8;
      }
      input.SetFromDouble(i, value);
    }
    inputs.push_back(std::move(input));
  }
  return inputs;
}

absl::StatusOr<std::vector<Literal>> RunPartitioned(const SpmdProgram& program,
                                                    absl::Span<const Literal> global_inputs,
                                                    std::chrono::milliseconds collective_timeout) {
  if (program.program == nullptr || program.num_devices < 1) {
    return absl::InvalidArgumentError("the SPMD program is empty");
  }
  const int64_t n = program.num_devices;
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::vector<Literal>> args,
                          SplitInputs(program, global_inputs));
  // One thread per device: a device waiting in a collective must not hold a thread its peers
  // need (DESIGN.md "Execution model").
  InProcessCollectives collectives(n, collective_timeout);
  std::vector<absl::StatusOr<std::vector<Literal>>> results(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int64_t d = 0; d < n; ++d) {
    threads.emplace_back([&, d] {
      ExecutorOptions options;
      options.num_threads = 1;
      options.device_id = d;
      options.collectives = &collectives;
      try {
        results[d] = Executor(options).Run(*program.program, args[d]);
      } catch (const std::exception& e) {
        results[d] = absl::InternalError(absl::StrCat("exception: ", e.what()));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::vector<Literal>> per_device(n);
  for (int64_t d = 0; d < n; ++d) {
    if (!results[d].ok()) return Prefixed(absl::StrCat("device ", d, ": "), results[d].status());
    if (results[d]->size() != program.outputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("device ", d, " returned ", results[d]->size(),
                                                     " outputs; the program declares ",
                                                     program.outputs.size()));
    }
    per_device[d] = *std::move(results[d]);
  }
  std::vector<Literal> outputs;
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    absl::StatusOr<Literal> assembled = AssembleOutput(program, o, per_device);
    if (!assembled.ok()) return Prefixed(absl::StrCat("output ", o, ": "), assembled.status());
    outputs.push_back(*std::move(assembled));
  }
  return outputs;
}

OutputCheck CompareOutput(const Literal& got, const Literal& expected, const Tolerance& tolerance) {
  OutputCheck check;
  check.global_shape = expected.shape();
  check.local_shape = expected.shape();
  check.tolerance = tolerance;
  if (got.shape() != expected.shape() || expected.shape().is_tuple()) {
    check.max_abs_error = kInf;
    check.max_rel_error = kInf;
    check.mismatched_elements = expected.shape().is_tuple() ? 1 : expected.num_elements();
    check.first_mismatch_element = 0;
    check.ok = false;
    return check;
  }
  VisitDType(expected.shape().dtype(),
             [&]<typename T>() { CompareElements<T>(got.data<T>(), expected.data<T>(), check); });
  check.ok = check.mismatched_elements == 0;
  return check;
}

std::optional<int64_t> VerifyReport::first_mismatch() const {
  for (const OutputCheck& output : outputs) {
    if (!output.ok) return output.index;
  }
  return std::nullopt;
}

absl::StatusOr<VerifyReport> VerifyProgram(const Graph& graph, const SpmdProgram& program,
                                           const VerifyOptions& options) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Literal> inputs, MakeVerifyInputs(graph, options.seed));
  absl::StatusOr<std::vector<Literal>> expected = Executor().Run(graph, inputs);
  if (!expected.ok()) return Prefixed("unpartitioned run: ", expected.status());
  if (expected->size() != program.outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the module has ", expected->size(),
                                                   " outputs but the SPMD program has ",
                                                   program.outputs.size()));
  }
  absl::StatusOr<std::vector<Literal>> got =
      RunPartitioned(program, inputs, options.collective_timeout);
  if (!got.ok()) return Prefixed("partitioned run: ", got.status());
  VerifyReport report;
  report.num_devices = program.num_devices;
  for (size_t o = 0; o < expected->size(); ++o) {
    const Literal& want = (*expected)[o];
    Tolerance tolerance = DefaultTolerance(want.shape().dtype());
    if (options.rtol.has_value()) tolerance.rtol = *options.rtol;
    if (options.atol.has_value()) tolerance.atol = *options.atol;
    OutputCheck check = CompareOutput((*got)[o], want, tolerance);
    check.index = static_cast<int64_t>(o);
    check.sharding = program.outputs[o].sharding;
    absl::StatusOr<spmd::ShardedTensor> layout = spmd::ShardedTensor::Create(
        program.outputs[o].global_shape, program.outputs[o].sharding, program.num_devices);
    if (layout.ok()) check.local_shape = layout->local_shape();
    report.outputs.push_back(std::move(check));
  }
  report.collectives = CountCollectives(*program.program);
  return report;
}

absl::StatusOr<VerifyReport> VerifyPartitioning(const Graph& graph, int64_t num_devices,
                                                const VerifyOptions& options) {
  TESSEL_ASSIGN_OR_RETURN(SpmdProgram program, Partition(graph, num_devices));
  return VerifyProgram(graph, program, options);
}

}  // namespace tessel::partitioner
