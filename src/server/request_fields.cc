#include "server/request_fields.h"

#include <charconv>
#include <limits>

namespace dsv41 {
namespace {

int Len(std::string_view s) { return static_cast<int>(s.size()); }

Status TypeError(std::string_view key, const char* want) {
  return InvalidArgumentError("%.*s: must be %s", Len(key), key.data(), want);
}

// A float member stored in a float field: out-of-range doubles become ±inf, which the range
// checks then refuse.
Status ReadFloat(const JsonValue& body, std::string_view key, float& out) {
  DSV41_ASSIGN_OR_RETURN(std::optional<double> value, NumberField(body, key));
  if (value.has_value()) out = static_cast<float>(*value);
  return OkStatus();
}

}  // namespace

const JsonValue* FieldOrNull(const JsonValue& object, std::string_view key) {
  const JsonValue* value = object.Find(key);
  return value == nullptr || value->is_null() ? nullptr : value;
}

Result<std::optional<double>> NumberField(const JsonValue& object, std::string_view key) {
  const JsonValue* value = FieldOrNull(object, key);
  if (value == nullptr) return std::optional<double>();
  if (value->kind == JsonValue::Kind::kFloat) return std::optional<double>(value->float_value);
  if (value->kind == JsonValue::Kind::kInteger) {
    return std::optional<double>(std::strtod(value->text.c_str(), nullptr));
  }
  return TypeError(key, "a number");
}

Result<std::optional<int64_t>> IntegerField(const JsonValue& object, std::string_view key) {
  const JsonValue* value = FieldOrNull(object, key);
  if (value == nullptr) return std::optional<int64_t>();
  if (value->kind != JsonValue::Kind::kInteger) return TypeError(key, "an integer");
  int64_t parsed = 0;
  const char* begin = value->text.data();
  const char* end = begin + value->text.size();
  const std::from_chars_result r = std::from_chars(begin, end, parsed);
  if (r.ec != std::errc() || r.ptr != end) {
    return InvalidArgumentError("%.*s: %s is out of range", Len(key), key.data(),
                                value->text.c_str());
  }
  return std::optional<int64_t>(parsed);
}

Result<std::optional<bool>> BoolField(const JsonValue& object, std::string_view key) {
  const JsonValue* value = FieldOrNull(object, key);
  if (value == nullptr) return std::optional<bool>();
  if (value->kind != JsonValue::Kind::kBool) return TypeError(key, "a boolean");
  return std::optional<bool>(value->bool_value);
}

Result<std::optional<std::string>> StringField(const JsonValue& object, std::string_view key) {
  const JsonValue* value = FieldOrNull(object, key);
  if (value == nullptr) return std::optional<std::string>();
  if (!value->is_string()) return TypeError(key, "a string");
  return std::optional<std::string>(value->text);
}

Result<std::vector<std::string>> StringListField(const JsonValue& object, std::string_view key) {
  std::vector<std::string> out;
  const JsonValue* value = FieldOrNull(object, key);
  if (value == nullptr) return out;
  if (value->is_string()) {
    out.push_back(value->text);
    return out;
  }
  if (!value->is_array()) return TypeError(key, "a string or an array of strings");
  for (size_t i = 0; i < value->array.size(); ++i) {
    if (!value->array[i].is_string()) {
      return InvalidArgumentError("%.*s[%zu]: must be a string", Len(key), key.data(), i);
    }
    out.push_back(value->array[i].text);
  }
  return out;
}

Status ReadSamplingFields(const JsonValue& body, SamplingParams& params) {
  DSV41_RETURN_IF_ERROR(ReadFloat(body, "temperature", params.temperature));
  DSV41_RETURN_IF_ERROR(ReadFloat(body, "top_p", params.top_p));
  DSV41_RETURN_IF_ERROR(ReadFloat(body, "min_p", params.min_p));
  DSV41_RETURN_IF_ERROR(ReadFloat(body, "presence_penalty", params.presence_penalty));
  DSV41_RETURN_IF_ERROR(ReadFloat(body, "frequency_penalty", params.frequency_penalty));
  DSV41_RETURN_IF_ERROR(ReadFloat(body, "repetition_penalty", params.repetition_penalty));
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, IntegerField(body, "top_k"));
  if (top_k.has_value()) {
    if (*top_k < -1 || *top_k > std::numeric_limits<int32_t>::max()) {
      return InvalidArgumentError("top_k: %lld must be -1, 0 (all tokens) or >= 1",
                                  static_cast<long long>(*top_k));
    }
    params.top_k = static_cast<int32_t>(*top_k);
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> seed, IntegerField(body, "seed"));
  if (seed.has_value()) params.seed = static_cast<uint64_t>(*seed);
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, BoolField(body, "ignore_eos"));
  if (ignore_eos.has_value()) params.ignore_eos = *ignore_eos;
  if (const JsonValue* ids = FieldOrNull(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return TypeError("stop_token_ids", "an array of integers");
    for (size_t i = 0; i < ids->array.size(); ++i) {
      const JsonValue& id = ids->array[i];
      const std::string field = StrFormat("stop_token_ids[%zu]", i);
      if (id.kind != JsonValue::Kind::kInteger || id.text.size() > 10) {
        return InvalidArgumentError("%s: must be a token id", field.c_str());
      }
      params.stop_token_ids.push_back(
          static_cast<int32_t>(std::strtoll(id.text.c_str(), nullptr, 10)));
    }
  }
  return OkStatus();
}

}  // namespace dsv41
