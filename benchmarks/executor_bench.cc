// Executor kernels against plain Eigen in the same binary.
//
//   BM_ExecutorDot/n:N/threads:T     f32 [N,N] x [N,N] through Executor::Run (a graph with two
//                                    parameters and a dot); T = 1 or 0 (default: all cores)
//   BM_EigenGemm/n:N/threads:1       C.noalias() = A * B on row-major Eigen matrices,
//                                    Eigen::setNbThreads(1)
//   BM_ExecutorMlpGemms/batch:B      the f32 GEMMs of one step of mlp_step_bench's wide MLP
//                                    (784-1024-1024-10), first two layers: x W1, h W2 (forward),
//                                    dy W2^T (backward), x^T dy and h^T dy (weight gradients,
//                                    k = B), as five dots of one graph, one thread
//   BM_EigenMlpGemms/batch:B         the same five products with Eigen (row-major maps,
//                                    transposes as Eigen expressions), one thread: the executor's
//                                    GEMM library (oneDNN) against Eigen on the step's shapes
//   BM_EigenTensorDot/n:N/threads:0  the same product as an Eigen Tensor contraction on a
//                                    ThreadPoolDevice with one thread per core: the multi-threaded
//                                    plain-Eigen baseline (Eigen's matrix GEMM parallelises only
//                                    with OpenMP, which Tessel does not build with)
//   BM_ExecutorAdd/threads:T         f32[16M] + f32[16M] through Executor::Run
//   BM_EigenAdd                      the same add on Eigen arrays into a preallocated output
//   BM_ExecutorExp/threads:1         exp of f32[16M] through Executor::Run (Eigen's packet exp,
//                                    then libm for the inputs below ln(FLT_MIN))
//   BM_EigenExp                      the same exp on Eigen arrays into a preallocated output
//   BM_ExecutorAdam/fusion:F         the Adam update of f32[1M] parameters (m, v, p; scalar
//                                    hyperparameters broadcast as the lazy API traces them)
//                                    through Executor::Run, threads 1, loop fusion off (0) or on
//                                    (1); counter kernels = passes over memory per run
//   BM_ExecutorAdamLoop/donate:D/elements:E  that update run after run, each run's outputs the
//                                    next run's p, m, v: donated to the run (D = 1, written in
//                                    place) or borrowed (D = 0, new buffers); E = 1M, or 1.87M
//                                    (the parameters of mlp_step_bench's wide MLP)
//   BM_ExecutorGptStep/prepared:P    JAX's GPT training step (tests/fixtures/jax/gpt_train_f32.hlo,
//                                    about 1,700 instructions, random arguments) on one
//                                    thread: P = 1 runs a program prepared once, P = 0
//                                    Run(graph), which prepares at every run (same binary)
//   BM_ExecutorPrepareGpt            Executor::Prepare alone on that step
//   BM_EigenAdam                     the same update as one Eigen array expression per output
//   BM_ExecutorConvolution/threads:T a ResNet 3x3 convolution, f32[8,32,32,64] (NHWC) x
//                                    [3,3,64,64] (HWIO), pad 1: im2col + a GEMM per block
//
// Every BM_Executor* prepares its graph once (Executor::Prepare) and times runs of the prepared
// program, as the runtimes run a step; TESSEL_EXECUTOR_PREPARED=0 times Run(graph), which
// prepares in every run (the A/B of the preparation's cost).
//
// Counters: FLOPS (2 N^3 per dot, N per add or exp) as a rate, so "FLOPS=90G/s" reads as 90
// GFLOP/s; the add and exp also report bytes/s (reads and writes). Wall-clock time throughout.
// Run: executor_bench --benchmark_min_time=0.01   (Google Benchmark 1.7.1 takes a bare number)
#define EIGEN_USE_THREADS

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "benchmark/benchmark.h"
#include "tbb/info.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/literal.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/window.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tessel {
namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Literal RandomF32(std::vector<int64_t> dims, uint32_t seed) {
  Literal lit(Shape(DType::kF32, std::move(dims)));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : lit.data<float>()) v = dist(gen);
  return lit;
}

void SetDotCounters(benchmark::State& state, int64_t n) {
  state.counters["FLOPS"] = benchmark::Counter(
      2.0 * static_cast<double>(n) * n * n * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// Runs `graph` prepared once: Prepare in the constructor (unless TESSEL_EXECUTOR_PREPARED=0),
// then each Run/RunBorrowed runs the prepared program, or the graph when not prepared.
class PreparedRunner {
 public:
  PreparedRunner(const Executor& executor, const Graph& graph)
      : executor_(executor), graph_(graph) {
    absl::StatusOr<bool> reuse = ReusePreparedPrograms();
    status_ = reuse.status();
    if (reuse.ok() && *reuse) {
      absl::StatusOr<std::shared_ptr<const PreparedProgram>> program = executor.Prepare(graph);
      status_ = program.status();
      if (program.ok()) program_ = *std::move(program);
    }
  }
  absl::StatusOr<std::vector<Literal>> Run(const std::vector<Literal>& args,
                                           ExecutionStats* stats = nullptr) const {
    if (!status_.ok()) return status_;
    return program_ != nullptr ? executor_.Run(*program_, args, stats)
                               : executor_.Run(graph_, args, stats);
  }
  absl::StatusOr<std::vector<Literal>> RunBorrowed(absl::Span<const Literal* const> args,
                                                   ExecutionStats* stats,
                                                   ExecutionDonation* donation) const {
    if (!status_.ok()) return status_;
    return program_ != nullptr ? executor_.RunBorrowed(*program_, args, stats, donation)
                               : executor_.RunBorrowed(graph_, args, stats, donation);
  }

 private:
  const Executor& executor_;
  const Graph& graph_;
  absl::Status status_;
  std::shared_ptr<const PreparedProgram> program_;
};

// Times runs of `graph` on `args` on `threads` threads (0: all cores); stops the benchmark with
// the error if a run fails.
void TimeExecutor(benchmark::State& state, const Graph& graph, const std::vector<Literal>& args,
                  int threads) {
  Executor executor(ExecutorOptions{threads});
  const PreparedRunner runner(executor, graph);
  for (auto _ : state) {
    absl::StatusOr<std::vector<Literal>> out = runner.Run(args);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(out->front().raw_data());
  }
}

void BM_ExecutorDot(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Graph graph("dot");
  Node* a = graph.AddParameter(0, Shape(DType::kF32, {n, n}), "a").value();
  Node* b = graph.AddParameter(1, Shape(DType::kF32, {n, n}), "b").value();
  OpAttributes attrs;
  attrs.dot.lhs_contracting_dims = {1};
  attrs.dot.rhs_contracting_dims = {0};
  graph.set_root(graph.AddNode(Opcode::kDot, {a, b}, attrs).value());
  std::vector<Literal> args = {RandomF32({n, n}, 1), RandomF32({n, n}, 2)};
  TimeExecutor(state, graph, args, threads);
  SetDotCounters(state, n);
}

void BM_EigenGemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  Eigen::setNbThreads(1);
  RowMajorMatrix a = RandomF32({n, n}, 1).AsMatrix<float>();
  RowMajorMatrix b = RandomF32({n, n}, 2).AsMatrix<float>();
  RowMajorMatrix c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  SetDotCounters(state, n);
}

// The five GEMMs of BM_ExecutorMlpGemms: flops of one step's worth at batch b.
double MlpGemmFlops(int64_t b) {
  return 2.0 * static_cast<double>(b) * (784.0 * 1024 + 3.0 * 1024 * 1024 + 784.0 * 1024);
}

void BM_ExecutorMlpGemms(benchmark::State& state) {
  const int64_t b = state.range(0);
  Graph graph("mlp_gemms");
  Node* x = graph.AddParameter(0, Shape(DType::kF32, {b, 784}), "x").value();
  Node* h = graph.AddParameter(1, Shape(DType::kF32, {b, 1024}), "h").value();
  Node* dy = graph.AddParameter(2, Shape(DType::kF32, {b, 1024}), "dy").value();
  Node* w1 = graph.AddParameter(3, Shape(DType::kF32, {784, 1024}), "w1").value();
  Node* w2 = graph.AddParameter(4, Shape(DType::kF32, {1024, 1024}), "w2").value();
  auto dot = [&](Node* lhs, Node* rhs, int64_t lhs_contracting, int64_t rhs_contracting) {
    OpAttributes attrs;
    attrs.dot.lhs_contracting_dims = {lhs_contracting};
    attrs.dot.rhs_contracting_dims = {rhs_contracting};
    return graph.AddNode(Opcode::kDot, {lhs, rhs}, attrs).value();
  };
  graph.set_root(
      graph
          .AddNode(Opcode::kTuple, {dot(x, w1, 1, 0), dot(h, w2, 1, 0), dot(dy, w2, 1, 1),
                                    dot(x, dy, 0, 0), dot(h, dy, 0, 0)})
          .value());
  std::vector<Literal> args = {RandomF32({b, 784}, 1), RandomF32({b, 1024}, 2),
                               RandomF32({b, 1024}, 3), RandomF32({784, 1024}, 4),
                               RandomF32({1024, 1024}, 5)};
  TimeExecutor(state, graph, args, 1);
  state.counters["FLOPS"] = benchmark::Counter(
      MlpGemmFlops(b) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_EigenMlpGemms(benchmark::State& state) {
  const int64_t b = state.range(0);
  Eigen::setNbThreads(1);
  const RowMajorMatrix x = RandomF32({b, 784}, 1).AsMatrix<float>();
  const RowMajorMatrix h = RandomF32({b, 1024}, 2).AsMatrix<float>();
  const RowMajorMatrix dy = RandomF32({b, 1024}, 3).AsMatrix<float>();
  const RowMajorMatrix w1 = RandomF32({784, 1024}, 4).AsMatrix<float>();
  const RowMajorMatrix w2 = RandomF32({1024, 1024}, 5).AsMatrix<float>();
  // New outputs every step, as the executor allocates its results.
  for (auto _ : state) {
    RowMajorMatrix y1(b, 1024), y2(b, 1024), dx(b, 1024), g1(784, 1024), g2(1024, 1024);
    y1.noalias() = x * w1;
    y2.noalias() = h * w2;
    dx.noalias() = dy * w2.transpose();
    g1.noalias() = x.transpose() * dy;
    g2.noalias() = h.transpose() * dy;
    benchmark::DoNotOptimize(g2.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] = benchmark::Counter(
      MlpGemmFlops(b) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_EigenTensorDot(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = tbb::info::default_concurrency();
  Eigen::ThreadPool pool(threads);
  Eigen::ThreadPoolDevice device(&pool, threads);
  using Tensor = Eigen::Tensor<float, 2, Eigen::RowMajor>;
  Tensor a(n, n), b(n, n), c(n, n);
  Literal la = RandomF32({n, n}, 1), lb = RandomF32({n, n}, 2);
  std::copy(la.data<float>().begin(), la.data<float>().end(), a.data());
  std::copy(lb.data<float>().begin(), lb.data<float>().end(), b.data());
  const Eigen::array<Eigen::IndexPair<int>, 1> contract = {Eigen::IndexPair<int>(1, 0)};
  for (auto _ : state) {
    c.device(device) = a.contract(b, contract);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  SetDotCounters(state, n);
  state.counters["threads"] = threads;
}

constexpr int64_t kAddElements = int64_t{1} << 24;  // 16M floats, 64 MiB per operand

// Elements per second, and bytes per second over `arrays` f32 arrays (an add reads two and
// writes one; exp reads one and writes one).
void SetAddCounters(benchmark::State& state, double arrays = 3) {
  const double iterations = static_cast<double>(state.iterations());
  state.counters["FLOPS"] = benchmark::Counter(static_cast<double>(kAddElements) * iterations,
                                               benchmark::Counter::kIsRate);
  state.counters["bytes"] =
      benchmark::Counter(arrays * sizeof(float) * static_cast<double>(kAddElements) * iterations,
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

void BM_ExecutorAdd(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  Graph graph("add");
  Node* a = graph.AddParameter(0, Shape(DType::kF32, {kAddElements}), "a").value();
  Node* b = graph.AddParameter(1, Shape(DType::kF32, {kAddElements}), "b").value();
  graph.set_root(graph.AddNode(Opcode::kAdd, {a, b}).value());
  std::vector<Literal> args = {RandomF32({kAddElements}, 1), RandomF32({kAddElements}, 2)};
  TimeExecutor(state, graph, args, threads);
  SetAddCounters(state);
}

void BM_EigenAdd(benchmark::State& state) {
  Literal la = RandomF32({kAddElements}, 1), lb = RandomF32({kAddElements}, 2);
  Eigen::Map<const Eigen::ArrayXf> a(la.data<float>().data(), kAddElements);
  Eigen::Map<const Eigen::ArrayXf> b(lb.data<float>().data(), kAddElements);
  Eigen::ArrayXf c(kAddElements);
  for (auto _ : state) {
    c = a + b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  SetAddCounters(state);
}

void BM_ExecutorExp(benchmark::State& state) {
  Graph graph("exp");
  Node* a = graph.AddParameter(0, Shape(DType::kF32, {kAddElements}), "a").value();
  graph.set_root(graph.AddNode(Opcode::kExp, {a}).value());
  std::vector<Literal> args = {RandomF32({kAddElements}, 1)};
  TimeExecutor(state, graph, args, static_cast<int>(state.range(0)));
  SetAddCounters(state, 2);
}

// The gradient norm's sum of squares, reduce(multiply(x, x)) over all of f32[1,1048576]
// (rows:1), and layer norm's variance, row sums of centred squares over f32[8192,256]
// (rows:8192), one thread: the square (or the centred-square loop) is written out and the
// reduce reads it back. docs/PERFORMANCE.md ("Reduce input fusion, measured and not kept")
// compares this with computing the square inside the reduce.
void BM_ExecutorSumOfSquares(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const int64_t row_len = (int64_t{1} << 20) / rows * (rows == 1 ? 1 : 2);
  const Shape shape(DType::kF32, {rows, row_len});
  Graph graph("sum_of_squares");
  Node* x = graph.AddParameter(0, shape, "x").value();
  Node* value = x;
  if (rows > 1) {
    Node* centre = graph.AddParameter(1, Shape(DType::kF32, {}), "c").value();
    value = graph
                .AddNode(
                    Opcode::kSubtract,
                    {x, graph.AddNode(Opcode::kBroadcast, shape, {centre}, OpAttributes{}).value()})
                .value();
  }
  OpAttributes reduce;
  reduce.dimensions = rows == 1 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{1};
  reduce.reduce_kind = ReduceKind::kAdd;
  graph.set_root(graph
                     .AddNode(Opcode::kReduce,
                              {graph.AddNode(Opcode::kMultiply, {value, value}).value(),
                               graph.AddConstant(Literal::Scalar(0.0f))},
                              reduce)
                     .value());
  std::vector<Literal> args = {RandomF32({rows, row_len}, 1)};
  if (rows > 1) args.push_back(Literal::Scalar(0.5f));
  TimeExecutor(state, graph, args, 1);
}

void BM_EigenExp(benchmark::State& state) {
  Literal la = RandomF32({kAddElements}, 1);
  Eigen::Map<const Eigen::ArrayXf> a(la.data<float>().data(), kAddElements);
  Eigen::ArrayXf c(kAddElements);
  for (auto _ : state) {
    c = a.exp();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  SetAddCounters(state, 2);
}

constexpr int64_t kAdamElements = 1 << 20;

// m' = b1 m + (1 - b1) g; v' = b2 v + (1 - b2) g g; p' = p - s m' / (sqrt(v') c + eps), with
// s and c scalar parameters (step data) and b1, b2, eps constants, every scalar broadcast.
std::unique_ptr<Graph> AdamGraph(int64_t elements = kAdamElements) {
  auto graph = std::make_unique<Graph>("adam");
  const Shape shape(DType::kF32, {elements});
  Node* p = graph->AddParameter(0, shape, "p").value();
  Node* g = graph->AddParameter(1, shape, "g").value();
  Node* m = graph->AddParameter(2, shape, "m").value();
  Node* v = graph->AddParameter(3, shape, "v").value();
  Node* step_size = graph->AddParameter(4, Shape(DType::kF32, {}), "step_size").value();
  Node* inv_c = graph->AddParameter(5, Shape(DType::kF32, {}), "inv_sqrt_bc2").value();
  auto full = [&](Node* scalar) {
    return graph->AddNode(Opcode::kBroadcast, shape, {scalar}, OpAttributes{}).value();
  };
  auto constant = [&](float value) { return full(graph->AddConstant(Literal::Scalar(value))); };
  auto op = [&](Opcode opcode, Node* a, Node* b) { return graph->AddNode(opcode, {a, b}).value(); };
  Node* m1 = op(Opcode::kAdd, op(Opcode::kMultiply, m, constant(0.9f)),
                op(Opcode::kMultiply, g, constant(0.1f)));
  Node* v1 = op(Opcode::kAdd, op(Opcode::kMultiply, v, constant(0.999f)),
                op(Opcode::kMultiply, op(Opcode::kMultiply, g, g), constant(0.001f)));
  Node* sqrt_v = graph->AddNode(Opcode::kSqrt, {v1}).value();
  Node* denom = op(Opcode::kAdd, op(Opcode::kMultiply, sqrt_v, full(inv_c)), constant(1e-8f));
  Node* p1 = op(Opcode::kSubtract, p,
                op(Opcode::kDivide, op(Opcode::kMultiply, full(step_size), m1), denom));
  graph->set_root(graph->AddNode(Opcode::kTuple, {p1, m1, v1}).value());
  return graph;
}

std::vector<Literal> AdamArguments(int64_t elements = kAdamElements) {
  return {RandomF32({elements}, 1), RandomF32({elements}, 2), RandomF32({elements}, 3),
          RandomF32({elements}, 4), Literal::Scalar(1e-3f),   Literal::Scalar(1.0f)};
}

void BM_ExecutorAdam(benchmark::State& state) {
  std::unique_ptr<Graph> graph = AdamGraph();
  std::vector<Literal> args = AdamArguments();
  for (float& x : args[3].data<float>()) x = x * x;  // v is non-negative
  Executor executor(ExecutorOptions{.num_threads = 1, .fusion = state.range(0) != 0});
  const PreparedRunner runner(executor, *graph);
  ExecutionStats stats;
  for (auto _ : state) {
    absl::StatusOr<std::vector<Literal>> out = runner.Run(args, &stats);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(out->front().raw_data());
  }
  state.counters["kernels"] = static_cast<double>(stats.kernels);
}

// Adam steps as a training loop runs them: each run's p', m' and v' are the next run's p, m
// and v. donate:1 donates them to the run (ExecutionDonation: the new values are written into
// the old buffers, as the lazy runtime's Sync does), donate:0 borrows them (new buffers each
// run, the old ones freed afterwards). elements: parameters (the wide MLP of mlp_step_bench has
// 1.87M). Counter donated_in_place: outputs written into a donated buffer per run.
void BM_ExecutorAdamLoop(benchmark::State& state) {
  const bool donate = state.range(0) != 0;
  const int64_t elements = state.range(1);
  std::unique_ptr<Graph> graph = AdamGraph(elements);
  std::vector<Literal> args = AdamArguments(elements);
  for (float& x : args[3].data<float>()) x = x * x;
  Executor executor(ExecutorOptions{.num_threads = 1});
  const PreparedRunner runner(executor, *graph);
  ExecutionStats stats;
  for (auto _ : state) {
    const Literal* arguments[6];
    Literal* donated[6] = {};
    for (int i = 0; i < 6; ++i) arguments[i] = &args[i];
    for (int i : {0, 2, 3}) donated[i] = donate ? &args[i] : nullptr;
    ExecutionDonation donation{.literals = donated};
    absl::StatusOr<std::vector<Literal>> out = runner.RunBorrowed(arguments, &stats, &donation);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      break;
    }
    args[0] = std::move((*out)[0]);
    args[2] = std::move((*out)[1]);
    args[3] = std::move((*out)[2]);
  }
  state.counters["donated_in_place"] = static_cast<double>(stats.donated_in_place);
}

// JAX's GPT training step, parsed from the fixture, and arguments for it: small random floats,
// zero integers (token ids and the step counter).
std::unique_ptr<Graph> GptStep() {
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      ParseHloFile(std::string(TESSEL_SOURCE_DIR) + "/tests/fixtures/jax/gpt_train_f32.hlo");
  TESSEL_CHECK_OK(graph);
  return *std::move(graph);
}

std::vector<Literal> GptArguments(const Graph& graph) {
  std::vector<Literal> args;
  uint32_t seed = 1;
  for (const Node* parameter : graph.parameters()) {
    Literal arg(parameter->shape());
    if (parameter->shape().dtype() == DType::kF32) {
      std::mt19937 gen(seed++);
      std::uniform_real_distribution<float> dist(0.0f, 0.02f);
      for (float& v : arg.data<float>()) v = dist(gen);
    }
    args.push_back(std::move(arg));
  }
  return args;
}

void BM_ExecutorGptStep(benchmark::State& state) {
  std::unique_ptr<Graph> graph = GptStep();
  const std::vector<Literal> args = GptArguments(*graph);
  const Executor executor(ExecutorOptions{.num_threads = 1});
  std::shared_ptr<const PreparedProgram> program;
  if (state.range(0) != 0) program = executor.Prepare(*graph).value();
  for (auto _ : state) {
    absl::StatusOr<std::vector<Literal>> out =
        program != nullptr ? executor.Run(*program, args) : executor.Run(*graph, args);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(out->front().raw_data());
  }
  state.counters["instructions"] = static_cast<double>(graph->num_nodes());
}

void BM_ExecutorPrepareGpt(benchmark::State& state) {
  std::unique_ptr<Graph> graph = GptStep();
  const Executor executor(ExecutorOptions{.num_threads = 1});
  for (auto _ : state) {
    absl::StatusOr<std::shared_ptr<const PreparedProgram>> program = executor.Prepare(*graph);
    if (!program.ok()) {
      state.SkipWithError(std::string(program.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(program->get());
  }
}

void BM_EigenAdam(benchmark::State& state) {
  std::vector<Literal> args = AdamArguments();
  for (float& x : args[3].data<float>()) x = x * x;
  using Array = Eigen::Map<const Eigen::ArrayXf>;
  Array p(args[0].data<float>().data(), kAdamElements),
      g(args[1].data<float>().data(), kAdamElements),
      m(args[2].data<float>().data(), kAdamElements),
      v(args[3].data<float>().data(), kAdamElements);
  Eigen::ArrayXf p1(kAdamElements), m1(kAdamElements), v1(kAdamElements);
  const float step_size = 1e-3f, inv_c = 1.0f;
  for (auto _ : state) {
    m1 = m * 0.9f + g * 0.1f;
    v1 = v * 0.999f + g * g * 0.001f;
    p1 = p - step_size * m1 / (v1.sqrt() * inv_c + 1e-8f);
    benchmark::DoNotOptimize(p1.data());
    benchmark::ClobberMemory();
  }
}

// One untimed run first (allocator, TBB workers, caches), so that a single timed iteration, as
void BM_ExecutorConvolution(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  Graph graph("convolution");
  Node* x = graph.AddParameter(0, Shape(DType::kF32, {8, 32, 32, 64}), "x").value();
  Node* w = graph.AddParameter(1, Shape(DType::kF32, {3, 3, 64, 64}), "w").value();
  OpAttributes attrs;
  attrs.window = ParseWindow("size=3x3 pad=1_1x1_1").value();
  attrs.convolution = ParseDimLabels("b01f_01io->b01f").value();
  graph.set_root(graph.AddNode(Opcode::kConvolution, {x, w}, attrs).value());
  std::vector<Literal> args = {RandomF32({8, 32, 32, 64}, 1), RandomF32({3, 3, 64, 64}, 2)};
  TimeExecutor(state, graph, args, threads);
  // 2 * output elements * kernel spatial size * input features.
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * 8 * 32 * 32 * 64 * 9 * 64 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// with --benchmark_min_time=0.01, compares like with like.
constexpr double kWarmUpSeconds = 0.01;

BENCHMARK(BM_ExecutorDot)
    ->ArgNames({"n", "threads"})
    ->Args({1024, 1})
    ->Args({2048, 1})
    ->Args({1024, 0})
    ->Args({2048, 0})
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecutorConvolution)
    ->ArgNames({"threads"})
    ->Arg(1)
    ->Arg(0)
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenGemm)
    ->ArgNames({"n", "threads"})
    ->Args({1024, 1})
    ->Args({2048, 1})
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// The MLP step's batches, one setting for both sides of the oneDNN / Eigen comparison.
void MlpGemmBatches(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch"})
      ->Arg(32)
      ->Arg(128)
      ->Arg(512)
      ->MinWarmUpTime(kWarmUpSeconds)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_ExecutorMlpGemms)->Apply(MlpGemmBatches);
BENCHMARK(BM_EigenMlpGemms)->Apply(MlpGemmBatches);
BENCHMARK(BM_EigenTensorDot)
    ->ArgNames({"n", "threads"})
    ->Args({1024, 0})
    ->Args({2048, 0})
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecutorAdd)
    ->ArgNames({"threads"})
    ->Arg(1)
    ->Arg(0)
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenAdd)->MinWarmUpTime(kWarmUpSeconds)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecutorExp)
    ->ArgNames({"threads"})
    ->Arg(1)
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecutorSumOfSquares)
    ->ArgNames({"rows"})
    ->Arg(1)
    ->Arg(8192)
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenExp)->MinWarmUpTime(kWarmUpSeconds)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecutorGptStep)
    ->ArgNames({"prepared"})
    ->Arg(0)
    ->Arg(1)
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecutorPrepareGpt)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecutorAdam)
    ->ArgNames({"fusion"})
    ->Arg(0)
    ->Arg(1)
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExecutorAdamLoop)
    ->ArgNames({"donate", "elements"})
    ->ArgsProduct({{0, 1}, {1 << 20, 1869824}})
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenAdam)
    ->MinWarmUpTime(kWarmUpSeconds)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessel
