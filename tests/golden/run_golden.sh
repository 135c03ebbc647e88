#!/usr/bin/env bash
# Runs the `// RUN:` line of a golden file: `tessel` becomes the built binary, `%s` the file and
# FileCheck the LLVM 14 FileCheck, as lit does.
#   run_golden.sh TESSEL_BINARY FILECHECK_BINARY FILE
set -uo pipefail
tessel="$1"
filecheck="$2"
file="$3"
run=$(sed -n 's|^// RUN: *||p' "$file" | head -n 1)
if [ -z "$run" ]; then
  echo "$file: no // RUN: line"
  exit 1
fi
cmd=${run//%s/$file}
cmd=${cmd//tessel /$tessel }
cmd=${cmd//FileCheck /$filecheck }
echo "RUN: $cmd"
bash -o pipefail -c "$cmd"
