// dsv41: the command-line entry point. Subcommands live in *_command.cc and register themselves.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <tuple>

#include "base/log.h"
#include "cli/command.h"

namespace dsv41 {

std::vector<CommandSpec>& CommandRegistry() {
  static std::vector<CommandSpec> registry;
  return registry;
}

namespace {

int Main(int argc, char** argv) {
  CLI::App app{"dsv41: DeepSeek-V4.1-Flash inference on CPU"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));

  std::vector<CommandSpec>& registry = CommandRegistry();
  // Top-level commands first (by name), then nested ones, so a parent exists before its child.
  std::sort(registry.begin(), registry.end(), [](const CommandSpec& a, const CommandSpec& b) {
    return std::tie(a.parent, a.name) < std::tie(b.parent, b.name);
  });
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
  for (const CommandSpec& spec : registry) {
    CLI::App* parent = spec.parent.empty() ? &app : app.get_subcommand(spec.parent);
    CLI::App* sub = parent->add_subcommand(spec.name, spec.description);
    actions.emplace_back(sub, spec.setup(*sub));
  }
  // A nested command's action wins over its parent's (both are "parsed").
  std::stable_partition(actions.begin(), actions.end(),
                        [&app](const auto& a) { return a.first->get_parent() != &app; });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;  // bad usage exits 2 (STYLE.md §10)
  }
  if (log_level == "error") SetLogLevel(LogLevel::kError);
  if (log_level == "warn") SetLogLevel(LogLevel::kWarn);
  if (log_level == "info") SetLogLevel(LogLevel::kInfo);
  if (log_level == "debug") SetLogLevel(LogLevel::kDebug);
  for (auto& [sub, action] : actions) {
    if (sub->parsed()) return action();
  }
  return 2;
}

}  // namespace
}  // namespace dsv41

int main(int argc, char** argv) { return dsv41::Main(argc, argv); }
