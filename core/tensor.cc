#include "tessel/core/tensor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/environment.h"
#include "tessel/core/fingerprint.h"
#include "tessel/core/internal/lazy.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/verifier.h"

namespace tessel {

using internal_lazy::LazyNode;
using internal_lazy::TensorImpl;

namespace {

struct CacheEntry {
  std::shared_ptr<const Graph> graph;
  uint64_t fingerprint = 0;  // GraphFingerprint(*graph)
};

// Per-thread state: live tensors, counters, the compilation cache and the rng seed counter.
struct LazyContext {
  std::vector<std::weak_ptr<TensorImpl>> live;
  uint64_t next_id = 0;
  uint64_t next_seed = 0;
  LazyMetrics metrics;
  // Graphs by GraphFingerprint, and the same entries by the lazy DAG's key (LazyGraphKey): a
  // step whose DAG was seen before skips lowering and fingerprinting the Graph.
  absl::flat_hash_map<uint64_t, CacheEntry> cache;
  absl::flat_hash_map<uint64_t, CacheEntry> lazy_cache;
  // The installed client; nullptr means `local` (options from SetExecutorOptions).
  std::shared_ptr<ComputationClient> client;
  LocalComputationClient local;
  // AddStepClosure's callbacks, run after the next successful Sync().
  std::vector<std::function<absl::Status()>> step_closures;
};

LazyContext& Context() {
  thread_local LazyContext context;
  return context;
}

const Shape& ErrorShape() {
  static const Shape* const kShape = new Shape();
  return *kShape;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Records `opcode` on `operands`; returns an error tensor on an errored operand or a bad shape.
Tensor MakeOp(Opcode opcode, absl::Span<const Tensor> operands, OpAttributes attrs = {},
              std::optional<Shape> declared = std::nullopt) {
  std::vector<const Shape*> shapes;
  std::vector<std::shared_ptr<LazyNode>> nodes;
  for (const Tensor& t : operands) {
    if (!t.defined()) {
      return Tensor::Error(absl::InvalidArgumentError(
          absl::StrCat(OpcodeName(opcode), ": an operand is an undefined tensor")));
    }
    if (!t.status().ok()) return t;
    shapes.push_back(&t.shape());
    nodes.push_back(t.impl()->node);
  }
  absl::StatusOr<Shape> shape = InferShape(opcode, shapes, attrs, declared);
  if (!shape.ok()) return Tensor::Error(shape.status());
  auto node = std::make_shared<LazyNode>();
  node->opcode = opcode;
  node->shape = *std::move(shape);
  node->attrs = std::move(attrs);
  node->operands = std::move(nodes);
  return Tensor(internal_lazy::MakeImpl(std::move(node)));
}

Tensor ScalarLike(const Tensor& like, double value) {
  if (!like.status().ok()) return like;
  return Scalar(like.dtype(), value);
}

Tensor FullLike(const Tensor& like, double value) {
  if (!like.status().ok()) return like;
  return Full(like.shape(), value);
}

}  // namespace

namespace internal_lazy {

std::shared_ptr<TensorImpl> MakeImpl(std::shared_ptr<LazyNode> node) {
  LazyContext& ctx = Context();
  auto impl = std::make_shared<TensorImpl>();
  impl->node = std::move(node);
  impl->id = ctx.next_id++;
  // Prune dead entries now and then so the registry stays proportional to live tensors.
  if (ctx.live.size() >= 1024 && (ctx.live.size() & (ctx.live.size() - 1)) == 0) {
    std::erase_if(ctx.live, [](const std::weak_ptr<TensorImpl>& w) { return w.expired(); });
  }
  ctx.live.push_back(impl);
  return impl;
}

}  // namespace internal_lazy

// ---------------------------------------------------------------------------------------------
// Tensor.

Tensor Tensor::FromLiteral(Literal value) {
  auto node = std::make_shared<LazyNode>();
  node->opcode = Opcode::kParameter;
  node->shape = value.shape();
  node->data = std::make_shared<const LiteralData>(std::move(value));
  return Tensor(internal_lazy::MakeImpl(std::move(node)));
}

Tensor Tensor::FromDeviceData(std::shared_ptr<const DeviceData> data) {
  TESSEL_CHECK(data != nullptr);
  auto node = std::make_shared<LazyNode>();
  node->opcode = Opcode::kParameter;
  node->shape = data->shape();
  node->sharding = data->sharding();
  node->data = std::move(data);
  return Tensor(internal_lazy::MakeImpl(std::move(node)));
}

Tensor Tensor::Placeholder(Shape shape) {
  auto node = std::make_shared<LazyNode>();
  node->opcode = Opcode::kParameter;
  node->shape = std::move(shape);
  node->placeholder = true;
  return Tensor(internal_lazy::MakeImpl(std::move(node)));
}

Tensor Tensor::Constant(Literal value) {
  auto node = std::make_shared<LazyNode>();
  node->opcode = Opcode::kConstant;
  node->shape = value.shape();
  node->attrs.literal = std::make_shared<const Literal>(std::move(value));
  return Tensor(internal_lazy::MakeImpl(std::move(node)));
}

Tensor Tensor::Error(absl::Status status) {
  TESSEL_CHECK(!status.ok());
  auto impl = std::make_shared<TensorImpl>();
  impl->status = std::move(status);
  return Tensor(std::move(impl));
}

const absl::Status& Tensor::status() const {
  static const absl::Status* const kUndefined =
      new absl::Status(absl::FailedPreconditionError("undefined tensor"));
  return impl_ ? impl_->status : *kUndefined;
}

const Shape& Tensor::shape() const {
  if (!impl_ || !impl_->node) return ErrorShape();
  return impl_->node->shape;
}

bool Tensor::is_data() const { return impl_ && impl_->node && impl_->node->data != nullptr; }

std::shared_ptr<const DeviceData> Tensor::device_data() const {
  return is_data() ? impl_->node->data : nullptr;
}

const std::string& Tensor::sharding() const {
  static const std::string* const kEmpty = new std::string();
  if (!impl_ || !impl_->node) return *kEmpty;
  return impl_->node->sharding;
}

void Tensor::SetSharding(std::string xla_sharding_text) {
  if (!impl_ || !impl_->node) return;
  impl_->node->sharding = std::move(xla_sharding_text);
}

absl::StatusOr<Literal> Tensor::ToLiteral() const {
  TESSEL_RETURN_IF_ERROR(status());
  if (!is_data()) TESSEL_RETURN_IF_ERROR(Sync({*this}));
  std::shared_ptr<const DeviceData> data = impl_->node->data;
  if (const auto* whole = dynamic_cast<const LiteralData*>(data.get())) return whole->literal();
  return GetComputationClient().TransferFromDevice(*data);
}

// ---------------------------------------------------------------------------------------------
// Tracing, fingerprint and Sync.

namespace {

// Visits each node of the lazy DAG reachable from `outputs` once, operands before users, in one
// fixed order: TraceGraph numbers the graph's parameters in it and KeyOfLazyGraph keys the cache
// by it, so the two must walk alike. Iterative, so deep graphs (hundreds of layers) do not
// overflow the stack. `done(node)` says whether `visit` has run for a node (each caller records
// that in its own map); `visit(node)` returns false to stop the walk.
template <typename Done, typename Visit>
void ForEachInPostOrder(absl::Span<const Tensor> outputs, Done done, Visit visit) {
  std::vector<std::pair<std::shared_ptr<LazyNode>, size_t>> stack;
  for (const Tensor& out : outputs) {
    stack.emplace_back(out.impl()->node, 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (done(node.get())) {
        stack.pop_back();
        continue;
      }
      if (next < node->operands.size()) {
        std::shared_ptr<LazyNode> child = node->operands[next++];
        if (!done(child.get())) stack.emplace_back(std::move(child), 0);
        continue;
      }
      if (!visit(node)) return;
      stack.pop_back();
    }
  }
}

}  // namespace

absl::StatusOr<TracedGraph> TraceGraph(absl::Span<const Tensor> outputs, std::string name) {
  for (const Tensor& t : outputs) TESSEL_RETURN_IF_ERROR(t.status());
  TracedGraph traced;
  traced.graph = std::make_unique<Graph>(std::move(name));
  Graph& graph = *traced.graph;
  absl::flat_hash_map<const LazyNode*, Node*> lowered;
  absl::Status error;
  ForEachInPostOrder(
      outputs, [&](const LazyNode* node) { return lowered.contains(node); },
      [&](const std::shared_ptr<LazyNode>& node) {
        Node* n;
        if (node->data != nullptr || node->placeholder) {
          int64_t number = static_cast<int64_t>(traced.parameters.size());
          absl::StatusOr<Node*> parameter = graph.AddParameter(number, node->shape);
          if (!parameter.ok()) {
            error = parameter.status();
            return false;
          }
          n = *parameter;
          traced.parameters.emplace_back(internal_lazy::MakeImpl(node));
        } else {
          std::vector<Node*> operands;
          for (const auto& operand : node->operands) operands.push_back(lowered.at(operand.get()));
          n = graph.AddNodeUnchecked(node->opcode, node->shape, std::move(operands), node->attrs);
        }
        n->set_sharding(node->sharding);
        lowered[node.get()] = n;
        return true;
      });
  TESSEL_RETURN_IF_ERROR(error);
  if (outputs.size() == 1) {
    graph.set_root(lowered.at(outputs[0].impl()->node.get()));
  } else {
    std::vector<Node*> elements;
    for (const Tensor& out : outputs) elements.push_back(lowered.at(out.impl()->node.get()));
    TESSEL_ASSIGN_OR_RETURN(Node * root, graph.AddNode(Opcode::kTuple, std::move(elements)));
    graph.set_root(root);
  }
  return traced;
}

namespace {

template <typename Hash>
void MixShape(const Shape& s, Hash& h) {
  h.Int(s.is_tuple());
  if (s.is_tuple()) {
    h.Int(static_cast<int64_t>(s.tuple_shapes().size()));
    for (const Shape& e : s.tuple_shapes()) MixShape(e, h);
    return;
  }
  h.Int(static_cast<int64_t>(s.dtype()));
  h.Ints(s.dims());
}

// Every attribute of a node with `opcode` that changes what it computes (GraphFingerprint and
// the lazy cache key: one list, so neither can miss an attribute the other has).
template <typename Hash>
void MixAttributes(Opcode opcode, const OpAttributes& a, Hash& h) {
  h.Ints(a.dimensions);
  for (const SliceDim& s : a.slice) h.Ints({s.start, s.limit, s.stride});
  for (const PadDim& p : a.padding) h.Ints({p.low, p.high, p.interior});
  h.Ints(a.dot.lhs_batch_dims);
  h.Ints(a.dot.rhs_batch_dims);
  h.Ints(a.dot.lhs_contracting_dims);
  h.Ints(a.dot.rhs_contracting_dims);
  h.Ints(a.dynamic_slice_sizes);
  const GatherDimensionNumbers& g = a.gather;
  for (const std::vector<int64_t>* dims :
       {&g.offset_dims, &g.collapsed_slice_dims, &g.start_index_map, &g.operand_batching_dims,
        &g.start_indices_batching_dims, &g.slice_sizes}) {
    h.Ints(*dims);
  }
  const ScatterDimensionNumbers& sc = a.scatter;
  for (const std::vector<int64_t>* dims :
       {&sc.update_window_dims, &sc.inserted_window_dims, &sc.scatter_dims_to_operand_dims,
        &sc.input_batching_dims, &sc.scatter_indices_batching_dims}) {
    h.Ints(*dims);
  }
  h.Ints({g.index_vector_dim, g.indices_are_sorted, sc.index_vector_dim, sc.indices_are_sorted,
          sc.unique_indices, a.scatter_overwrite});
  h.Ints({static_cast<int64_t>(a.comparison_direction), static_cast<int64_t>(a.reduce_kind),
          static_cast<int64_t>(a.rng_distribution), static_cast<int64_t>(a.rng_seed),
          a.parameter_number, a.iota_dimension, a.tuple_index});
  h.Ints({a.sort_descending, a.is_stable, a.topk_k, a.topk_largest, a.channel_id,
          a.use_global_device_ids});
  h.Str(a.custom_call_target);
  // Collectives reach lazy graphs through manual regions (AllReduce): their groups and pairs
  // are part of what the graph computes.
  if (IsCollective(opcode)) {
    for (const std::vector<int64_t>& group : a.replica_groups.groups()) h.Ints(group);
    for (const auto& [source, target] : a.source_target_pairs) h.Ints({source, target});
  }
  if (opcode == Opcode::kConstant && a.literal != nullptr) {
    h.Bytes(a.literal->raw_data(), static_cast<size_t>(a.literal->byte_size()));
  }
  // A while or conditional computes what its called computations compute.
  h.Ints({a.known_trip_count, static_cast<int64_t>(a.called_computations.size())});
  for (const auto& called : a.called_computations) {
    h.Int(called != nullptr ? static_cast<int64_t>(GraphFingerprint(*called)) : -1);
  }
}

// An in-process hash with Fingerprint's mixing interface, one multiply per 64-bit word instead
// of per byte: the lazy cache key, computed every step. Not stable across builds (no need:
// the key never leaves the process; GraphFingerprint is the stable one).
class WordHash {
 public:
  WordHash& U64(uint64_t value) {
    hash_ = (hash_ ^ value) * 0x9e3779b97f4a7c15ULL;
    hash_ ^= hash_ >> 29;
    return *this;
  }
  WordHash& Int(int64_t value) { return U64(static_cast<uint64_t>(value)); }
  WordHash& Ints(absl::Span<const int64_t> values) {
    Int(static_cast<int64_t>(values.size()));
    for (int64_t v : values) Int(v);
    return *this;
  }
  WordHash& Bytes(const void* data, size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      U64(word);
    }
    uint64_t tail = 0;
    if (i < size) std::memcpy(&tail, bytes + i, size - i);
    return U64(tail).U64(size);
  }
  WordHash& Str(std::string_view text) {
    Int(static_cast<int64_t>(text.size()));
    return Bytes(text.data(), text.size());
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = kFnv1a64OffsetBasis;
};

// The lazy DAG of `outputs` walked exactly as TraceGraph lowers it (the same post-order, so
// the same parameter numbers): `key` covers what GraphFingerprint covers of the Graph that
// TraceGraph would make (opcodes, shapes, operand positions, attributes, shardings, which
// leaves are the same leaf, the outputs), and `parameters` are the leaves in parameter order.
struct LazyGraphKey {
  uint64_t key = 0;
  std::vector<std::shared_ptr<LazyNode>> parameters;
};

LazyGraphKey KeyOfLazyGraph(absl::Span<const Tensor> outputs) {
  LazyGraphKey result;
  WordHash h;
  absl::flat_hash_map<const LazyNode*, int64_t> position;
  ForEachInPostOrder(
      outputs, [&](const LazyNode* node) { return position.contains(node); },
      [&](const std::shared_ptr<LazyNode>& node) {
        if (node->data != nullptr || node->placeholder) {
          h.Int(-1).Int(node->placeholder);  // a graph parameter
          result.parameters.push_back(node);
        } else {
          h.Int(static_cast<int64_t>(node->opcode))
              .Int(static_cast<int64_t>(node->operands.size()));
          for (const auto& operand : node->operands) h.Int(position.at(operand.get()));
          MixAttributes(node->opcode, node->attrs, h);
        }
        MixShape(node->shape, h);
        h.Str(node->sharding);
        position.emplace(node.get(), static_cast<int64_t>(position.size()));
        return true;
      });
  h.Int(static_cast<int64_t>(outputs.size()));
  for (const Tensor& out : outputs) h.Int(position.at(out.impl()->node.get()));
  result.key = h.value();
  return result;
}

// Which of `parameters` (the leaves of the lazy DAG of `pending`, one reference each) nothing
// can read once this Sync has replaced the pending tensors by data: the leaf and every node that
// leads to it are held only from inside the DAG, by the pending tensors (whose nodes Sync
// replaces) and by `parameters`. A reference from anywhere else (a live tensor still naming
// the old value, `Tensor old = p`, a pending tensor left out of a Sync(tensors), a node shared
// with a live tensor) shows as a use count above the references counted here, and keeps the
// node and everything below it alive.
std::vector<bool> ParametersDeadAfterSync(absl::Span<const Tensor> pending,
                                          absl::Span<const std::shared_ptr<LazyNode>> parameters) {
  struct Visit {
    const std::shared_ptr<LazyNode>* handle;  // one owning pointer, to read the use count
    int64_t references = 0;                   // owners accounted for
    bool alive = false;
  };
  absl::flat_hash_map<const LazyNode*, int> index;
  std::vector<Visit> visits;
  std::vector<const LazyNode*> order;  // operands before users
  std::vector<std::pair<const std::shared_ptr<LazyNode>*, size_t>> stack;
  auto enter = [&](const std::shared_ptr<LazyNode>& handle) {
    auto [it, inserted] = index.try_emplace(handle.get(), static_cast<int>(visits.size()));
    if (inserted) {
      visits.push_back({&handle});
      stack.emplace_back(&handle, 0);
    }
    ++visits[it->second].references;
  };
  for (const Tensor& t : pending) {
    enter(t.impl()->node);
    while (!stack.empty()) {
      auto& [handle, next] = stack.back();
      const LazyNode& node = **handle;
      if (next < node.operands.size()) {
        enter(node.operands[next++]);  // may grow `stack`: `handle` and `next` are not used after
        continue;
      }
      order.push_back(&node);
      stack.pop_back();
    }
  }
  for (const auto& p : parameters) ++visits[index.at(p.get())].references;
  for (Visit& v : visits) v.alive = v.handle->use_count() > v.references;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (!visits[index.at(*it)].alive) continue;
    for (const auto& operand : (*it)->operands) visits[index.at(operand.get())].alive = true;
  }
  std::vector<bool> dead(parameters.size());
  for (size_t i = 0; i < dead.size(); ++i) dead[i] = !visits[index.at(parameters[i].get())].alive;
  return dead;
}

// Moves into `arguments` the values of the parameters that may be donated to the execution
// (dead after this Sync, arrays held by their leaf alone: a whole literal of the local client or
// a multi-device client's value, e.g. mesh::ShardedData) and clears their leaves' data; returns
// the donation flags. The client decides which of them it consumes. TESSEL_DONATE_PARAMS=0
// donates none.
absl::StatusOr<std::vector<bool>> DonateArguments(
    absl::Span<const Tensor> pending, absl::Span<const std::shared_ptr<LazyNode>> parameters,
    std::vector<std::shared_ptr<const DeviceData>>& arguments) {
  std::vector<bool> donated(arguments.size(), false);
  TESSEL_ASSIGN_OR_RETURN(std::optional<bool> enabled, GetBoolEnv("TESSEL_DONATE_PARAMS"));
  if (enabled.has_value() && !*enabled) return donated;
  // Held by the leaf and by `arguments` only: no other leaf, tensor or caller shares it.
  std::vector<bool> candidate(arguments.size(), false);
  for (size_t i = 0; i < arguments.size(); ++i) {
    const LazyNode& leaf = *parameters[i];
    candidate[i] = leaf.data.use_count() == 2 && !leaf.data->shape().is_tuple();
  }
  if (std::find(candidate.begin(), candidate.end(), true) == candidate.end()) return donated;
  const std::vector<bool> dead = ParametersDeadAfterSync(pending, parameters);
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!candidate[i] || !dead[i]) continue;
    parameters[i]->data.reset();
    donated[i] = true;
  }
  return donated;
}

}  // namespace

uint64_t GraphFingerprint(const Graph& graph) {
  Fingerprint h;
  absl::flat_hash_map<const Node*, int64_t> position;
  for (const Node* node : graph.nodes()) {
    position[node] = static_cast<int64_t>(position.size());
    h.Int(static_cast<int64_t>(node->opcode()));
    MixShape(node->shape(), h);
    h.Int(node->operand_count());
    for (const Node* operand : node->operands()) h.Int(position.at(operand));
    MixAttributes(node->opcode(), node->attrs(), h);
    h.Str(node->sharding());
  }
  h.Int(graph.root() != nullptr ? position.at(graph.root()) : -1);
  return h.value();
}

namespace {

// The graph of `pending` and its fingerprint: from the lazy cache when this DAG was seen before,
// else lowered (TraceGraph), fingerprinted, verified if new, and cached. `parameters` receives
// the graph's parameter leaves in order. Errors: TraceGraph's and Verify's; kInternal if the
// lazy walk and TraceGraph disagree on the parameters.
absl::StatusOr<CacheEntry> LookUpOrCompile(LazyContext& ctx, absl::Span<const Tensor> pending,
                                           std::vector<std::shared_ptr<LazyNode>>& parameters) {
  LazyGraphKey lazy = KeyOfLazyGraph(pending);
  parameters = std::move(lazy.parameters);
  if (auto it = ctx.lazy_cache.find(lazy.key); it != ctx.lazy_cache.end()) {
    ++ctx.metrics.cache_hits;
    return it->second;
  }
  TESSEL_ASSIGN_OR_RETURN(TracedGraph traced, TraceGraph(pending, "sync"));
  bool same = traced.parameters.size() == parameters.size();
  for (size_t i = 0; same && i < parameters.size(); ++i) {
    same = traced.parameters[i].impl()->node == parameters[i];
  }
  if (!same) {
    return absl::InternalError(
        "sync: the lazy cache key's walk and TraceGraph disagree on the "
        "graph's parameters");
  }
  CacheEntry entry;
  entry.fingerprint = GraphFingerprint(*traced.graph);
  if (auto it = ctx.cache.find(entry.fingerprint); it != ctx.cache.end()) {
    ++ctx.metrics.cache_hits;
    entry = it->second;
  } else {
    TESSEL_RETURN_IF_ERROR(Verify(*traced.graph));
    entry.graph = std::shared_ptr<const Graph>(std::move(traced.graph));
    ctx.cache[entry.fingerprint] = entry;
    ++ctx.metrics.compiles;
  }
  ctx.lazy_cache[lazy.key] = entry;
  return entry;
}

}  // namespace

absl::Status Sync(absl::Span<const Tensor> tensors) {
  LazyContext& ctx = Context();
  std::vector<Tensor> pending;
  for (const Tensor& t : tensors) {
    TESSEL_RETURN_IF_ERROR(t.status());
    if (t.is_data()) continue;
    if (t.impl()->node->placeholder) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot run a graph on a placeholder input of shape ", t.shape().ToString(),
                       ": it has no value"));
    }
    bool seen = false;
    for (const Tensor& p : pending) seen = seen || p.SameAs(t);
    if (!seen) pending.push_back(t);
  }
  if (pending.empty()) return absl::OkStatus();

  std::vector<std::shared_ptr<LazyNode>> parameters;
  auto compile_start = std::chrono::steady_clock::now();
  TESSEL_ASSIGN_OR_RETURN(CacheEntry entry, LookUpOrCompile(ctx, pending, parameters));
  ctx.metrics.compile_seconds += Seconds(compile_start);
  const std::shared_ptr<const Graph>& graph = entry.graph;
  const uint64_t fingerprint = entry.fingerprint;

  std::vector<std::shared_ptr<const DeviceData>> arguments;
  arguments.reserve(parameters.size());
  for (const auto& p : parameters) {
    if (p->data == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot run a graph that reads a placeholder input of shape ",
                       p->shape.ToString(), ": it has no value"));
    }
    arguments.push_back(p->data);
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<bool> donated,
                          DonateArguments(pending, parameters, arguments));
  auto execute_start = std::chrono::steady_clock::now();
  ExecutionStats stats;
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> executed =
      GetComputationClient().ExecuteDonated(graph, fingerprint, arguments, donated, &stats);
  if (!executed.ok()) {
    // Values the client did not consume go back to their leaves (the tensors are unchanged);
    // once one was consumed the step cannot run again, and its tensors keep the error.
    bool consumed = false;
    for (size_t i = 0; i < donated.size(); ++i) {
      if (!donated[i]) continue;
      if (arguments[i]->donated()) {
        consumed = true;
      } else {
        parameters[i]->data = arguments[i];
      }
    }
    if (consumed) {
      absl::Status lost(executed.status().code(),
                        absl::StrCat(executed.status().message(),
                                     " (values donated to this step are lost; set "
                                     "TESSEL_DONATE_PARAMS=0 to keep them)"));
      for (const Tensor& t : pending) t.impl()->status = lost;
      return lost;
    }
    return executed.status();
  }
  std::vector<std::shared_ptr<const DeviceData>> results = *std::move(executed);
  for (bool d : donated) ctx.metrics.donated_arguments += d;
  ctx.metrics.donated_in_place += stats.donated_in_place;
  ctx.metrics.execute_seconds += Seconds(execute_start);
  ctx.metrics.peak_live_bytes = std::max(ctx.metrics.peak_live_bytes, stats.peak_live_bytes);
  ++ctx.metrics.syncs;
  if (results.size() != pending.size()) {
    return absl::InternalError(absl::StrCat("computation client returned ", results.size(),
                                            " values for ", pending.size(), " outputs"));
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    auto leaf = std::make_shared<LazyNode>();
    leaf->opcode = Opcode::kParameter;
    leaf->shape = results[i]->shape();
    // An annotated value keeps its annotation; otherwise it takes the layout the client chose
    // (torch_xla: the sharding of device data becomes the parameter sharding of the next graph).
    leaf->sharding = pending[i].impl()->node->sharding;
    if (leaf->sharding.empty()) leaf->sharding = results[i]->sharding();
    leaf->data = std::move(results[i]);
    pending[i].impl()->node = std::move(leaf);
  }
  return absl::OkStatus();
}

absl::Status Sync() {
  LazyContext& ctx = Context();
  std::vector<std::shared_ptr<TensorImpl>> live;
  for (const auto& weak : ctx.live) {
    if (auto impl = weak.lock()) {
      if (impl->status.ok() && impl->node && impl->node->data == nullptr &&
          !impl->node->placeholder) {
        live.push_back(std::move(impl));
      }
    }
  }
  std::erase_if(ctx.live, [](const std::weak_ptr<TensorImpl>& w) { return w.expired(); });
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a->id < b->id; });
  std::vector<Tensor> tensors;
  tensors.reserve(live.size());
  for (auto& impl : live) tensors.emplace_back(std::move(impl));
  // Taken out first: a closure may add closures (for the next step) or call Sync itself, and a
  // failed step drops its closures (they may point at the caller's frame, which is unwinding).
  std::vector<std::function<absl::Status()>> closures = std::move(ctx.step_closures);
  ctx.step_closures.clear();
  TESSEL_RETURN_IF_ERROR(Sync(tensors));
  for (auto& closure : closures) TESSEL_RETURN_IF_ERROR(closure());
  return absl::OkStatus();
}

void AddStepClosure(std::function<absl::Status()> closure) {
  Context().step_closures.push_back(std::move(closure));
}

const LazyMetrics& GetLazyMetrics() { return Context().metrics; }
void ResetLazyMetrics() { Context().metrics = LazyMetrics(); }
void SetExecutorOptions(const ExecutorOptions& options) { Context().local.set_options(options); }

void SetComputationClient(std::shared_ptr<ComputationClient> client) {
  Context().client = std::move(client);
}

ComputationClient& GetComputationClient() {
  LazyContext& ctx = Context();
  if (ctx.client != nullptr) return *ctx.client;
  return ctx.local;
}
void ManualSeed(uint64_t seed) { Context().next_seed = seed; }

// ---------------------------------------------------------------------------------------------
// Creation.

Tensor Scalar(DType dtype, double value) {
  Literal lit(Shape(dtype, {}));
  lit.SetFromDouble(0, value);
  return Tensor::Constant(std::move(lit));
}

Tensor Full(const Shape& shape, double value) {
  Tensor s = Scalar(shape.dtype(), value);
  if (shape.rank() == 0) return s;
  OpAttributes attrs;
  return MakeOp(Opcode::kBroadcast, {s}, attrs, shape);
}

Tensor Iota(const Shape& shape, int64_t iota_dimension) {
  OpAttributes attrs;
  attrs.iota_dimension = iota_dimension;
  return MakeOp(Opcode::kIota, {}, std::move(attrs), shape);
}

namespace {
Tensor Rng(const Shape& shape, double a, double b, RngDistribution distribution) {
  OpAttributes attrs;
  attrs.rng_distribution = distribution;
  attrs.rng_seed = Context().next_seed++;
  return MakeOp(Opcode::kRng, {Scalar(shape.dtype(), a), Scalar(shape.dtype(), b)},
                std::move(attrs), shape);
}
}  // namespace

Tensor RngUniform(const Shape& shape, double low, double high) {
  return Rng(shape, low, high, RngDistribution::kUniform);
}
Tensor RngNormal(const Shape& shape, double mean, double stddev) {
  return Rng(shape, mean, stddev, RngDistribution::kNormal);
}

// ---------------------------------------------------------------------------------------------
// Elementwise.

Tensor Add(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kAdd, {a, b}); }
Tensor Sub(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kSubtract, {a, b}); }
Tensor Mul(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kMultiply, {a, b}); }
Tensor Div(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kDivide, {a, b}); }
Tensor Max(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kMaximum, {a, b}); }
Tensor Min(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kMinimum, {a, b}); }
Tensor Pow(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kPower, {a, b}); }
Tensor And(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kAnd, {a, b}); }
Tensor Or(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kOr, {a, b}); }
Tensor Not(const Tensor& a) { return MakeOp(Opcode::kNot, {a}); }
Tensor Compare(const Tensor& a, const Tensor& b, ComparisonDirection direction) {
  OpAttributes attrs;
  attrs.comparison_direction = direction;
  return MakeOp(Opcode::kCompare, {a, b}, std::move(attrs));
}
Tensor Neg(const Tensor& a) { return MakeOp(Opcode::kNegate, {a}); }
Tensor Abs(const Tensor& a) { return MakeOp(Opcode::kAbs, {a}); }
Tensor Exp(const Tensor& a) { return MakeOp(Opcode::kExp, {a}); }
Tensor Log(const Tensor& a) { return MakeOp(Opcode::kLog, {a}); }
Tensor Tanh(const Tensor& a) { return MakeOp(Opcode::kTanh, {a}); }
Tensor Logistic(const Tensor& a) { return MakeOp(Opcode::kLogistic, {a}); }
Tensor Sqrt(const Tensor& a) { return MakeOp(Opcode::kSqrt, {a}); }
Tensor Rsqrt(const Tensor& a) { return MakeOp(Opcode::kRsqrt, {a}); }
Tensor Sin(const Tensor& a) { return MakeOp(Opcode::kSine, {a}); }
Tensor Cos(const Tensor& a) { return MakeOp(Opcode::kCosine, {a}); }
Tensor Copy(const Tensor& a) { return MakeOp(Opcode::kCopy, {a}); }
Tensor Remainder(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kRemainder, {a, b}); }
Tensor Atan2(const Tensor& a, const Tensor& b) { return MakeOp(Opcode::kAtan2, {a, b}); }
Tensor Erf(const Tensor& a) { return MakeOp(Opcode::kErf, {a}); }

Tensor SpmdFullToShardShape(const Tensor& a, const Shape& local_shape) {
  OpAttributes attrs;
  attrs.custom_call_target = std::string(kFullToShardShapeTarget);
  Tensor local = MakeOp(Opcode::kCustomCall, {a}, std::move(attrs), local_shape);
  if (local.status().ok()) local.SetSharding("{manual}");
  return local;
}

Tensor SpmdShardToFullShape(const Tensor& a, const Shape& global_shape, std::string sharding) {
  OpAttributes attrs;
  attrs.custom_call_target = std::string(kShardToFullShapeTarget);
  Tensor global = MakeOp(Opcode::kCustomCall, {a}, std::move(attrs), global_shape);
  if (global.status().ok()) global.SetSharding(std::move(sharding));
  return global;
}

Tensor AllReduce(const Tensor& a, CollectiveDeviceList replica_groups, ReduceKind kind) {
  OpAttributes attrs;
  attrs.replica_groups = std::move(replica_groups);
  attrs.reduce_kind = kind;
  attrs.channel_id = 1;
  attrs.use_global_device_ids = true;
  return MakeOp(Opcode::kAllReduce, {a}, std::move(attrs));
}
namespace {
// XLA's collectives as JAX and torch_xla emit them in per-device code: global device ids.
OpAttributes CollectiveAttributes(CollectiveDeviceList replica_groups) {
  OpAttributes attrs;
  attrs.replica_groups = std::move(replica_groups);
  attrs.channel_id = 1;
  attrs.use_global_device_ids = true;
  return attrs;
}
}  // namespace

Tensor AllGather(const Tensor& a, int64_t dim, CollectiveDeviceList replica_groups) {
  OpAttributes attrs = CollectiveAttributes(std::move(replica_groups));
  attrs.dimensions = {dim};
  return MakeOp(Opcode::kAllGather, {a}, std::move(attrs));
}
Tensor ReduceScatter(const Tensor& a, int64_t dim, CollectiveDeviceList replica_groups,
                     ReduceKind kind) {
  OpAttributes attrs = CollectiveAttributes(std::move(replica_groups));
  attrs.dimensions = {dim};
  attrs.reduce_kind = kind;
  return MakeOp(Opcode::kReduceScatter, {a}, std::move(attrs));
}
Tensor AllToAll(const Tensor& a, int64_t dim, CollectiveDeviceList replica_groups) {
  OpAttributes attrs = CollectiveAttributes(std::move(replica_groups));
  attrs.dimensions = {dim};
  return MakeOp(Opcode::kAllToAll, {a}, std::move(attrs));
}
Tensor Convert(const Tensor& a, DType dtype) {
  if (!a.status().ok()) return a;
  return MakeOp(Opcode::kConvert, {a}, {}, a.shape().WithDType(dtype));
}
Tensor ReducePrecision(const Tensor& a, int64_t exponent_bits, int64_t mantissa_bits) {
  if (!a.status().ok()) return a;
  OpAttributes attrs;
  attrs.exponent_bits = exponent_bits;
  attrs.mantissa_bits = mantissa_bits;
  return MakeOp(Opcode::kReducePrecision, {a}, std::move(attrs));
}
Tensor Select(const Tensor& pred, const Tensor& on_true, const Tensor& on_false) {
  return MakeOp(Opcode::kSelect, {pred, on_true, on_false});
}
Tensor Clamp(const Tensor& low, const Tensor& x, const Tensor& high) {
  return MakeOp(Opcode::kClamp, {low, x, high});
}

Tensor operator+(const Tensor& a, const Tensor& b) { return Add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return Sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return Mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return Div(a, b); }
Tensor operator-(const Tensor& a) { return Neg(a); }
Tensor operator+(const Tensor& a, double b) { return Add(a, FullLike(a, b)); }
Tensor operator-(const Tensor& a, double b) { return Sub(a, FullLike(a, b)); }
Tensor operator*(const Tensor& a, double b) { return Mul(a, FullLike(a, b)); }
Tensor operator/(const Tensor& a, double b) { return Div(a, FullLike(a, b)); }
Tensor operator+(double a, const Tensor& b) { return Add(FullLike(b, a), b); }
Tensor operator-(double a, const Tensor& b) { return Sub(FullLike(b, a), b); }
Tensor operator*(double a, const Tensor& b) { return Mul(FullLike(b, a), b); }
Tensor operator/(double a, const Tensor& b) { return Div(FullLike(b, a), b); }

// ---------------------------------------------------------------------------------------------
// Shape ops.

Tensor Broadcast(const Tensor& a, std::vector<int64_t> dims,
                 std::vector<int64_t> broadcast_dimensions) {
  if (!a.status().ok()) return a;
  OpAttributes attrs;
  attrs.dimensions = std::move(broadcast_dimensions);
  return MakeOp(Opcode::kBroadcast, {a}, std::move(attrs), Shape(a.dtype(), std::move(dims)));
}

Tensor BroadcastTo(const Tensor& a, std::vector<int64_t> dims) {
  if (!a.status().ok()) return a;
  int64_t rank = static_cast<int64_t>(dims.size());
  int64_t offset = rank - a.rank();
  if (offset < 0) {
    return Tensor::Error(absl::InvalidArgumentError(
        absl::StrCat("broadcast_to: cannot broadcast ", a.shape().ToString(), " to rank ", rank)));
  }
  std::vector<int64_t> kept_dims, broadcast_dims;
  for (int64_t i = 0; i < a.rank(); ++i) {
    int64_t target = dims[offset + i];
    if (a.dim(i) == target) {
      kept_dims.push_back(a.dim(i));
      broadcast_dims.push_back(offset + i);
    } else if (a.dim(i) != 1) {
      return Tensor::Error(absl::InvalidArgumentError(absl::StrCat(
          "broadcast_to: dim ", i, " of ", a.shape().ToString(), " is neither 1 nor ", target)));
    }
  }
  Tensor squeezed = static_cast<int64_t>(kept_dims.size()) == a.rank() ? a : Reshape(a, kept_dims);
  if (squeezed.shape().dims() == dims) return squeezed;
  return Broadcast(squeezed, std::move(dims), std::move(broadcast_dims));
}

Tensor Reshape(const Tensor& a, std::vector<int64_t> dims) {
  if (!a.status().ok()) return a;
  if (a.shape().dims() == dims) return a;
  return MakeOp(Opcode::kReshape, {a}, {}, Shape(a.dtype(), std::move(dims)));
}

Tensor Transpose(const Tensor& a, std::vector<int64_t> permutation) {
  OpAttributes attrs;
  attrs.dimensions = std::move(permutation);
  return MakeOp(Opcode::kTranspose, {a}, std::move(attrs));
}

Tensor Slice(const Tensor& a, std::vector<int64_t> starts, std::vector<int64_t> limits,
             std::vector<int64_t> strides) {
  if (strides.empty()) strides.assign(starts.size(), 1);
  if (starts.size() != limits.size() || starts.size() != strides.size()) {
    return Tensor::Error(
        absl::InvalidArgumentError("slice: starts, limits and strides must have the same length"));
  }
  OpAttributes attrs;
  for (size_t i = 0; i < starts.size(); ++i) {
    attrs.slice.push_back(SliceDim{starts[i], limits[i], strides[i]});
  }
  return MakeOp(Opcode::kSlice, {a}, std::move(attrs));
}

Tensor Pad(const Tensor& a, const Tensor& value, std::vector<PadDim> padding) {
  OpAttributes attrs;
  attrs.padding = std::move(padding);
  return MakeOp(Opcode::kPad, {a, value}, std::move(attrs));
}

Tensor Concatenate(absl::Span<const Tensor> parts, int64_t dim) {
  OpAttributes attrs;
  attrs.dimensions = {dim};
  return MakeOp(Opcode::kConcatenate, parts, std::move(attrs));
}

Tensor DynamicSlice(const Tensor& a, absl::Span<const Tensor> starts, std::vector<int64_t> sizes) {
  std::vector<Tensor> operands = {a};
  operands.insert(operands.end(), starts.begin(), starts.end());
  OpAttributes attrs;
  attrs.dynamic_slice_sizes = std::move(sizes);
  return MakeOp(Opcode::kDynamicSlice, operands, std::move(attrs));
}

Tensor DynamicUpdateSlice(const Tensor& a, const Tensor& update, absl::Span<const Tensor> starts) {
  std::vector<Tensor> operands = {a, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return MakeOp(Opcode::kDynamicUpdateSlice, operands);
}

Tensor Gather(const Tensor& operand, const Tensor& indices, const GatherDimensionNumbers& dnums) {
  OpAttributes attrs;
  attrs.gather = dnums;
  return MakeOp(Opcode::kGather, {operand, indices}, std::move(attrs));
}

Tensor Scatter(const Tensor& operand, const Tensor& indices, const Tensor& updates,
               const ScatterDimensionNumbers& dnums, ReduceKind kind) {
  OpAttributes attrs;
  attrs.scatter = dnums;
  attrs.reduce_kind = kind;
  return MakeOp(Opcode::kScatter, {operand, indices, updates}, std::move(attrs));
}

// ---------------------------------------------------------------------------------------------
// Reductions and contractions.

Tensor Reduce(const Tensor& a, const Tensor& init, std::vector<int64_t> dims, ReduceKind kind) {
  OpAttributes attrs;
  attrs.dimensions = std::move(dims);
  attrs.reduce_kind = kind;
  return MakeOp(Opcode::kReduce, {a, init}, std::move(attrs));
}

Tensor Convolution(const Tensor& lhs, const Tensor& rhs, std::vector<WindowDim> window,
                   const ConvolutionDimensionNumbers& dnums, int64_t feature_group_count,
                   int64_t batch_group_count) {
  OpAttributes attrs;
  attrs.window = std::move(window);
  attrs.convolution = dnums;
  attrs.feature_group_count = feature_group_count;
  attrs.batch_group_count = batch_group_count;
  return MakeOp(Opcode::kConvolution, {lhs, rhs}, std::move(attrs));
}

Tensor ReduceWindow(const Tensor& a, const Tensor& init, std::vector<WindowDim> window,
                    ReduceKind kind) {
  OpAttributes attrs;
  attrs.window = std::move(window);
  attrs.reduce_kind = kind;
  return MakeOp(Opcode::kReduceWindow, {a, init}, std::move(attrs));
}

Tensor SelectAndScatter(const Tensor& operand, const Tensor& source, const Tensor& init,
                        std::vector<WindowDim> window, ComparisonDirection select,
                        ReduceKind scatter) {
  OpAttributes attrs;
  attrs.window = std::move(window);
  attrs.comparison_direction = select;
  attrs.reduce_kind = scatter;
  return MakeOp(Opcode::kSelectAndScatter, {operand, source, init}, std::move(attrs));
}

Tensor Reverse(const Tensor& a, std::vector<int64_t> dims) {
  OpAttributes attrs;
  attrs.dimensions = std::move(dims);
  return MakeOp(Opcode::kReverse, {a}, std::move(attrs));
}

Tensor ReduceSum(const Tensor& a, std::vector<int64_t> dims) {
  return Reduce(a, ScalarLike(a, 0), std::move(dims), ReduceKind::kAdd);
}

Tensor ReduceMax(const Tensor& a, std::vector<int64_t> dims) {
  double init = IsFloating(a.dtype()) ? -std::numeric_limits<double>::infinity()
                                      : std::numeric_limits<double>::lowest();
  return Reduce(a, ScalarLike(a, init), std::move(dims), ReduceKind::kMaximum);
}

Tensor ReduceMin(const Tensor& a, std::vector<int64_t> dims) {
  double init = IsFloating(a.dtype()) ? std::numeric_limits<double>::infinity()
                                      : std::numeric_limits<double>::max();
  return Reduce(a, ScalarLike(a, init), std::move(dims), ReduceKind::kMinimum);
}

Tensor ReduceMean(const Tensor& a, std::vector<int64_t> dims) {
  if (!a.status().ok()) return a;
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d >= 0 && d < a.rank()) count *= a.dim(d);
  }
  Tensor sum = ReduceSum(a, std::move(dims));
  return sum / static_cast<double>(count);
}

Tensor Dot(const Tensor& lhs, const Tensor& rhs, const DotDimensionNumbers& dnums) {
  OpAttributes attrs;
  attrs.dot = dnums;
  return MakeOp(Opcode::kDot, {lhs, rhs}, std::move(attrs));
}

Tensor MatMul(const Tensor& lhs, const Tensor& rhs) {
  if (!lhs.status().ok()) return lhs;
  if (!rhs.status().ok()) return rhs;
  DotDimensionNumbers dn;
  if (rhs.rank() == 2) {
    dn.lhs_contracting_dims = {lhs.rank() - 1};
    dn.rhs_contracting_dims = {0};
    return Dot(lhs, rhs, dn);
  }
  if (lhs.rank() != rhs.rank() || lhs.rank() < 3) {
    return Tensor::Error(absl::InvalidArgumentError(absl::StrCat(
        "matmul: unsupported ranks ", lhs.shape().ToString(), " x ", rhs.shape().ToString())));
  }
  for (int64_t d = 0; d < lhs.rank() - 2; ++d) {
    dn.lhs_batch_dims.push_back(d);
    dn.rhs_batch_dims.push_back(d);
  }
  dn.lhs_contracting_dims = {lhs.rank() - 1};
  dn.rhs_contracting_dims = {rhs.rank() - 2};
  return Dot(lhs, rhs, dn);
}

}  // namespace tessel
