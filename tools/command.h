// The `tessel` command-line program is one binary with subcommands (`tessel topology`,
// `tessel mesh`, `tessel shard`, ...). Each subcommand lives in its own file and registers itself
// with CLI11 through a function declared here.
//
// Exit codes: 0 success; 1 the command ran and failed (e.g. a config that does not validate);
// 2 bad command-line arguments (one clear line on stderr).
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

// Exit code for bad arguments.
inline constexpr int kExitUsage = 2;

}  // namespace tessel::tools

#endif  // TESSEL_TOOLS_COMMAND_H_
