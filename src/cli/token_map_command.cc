// `dsv41 token-map`: writes the Engram compressed token map (model.md §9.2) as int32 LE.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/tokenizer_flags.h"
#include "engram/token_map.h"

namespace dsv41 {
namespace {

struct TokenMapFlags {
  TokenizerFlags tokenizer;
  std::string out_path;
};

int RunTokenMap(const TokenMapFlags& flags) {
  if (!flags.tokenizer.Check()) return 2;
  auto tokenizer = flags.tokenizer.Load();
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  auto map = BuildEngramTokenMap(*tokenizer);
  if (!map.ok()) {
    std::fprintf(stderr, "error: %s\n", map.status().ToString().c_str());
    return 1;
  }
  const Status written = WriteEngramTokenMap(flags.out_path, *map);
  if (!written.ok()) {
    std::fprintf(stderr, "error: %s\n", written.ToString().c_str());
    return 1;
  }
  std::printf("%d\n", map->num_classes);
  return 0;
}

DSV41_REGISTER_COMMAND(
    kTokenMapCommand, "token-map",
    "write the Engram compressed token map (int32 LE per token id) and print its class count",
    [](CLI::App& sub) -> std::function<int()> {
      auto flags = std::make_shared<TokenMapFlags>();
      flags->tokenizer.Add(sub);
      sub.add_option("--out", flags->out_path, "output file")->required();
      return [flags] { return RunTokenMap(*flags); };
    });

}  // namespace
}  // namespace dsv41
