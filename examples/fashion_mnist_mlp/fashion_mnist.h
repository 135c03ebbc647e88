// The main job: an MLP trained with Adam on the real Fashion-MNIST, on one device or sharded over
// a multi-slice mesh of host processes (the `tessel run` example `fashion-mnist-mlp`).
//
// Sharded (default, when started as a host by `tessel run`, `tessel launch`, mpirun or srun):
// the config's devices form a HybridMesh (torch_xla's) with `--ici-mesh-shape`,
// `--dcn-mesh-shape` and `--axis-names` (default (2,2) x (2,1), ("data", "model") on the
// two-slice preset); the batch is sharded over "data" (each host loads only its devices' rows),
// the hidden layers are Megatron-style over "model" (column-parallel, then row-parallel), and
// the gradients of data-parallel copies are all-reduced across slices over DCN by the
// partitioner's collectives. With `--single-device` the same training runs on one device; with
// the same seed every step's loss matches the sharded run up to reduction order.
//
//   tessel run configs/two_slices_2x2hosts.json --example fashion-mnist-mlp --epochs 1
//   fashion_mnist_mlp --single-device --epochs 5
#ifndef TESSEL_EXAMPLES_FASHION_MNIST_MLP_FASHION_MNIST_H_
#define TESSEL_EXAMPLES_FASHION_MNIST_MLP_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "examples/common/host_setup.h"
#include "tessel/mesh/topology/topology.h"

namespace tessel::examples {

struct FashionMnistFlags {
  std::string data_dir;  // default nn::kDefaultFashionMnistDir
  int64_t epochs = 5;
  int64_t batch_size = 128;
  int64_t eval_batch_size = 1000;
  double lr = 1e-3;
  std::string optimizer = "adam";  // or "sgd"
  std::string lr_schedule = "cosine";
  uint64_t seed = 0;
  std::vector<int64_t> hidden = {1024, 1024};
  int64_t steps = 0;  // at most this many steps per epoch (0: all)
  int threads = 0;    // executor threads (single device; per device when sharded: 1)
  int64_t log_every = 0;
  bool json = false;
  bool single_device = false;
  std::string
      trace;  // Chrome-trace JSON of the run's device timeline (sharded runs), written by host 0
  // Sharded runs: the topology (else TESSEL_CONFIG) and the logical mesh.
  MeshFlags mesh{
      .ici_mesh_shape = {2, 2}, .dcn_mesh_shape = {2, 1}, .axis_names = {"data", "model"}};
};

// Adds the example's options to `app` (the standalone program and `tessel run` share them).
void AddFashionMnistFlags(CLI::App& app, FashionMnistFlags* flags);

// Checks, before any host starts, what every host would otherwise reject on its own: the mesh
// flags against `topology` (the config at `config_path`) and the dataset's presence.
// Errors: kInvalidArgument naming the flags and the config; the dataset loader's error naming
// the path.
[[nodiscard]] absl::Status CheckFashionMnistRun(const FashionMnistFlags& flags,
                                                const mesh::Topology& topology,
                                                const std::string& config_path);

// Runs the example and returns the process exit code: 0 success; 1 a run-time failure (missing
// dataset, a config that does not match the mesh flags, an unreachable coordinator, a lost
// host), reported as one line on stderr naming the value and where it came from.
int RunFashionMnist(const FashionMnistFlags& flags);

}  // namespace tessel::examples

#endif  // TESSEL_EXAMPLES_FASHION_MNIST_MLP_FASHION_MNIST_H_
