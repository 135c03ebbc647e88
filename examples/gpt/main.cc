// Trains a byte-level GPT with AdamW on the fortune-cookie corpus and prints a sample; see
// gpt_example.h for the sharded mode and the flags.
//
//   gpt_train --single-device --steps 200
//   tessel run configs/two_slices_2x2hosts.json --example gpt
//
// Exit codes: 0 success; 1 a run-time failure (one line on stderr); 2 bad flags.
#include <cstdio>
#include <new>

#include "CLI/CLI.hpp"
#include "examples/gpt/gpt_example.h"

int main(int argc, char** argv) {
  tessel::examples::GptFlags flags;
  CLI::App app{
      "Trains a byte-level GPT on the fortune-cookie corpus with AdamW, on one device or sharded "
      "over the mesh of a topology config, and prints the validation loss and a sample.",
      "gpt_train"};
  tessel::examples::AddGptFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "gpt_train: %s (see --help)\n", e.what());
    return 2;
  }
  // Sizes that pass the checks but not this host's memory end with one line, not an abort.
  try {
    return tessel::examples::RunGpt(flags);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "gpt_train: out of memory on this host\n");
    return 1;
  }
}
