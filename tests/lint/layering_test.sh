#!/usr/bin/env bash
# Fails when a source file includes a project header of a layer it may not use. One rule per
# folder, no exceptions (docs/architecture.md, "Layers"):
#
#   core -> mesh/topology -> spmd -> mesh/cost -> partitioner -> nn -> mesh/sim
#   core -> transport -> mesh/launch;  mesh/sim + mesh/launch -> mesh/runtime;  mesh/sim -> mesh/autoshard
#   everything -> examples -> tools;  python (the bindings), benchmarks, tests and fuzz (the
#   libFuzzer targets) use any library.
#
# A folder listed below may include its own headers and those of the folders after it. A source
# file in a folder with no rule is itself a violation, so a new folder must be given its place.
#
#   bash tests/lint/layering_test.sh [ROOT]
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root" || exit 2

libs="core/ mesh/topology/ spmd/ mesh/cost/ partitioner/ nn/ mesh/sim/ transport/ mesh/launch/ mesh/runtime/ mesh/autoshard/"
declare -A rule=(
  [core/]="core/"
  [mesh/topology/]="core/ mesh/topology/"
  [spmd/]="core/ mesh/topology/ spmd/"
  [mesh/cost/]="core/ mesh/topology/ mesh/cost/"
  [partitioner/]="core/ mesh/topology/ spmd/ mesh/cost/ partitioner/"
  [nn/]="core/ spmd/ nn/"
  [mesh/sim/]="core/ mesh/topology/ spmd/ mesh/cost/ partitioner/ nn/ mesh/sim/"
  [transport/]="core/ transport/"
  [mesh/launch/]="core/ mesh/topology/ transport/ mesh/launch/"
  [mesh/runtime/]="core/ mesh/topology/ spmd/ mesh/cost/ partitioner/ nn/ mesh/sim/ transport/ mesh/launch/ mesh/runtime/"
  [mesh/autoshard/]="core/ mesh/topology/ spmd/ mesh/cost/ partitioner/ nn/ mesh/sim/ mesh/autoshard/"
  [examples/]="$libs examples/"
  [tools/]="$libs examples/ tools/"
  [python/]="$libs python/"
  [benchmarks/]="$libs benchmarks/"
  [tests/]="$libs tests/"
  [fuzz/]="$libs fuzz/"
)

# The rule of the longest folder that holds FILE, or nothing.
folder_of() {
  local best=""
  for folder in "${!rule[@]}"; do
    case "$1" in "$folder"*) [ ${#folder} -gt ${#best} ] && best="$folder" ;; esac
  done
  echo "$best"
}

status=0
checked=0
while IFS= read -r file; do
  file="${file#./}"
  folder=$(folder_of "$file")
  if [ -z "$folder" ]; then
    echo "layering violation: $file is in a folder with no layering rule"
    status=1
    continue
  fi
  checked=$((checked + 1))
  while IFS= read -r inc; do
    # "tessel/core/shape.h" is core/shape.h (the installed layout, cmake/TesselHelpers.cmake).
    inc="${inc#tessel/}"
    # Only project headers (those under a project folder) are checked.
    case "$inc" in
      core/*|spmd/*|partitioner/*|transport/*|mesh/*|nn/*|tools/*|examples/*|tests/*|benchmarks/*|python/*) ;;
      *) continue ;;
    esac
    ok=0
    for prefix in ${rule[$folder]}; do
      case "$inc" in "$prefix"*) ok=1 ;; esac
    done
    if [ $ok -eq 0 ]; then
      echo "layering violation: $file includes \"$inc\" (the rule of $folder allows: ${rule[$folder]})"
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find . -mindepth 1 \( -name '.*' -o -name 'build*' \) -prune -o \( -name '*.h' -o -name '*.cc' \) -print |
         sort)

if [ $checked -eq 0 ]; then
  echo "layering: no source files found under $root"
  exit 1
fi
[ $status -eq 0 ] && echo "layering: $checked files checked, no violations"
exit $status
