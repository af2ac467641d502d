#pragma once

// Typed reads of request-body members (JsonValue, the one JSON type on the wire) whose errors name
// the field: "temperature: must be a number", "stop[1]: must be a string". A member that is absent
// or JSON null reads as "not given" (nullopt), as the OpenAI and Anthropic APIs treat null.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sampling_params.h"
#include "text/json_format.h"

namespace dsv41 {

// The member `key` of `object`, or nullptr when absent or null.
const JsonValue* FieldOrNull(const JsonValue& object, std::string_view key);

Result<std::optional<double>> NumberField(const JsonValue& object, std::string_view key);
// An integer (no fraction, no exponent) that fits int64.
Result<std::optional<int64_t>> IntegerField(const JsonValue& object, std::string_view key);
Result<std::optional<bool>> BoolField(const JsonValue& object, std::string_view key);
Result<std::optional<std::string>> StringField(const JsonValue& object, std::string_view key);
// A string or an array of strings (OpenAI `stop`); absent gives an empty list.
Result<std::vector<std::string>> StringListField(const JsonValue& object, std::string_view key);

// The sampling members every generation endpoint shares, with vLLM's names: temperature, top_p,
// top_k, min_p, seed, presence_penalty, frequency_penalty, repetition_penalty, ignore_eos,
// stop_token_ids. Type errors name the member; range checks are ValidateSamplingParams'.
Status ReadSamplingFields(const JsonValue& body, SamplingParams& params);

// The largest number of output tokens a request may ask for.
inline constexpr int64_t kMaxOutputTokens = int64_t{1} << 30;

}  // namespace dsv41
