// Where lazy tensors run: the ComputationClient interface behind Sync(), and the DeviceData
// values it hands back, as in PyTorch/XLA's ComputationClient (PJRT client) design.
//
// By default Sync() runs each step graph on one local device with the Executor, and device data
// is a whole Literal (LiteralData). A runtime that spreads the program over several devices
// (mesh/runtime/host_runtime.h: SPMD over the devices of a mesh, partitioned by the partitioner)
// installs its own client on the thread; its data are sharded values whose pieces live on the
// devices.
//
//   std::shared_ptr<ComputationClient> client = ...;   // e.g. mesh::HostRuntime::client()
//   SetComputationClient(client);                        // this thread's Sync() now uses it
//   Tensor w = Tensor::FromLiteral(weights);             // host data (LiteralData)
//   ...; TESSEL_RETURN_IF_ERROR(Sync());                 // client->Execute(graph, ...)
//   SetComputationClient(nullptr);                       // back to the local executor
//
// Thread model: a client is installed per thread (the lazy context is per thread); one client
// may serve several threads only if its implementation says so.
#ifndef TESSEL_CORE_COMPUTATION_CLIENT_H_
#define TESSEL_CORE_COMPUTATION_CLIENT_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessel/core/executor.h"
#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"

namespace tessel {

// A value held by a computation client (torch_xla: a device data handle). Immutable once made,
// except that a client may consume a value donated to an execution (ExecuteDonated).
class DeviceData {
 public:
  virtual ~DeviceData() = default;
  // The value's global (logical) shape.
  virtual const Shape& shape() const = 0;
  // How the value is laid out over devices, as XLA HloSharding text; "" for a value held whole
  // in one place (host or single device).
  virtual const std::string& sharding() const;
  // Bytes this process holds for the value (all local pieces, padding included).
  virtual int64_t local_bytes() const = 0;
  // True once an execution consumed this value as a donated argument (ExecuteDonated): its
  // buffers are gone and it must not be read. Always false for data a client never consumes.
  virtual bool donated() const { return false; }
};

// A whole value in this process's memory: what Tensor::FromLiteral makes and what the default
// client returns.
class LiteralData final : public DeviceData {
 public:
  explicit LiteralData(Literal value) : shape_(value.shape()), value_(std::move(value)) {}
  const Shape& shape() const override { return shape_; }
  int64_t local_bytes() const override { return shape_.is_tuple() ? 0 : shape_.byte_size(); }
  // The value. Precondition: !donated().
  const Literal& literal() const { return value_; }

  // Donation (ComputationClient::ExecuteDonated): the literal an execution may take over, for
  // the client that holds the only reference to this value. Once taken (MarkDonated), the value
  // is spent: donated() is true and literal() must not be read. Const because device data is
  // shared as shared_ptr<const DeviceData>; a donated value has no other holder to see it change.
  Literal* literal_for_donation() const { return &value_; }
  void MarkDonated() const { donated_ = true; }
  bool donated() const override { return donated_; }

 private:
  Shape shape_;
  mutable Literal value_;
  mutable bool donated_ = false;
};

class ComputationClient {
 public:
  virtual ~ComputationClient() = default;

  // Runs `graph` (verified; global shapes; nodes may carry sharding annotations) on `arguments`
  // (bound to parameter 0, 1, ...; their shapes equal the parameters') and returns one value per
  // output: the root's elements for a tuple root, else the root. `fingerprint` is
  // GraphFingerprint(*graph), the cache key for whatever the client compiles from the graph.
  // `stats` (optional) receives the executor's statistics (for a multi-device client: the
  // largest peak over its devices).
  // Errors: implementation-defined (compilation errors naming the instruction, executor errors,
  // transport errors such as kUnavailable for a lost host).
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> Execute(
      const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
      absl::Span<const std::shared_ptr<const DeviceData>> arguments, ExecutionStats* stats) = 0;

  // Execute where the caller gives up the arguments with `donated[i]` true (one flag per
  // argument): it holds no other reference to them and will never read them again, so the
  // client may write outputs into their buffers (XLA input_output_alias, JAX donate_argnums,
  // torch_xla's parameter aliasing). A client that consumes a donated value (a LiteralData, or
  // its own data type) marks it so that its donated() is true, even when the execution then
  // fails; one that did not consume it leaves it intact. Results equal Execute's. The default
  // ignores `donated` and calls Execute. Errors: as Execute; kInvalidArgument if `donated` has not
  // one flag per argument.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>>
  ExecuteDonated(const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
                 absl::Span<const std::shared_ptr<const DeviceData>> arguments,
                 const std::vector<bool>& donated, ExecutionStats* stats);

  // Reads a value back whole (torch_xla: TransferFromDevice). A multi-host client may need every
  // host to call this at the same point (SPMD), as torch_xla's `tensor.cpu()` on a sharded
  // tensor gathers from every device. Errors: implementation-defined.
  [[nodiscard]] virtual absl::StatusOr<Literal> TransferFromDevice(const DeviceData& data) = 0;
};

// The default client: one device, the core Executor with `options`. Accepts only LiteralData
// arguments (kInvalidArgument naming the parameter otherwise); returns LiteralData. Donated
// arguments (ExecuteDonated) go to the executor as ExecutionDonation (core/executor.h): outputs
// are written into their buffers where the executor's in-place rules allow. Each graph is
// prepared once (Executor::Prepare) and its PreparedProgram kept by fingerprint beside the
// graph, so a training step that runs the same graph every iteration pays the fusion planning
// and liveness analysis once (XLA's executable cache); TESSEL_EXECUTOR_PREPARED=0 prepares at
// every execution instead (ReusePreparedPrograms, for A/B timing).
class LocalComputationClient final : public ComputationClient {
 public:
  explicit LocalComputationClient(ExecutorOptions options = {}) : options_(options) {}
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> Execute(
      const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
      absl::Span<const std::shared_ptr<const DeviceData>> arguments,
      ExecutionStats* stats) override;
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceData>>> ExecuteDonated(
      const std::shared_ptr<const Graph>& graph, uint64_t fingerprint,
      absl::Span<const std::shared_ptr<const DeviceData>> arguments,
      const std::vector<bool>& donated, ExecutionStats* stats) override;
  absl::StatusOr<Literal> TransferFromDevice(const DeviceData& data) override;
  void set_options(const ExecutorOptions& options) {
    std::lock_guard<std::mutex> lock(mu_);
    options_ = options;
    prepared_.clear();
  }

 private:
  // Programs kept at most; more distinct graphs than this start the cache afresh.
  static constexpr size_t kMaxPreparedPrograms = 256;
  struct PreparedEntry {
    std::shared_ptr<const Graph> graph;  // keeps the graph the program refers to alive
    bool fusion = false;
    std::shared_ptr<const PreparedProgram> program;
  };
  // The prepared program of `graph` under `executor`'s options, from the cache or prepared now;
  // null when reuse is off or the graph does not prepare (the caller then runs it unprepared,
  // which reports the error). Errors: a malformed TESSEL_EXECUTOR_PREPARED.
  absl::StatusOr<std::shared_ptr<const PreparedProgram>> Prepared(
      const Executor& executor, const std::shared_ptr<const Graph>& graph, uint64_t fingerprint);

  std::mutex mu_;
  ExecutorOptions options_;
  absl::flat_hash_map<uint64_t, PreparedEntry> prepared_;
};

// Installs `client` for this thread's Sync() and ToLiteral() (nullptr: the default local client
// with the options of SetExecutorOptions). Tensors made under one client should only be used
// under the same client.
void SetComputationClient(std::shared_ptr<ComputationClient> client);
// This thread's client (never null).
ComputationClient& GetComputationClient();

}  // namespace tessel

#endif  // TESSEL_CORE_COMPUTATION_CLIENT_H_
