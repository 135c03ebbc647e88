// tessel._tessel: the pybind11 bindings behind `import tessel` (python/tessel/__init__.py).
// Every function here is a thin layer over the C++ libraries the CLI uses (tools/*.cc), so the
// Python package and `tessel ...` share one implementation: mesh/topology (Topology), spmd (Mesh,
// HybridMesh, PartitionSpec, ShardedTensor), partitioner (propagation, Partition, verify) and
// mesh/sim (Simulator). absl::Status errors become Python exceptions carrying the C++ message
// (ThrowIfError). Work that can take seconds (partitioning, verification on N threads,
// simulation) runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/status_macros.h"
#include "tessel/mesh/autoshard/autoshard.h"
#include "tessel/mesh/sim/model_step.h"
#include "tessel/mesh/sim/simulator.h"
#include "tessel/mesh/sim/training_step.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/transformer.h"
#include "tessel/partitioner/partitioner.h"
#include "tessel/partitioner/propagation.h"
#include "tessel/partitioner/verify.h"
#include "tessel/spmd/mesh.h"
#include "tessel/spmd/partition_spec.h"
#include "tessel/spmd/sharded_tensor.h"
#include "tessel/spmd/sharding.h"

namespace py = pybind11;

namespace tessel::python {
namespace {

// Bad input (text that does not parse, an out-of-range id, a mesh that does not match) is a
// ValueError as the package documents; a missing file keeps its own Python type; everything
// else (internal errors, timeouts) is a RuntimeError.
[[noreturn]] void ThrowStatus(const absl::Status& status) {
  PyObject* type = PyExc_RuntimeError;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      type = PyExc_ValueError;
      break;
    case absl::StatusCode::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case absl::StatusCode::kUnimplemented:
      type = PyExc_NotImplementedError;
      break;
    default:
      break;
  }
  // A message may quote bytes of the user's input that are not UTF-8 (one byte of a multi-byte
  // character): decoded strictly, the message itself was lost in a UnicodeDecodeError.
  const std::string message(status.message());
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                        "backslashreplace");
  if (text == nullptr) throw py::error_already_set();
  PyErr_SetObject(type, text);
  Py_DECREF(text);
  throw py::error_already_set();
}

// pybind11 lets `Cls.__new__(Cls)` (and so copy.copy and pickle's reconstruction) make an
// instance whose C++ value was never constructed; the first method call then reads raw memory
// (pybind11's lazy allocation in type_caster_generic::load_value; pybind/pybind11 issue 6153,
// unfixed in 3.1). Every class here gets a metaclass whose __call__ marks "constructing" and a
// __new__ that refuses to run outside it, so an instance only exists with its value built.
thread_local int constructions_in_progress = 0;
PyTypeObject* pybind11_metaclass = nullptr;

PyObject* GuardedMetaCall(PyObject* type, PyObject* args, PyObject* kwargs) {
  ++constructions_in_progress;
  PyObject* result = pybind11_metaclass->tp_call(type, args, kwargs);
  --constructions_in_progress;
  return result;
}

// The metaclass for every class of the module: pybind11's own, with GuardedMetaCall.
py::handle GuardedMetaclass() {
  static PyObject* metaclass = [] {
    pybind11_metaclass = py::detail::get_internals().default_metaclass;
    PyType_Slot slots[] = {{Py_tp_call, reinterpret_cast<void*>(GuardedMetaCall)}, {0, nullptr}};
    PyType_Spec spec = {"tessel._tessel.TesselMeta", 0, 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
                        slots};
    PyObject* bases = PyTuple_Pack(1, reinterpret_cast<PyObject*>(pybind11_metaclass));
    if (bases == nullptr) throw py::error_already_set();
    PyObject* made = PyType_FromSpecWithBases(&spec, bases);
    Py_DECREF(bases);
    if (made == nullptr) throw py::error_already_set();
    return made;
  }();
  return metaclass;
}

// py::class_ with the guard above: use it for every bound class.
template <typename T, typename... Options>
py::class_<T, Options...> BindClass(py::module_& m, const char* name) {
  py::class_<T, Options...> cls(m, name, py::metaclass(GuardedMetaclass()));
  const std::string class_name = name;
  py::handle owner = cls;
  cls.attr("__new__") =
      py::staticmethod(py::cpp_function([class_name, owner](const py::handle& type, const py::args&,
                                                            const py::kwargs&) -> py::object {
        if (constructions_in_progress == 0) {
          throw py::type_error(
              absl::StrCat(class_name, ".__new__ alone cannot make a ", class_name,
                           ": its C++ value is built by ", class_name,
                           "(...) or by the tessel function that returns one (copy.copy and pickle "
                           "are not supported)"));
        }
        if (!PyType_Check(type.ptr()) ||
            !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type.ptr()),
                              reinterpret_cast<PyTypeObject*>(owner.ptr()))) {
          throw py::type_error(absl::StrCat(class_name,
                                            ".__new__: ", py::repr(type).cast<std::string>(),
                                            " is not a subtype of ", class_name));
        }
        return py::reinterpret_steal<py::object>(py::detail::pybind11_object_new(
            reinterpret_cast<PyTypeObject*>(type.ptr()), nullptr, nullptr));
      }));
  return cls;
}

// A keyword argument's range check: ValueError naming it and the value.
void CheckArgument(bool ok, const char* name, const char* expected, double value) {
  if (!ok) {
    throw py::value_error(absl::StrCat(name, ": expected ", expected, ", got ", value));
  }
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return *std::move(value);
}

std::unique_ptr<Graph> ParseModule(const std::string& hlo_text) {
  return ValueOrThrow(ParseHloModule(hlo_text));
}

int64_t NumPartitionsOf(const Graph& graph, std::optional<int64_t> num_partitions) {
  if (!num_partitions) return partitioner::InferNumPartitions(graph);
  if (*num_partitions < 1) {
    throw py::value_error(absl::StrCat("num_partitions must be >= 1, got ", *num_partitions));
  }
  return *num_partitions;
}

// A list of ints from Python (device ids, mesh shapes): a sequence or numpy array of Python or
// numpy integers. pybind11's own conversion took True / False and numpy bools as 1 / 0 (a
// boolean mask passed as device ids made a "valid" mesh) and named neither the argument nor the
// value when an int did not fit in int64.
std::vector<int64_t> IntList(const py::handle& values, const char* what) {
  // numpy arrays and ranges are sequences; a set or a generator has no order to keep.
  if (py::isinstance<py::str>(values) || !py::isinstance<py::sequence>(values)) {
    throw py::type_error(absl::StrCat(what, ": expected a sequence of ints, got ",
                                      py::repr(values).cast<std::string>()));
  }
  // Kept for the life of the process (a reference that is never dropped).
  static const py::handle numpy_bool =
      py::object(py::module_::import("numpy").attr("bool_")).release();
  std::vector<int64_t> out;
  for (const py::handle& item : py::iter(values)) {
    if (py::isinstance<py::bool_>(item) || py::isinstance(item, numpy_bool)) {
      throw py::type_error(
          absl::StrCat(what, ": expected ints, got the bool ", py::repr(item).cast<std::string>()));
    }
    // operator.index: ints and numpy integers, not floats or strings.
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
    if (!index) {
      PyErr_Clear();
      throw py::type_error(
          absl::StrCat(what, ": expected ints, got ", py::repr(item).cast<std::string>()));
    }
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0) {
      throw py::value_error(
          absl::StrCat(what, ": ", py::str(index).cast<std::string>(), " does not fit in int64"));
    }
    out.push_back(static_cast<int64_t>(value));
  }
  return out;
}

// A partition spec from Python: a string in PartitionSpec::Parse syntax ("x,None",
// "(x,y),None") or a sequence whose entries are None, an axis index, an axis name, or a tuple /
// list of indices and names (major to minor), as torch_xla's mark_sharding takes it.
spmd::PartitionSpec PartitionSpecOf(const py::handle& spec) {
  if (py::isinstance<py::str>(spec)) {
    return ValueOrThrow(spmd::PartitionSpec::Parse(spec.cast<std::string>()));
  }
  if (!py::isinstance<py::sequence>(spec)) {
    throw py::value_error(
        "partition_spec must be a string or a sequence of None, int, str or "
        "tuples of them");
  }
  auto axis_of = [](const py::handle& item) -> spmd::AxisRef {
    if (py::isinstance<py::str>(item)) return spmd::AxisRef(item.cast<std::string>());
    if (py::isinstance<py::int_>(item) && !py::isinstance<py::bool_>(item)) {
      // An int beyond int64 is no axis index; pybind11's own message ("Unable to cast Python
      // instance ...") named neither the argument nor the value.
      int overflow = 0;
      const long long index = PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
      if (overflow != 0) {
        throw py::value_error(absl::StrCat("partition_spec: axis index ",
                                           py::str(item).cast<std::string>(),
                                           " is outside the mesh's axes"));
      }
      return spmd::AxisRef(static_cast<int64_t>(index));
    }
    throw py::value_error(absl::StrCat("partition_spec: expected an axis index or name, got ",
                                       py::repr(item).cast<std::string>()));
  };
  std::vector<spmd::PartitionSpec::Entry> entries;
  for (const py::handle& item : spec.cast<py::sequence>()) {
    if (item.is_none()) {
      entries.emplace_back(spmd::kNone);
    } else if (py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) {
      std::vector<spmd::AxisRef> axes;
      for (const py::handle& axis : item.cast<py::sequence>()) axes.push_back(axis_of(axis));
      entries.emplace_back(spmd::Axes(std::move(axes)));
    } else {
      entries.emplace_back(axis_of(item));
    }
  }
  return spmd::PartitionSpec(std::move(entries));
}

// The result of shard(): the XLA sharding string and each device's piece of the global array.
struct ShardResult {
  std::string sharding;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> local_shape;
  std::vector<spmd::Shard> shards;
};

ShardResult Shard(const std::vector<int64_t>& shape, const spmd::Mesh& mesh,
                  const py::object& partition_spec) {
  for (int64_t d : shape) {
    if (d < 0) throw py::value_error(absl::StrCat("shape: negative dim ", d));
  }
  const spmd::PartitionSpec spec = PartitionSpecOf(partition_spec);
  // The element type does not change index ranges; f32 is what `tessel shard` uses too.
  const Shape global(DType::kF32, shape);
  spmd::Sharding sharding =
      ValueOrThrow(spmd::ShardingFromPartitionSpec(mesh, global.rank(), spec));
  spmd::ShardedTensor tensor =
      ValueOrThrow(spmd::ShardedTensor::Create(global, sharding, mesh.size()));
  return ShardResult{sharding.ToString(), shape, tensor.local_shape().dims(), tensor.shards()};
}

// The result of partition(): the per-device program as HLO text and its collective counts.
struct PartitionResult {
  std::string hlo_text;
  int64_t num_partitions = 1;
  std::map<std::string, partitioner::CollectiveCount> collectives;
  std::vector<std::string> parameter_shardings;
  std::vector<std::string> output_shardings;
};

PartitionResult PartitionHlo(const std::string& hlo_text, std::optional<int64_t> num_partitions) {
  std::unique_ptr<Graph> graph = ParseModule(hlo_text);
  const int64_t n = NumPartitionsOf(*graph, num_partitions);
  absl::StatusOr<partitioner::SpmdProgram> program;
  PartitionResult result;
  {
    py::gil_scoped_release release;
    program = partitioner::Partition(*graph, n);
    if (program.ok()) {
      result.hlo_text = PrintHloModule(*program->program);
      result.collectives = partitioner::CountCollectives(*program->program);
    }
  }
  if (!program.ok()) ThrowStatus(program.status());
  result.num_partitions = n;
  for (const auto& p : program->parameters)
    result.parameter_shardings.push_back(p.sharding.ToString());
  for (const auto& o : program->outputs) result.output_shardings.push_back(o.sharding.ToString());
  return result;
}

std::string Propagate(const std::string& hlo_text, std::optional<int64_t> num_partitions) {
  std::unique_ptr<Graph> graph = ParseModule(hlo_text);
  const int64_t n = NumPartitionsOf(*graph, num_partitions);
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = partitioner::PropagateShardings(*graph, n);
  }
  ThrowIfError(status);
  return PrintHloModule(*graph);
}

partitioner::VerifyReport Verify(const std::string& hlo_text, std::optional<int64_t> num_partitions,
                                 uint64_t seed, std::optional<double> rtol,
                                 std::optional<double> atol, double timeout_seconds) {
  std::unique_ptr<Graph> graph = ParseModule(hlo_text);
  const int64_t n = NumPartitionsOf(*graph, num_partitions);
  // Checked here: timeout_seconds * 1000 cast to an integer is undefined for inf, NaN and huge
  // values (1e300 became a timeout of zero); a NaN or negative tolerance failed every output.
  CheckArgument(std::isfinite(timeout_seconds) && timeout_seconds > 0 && timeout_seconds <= 1e6,
                "timeout_seconds", "a number of seconds in (0, 1e6]", timeout_seconds);
  if (rtol)
    CheckArgument(*rtol >= 0 && std::isfinite(*rtol), "rtol", "a finite number >= 0", *rtol);
  if (atol)
    CheckArgument(*atol >= 0 && std::isfinite(*atol), "atol", "a finite number >= 0", *atol);
  partitioner::VerifyOptions options;
  options.seed = seed;
  options.rtol = rtol;
  options.atol = atol;
  options.collective_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  // The runs go on a worker thread while this one waits with the GIL released, taking it back
  // every 100 ms to let Python handle signals: Ctrl-C (KeyboardInterrupt) sets the cancel flag,
  // the runs stop at their next node, and the exception propagates. Waiting in one call without
  // the GIL, a run could not be interrupted at all.
  std::atomic<bool> cancel{false};
  options.cancel = &cancel;
  absl::StatusOr<partitioner::VerifyReport> report;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread worker([&] {
    absl::StatusOr<partitioner::VerifyReport> result;
    try {
      result = partitioner::VerifyPartitioning(*graph, n, options);
    } catch (const std::exception& e) {
      result = absl::InternalError(absl::StrCat("verify: ", e.what()));
    }
    std::lock_guard<std::mutex> lock(mu);
    report = std::move(result);
    done = true;
    cv.notify_all();
  });
  while (true) {
    bool finished = false;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mu);
      finished = cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return done; });
    }
    if (finished) break;
    if (PyErr_CheckSignals() != 0) {
      cancel.store(true);
      {
        py::gil_scoped_release release;
        worker.join();
      }
      throw py::error_already_set();
    }
  }
  worker.join();
  return ValueOrThrow(std::move(report));
}

// One entry parameter's random input as verify() makes it (MakeVerifyInputs), as a NumPy array
// of the parameter's global shape. Element types without a NumPy equivalent are refused.
py::array LiteralToNumpy(const Literal& literal) {
  const Shape& shape = literal.shape();
  if (shape.is_tuple()) {
    throw py::value_error(absl::StrCat("verify_inputs: tuple parameter ", shape.ToString(),
                                       " has no single NumPy array"));
  }
  std::vector<py::ssize_t> dims(shape.dims().begin(), shape.dims().end());
  auto copy = [&](auto tag) {
    using T = decltype(tag);
    py::array_t<T> out(dims);
    const auto values = literal.template data<T>();
    std::copy(values.begin(), values.end(), out.mutable_data());
    return py::array(out);
  };
  switch (shape.dtype()) {
    case DType::kF32:
      return copy(float{});
    case DType::kF64:
      return copy(double{});
    case DType::kS32:
      return copy(int32_t{});
    case DType::kS64:
      return copy(int64_t{});
    case DType::kU8:
      return copy(uint8_t{});
    case DType::kU32:
      return copy(uint32_t{});
    case DType::kU64:
      return copy(uint64_t{});
    case DType::kPred:
      return copy(bool{});
    default:
      PyErr_SetString(
          PyExc_NotImplementedError,
          absl::StrCat("verify_inputs: no NumPy conversion for ", shape.ToString()).c_str());
      throw py::error_already_set();
  }
}

std::vector<py::array> VerifyInputs(const std::string& hlo_text, uint64_t seed) {
  std::unique_ptr<Graph> graph = ParseModule(hlo_text);
  std::vector<Literal> inputs = ValueOrThrow(partitioner::MakeVerifyInputs(*graph, seed));
  std::vector<py::array> arrays;
  for (const Literal& literal : inputs) arrays.push_back(LiteralToNumpy(literal));
  return arrays;
}

// simulate(): the same steps as `tessel simulate CONFIG --hlo FILE` (tools/simulate_command.cc):
// partition on the topology's device count, simulate, optionally write the Chrome trace.
struct SimulateResult {
  mesh::SimulationReport report;
  int64_t global_nodes = 0;
  int64_t local_nodes = 0;
  std::optional<std::string> trace_path;
};

SimulateResult SimulateHlo(const std::string& hlo_text, const mesh::Topology& topology,
                           bool overlap, std::optional<std::string> trace_path, int64_t top_k,
                           std::optional<std::string> matmul_dtype,
                           std::optional<int64_t> assume_trip_count) {
  CheckArgument(top_k >= 0, "top_k", "a count >= 0", static_cast<double>(top_k));
  if (assume_trip_count) {
    CheckArgument(*assume_trip_count > 0, "assume_trip_count", "a count > 0",
                  static_cast<double>(*assume_trip_count));
  }
  std::unique_ptr<Graph> graph = ParseModule(hlo_text);
  mesh::SimulatorOptions options;
  options.overlap = overlap;
  options.record_trace = trace_path.has_value();
  options.top_k = top_k;
  options.assumed_trip_count = assume_trip_count;
  if (matmul_dtype) {
    if (!topology.device_spec().PeakTflops(*matmul_dtype)) {
      throw py::value_error(absl::StrCat("matmul_dtype: the device spec of ",
                                         topology.device_spec().name, " gives no peak for \"",
                                         *matmul_dtype, "\""));
    }
    options.cost.matmul_dtype = *matmul_dtype;
  }
  SimulateResult result;
  result.global_nodes = graph->num_nodes();
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = [&]() -> absl::Status {
      absl::StatusOr<mesh::Simulator> simulator = mesh::Simulator::Create(topology, options);
      if (!simulator.ok()) return simulator.status();
      absl::StatusOr<partitioner::SpmdProgram> program =
          partitioner::Partition(*graph, topology.num_devices());
      if (!program.ok()) return program.status();
      result.local_nodes = program->program->num_nodes();
      absl::StatusOr<mesh::SimulationReport> report = simulator->Run(*program);
      if (!report.ok()) return report.status();
      result.report = *std::move(report);
      if (trace_path) return mesh::WriteChromeTrace(result.report, *trace_path);
      return absl::OkStatus();
    }();
  }
  ThrowIfError(status);
  result.trace_path = std::move(trace_path);
  return result;
}

// What a simulated training step of a model description needs besides the topology: the
// HybridMesh (torch_xla's ici/dcn mesh shapes and axis names), the sharding recipe, the batch.
struct ModelRun {
  std::vector<int64_t> ici_mesh_shape;  // empty: one "data" axis over each slice's devices
  std::vector<int64_t> dcn_mesh_shape;  // empty: the slices on the first axis
  std::vector<std::string> axis_names;
  std::string recipe = "fsdp_tp";
  std::optional<int64_t> batch;  // default: the file's, else one sequence per device
  bool overlap = false;
  int64_t top_k = 10;
};

// The mesh of `run` on `topology`, with `tessel simulate`'s defaults for missing shapes.
mesh::MeshShape ModelMesh(const ModelRun& run, const mesh::Topology& topology) {
  mesh::MeshShape shape{run.ici_mesh_shape, run.dcn_mesh_shape, run.axis_names};
  // Without an ici shape, each slice's devices go on the "data" axis (the first axis when none
  // is named so), and the other named axes are kept with size 1: the recipe may need them
  // (fsdp_tp, the default, needs "tensor"; dropping them made the defaults fail).
  if (shape.names.empty()) shape.names = {"data"};
  const auto data = std::find(shape.names.begin(), shape.names.end(), "data");
  const size_t data_axis = data == shape.names.end() ? 0 : data - shape.names.begin();
  if (shape.ici.empty()) {
    shape.ici.assign(shape.names.size(), 1);
    shape.ici[data_axis] = topology.num_devices() / topology.num_slices();
  }
  if (shape.dcn.empty()) {
    shape.dcn.assign(shape.ici.size(), 1);
    if (topology.num_slices() > 1 && data_axis < shape.dcn.size()) {
      shape.dcn[data_axis] = topology.num_slices();
    }
  }
  return shape;
}

// One training step of the model file's transformer, as `tessel simulate CONFIG --model-config
// FILE` runs it: built, sharded with the recipe, partitioned, simulated, and completed with the
// remat recompute, flash-attention and MoE estimates and the memory of mesh/sim/training_step.h.
SimulateResult SimulateModel(const std::string& model_json, const std::string& source,
                             const mesh::Topology& topology, const ModelRun& run) {
  nn::ModelFile file = ValueOrThrow(nn::ParseModelConfig(model_json, source));
  nn::TransformerConfig config = file.config;
  if (run.batch) {
    config.batch = *run.batch;
  } else if (!file.has_batch) {
    config.batch = topology.num_devices();
  }
  ThrowIfError(nn::ValidateTransformerConfig(config));
  mesh::ModelPlan plan;
  plan.recipe = ValueOrThrow(nn::ParseShardingRecipe(run.recipe));
  plan.mesh = ModelMesh(run, topology);
  plan.remat = ValueOrThrow(mesh::ParseRematPolicy(file.remat.empty() ? "none" : file.remat));
  for (const auto& [names, where] :
       {std::pair{file.remat_device, "device"}, std::pair{file.remat_offload, "offload"}}) {
    if (names.empty()) continue;
    if (plan.remat != mesh::RematPolicy::kCustom) {
      throw py::value_error(
          absl::StrCat(file.source, ": remat_", where, " applies to remat \"custom\""));
    }
    ThrowIfError(mesh::AddCustomRematNames(
        names, where, absl::StrCat(file.source, ": remat_", where), &plan.custom_remat));
  }
  plan.attention = ValueOrThrow(
      mesh::ParseAttentionKernel(file.attention.empty() ? "dot_product" : file.attention));
  mesh::ModelSimulationOptions options;
  options.simulator.overlap = run.overlap;
  options.simulator.top_k = run.top_k;
  if (file.matmul_dtype == "int8") options.simulator.cost.matmul_dtype = "s8";
  if (file.matmul_dtype == "fp8") options.simulator.cost.matmul_dtype = "f8e4m3fn";
  SimulateResult result;
  absl::StatusOr<mesh::ModelSimulation> simulated;
  {
    py::gil_scoped_release release;
    simulated = mesh::SimulateModelPlan(topology, config, plan, options);
  }
  ThrowIfError(simulated.status());
  result.report = std::move(simulated->report);
  result.global_nodes = simulated->global_nodes;
  result.local_nodes = simulated->local_nodes;
  return result;
}

// One plan of `tessel autoshard` as a dict: mesh sizes over MaxText's axes, remat, microbatches,
// step time (seconds), DCN bytes and memory (bytes) per device, fits.
py::dict CandidateDict(const mesh::AutoshardCandidate& c) {
  py::dict d;
  std::vector<std::string> names(mesh::kMaxTextAxes.begin(), mesh::kMaxTextAxes.end());
  d["axis_names"] = names;
  d["ici_mesh_shape"] = c.ici_axes;
  d["dcn_mesh_shape"] = c.dcn_axes;
  d["remat"] = std::string(mesh::RematPolicyName(c.plan.remat));
  d["microbatches"] = c.plan.microbatches;
  d["step_seconds"] = c.step_seconds;
  d["compute_seconds"] = c.compute_seconds;
  d["ici_seconds"] = c.ici_seconds;
  d["dcn_seconds"] = c.dcn_seconds;
  d["dcn_bytes_per_device"] = c.dcn_bytes_per_device;
  d["memory_bytes"] = c.memory.total_bytes();
  d["hbm_bytes"] = c.hbm_bytes;
  d["fits"] = c.fits;
  return d;
}

// `tessel autoshard CONFIG --model-config FILE` (mesh/autoshard/autoshard.h) as a dict: "best"
// (None when no plan fits), "alternatives", "search" (coverage). `axes` and `hbm_bytes`:
// AutoshardOptions' (empty / 0: every axis, the device's HBM).
py::dict Autoshard(const std::string& model_json, const std::string& source,
                   const mesh::Topology& topology, std::optional<int64_t> batch,
                   double budget_seconds, int64_t top_k, bool overlap,
                   const std::vector<std::string>& axes, int64_t hbm_bytes) {
  nn::ModelFile file = ValueOrThrow(nn::ParseModelConfig(model_json, source));
  nn::TransformerConfig config = file.config;
  if (batch) {
    config.batch = *batch;
  } else if (!file.has_batch) {
    config.batch = topology.num_devices();
  }
  ThrowIfError(nn::ValidateTransformerConfig(config));
  CheckArgument(budget_seconds >= 0 && !std::isnan(budget_seconds), "budget_seconds",
                "a number of seconds >= 0 (0: no limit)", budget_seconds);
  CheckArgument(top_k >= 0, "top_k", "a count >= 0", static_cast<double>(top_k));
  CheckArgument(hbm_bytes >= 0, "hbm_bytes", "a byte count >= 0 (0: the device's HBM)",
                static_cast<double>(hbm_bytes));
  mesh::AutoshardOptions options;
  options.budget_seconds = budget_seconds;
  options.top_k = top_k;
  options.overlap = overlap;
  options.axes = axes;
  options.hbm_bytes = hbm_bytes;
  options.attention = ValueOrThrow(
      mesh::ParseAttentionKernel(file.attention.empty() ? "dot_product" : file.attention));
  absl::StatusOr<mesh::AutoshardResult> result;
  {
    py::gil_scoped_release release;
    result = mesh::Autoshard(topology, config, options);
  }
  ThrowIfError(result.status());
  py::dict out;
  out["best"] = result->best >= 0 ? py::object(CandidateDict(result->candidates[result->best]))
                                  : py::object(py::none());
  py::list alternatives;
  for (size_t i = 1; i < result->ranking.size(); ++i) {
    alternatives.append(CandidateDict(result->candidates[result->ranking[i]]));
  }
  out["alternatives"] = alternatives;
  py::dict search;
  search["meshes_enumerated"] = result->meshes_enumerated;
  search["meshes_simulated"] = result->meshes_simulated;
  search["meshes_failed"] = result->meshes_failed;
  search["plans_evaluated"] = result->plans_evaluated;
  search["pruned"] = result->pruned;
  search["complete"] = result->complete;
  search["seconds"] = result->search_seconds;
  out["search"] = search;
  return out;
}

void BindTopologyAndMesh(py::module_& m) {
  BindClass<mesh::Topology>(m, "Topology")
      .def_static(
          "load",
          [](const std::filesystem::path& path) {
            return ValueOrThrow(mesh::LoadTopology(path.string()));
          },
          py::arg("path"))
      .def_static(
          "from_json",
          [](const std::string& text) {
            return ValueOrThrow(mesh::ParseTopology(text, "<python>"));
          },
          py::arg("json_text"))
      .def_property_readonly("name", &mesh::Topology::name)
      .def_property_readonly("description", &mesh::Topology::description)
      .def_property_readonly("num_devices", &mesh::Topology::num_devices)
      .def_property_readonly("num_slices", &mesh::Topology::num_slices)
      .def_property_readonly("num_hosts", &mesh::Topology::num_hosts)
      .def_property_readonly("device_name",
                             [](const mesh::Topology& t) { return t.device_spec().name; })
      .def_property_readonly("hbm_bytes",
                             [](const mesh::Topology& t) { return t.device_spec().hbm_bytes; })
      .def_property_readonly(
          "hbm_bandwidth_bytes_per_s",
          [](const mesh::Topology& t) { return t.device_spec().hbm_bandwidth_gbytes_per_s * 1e9; })
      .def_property_readonly("peak_tflops",
                             [](const mesh::Topology& t) { return t.device_spec().peak_tflops; })
      .def("__repr__", [](const mesh::Topology& t) {
        return absl::StrCat("Topology(name='", t.name(), "', devices=", t.num_devices(),
                            ", slices=", t.num_slices(), ", device='", t.device_spec().name, "')");
      });

  BindClass<spmd::Mesh>(m, "Mesh")
      .def(py::init([](const py::object& device_ids, const py::object& mesh_shape,
                       std::optional<std::vector<std::string>> axis_names) {
             return ValueOrThrow(spmd::Mesh::Create(
                 IntList(device_ids, "device_ids"), IntList(mesh_shape, "mesh_shape"),
                 axis_names.value_or(std::vector<std::string>{})));
           }),
           py::arg("device_ids"), py::arg("mesh_shape"), py::arg("axis_names") = py::none())
      .def_property_readonly("device_ids", &spmd::Mesh::device_ids)
      .def_property_readonly("mesh_shape", &spmd::Mesh::mesh_shape)
      .def_property_readonly("axis_names", &spmd::Mesh::axis_names)
      .def("size", &spmd::Mesh::size)
      .def("rank", &spmd::Mesh::rank)
      .def("shape", &spmd::Mesh::shape)
      .def("get_axis_name_idx",
           [](const spmd::Mesh& mesh, const std::string& name) {
             return ValueOrThrow(mesh.AxisIndex(name));
           })
      .def("get_logical_mesh",
           [](const spmd::Mesh& mesh) {
             std::vector<py::ssize_t> dims(mesh.mesh_shape().begin(), mesh.mesh_shape().end());
             py::array_t<int64_t> out(dims);
             std::copy(mesh.device_ids().begin(), mesh.device_ids().end(), out.mutable_data());
             return out;
           })
      .def("coordinate_of", &spmd::Mesh::CoordinateOf, py::arg("device_id"))
      .def("__eq__", [](const spmd::Mesh& a, const spmd::Mesh& b) { return a == b; })
      .def("__repr__", &spmd::Mesh::ToString);

  BindClass<spmd::HybridMesh, spmd::Mesh>(m, "HybridMesh")
      .def(py::init([](const py::object& ici, const py::object& dcn,
                       std::vector<std::string> axis_names, const mesh::Topology& topology) {
             return ValueOrThrow(spmd::HybridMesh::Create(IntList(ici, "ici_mesh_shape"),
                                                          IntList(dcn, "dcn_mesh_shape"),
                                                          std::move(axis_names), topology));
           }),
           py::arg("ici_mesh_shape"), py::arg("dcn_mesh_shape"), py::arg("axis_names"),
           py::arg("topology"))
      .def_property_readonly("ici_mesh_shape", &spmd::HybridMesh::ici_mesh_shape)
      .def_property_readonly("dcn_mesh_shape", &spmd::HybridMesh::dcn_mesh_shape);
}

void BindShardAndPartition(py::module_& m) {
  BindClass<spmd::Shard>(m, "Shard")
      .def_readonly("device_id", &spmd::Shard::device_id)
      .def_readonly("index", &spmd::Shard::index)
      .def_readonly("tile_index", &spmd::Shard::tile_index)
      .def_readonly("replica_id", &spmd::Shard::replica_id)
      .def("__repr__", [](const spmd::Shard& s) {
        std::string index;
        for (const auto& [start, limit] : s.index) {
          absl::StrAppend(&index, index.empty() ? "" : ", ", start, ":", limit);
        }
        return absl::StrCat("Shard(device_id=", s.device_id, ", index=[", index,
                            "], replica_id=", s.replica_id, ")");
      });
  BindClass<ShardResult>(m, "ShardResult")
      .def_readonly("sharding", &ShardResult::sharding)
      .def_readonly("global_shape", &ShardResult::global_shape)
      .def_readonly("local_shape", &ShardResult::local_shape)
      .def_readonly("shards", &ShardResult::shards)
      .def("__repr__", [](const ShardResult& r) {
        return absl::StrCat("ShardResult(sharding='", r.sharding, "', shards=", r.shards.size(),
                            ")");
      });
  m.def("shard", &Shard, py::arg("shape"), py::arg("mesh"), py::arg("partition_spec"));

  BindClass<partitioner::CollectiveCount>(m, "CollectiveCount")
      .def_readonly("count", &partitioner::CollectiveCount::count)
      .def_readonly("result_bytes", &partitioner::CollectiveCount::result_bytes)
      .def("__repr__", [](const partitioner::CollectiveCount& c) {
        return absl::StrCat("CollectiveCount(count=", c.count, ", result_bytes=", c.result_bytes,
                            ")");
      });
  BindClass<PartitionResult>(m, "PartitionResult")
      .def_readonly("hlo_text", &PartitionResult::hlo_text)
      .def_readonly("num_partitions", &PartitionResult::num_partitions)
      .def_readonly("collectives", &PartitionResult::collectives)
      .def_readonly("parameter_shardings", &PartitionResult::parameter_shardings)
      .def_readonly("output_shardings", &PartitionResult::output_shardings);
  m.def("partition", &PartitionHlo, py::arg("hlo_text"), py::arg("num_partitions") = py::none());
  m.def("propagate", &Propagate, py::arg("hlo_text"), py::arg("num_partitions") = py::none());
}

void BindVerify(py::module_& m) {
  using partitioner::OutputCheck;
  BindClass<OutputCheck>(m, "OutputCheck")
      .def_readonly("index", &OutputCheck::index)
      .def_property_readonly("global_shape",
                             [](const OutputCheck& c) { return c.global_shape.ToString(); })
      .def_property_readonly("local_shape",
                             [](const OutputCheck& c) { return c.local_shape.ToString(); })
      .def_property_readonly("sharding", [](const OutputCheck& c) { return c.sharding.ToString(); })
      .def_property_readonly("rtol", [](const OutputCheck& c) { return c.tolerance.rtol; })
      .def_property_readonly("atol", [](const OutputCheck& c) { return c.tolerance.atol; })
      .def_readonly("scale", &OutputCheck::scale)
      .def_readonly("max_abs_error", &OutputCheck::max_abs_error)
      .def_readonly("max_rel_error", &OutputCheck::max_rel_error)
      .def_readonly("mismatched_elements", &OutputCheck::mismatched_elements)
      .def_readonly("first_mismatch_element", &OutputCheck::first_mismatch_element)
      .def_readonly("ok", &OutputCheck::ok);
  BindClass<partitioner::VerifyReport>(m, "VerifyReport")
      .def_readonly("num_devices", &partitioner::VerifyReport::num_devices)
      .def_readonly("outputs", &partitioner::VerifyReport::outputs)
      .def_readonly("collectives", &partitioner::VerifyReport::collectives)
      .def_property_readonly("ok", &partitioner::VerifyReport::ok)
      .def_property_readonly("first_mismatch", &partitioner::VerifyReport::first_mismatch);
  m.def("verify", &Verify, py::arg("hlo_text"), py::arg("num_partitions") = py::none(),
        py::arg("seed") = 0, py::arg("rtol") = py::none(), py::arg("atol") = py::none(),
        py::arg("timeout_seconds") = 60.0);
  m.def("verify_inputs", &VerifyInputs, py::arg("hlo_text"), py::arg("seed") = 0);
}

void BindSimulate(py::module_& m) {
  BindClass<mesh::OpEntry>(m, "OpEntry")
      .def_readonly("name", &mesh::OpEntry::name)
      .def_readonly("opcode", &mesh::OpEntry::opcode)
      .def_readonly("shape", &mesh::OpEntry::shape)
      .def_readonly("seconds", &mesh::OpEntry::seconds)
      .def_readonly("flops", &mesh::OpEntry::flops)
      .def_readonly("bytes", &mesh::OpEntry::bytes)
      .def("__repr__", [](const mesh::OpEntry& e) {
        return absl::StrCat("OpEntry(", e.opcode, " ", e.name, " ", e.shape, ", ", e.seconds,
                            " s)");
      });
  BindClass<mesh::DeviceClass>(m, "DeviceClass")
      .def_readonly("representative_device", &mesh::DeviceClass::representative_device)
      .def_readonly("num_devices", &mesh::DeviceClass::num_devices)
      .def_readonly("in_order_seconds", &mesh::DeviceClass::in_order_seconds)
      .def_readonly("overlapped_seconds", &mesh::DeviceClass::overlapped_seconds)
      .def_readonly("compute_seconds", &mesh::DeviceClass::compute_seconds)
      .def_readonly("ici_seconds", &mesh::DeviceClass::ici_seconds)
      .def_readonly("dcn_seconds", &mesh::DeviceClass::dcn_seconds)
      .def_readonly("ici_bytes", &mesh::DeviceClass::ici_bytes)
      .def_readonly("dcn_bytes", &mesh::DeviceClass::dcn_bytes);
  using R = SimulateResult;
  auto field = [](auto member) { return [member](const R& r) { return r.report.*member; }; };
  BindClass<R>(m, "SimulationReport")
      .def_property_readonly("device_name", field(&mesh::SimulationReport::device_name))
      .def_property_readonly("num_devices", field(&mesh::SimulationReport::num_devices))
      .def_property_readonly("overlap", field(&mesh::SimulationReport::overlap))
      .def_property_readonly("step_seconds", field(&mesh::SimulationReport::step_seconds))
      .def_property_readonly("in_order_seconds", field(&mesh::SimulationReport::in_order_seconds))
      .def_property_readonly("overlapped_seconds",
                             field(&mesh::SimulationReport::overlapped_seconds))
      .def_property_readonly("compute_seconds", field(&mesh::SimulationReport::compute_seconds))
      .def_property_readonly("ici_seconds", field(&mesh::SimulationReport::ici_seconds))
      .def_property_readonly("dcn_seconds", field(&mesh::SimulationReport::dcn_seconds))
      .def_property_readonly("exposed_comm_seconds",
                             field(&mesh::SimulationReport::exposed_comm_seconds))
      .def_property_readonly("flops_per_device", field(&mesh::SimulationReport::flops_per_device))
      .def_property_readonly("ici_bytes_per_device",
                             field(&mesh::SimulationReport::ici_bytes_per_device))
      .def_property_readonly("dcn_bytes_per_device",
                             field(&mesh::SimulationReport::dcn_bytes_per_device))
      .def_property_readonly("ici_bytes_total", field(&mesh::SimulationReport::ici_bytes_total))
      .def_property_readonly("dcn_bytes_total", field(&mesh::SimulationReport::dcn_bytes_total))
      .def_property_readonly("peak_memory_bytes", field(&mesh::SimulationReport::peak_memory_bytes))
      .def_property_readonly("parameter_bytes", field(&mesh::SimulationReport::parameter_bytes))
      .def_property_readonly("hbm_bytes", field(&mesh::SimulationReport::hbm_bytes))
      .def_property_readonly("exceeds_hbm", field(&mesh::SimulationReport::exceeds_hbm))
      .def_property_readonly("classes", field(&mesh::SimulationReport::classes))
      .def_property_readonly("top_ops", field(&mesh::SimulationReport::top_ops))
      .def_property_readonly("top_collectives", field(&mesh::SimulationReport::top_collectives))
      .def_property_readonly("warnings", field(&mesh::SimulationReport::warnings))
      .def_readonly("global_nodes", &R::global_nodes)
      .def_readonly("local_nodes", &R::local_nodes)
      .def_readonly("trace_path", &R::trace_path);
  m.def("simulate_hlo", &SimulateHlo, py::arg("hlo_text"), py::arg("topology"),
        py::arg("overlap") = false, py::arg("trace_path") = py::none(), py::arg("top_k") = 10,
        py::arg("matmul_dtype") = py::none(), py::arg("assume_trip_count") = py::none());
  m.def(
      "simulate_model",
      [](const std::string& model_json, const std::string& source, const mesh::Topology& topology,
         std::vector<int64_t> ici_mesh_shape, std::vector<int64_t> dcn_mesh_shape,
         std::vector<std::string> axis_names, std::string recipe, std::optional<int64_t> batch,
         bool overlap, int64_t top_k) {
        ModelRun run{std::move(ici_mesh_shape),
                     std::move(dcn_mesh_shape),
                     std::move(axis_names),
                     std::move(recipe),
                     batch,
                     overlap,
                     top_k};
        return SimulateModel(model_json, source, topology, run);
      },
      py::arg("model_json"), py::arg("source"), py::arg("topology"), py::arg("ici_mesh_shape"),
      py::arg("dcn_mesh_shape"), py::arg("axis_names"), py::arg("recipe"), py::arg("batch"),
      py::arg("overlap") = false, py::arg("top_k") = 10);
  m.def("autoshard", &Autoshard, py::arg("model_json"), py::arg("source"), py::arg("topology"),
        py::arg("batch"), py::arg("budget_seconds") = 0.0, py::arg("top_k") = 5,
        py::arg("overlap") = false, py::arg("axes") = std::vector<std::string>{},
        py::arg("hbm_bytes") = 0);
}

}  // namespace
}  // namespace tessel::python

PYBIND11_MODULE(_tessel, m) {
  m.doc() = "Tessel C++ bindings; use the `tessel` package (python/tessel/__init__.py).";
  tessel::python::BindTopologyAndMesh(m);
  tessel::python::BindShardAndPartition(m);
  tessel::python::BindVerify(m);
  tessel::python::BindSimulate(m);
}
