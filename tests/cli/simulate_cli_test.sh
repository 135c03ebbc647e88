#!/usr/bin/env bash
# Checks `tessel simulate` end to end: a small GPT and Llama on the presets in text and --json
# (keys present, numbers consistent: step = compute + exposed, MFU from the formula, overlapped
# <= in order), a Chrome trace that parses, an HLO module, and the error paths: exit 2 with one
# line on stderr for bad arguments (unknown model / recipe, a mesh whose product is not the
# device count, heads not dividing d_model), exit 1 for a missing file and a model too big for
# HBM.
#
# Usage: simulate_cli_test.sh TESSEL_BINARY CONFIGS_DIR
set -u
tessel="$1"
configs="$2"
root="$(cd "$configs/.." && pwd)"
source "$(dirname "$0")/cli_test_lib.sh"



# expect_one_error_line SUBSTRING: stderr is one line containing SUBSTRING.
expect_one_error_line() {
  local lines
  lines=$(wc -l <"$tmp/err")
  [[ "$lines" == 1 ]] || fail "expected one stderr line, got $lines: $(cat "$tmp/err")"
  grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(cat "$tmp/err")"
}

small=(--layers 2 --d-model 256 --heads 4 --ffn 1024 --vocab 1024 --seq-len 128 --batch 16)

# Text output on two slices of v4-8 (8 chips), multi-slice DP over DCN.
if expect_exit 0 simulate "$configs/two_v4-8_slices.json" --model gpt "${small[@]}" \
    --ici-mesh-shape 1,2,2 --dcn-mesh-shape 2,1,1 --recipe multislice_dp; then
  for key in "step time" "compute" "ICI" "DCN" "exposed comm" "MFU" "tokens/s" "peak memory" \
      "ICI bytes" "DCN bytes" "top ops:" "top collectives:"; do
    grep -q "^$key" "$tmp/out" || fail "text output lacks '$key'"
  done
fi

# --json on v5p-128 (64 chips), Llama with GQA, FSDP x TP, overlap and a trace.
if expect_exit 0 simulate "$configs/v5p-128.json" --model llama "${small[@]}" --kv-heads 2 \
    --ici-mesh-shape 1,16,4 --recipe fsdp_tp --overlap --trace "$tmp/trace.json" --json; then
  python3 - "$tmp/out" "$tmp/trace.json" <<'PY' || fail "json checks failed"
import json, sys
r = json.load(open(sys.argv[1]))
for k in ["step_time_s", "mfu", "compute_s", "ici_s", "dcn_s", "exposed_comm_s",
          "peak_memory_bytes", "tokens_per_s", "top_ops", "top_collectives",
          "ici_bytes_per_device", "dcn_bytes_per_device"]:
    assert k in r, k
assert r["num_devices"] == 64
assert r["step_time_s"] > 0 and r["compute_s"] > 0 and r["ici_s"] > 0
assert r["dcn_s"] == 0, "one slice has no DCN traffic"
assert r["step_time_s"] == r["overlapped_step_time_s"] <= r["in_order_step_time_s"]
assert abs(r["step_time_s"] - (r["compute_s"] + r["exposed_comm_s"])) < 1e-9 * r["step_time_s"] + 1e-15
mfu = 6 * r["params"] * r["tokens_per_step"] / (r["step_time_s"] * 64 * 459e12)
assert abs(r["mfu"] - mfu) < 1e-9, (r["mfu"], mfu)
assert abs(r["tokens_per_s"] - 16 * 128 / r["step_time_s"]) < 1e-6 * r["tokens_per_s"]
assert len(r["top_ops"]) == 10 and len(r["top_collectives"]) == 10
assert r["top_ops"][0]["seconds"] >= r["top_ops"][9]["seconds"]
t = json.load(open(sys.argv[2]))
assert any(e["ph"] == "X" for e in t["traceEvents"])
PY
fi

# Doubling the DCN bandwidth halves the DCN time of multi-slice DP (latency set to 0).
python3 - "$configs/two_v4-8_slices.json" "$tmp" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["dcn"]["latency_us"] = 0
json.dump(t, open(sys.argv[2] + "/slow.json", "w"))
t["dcn"]["bandwidth_gbps"] *= 2
json.dump(t, open(sys.argv[2] + "/fast.json", "w"))
PY
for speed in slow fast; do
  "$tessel" simulate "$tmp/$speed.json" --model gpt "${small[@]}" --ici-mesh-shape 1,2,2 \
      --dcn-mesh-shape 2,1,1 --recipe multislice_dp --json >"$tmp/$speed.out" 2>"$tmp/err" ||
    fail "simulate $speed: $(cat "$tmp/err")"
done
python3 -c "
import json
s = json.load(open('$tmp/slow.out'))['dcn_s']; f = json.load(open('$tmp/fast.out'))['dcn_s']
assert s > 0 and abs(f - s / 2) < 1e-12 * s, (s, f)
" || fail "doubling DCN bandwidth did not halve dcn_s"

# An HLO module.
if expect_exit 0 simulate "$configs/v4-8.json" --hlo "$root/tests/golden/partitioner/mlp_megatron.hlo" --json; then
  python3 -c "import json,sys; r=json.load(open('$tmp/out')); assert r['step_time_s'] > 0" ||
    fail "hlo json"
fi

# Bad arguments: exit 2, one line.
expect_exit 2 simulate "$configs/v4-8.json" --model bert "${small[@]}" &&
  expect_one_error_line 'unknown model "bert"'
expect_exit 2 simulate "$configs/v4-8.json" --model gpt "${small[@]}" --recipe zero3 &&
  expect_one_error_line 'unknown recipe "zero3"'
expect_exit 2 simulate "$configs/v4-8.json" --model gpt "${small[@]}" --ici-mesh-shape 2,2,4 &&
  expect_one_error_line "tessel simulate:"
expect_exit 2 simulate "$configs/v4-8.json" --model gpt --d-model 100 --heads 3 &&
  expect_one_error_line "heads (3) must divide d_model (100)"
expect_exit 2 simulate "$configs/v4-8.json" &&
  expect_one_error_line "give exactly one of --model"
expect_exit 2 simulate "$configs/v4-8.json" --model gpt --ici-mesh-shape 1,x,2 &&
  expect_one_error_line "--ici-mesh-shape"

# Failures: exit 1, one line.
expect_exit 1 simulate "$tmp/missing.json" --model gpt && expect_one_error_line "missing.json"
expect_exit 1 simulate "$configs/v4-8.json" --hlo "$tmp/missing.hlo" &&
  expect_one_error_line "missing.hlo"
# GPT with d_model 4096 and 16 layers, data parallel on 4 chips of 32 GiB: ~3.3e9 parameters x
# 16 bytes (f32 weights, gradients, two moments) does not fit.
expect_exit 1 simulate "$configs/v4-8.json" --model gpt --layers 16 --d-model 4096 --heads 32 \
    --vocab 1024 --seq-len 128 --batch 4 --ici-mesh-shape 4 --axis-names data --recipe dp &&
  expect_one_error_line "does not fit"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "simulate cli: all passed"
