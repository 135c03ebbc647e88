#!/usr/bin/env bash
# The main job: builds Tessel (installing what is missing), then trains the Fashion-MNIST MLP
# example on the real dataset and prints a progress line per epoch and the test accuracy.
#
#   bash scripts/train.sh [example flags, e.g. --epochs 1 --batch-size 256]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
BUILD_DIR="${TESSEL_BUILD_DIR:-build}"
exec "$BUILD_DIR/examples/fashion_mnist_mlp/fashion_mnist_mlp" "$@"
