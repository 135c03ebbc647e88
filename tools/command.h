// The `tessel` command-line program is one binary with subcommands (`tessel topology`,
// `tessel mesh`, `tessel shard`, ...). Each subcommand lives in its own file and registers itself
// with CLI11 through a function declared here.
//
// Every subcommand follows the same conventions (docs/cli.md):
// - positionals are named for what they are: CONFIG (topology JSON), HLO (HLO text file),
//   PROGRAM (a program and its arguments);
// - `--json` prints ONE JSON object on stdout (schemas in docs/cli.md); messages go to stderr;
// - summaries are one line, capital first letter, no trailing period;
// - the exit codes are kExitCodesHelp's, printed as the footer of every --help.
#ifndef TESSEL_TOOLS_COMMAND_H_
#define TESSEL_TOOLS_COMMAND_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace tessel::tools {

// What a subcommand runs after parsing; returns the process exit code.
using CommandFn = std::function<int()>;

// Each Add*Command adds its subcommand to `app` and returns the function that runs it when that
// subcommand is selected. The options it binds live as long as the process.
CommandFn AddTopologyCommand(CLI::App& app);   // tools/topology_command.cc
CommandFn AddMeshCommand(CLI::App& app);       // tools/mesh_command.cc
CommandFn AddShardCommand(CLI::App& app);      // tools/shard_command.cc
CommandFn AddPropagateCommand(CLI::App& app);  // tools/partition_command.cc
CommandFn AddPartitionCommand(CLI::App& app);  // tools/partition_command.cc
CommandFn AddLaunchCommand(CLI::App& app);     // tools/launch_command.cc
CommandFn AddRunCommand(CLI::App& app);        // tools/run_command.cc
CommandFn AddSimulateCommand(CLI::App& app);   // tools/simulate_command.cc
CommandFn AddVerifyCommand(CLI::App& app);     // tools/verify_command.cc
CommandFn AddAutoshardCommand(CLI::App& app);  // tools/autoshard_command.cc

// Exit codes, the same for every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;      // the command ran and failed (one line on stderr)
inline constexpr int kExitUsage = 2;       // bad command-line arguments (one line on stderr)
inline constexpr int kExitDoesNotFit = 3;  // simulate --require-fit: the step exceeds HBM

// The footer of `tessel --help` and of every subcommand's --help (tests/cli/conventions.test
// checks that they all print it).
inline constexpr char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  failed: the command ran and failed (one line on stderr)\n"
    "  2  usage: bad command-line arguments (one line on stderr)\n"
    "  3  does not fit: simulate --require-fit and the step exceeds HBM\n"
    "  launch and run: a failed host's own exit status (128 + signal when killed)";

}  // namespace tessel::tools

#endif  // TESSEL_TOOLS_COMMAND_H_
