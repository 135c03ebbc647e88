// Trains an MLP (784-1024-1024-10, ReLU) with Adam on Fashion-MNIST and reports the test
// accuracy after every epoch; see fashion_mnist.h for the sharded mode and the flags.
//
//   fashion_mnist_mlp --single-device --epochs 5
//   tessel run configs/two_slices_2x2hosts.json --example fashion-mnist-mlp --epochs 1
//   tessel launch configs/two_slices_2x2hosts.json --
//   build/examples/fashion_mnist_mlp/fashion_mnist_mlp
//
// Exit codes: 0 success; 1 a run-time failure (one line on stderr); 2 bad flags.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "examples/fashion_mnist_mlp/fashion_mnist.h"

int main(int argc, char** argv) {
  tessel::examples::FashionMnistFlags flags;
  CLI::App app{
      "Trains an MLP on Fashion-MNIST with Adam, on one device or sharded over the mesh of a "
      "topology config, and reports the test accuracy per epoch.",
      "fashion_mnist_mlp"};
  tessel::examples::AddFashionMnistFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "fashion_mnist_mlp: %s (see --help)\n", e.what());
    return 2;
  }
  return tessel::examples::RunFashionMnist(flags);
}
