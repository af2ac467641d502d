#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace dsv41 {

// One `dsv41 <name>` subcommand. Each `*_command.cc` registers itself with DSV41_REGISTER_COMMAND;
// `setup` adds the subcommand's flags to `sub`, and returns the action that runs after parsing.
// The action returns the process exit code: 0 ok, 1 runtime failure (usage errors exit 2 in CLI11).
struct CommandSpec {
  std::string name;
  std::string description;
  std::function<std::function<int()>(CLI::App& sub)> setup;
  // Non-empty: a subcommand of that command (`dsv41 bench serve`), whose action runs instead of
  // the parent's when it is given.
  std::string parent = {};
};

std::vector<CommandSpec>& CommandRegistry();

struct CommandRegistrar {
  explicit CommandRegistrar(CommandSpec spec) { CommandRegistry().push_back(std::move(spec)); }
};

}  // namespace dsv41

#define DSV41_REGISTER_COMMAND(var, ...)       \
  static const ::dsv41::CommandRegistrar var { \
    ::dsv41::CommandSpec { __VA_ARGS__ }       \
  }
