#pragma once

// Reads members of parsed responses by a dotted path ("choices.0.delta.content": object keys and
// array indexes), for clients of the server (`dsv41 bench serve`, tests).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "text/json_format.h"

namespace dsv41 {

// The value at `path`, or nullptr when a key or index is missing.
const JsonValue* JsonAt(const JsonValue& root, std::string_view path);
// The string (or number spelling) at `path`, or "<missing PATH>".
std::string JsonText(const JsonValue& root, std::string_view path);
// The integer at `path`, or nullopt.
std::optional<int64_t> JsonInteger(const JsonValue& root, std::string_view path);

}  // namespace dsv41
