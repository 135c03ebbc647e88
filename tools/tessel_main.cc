// tessel: the command-line front end. See README.md and docs/ for each subcommand.
#include <iostream>
#include <new>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "tessel/version.h"
#include "tools/command.h"

int main(int argc, char** argv) {
  CLI::App app{"tessel: SPMD sharding engine and mesh simulator"};
  app.set_version_flag("--version", "tessel " TESSEL_VERSION_STRING,
                       "Print the version (tessel MAJOR.MINOR.PATCH) and exit");
  app.require_subcommand(1);
  app.footer(tessel::tools::kExitCodesHelp);
  std::vector<std::pair<CLI::App*, tessel::tools::CommandFn>> commands;
  auto add = [&](tessel::tools::CommandFn (*adder)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    tessel::tools::CommandFn fn = adder(app);
    auto subs = app.get_subcommands({});
    if (subs.size() > before) commands.emplace_back(subs.back(), std::move(fn));
  };
  add(&tessel::tools::AddTopologyCommand);
  add(&tessel::tools::AddMeshCommand);
  add(&tessel::tools::AddShardCommand);
  add(&tessel::tools::AddPropagateCommand);
  add(&tessel::tools::AddPartitionCommand);
  add(&tessel::tools::AddVerifyCommand);
  add(&tessel::tools::AddLaunchCommand);
  add(&tessel::tools::AddRunCommand);
  add(&tessel::tools::AddSimulateCommand);
  add(&tessel::tools::AddAutoshardCommand);
  // One footer for all: scripts read the exit codes from any --help (docs/cli.md).
  for (auto& [sub, fn] : commands) sub->footer(tessel::tools::kExitCodesHelp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "tessel: " << e.what() << "\n";
    return tessel::tools::kExitUsage;
  }
  for (auto& [sub, fn] : commands) {
    if (!sub->parsed()) continue;
    // The last resort for input too large for this host (a huge shape in an HLO file): the
    // paths that allocate on a user's behalf return kResourceExhausted themselves; anything that
    // still runs out of memory ends with one line and exit 1 rather than an abort.
    try {
      return fn();
    } catch (const std::bad_alloc&) {
      std::cerr << "tessel " << sub->get_name() << ": out of memory on this host\n";
      return 1;
    }
  }
  return tessel::tools::kExitUsage;
}
