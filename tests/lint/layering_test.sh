#!/usr/bin/env bash
# Fails when a file includes a header of a higher layer (see DESIGN.md, "Layout and dependency
# direction"):  core <- spmd <- partitioner <- mesh <- tools;  core <- transport <- mesh;
# mesh/topology (pure data) may be used by spmd and above; nn sits beside partitioner.
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root" || exit 2

# allowed_for FILE -> space-separated list of include prefixes the file may use.
allowed_for() {
  case "$1" in
    core/*) echo "core/" ;;
    transport/*) echo "core/ transport/" ;;
    mesh/topology.h|mesh/topology.cc|mesh/topology_test.cc) echo "core/ mesh/topology.h" ;;
    spmd/*) echo "core/ spmd/ mesh/topology.h" ;;
    partitioner/*) echo "core/ spmd/ partitioner/ mesh/topology.h" ;;
    nn/*) echo "core/ spmd/ nn/ mesh/topology.h" ;;
    mesh/*) echo "core/ spmd/ partitioner/ transport/ nn/ mesh/" ;;
    *) echo "*" ;;
  esac
}

status=0
checked=0
while IFS= read -r file; do
  allowed=$(allowed_for "$file")
  [ "$allowed" = "*" ] && continue
  checked=$((checked + 1))
  while IFS= read -r inc; do
    # Only project headers (those that start with a project folder) are checked.
    case "$inc" in
      core/*|spmd/*|partitioner/*|transport/*|mesh/*|nn/*|tools/*|examples/*|tests/*|benchmarks/*) ;;
      *) continue ;;
    esac
    ok=0
    for prefix in $allowed; do
      case "$inc" in "$prefix"*) ok=1 ;; esac
    done
    if [ $ok -eq 0 ]; then
      echo "layering violation: $file includes \"$inc\" (allowed: $allowed)"
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find core spmd partitioner transport mesh nn -name '*.h' -o -name '*.cc' 2>/dev/null | sort)

if [ $checked -eq 0 ]; then
  echo "layering: no source files found under $root"
  exit 1
fi
[ $status -eq 0 ] && echo "layering: $checked files checked, no violations"
exit $status
