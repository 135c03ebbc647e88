// A byte-level GPT (nn/gpt.h) trained with AdamW on the fortune-cookie corpus (Debian package
// `fortunes`, nn/text_data.h), on one device or sharded FSDP x tensor x data parallel over a
// multi-slice mesh of host processes (the `tessel run` example `gpt`).
//
// Sharded (default, when started as a host by `tessel run`, `tessel launch`, mpirun or srun):
// the config's devices form a HybridMesh with `--ici-mesh-shape 1,2,2 --dcn-mesh-shape 2,1,1
// --axis-names data,fsdp,tensor` on the two-slice preset (slices over `data`, each slice's 4
// devices over `fsdp` x `tensor`); `--recipe` (default fsdp_tp, nn/transformer.h) shards the
// parameters with mark_sharding: Megatron column/row splits over `tensor`, the other dim of each
// matrix over `fsdp`; the batch over (data, fsdp), each host loading only its devices' rows.
// With `--single-device` the same model trains on one device; with the same seed every step's
// loss equals the sharded run's up to reduction order (tests/e2e/gpt_e2e.sh checks 1e-4).
//
// Per step: lr from the warmup + cosine schedule, forward, Grad, clipping by global norm, AdamW
// (decay on matrices and the embedding), all in one graph. Every --log-every steps a progress
// line (step, loss, lr, gradient norm, tokens/s, the simulated step time on the config's
// hardware); every --eval-every steps the validation loss over --eval-batches fixed batches, in
// nats and bits per byte; at the end a sample generated from --prompt, greedy and at
// --temperature, through the same sharded model (the generation batch is split like training).
//
// Checkpoints: with --checkpoint-dir DIR --checkpoint-every N every host writes its shards of
// the parameters and AdamW's moments after every N-th step (and the last), and host 0 the
// metadata with the step, the seed (all of the run's randomness is a function of the seed and
// the step: initialization, batch windows, sampling), the data-loader position (the next
// training batch index) and the model's description. --resume continues from the newest
// complete checkpoint in DIR, on this mesh or another (reshard on load) or on one device; on the
// same mesh the losses after the resume equal the uninterrupted run's bit for bit.
//
//   tessel run configs/two_slices_2x2hosts.json --example gpt
//   gpt_train --single-device --steps 200
#ifndef TESSEL_EXAMPLES_GPT_GPT_EXAMPLE_H_
#define TESSEL_EXAMPLES_GPT_GPT_EXAMPLE_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "examples/common/host_setup.h"
#include "tessel/mesh/topology/topology.h"

namespace tessel::examples {

struct GptFlags {
  std::string data_dir;  // default nn::kDefaultFortunesDir
  // Model.
  int64_t layers = 2;
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t ffn = 0;  // 0: 4 * d_model
  int64_t seq_len = 128;
  std::string position = "rotary";
  std::string mlp = "swiglu";
  std::string head = "tied";
  // Training.
  int64_t batch = 16;
  int64_t steps = 3600;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup = 30;
  double weight_decay = 0.1;
  double clip = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  // Output.
  int64_t log_every = 50;
  int64_t eval_every = 300;
  int64_t eval_batches = 8;
  std::string prompt = "The meaning of life is";
  int64_t generate = 200;  // bytes generated per sample
  double temperature = 0.8;
  std::string plot;  // SVG of the training and validation loss curves (host 0)
  // Chrome-trace JSON of every device's graph runs and collectives (sharded runs, host 0
  // writes it; benchmarks/jax_compare/trace_split.py reads it).
  std::string trace;
  bool json = false;
  bool single_device = false;
  // Distributed checkpoints (mesh/runtime/checkpoint.h).
  std::string checkpoint_dir;    // where checkpoints go / come from
  int64_t checkpoint_every = 0;  // save every N steps and after the last (0: never)
  bool resume = false;           // continue from the newest complete checkpoint
  // Sharded runs.
  std::string recipe = "fsdp_tp";
  MeshFlags mesh{.ici_mesh_shape = {1, 2, 2},
                 .dcn_mesh_shape = {2, 1, 1},
                 .axis_names = {"data", "fsdp", "tensor"}};
};

// Adds the example's options to `app` (the standalone program and `tessel run` share them).
void AddGptFlags(CLI::App& app, GptFlags* flags);

// Checks, before any host starts, what every host would otherwise reject on its own: the model
// sizes, the mesh flags and recipe against `topology` (the config at `config_path`), the
// corpus, and with --resume the checkpoint (present, complete, files whole, fits the model).
// Errors: kInvalidArgument naming the flags and the config, or the checkpoint and the array at
// fault; kNotFound naming the corpus directory and the Debian package `fortunes`, or the
// missing checkpoint; kDataLoss for a damaged checkpoint.
[[nodiscard]] absl::Status CheckGptRun(const GptFlags& flags, const mesh::Topology& topology,
                                       const std::string& config_path);

// Runs the example; returns the exit code: 0 success, 1 a run-time failure (one line on stderr
// naming the value and where it came from).
int RunGpt(const GptFlags& flags);

}  // namespace tessel::examples

#endif  // TESSEL_EXAMPLES_GPT_GPT_EXAMPLE_H_
