#pragma once

// Comma-separated integer flags (`--ids 0,5,7`, `--concurrency 1,8`), one parser for every command.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// The integers of "0,5,7", each within [min_value, max_value]; InvalidArgument naming `flag` and
// the text for an empty list, an empty or non-numeric item, or a value out of range.
Result<std::vector<int32_t>> ParseIntList(const std::string& text, const char* flag,
                                          int32_t min_value, int32_t max_value);

}  // namespace dsv41
