#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv41 {

using Json = nlohmann::json;
// Keeps object keys in file order (for writing config.json and headers as the release lays them).
using OrderedJson = nlohmann::ordered_json;

// The one adapter between nlohmann-json (which throws) and dsv41 (which never does). `what` names
// the source in errors ("config.json", "model-00001.safetensors header").
Result<Json> ParseJson(std::string_view text, std::string_view what);
Result<OrderedJson> ParseOrderedJson(std::string_view text, std::string_view what);
// As ParseJson, but an object that repeats a key is an InvalidArgument naming the key
// ("<what>: duplicate key 'x'"); nlohmann itself silently keeps one of the values. For formats
// where a repeated key is corruption (safetensors headers).
Result<Json> ParseJsonRejectingDuplicateKeys(std::string_view text, std::string_view what);
// Reads and parses a JSON file; errors name the path.
Result<Json> ReadJsonFile(const std::string& path);

}  // namespace dsv41
