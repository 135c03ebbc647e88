#!/usr/bin/env bash
# The main job: builds Tessel (scripts/build.sh installs what is missing first, the `fortunes`
# corpus included), then launches the default mesh (configs/two_slices_2x2hosts.json: 2 slices x
# 2 hosts x 2 devices, as 4 host processes on this machine) and trains the byte-level GPT on the
# fortune-cookie corpus, FSDP x tensor x data parallel (HybridMesh ici (1,2,2) x dcn (2,1,1),
# axes data,fsdp,tensor), printing progress lines, the validation loss in bits per byte against
# the corpus' unigram entropy, a generated sample and a metrics report (docs/runtime.md).
#
#   bash scripts/train_gpt.sh                        # the default run
#   bash scripts/train_gpt.sh --steps 200            # example flags (see --help)
#   bash scripts/train_gpt.sh --single-device        # the same training on one device
#   bash scripts/train_gpt.sh --plot loss.svg        # and the loss curves
# Environment: TESSEL_CONFIG_FILE picks another topology config. The Fashion-MNIST MLP is
# scripts/train.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
BUILD_DIR="${TESSEL_BUILD_DIR:-build}"
CONFIG="${TESSEL_CONFIG_FILE:-configs/two_slices_2x2hosts.json}"
exec "$BUILD_DIR/tools/tessel" run "$CONFIG" --example gpt "$@"
