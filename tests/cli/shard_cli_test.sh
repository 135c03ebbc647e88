#!/usr/bin/env bash
# Checks `tessel mesh` and `tessel shard` end to end on torch_xla's worked examples: the exact
# sharding strings, the per-device index ranges (including an uneven split), the JSON forms,
# a HybridMesh over two 2x2 slices, exit 1 for a bad topology file and exit 2 with one line on
# stderr for bad arguments.
#
# Usage: shard_cli_test.sh TESSEL_BINARY CONFIGS_DIR
set -u
tessel="$1"
configs="$2"
source "$(dirname "$0")/cli_test_lib.sh"



# expect_out TEXT: stdout equals TEXT exactly.
expect_out() {
  local got
  got="$(cat "$tmp/out")"
  [[ "$got" == "$1" ]] || fail "expected stdout:
$1
got:
$got"
}

# expect_line TEXT: stdout has a line equal to TEXT.
expect_line() {
  grep -qxF -- "$1" "$tmp/out" || fail "no line '$1' in: $(cat "$tmp/out")"
}

# expect_usage ARGS...: exit 2 and exactly one stderr line starting with "tessel ".
expect_usage() {
  if expect_exit 2 "$@"; then
    local lines
    lines=$(wc -l <"$tmp/err")
    if [[ "$lines" != 1 ]] || ! grep -q "^tessel" "$tmp/err"; then
      fail "tessel $*: expected one stderr line, got: $(cat "$tmp/err")"
    fi
  fi
}

# --- tessel shard: the sharding strings of torch_xla's documentation -------------------------
expect_exit 0 shard --mesh-shape 2,4 --shape 8,10 --spec "0,None" &&
  expect_line "sharding: {devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"
expect_exit 0 shard --mesh-shape 1,2,4 --axis-names r,b,m --shape 8,8 --spec "None,(r,m)" &&
  expect_line "sharding: {devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
expect_exit 0 shard --mesh-shape 2,4 --axis-names x,y --shape 8,10 --spec "x,y" &&
  expect_line "sharding: {devices=[2,4]0,1,2,3,4,5,6,7}"
expect_exit 0 shard --mesh-shape 2,4 --axis-names x,y --shape 8,10 --spec "y,x" &&
  expect_line "sharding: {devices=[4,2]0,4,1,5,2,6,3,7}"
expect_exit 0 shard --mesh-shape 2,4 --device-ids 7,6,5,4,3,2,1,0 --shape 8,10 --spec "0,None" &&
  expect_line "sharding: {devices=[2,1,4]4,5,6,7,0,1,2,3 last_tile_dim_replicate}"
expect_exit 0 shard --mesh-shape 2,4 --shape 8,10 --spec "None,None" &&
  expect_line "sharding: {replicated}"
expect_exit 0 shard --mesh-shape 2,4 --shape "" --spec "" &&
  expect_line "sharding: {replicated}"
expect_exit 0 shard --mesh-shape 2,4 --shape 8,2,10 --spec "0,None,1" &&
  expect_line "sharding: {devices=[2,1,4]0,1,2,3,4,5,6,7}"

# The text form: the table and one line per device.
expect_exit 0 shard --mesh-shape 2,4 --axis-names x,y --shape 8,10 --spec "x,None" &&
  expect_out 'mesh: Mesh(["x"=2, "y"=4], [[0, 1, 2, 3], [4, 5, 6, 7]])
partition_spec: (x,None) on shape [8,10]
sharding: {devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}
+-------------+
|     0-3     |
| [0:4, 0:10] |
+-------------+
|     4-7     |
| [4:8, 0:10] |
+-------------+
device  index        local_shape  replica_id
0       [0:4, 0:10]  [4,10]       0
1       [0:4, 0:10]  [4,10]       1
2       [0:4, 0:10]  [4,10]       2
3       [0:4, 0:10]  [4,10]       3
4       [4:8, 0:10]  [4,10]       0
5       [4:8, 0:10]  [4,10]       1
6       [4:8, 0:10]  [4,10]       2
7       [4:8, 0:10]  [4,10]       3'

# Uneven: 5 elements on 4 devices -> [0:2], [2:4], [4:5], [5:5], local shape [2].
expect_exit 0 shard --mesh-shape 4 --shape 5 --spec 0 --json &&
  expect_out '{"sharding":"{devices=[4]0,1,2,3}","shards":[{"device":0,"index":[[0,2]],"local_shape":[2],"replica_id":0},{"device":1,"index":[[2,4]],"local_shape":[2],"replica_id":0},{"device":2,"index":[[4,5]],"local_shape":[2],"replica_id":0},{"device":3,"index":[[5,5]],"local_shape":[2],"replica_id":0}]}'

expect_exit 0 shard --mesh-shape 2,4 --axis-names x,y --shape 8,10 --spec "x,None" --json
if command -v python3 >/dev/null; then
  python3 - "$tmp/out" <<'EOF' || fail "shard --json for x,None is not the expected JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["sharding"] == "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", d
assert [s["device"] for s in d["shards"]] == list(range(8))
assert d["shards"][5] == {"device": 5, "index": [[4, 8], [0, 10]], "local_shape": [4, 10],
                          "replica_id": 1}, d["shards"][5]
EOF
fi

# --- tessel mesh ----------------------------------------------------------------------------
expect_exit 0 mesh --mesh-shape 4,2 --axis-names x,y --json &&
  expect_out '{"mesh_shape":[4,2],"axis_names":["x","y"],"logical_mesh":[[0,1],[2,3],[4,5],[6,7]]}'
expect_exit 0 mesh --mesh-shape 2,2 --device-ids 3,2,1,0 &&
  expect_out 'Mesh
axes: [0=2, 1=2]
logical_mesh:
[[3, 2],
 [1, 0]]'
# HybridMesh: two 2x2 slices; 'data' over DCN, 'fsdp' over the ICI of each slice.
expect_exit 0 mesh "$configs/two_slices_2x2hosts.json" --ici-mesh-shape 1,4,1 \
  --dcn-mesh-shape 2,1,1 --axis-names data,fsdp,tensor --json &&
  expect_out '{"mesh_shape":[2,4,1],"axis_names":["data","fsdp","tensor"],"logical_mesh":[[[0],[2],[1],[3]],[[4],[6],[5],[7]]]}'
expect_exit 0 mesh "$configs/two_slices_2x2hosts.json" --ici-mesh-shape 2,2 --dcn-mesh-shape 2,1 &&
  expect_line "[[0, 1],"

# --- errors ---------------------------------------------------------------------------------
# A topology file that does not validate: exit 1.
sed 's/"hosts": 2/"hosts": 0/' "$configs/two_slices_2x2hosts.json" >"$tmp/bad.json"
expect_exit 1 mesh "$tmp/bad.json" --ici-mesh-shape 1,4,1 --dcn-mesh-shape 2,1,1
# Bad arguments: exit 2, one line.
expect_usage shard --mesh-shape 2,4 --shape 8,10 --spec "0,0"            # axis used twice
expect_usage shard --mesh-shape 2,4 --axis-names x,y --shape 8,10 --spec "z,None"  # unknown axis
expect_usage shard --mesh-shape 2,4 --shape 8,10 --spec "0"              # spec too short
expect_usage shard --mesh-shape 2,4 --shape 8 --spec "0,None"            # spec too long
expect_usage shard --mesh-shape 2,4 --shape 8,10 --spec "2,None"         # axis out of range
expect_usage shard --mesh-shape 2,4 --shape 8,10 --spec "(0,None"        # bad syntax
expect_usage shard --mesh-shape 2,x --shape 8,10 --spec "0,None"         # not integers
expect_usage shard --mesh-shape 2,4 --device-ids 0,1,2 --shape 8 --spec 0  # wrong id count
expect_usage shard --mesh-shape 2,4 --axis-names x --shape 8 --spec 0    # names count
expect_usage shard --mesh-shape 2,4 --shape 8,-1 --spec 0,1              # negative dim
expect_usage shard --mesh-shape 2,4 --shape 8,10                         # no spec
expect_usage shard --shape 8,10 --spec 0,1                               # no mesh
expect_usage shard --mesh-shape 2,4 --shape 8,10 --spec 0,1 --bogus      # unknown flag
expect_usage mesh --mesh-shape 4,2 --axis-names x,x                      # repeated name
expect_usage mesh --mesh-shape 4,2 --device-ids 0,1,2,3,4,5,6,8          # id out of range
expect_usage mesh --ici-mesh-shape 1,4,1                                 # no CONFIG
expect_usage mesh                                                        # nothing
expect_usage mesh "$configs/two_slices_2x2hosts.json" --ici-mesh-shape 1,4,1  # no dcn, 2 slices
expect_usage mesh "$configs/two_slices_2x2hosts.json" --ici-mesh-shape 1,8,1 --dcn-mesh-shape 2,1,1
expect_usage mesh "$configs/two_slices_2x2hosts.json" --ici-mesh-shape 1,4,1 --dcn-mesh-shape 3,1,1
expect_usage mesh "$configs/two_slices_2x2hosts.json" --mesh-shape 4,2   # CONFIG with a Mesh

if [[ "$failures" -ne 0 ]]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "shard_cli_test: all checks passed"
