#include "tessel/partitioner/verify.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <new>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "tessel/core/collectives.h"
#include "tessel/core/executor.h"
#include "tessel/core/rng.h"
#include "tessel/core/status_macros.h"
#include "tessel/partitioner/propagation.h"
#include "tessel/spmd/sharded_tensor.h"

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

bool HasManualRegion(const Graph& graph) {
  for (const Node* node : graph.nodes()) {
    if (node->opcode() == Opcode::kCustomCall) return true;
  }
  return false;
}

// Builds, for one device, the reference program of a module with manual regions: everything
// outside the regions is computed whole (replicated) on every device, and only core ops stand for
// the region boundaries, so the reference shares no code with the partitioner's region rule:
// - SPMDFullToShardShape(x): this device's shard of x under x's sharding, cut with static
//   pad + slice (the offsets of spmd::ShardedTensor for this device);
// - SPMDShardToFullShape(v): every device's v gathered by one all-gather over all devices, and
//   the global value rebuilt by placing replica 0 of each tile at its offset
//   (dynamic-update-slice into zeros), as ShardedTensor::Assemble does.
class ManualReferenceBuilder {
 public:
  ManualReferenceBuilder(const Graph& graph, const std::vector<spmd::Sharding>& shardings,
                         int64_t num_devices, int64_t device_id)
      : graph_(graph), shardings_(shardings), n_(num_devices), device_id_(device_id) {}

  absl::StatusOr<std::unique_ptr<Graph>> Build() {
    out_ = std::make_unique<Graph>(graph_.name());
    for (int64_t i = 0; i < graph_.num_nodes(); ++i) {
      const Node* node = graph_.nodes()[i];
      std::vector<Node*> operands;
      for (const Node* operand : node->operands()) operands.push_back(map_.at(operand));
      Node* copy = nullptr;
      if (node->opcode() == Opcode::kCustomCall) {
        const bool to_shard = node->attrs().custom_call_target == kFullToShardShapeTarget;
        absl::StatusOr<Node*> made =
            to_shard ? Shard(*node, operands[0], shardings_[index_of(node->operand(0))])
                     : Unshard(*node, operands[0], shardings_[i]);
        if (!made.ok()) {
          return absl::Status(made.status().code(),
                              absl::StrCat("%", node->name(), ": ", made.status().message()));
        }
        copy = *made;
      } else {
        copy = out_->AddNodeUnchecked(node->opcode(), node->shape(), std::move(operands),
                                      node->attrs(), node->name());
      }
      map_[node] = copy;
    }
    out_->set_root(map_.at(graph_.root()));
    return std::move(out_);
  }

 private:
  int64_t index_of(const Node* node) const {
    const auto& nodes = graph_.nodes();
    return std::find(nodes.begin(), nodes.end(), node) - nodes.begin();
  }

  Node* Zero(DType dtype) { return out_->AddConstant(Literal(Shape(dtype, {}))); }

  absl::StatusOr<Node*> Shard(const Node& node, Node* x, const spmd::Sharding& sharding) {
    TESSEL_ASSIGN_OR_RETURN(spmd::ShardedTensor layout,
                            spmd::ShardedTensor::Create(x->shape(), sharding, n_));
    const spmd::Shard* shard = layout.shard_for(device_id_);
    if (shard == nullptr || layout.local_shape() != node.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("the operand's sharding ", sharding.ToString(),
                                                     " does not give device ", device_id_,
                                                     " a shard of ", node.shape().ToString()));
    }
    OpAttributes pad, slice;
    for (int64_t d = 0; d < x->shape().rank(); ++d) {
      const int64_t start = shard->index[d].first, size = node.shape().dim(d);
      pad.padding.push_back(PadDim{0, std::max<int64_t>(0, start + size - x->shape().dim(d)), 0});
      slice.slice.push_back(SliceDim{start, start + size, 1});
    }
    TESSEL_ASSIGN_OR_RETURN(Node * padded,
                            out_->AddNode(Opcode::kPad, {x, Zero(x->shape().dtype())}, pad));
    return out_->AddNode(Opcode::kSlice, {padded}, slice);
  }

  absl::StatusOr<Node*> Unshard(const Node& node, Node* v, const spmd::Sharding& sharding) {
    const Shape& global = node.shape();
    TESSEL_ASSIGN_OR_RETURN(spmd::ShardedTensor layout,
                            spmd::ShardedTensor::Create(global, sharding, n_));
    std::vector<int64_t> row_dims = {1};
    for (int64_t d : v->shape().dims()) row_dims.push_back(d);
    TESSEL_ASSIGN_OR_RETURN(Node * row,
                            out_->AddNode(Opcode::kReshape, Shape(global.dtype(), row_dims), {v}));
    OpAttributes gather;
    std::vector<int64_t> everyone(n_);
    for (int64_t d = 0; d < n_; ++d) everyone[d] = d;
    gather.replica_groups = std::vector<std::vector<int64_t>>{everyone};
    gather.dimensions = {0};
    TESSEL_ASSIGN_OR_RETURN(Node * all, out_->AddNode(Opcode::kAllGather, {row}, gather));
    TESSEL_ASSIGN_OR_RETURN(Node * result, out_->AddNode(Opcode::kBroadcast, global,
                                                         {Zero(global.dtype())}, OpAttributes()));
    for (const spmd::Shard& shard : layout.shards()) {
      if (shard.replica_id != 0 || shard.unreduced_id != 0) continue;
      OpAttributes cut;
      cut.slice.push_back(SliceDim{shard.device_id, shard.device_id + 1, 1});
      std::vector<Node*> update_operands = {result};
      std::vector<int64_t> data_dims = shard.data_dims();
      for (int64_t d = 0; d < global.rank(); ++d) {
        cut.slice.push_back(SliceDim{0, data_dims[d], 1});
        update_operands.push_back(out_->AddConstant(
            Literal::Scalar<int32_t>(static_cast<int32_t>(shard.index[d].first))));
      }
      TESSEL_ASSIGN_OR_RETURN(Node * cut_piece, out_->AddNode(Opcode::kSlice, {all}, cut));
      TESSEL_ASSIGN_OR_RETURN(
          Node * piece,
          out_->AddNode(Opcode::kReshape, Shape(global.dtype(), data_dims), {cut_piece}));
      update_operands.insert(update_operands.begin() + 1, piece);
      TESSEL_ASSIGN_OR_RETURN(result, out_->AddNode(Opcode::kDynamicUpdateSlice, update_operands));
    }
    return result;
  }

  const Graph& graph_;
  const std::vector<spmd::Sharding>& shardings_;
  int64_t n_;
  int64_t device_id_;
  std::unique_ptr<Graph> out_;
  absl::flat_hash_map<const Node*, Node*> map_;
};

// Runs `run(d, options)` for devices 0..n-1, one thread each (a device waiting in a
// collective must not hold a thread its peers need: DESIGN.md "Execution model"), with the
// reference collectives. The first device to fail aborts the collectives, so its peers stop at
// once instead of waiting out `collective_timeout`; the error returned is the first failing
// device's own, not a peer's report of the abort.
absl::StatusOr<std::vector<std::vector<Literal>>> RunDevices(
    int64_t n, std::chrono::milliseconds collective_timeout, absl::Time deadline,
    const std::atomic<bool>* cancel,
    const std::function<absl::StatusOr<std::vector<Literal>>(int64_t, const ExecutorOptions&)>&
        run) {
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
      options.deadline = deadline;
      options.cancel = cancel;
      try {
        results[d] = run(d, options);
      } catch (const std::exception& e) {
        results[d] = absl::InternalError(absl::StrCat("exception: ", e.what()));
      }
      if (!results[d].ok()) {
        collectives.Abort(absl::AbortedError(absl::StrCat("device ", d, " failed")));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // Peers stopped by the abort report kAborted; the device that failed first reports its own.
  for (bool peer_reports : {false, true}) {
    for (int64_t d = 0; d < n; ++d) {
      if (!results[d].ok() && (peer_reports || !absl::IsAborted(results[d].status()))) {
        return Prefixed(absl::StrCat("device ", d, ": "), results[d].status());
      }
    }
  }
  std::vector<std::vector<Literal>> per_device(n);
  for (int64_t d = 0; d < n; ++d) per_device[d] = *std::move(results[d]);
  return per_device;
}

// Runs one program per device (each on all the global inputs), one thread per device, with the
// reference collectives; returns each device's outputs.
absl::StatusOr<std::vector<std::vector<Literal>>> RunPerDevice(
    const std::vector<std::unique_ptr<Graph>>& programs, absl::Span<const Literal> inputs,
    std::chrono::milliseconds collective_timeout, absl::Time deadline,
    const std::atomic<bool>* cancel) {
  const int64_t n = static_cast<int64_t>(programs.size());
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::vector<Literal>> per_device,
                          RunDevices(n, collective_timeout, deadline, cancel,
                                     [&](int64_t d, const ExecutorOptions& options) {
                                       return Executor(options).Run(*programs[d], inputs);
                                     }));
  return per_device;
}

}  // namespace

absl::StatusOr<std::vector<Literal>> RunManualReference(
    const Graph& graph, int64_t num_devices, absl::Span<const Literal> global_inputs,
    std::chrono::milliseconds collective_timeout, absl::Time deadline,
    const std::atomic<bool>* cancel) {
  if (num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_devices must be >= 1, got ", num_devices));
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<spmd::Sharding> shardings,
                          ComputeShardings(graph, num_devices));
  std::vector<std::unique_ptr<Graph>> programs;
  for (int64_t d = 0; d < num_devices; ++d) {
    ManualReferenceBuilder builder(graph, shardings, num_devices, d);
    TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Graph> program, builder.Build());
    programs.push_back(std::move(program));
  }
  TESSEL_ASSIGN_OR_RETURN(
      std::vector<std::vector<Literal>> per_device,
      RunPerDevice(programs, global_inputs, collective_timeout, deadline, cancel));
  // Outside the regions every device computed the same global values; device 0's are the
  // reference.
  return std::move(per_device[0]);
}

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
    case DType::kU32:
    case DType::kU64:
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
    std::optional<Literal> made;
    try {
      made.emplace(shape);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat("%", parameter->name(), ": out of memory making its input ",
                       shape.ToString(), " (", shape.byte_size(), " bytes) on this host"));
    }
    Literal& input = *made;
    for (int64_t i = 0; i < input.num_elements(); ++i) {
      double u = RngUniform01(key, static_cast<uint64_t>(i));
      double value;
      if (index_limit != max_start.end()) {
        value = std::floor(u * static_cast<double>(index_limit->second + 1));
      } else if (IsFloating(dtype)) {
        value = 2 * u - 1;
      } else if (dtype == DType::kPred) {
        value = u < 0.5 ? 1 : 0;
      } else if (dtype == DType::kU8 || dtype == DType::kU32 || dtype == DType::kU64) {
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
                                                    std::chrono::milliseconds collective_timeout,
                                                    absl::Time deadline,
                                                    const std::atomic<bool>* cancel) {
  if (program.program == nullptr || program.num_devices < 1) {
    return absl::InvalidArgumentError("the SPMD program is empty");
  }
  const int64_t n = program.num_devices;
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::vector<Literal>> args,
                          SplitInputs(program, global_inputs));
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::vector<Literal>> per_device,
                          RunDevices(n, collective_timeout, deadline, cancel,
                                     [&](int64_t d, const ExecutorOptions& options) {
                                       return Executor(options).Run(*program.program, args[d]);
                                     }));
  for (int64_t d = 0; d < n; ++d) {
    if (per_device[d].size() != program.outputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", d, " returned ", per_device[d].size(),
                       " outputs; the program declares ", program.outputs.size()));
    }
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
  // A module with manual regions has per-device semantics: its reference runs on the program's
  // devices too (RunManualReference).
  ExecutorOptions reference_options;
  reference_options.deadline = absl::Now() + absl::FromChrono(options.run_timeout);
  reference_options.cancel = options.cancel;
  absl::StatusOr<std::vector<Literal>> expected =
      HasManualRegion(graph)
          ? RunManualReference(graph, program.num_devices, inputs, options.collective_timeout,
                               reference_options.deadline, options.cancel)
          : Executor(reference_options).Run(graph, inputs);
  if (!expected.ok()) return Prefixed("unpartitioned run: ", expected.status());
  if (expected->size() != program.outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the module has ", expected->size(),
                                                   " outputs but the SPMD program has ",
                                                   program.outputs.size()));
  }
  absl::StatusOr<std::vector<Literal>> got =
      RunPartitioned(program, inputs, options.collective_timeout,
                     absl::Now() + absl::FromChrono(options.run_timeout), options.cancel);
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
