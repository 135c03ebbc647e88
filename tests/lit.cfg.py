# lit configuration of Tessel's text tests: tests/golden (HLO text in, partitioned HLO text out)
# and tests/cli (the `tessel` command line). Each test is one file with `RUN:` lines, run by lit's
# internal shell, whose output is matched with FileCheck (LLVM 14, Debian package llvm-14-tools).
#
# CMake writes build/tests/lit.site.cfg.py, which sets the paths below and loads this file; ctest
# runs `lit.py -sv build/tests/golden` and `.../cli`. Without a build tree, pass the binary:
#
#   python3 /usr/lib/llvm-14/build/utils/lit/lit.py -sv tests/cli --param tessel=build/tools/tessel
#
# Parameters (--param NAME=VALUE, overriding lit.site.cfg.py):
#   tessel          the `tessel` binary (required)
#   llvm_tools_dir  where FileCheck, not, count and split-file live (default /usr/lib/llvm-14/bin)
#   exec_root       where tests write `Output/` (%t); default: the build tree, else a temp dir
#
# Substitutions in RUN lines:
#   tessel          the binary (a whole word only: `tessel` inside a path or a name is left alone)
#   %configs        the repository's configs/ (topology presets)
#   %golden         tests/golden (HLO modules that other tests may reuse as input)
#   %python         the Python 3 running lit
#   %expect-exit N  runs the rest of the line and succeeds only if it exits with status N
#                   (`not` accepts any non-zero status; tessel uses 1 for a failed command and 2
#                   for bad arguments, tools/command.h)
#   %json-assert    checks Python expressions over JSON documents (tests/lit/json_assert.py)
#   %s, %S, %t      lit's own: this file, its folder, a scratch path for this test
import os
import sys
import tempfile

import lit.formats

config.name = "tessel"
# The internal shell: pipes, redirections, `not`, `&&` and globs, the same on every machine.
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".hlo", ".test"]
# Folders under tests/ that hold other kinds of tests or lit's helpers, not lit tests.
config.excludes = ["Inputs", "lit", "e2e", "integration", "lint"]

tests_dir = os.path.dirname(os.path.abspath(__file__))
repo_dir = os.path.dirname(tests_dir)
config.test_source_root = tests_dir


def setting(name, default=None):
    """A --param value, else what lit.site.cfg.py set, else `default`."""
    value = lit_config.params.get(name) or getattr(config, name, None) or default
    if value is None:
        lit_config.fatal(
            f"no `{name}`: run lit on the build tree (build/tests/...) or pass --param {name}=...")
    return value


tessel = os.path.abspath(setting("tessel"))
if not os.access(tessel, os.X_OK):
    lit_config.fatal(f"tessel binary {tessel!r} is missing or not executable (build it first)")
llvm_tools_dir = setting("llvm_tools_dir", "/usr/lib/llvm-14/bin")
for tool in ["FileCheck", "not", "count", "split-file"]:
    if not os.access(os.path.join(llvm_tools_dir, tool), os.X_OK):
        lit_config.fatal(f"{tool} not found in {llvm_tools_dir} (Debian package llvm-14-tools)")
config.test_exec_root = setting(
    "exec_root", os.path.join(tempfile.gettempdir(), f"tessel-lit-{os.getuid()}"))

# LLVM 14's FileCheck, not, count and split-file come first on PATH, before any other LLVM.
config.environment["PATH"] = os.pathsep.join([llvm_tools_dir, config.environment["PATH"]])

helpers_dir = os.path.join(tests_dir, "lit")
python = sys.executable
# `tessel` comes first: later substitutions expand to paths that may contain the word.
config.substitutions.append((r"(?<![\w./%-])tessel(?![\w./-])", tessel))
config.substitutions.append(("%configs", os.path.join(repo_dir, "configs")))
config.substitutions.append(("%golden", os.path.join(tests_dir, "golden")))
config.substitutions.append(
    ("%expect-exit", f"{python} {os.path.join(helpers_dir, 'expect_exit.py')}"))
config.substitutions.append(
    ("%json-assert", f"{python} {os.path.join(helpers_dir, 'json_assert.py')}"))
config.substitutions.append(("%python", python))
