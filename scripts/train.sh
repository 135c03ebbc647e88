#!/usr/bin/env bash
# The main job: builds Tessel (installing what is missing), then launches the default mesh
# (configs/two_slices_2x2hosts.json: 2 slices x 2 hosts x 2 devices, as 4 host processes on this
# machine) and trains the Fashion-MNIST MLP sharded over it (HybridMesh ici (2,2) x dcn (2,1),
# axes data,model), printing the loss, a line per epoch, the test accuracy and a metrics report.
#
#   bash scripts/train.sh                      # one epoch
#   bash scripts/train.sh --epochs 10          # example flags (see --help)
#   bash scripts/train.sh --single-device      # the same training on one device
# Environment: TESSEL_CONFIG_FILE picks another topology config.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
BUILD_DIR="${TESSEL_BUILD_DIR:-build}"
CONFIG="${TESSEL_CONFIG_FILE:-configs/two_slices_2x2hosts.json}"
args=("$@")
case " $* " in
  *" --epochs "* | *" --epochs="*) ;;
  *) args=(--epochs 1 "${args[@]}") ;;
esac
case " $* " in
  *" --log-every "* | *" --log-every="*) ;;
  *) args=(--log-every 50 "${args[@]}") ;;
esac
exec "$BUILD_DIR/tools/tessel" run "$CONFIG" --example fashion-mnist-mlp "${args[@]}"
