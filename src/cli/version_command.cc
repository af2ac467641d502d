#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/command.h"

namespace dsv41 {
namespace {

DSV41_REGISTER_COMMAND(kVersionCommand, "version", "print the dsv41 version",
                       [](CLI::App&) -> std::function<int()> {
                         return [] {
                           std::printf("dsv41 0.1.0 (deepseek_v41)\n");
                           return 0;
                         };
                       });

}  // namespace
}  // namespace dsv41
