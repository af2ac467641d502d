#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

struct JsonMember;

// A JSON value as the chat format needs it (tokenizer-and-chat.md §6.5): object members in the
// client's order, integers kept exactly whatever their size, other numbers as binary64. Plain
// data; nlohmann-json cannot hold integers beyond 64 bits, hence this small type.
struct JsonValue {
  enum class Kind { kNull, kBool, kInteger, kFloat, kString, kArray, kObject };

  Kind kind = Kind::kNull;
  bool bool_value = false;
  // kString: the decoded UTF-8 text. kInteger: the decimal digits with an optional '-' (as
  // Python's int() would print them: "-0" becomes "0").
  std::string text;
  double float_value = 0.0;  // kFloat
  std::vector<JsonValue> array;
  // kObject: members in first-appearance order; a repeated key keeps its first position and takes
  // its last value (Python's dict).
  std::vector<JsonMember> object;

  bool is_null() const { return kind == Kind::kNull; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_object() const { return kind == Kind::kObject; }
  bool is_array() const { return kind == Kind::kArray; }
  // The member `key` of an object, or nullptr (also when this is not an object).
  const JsonValue* Find(std::string_view key) const;
  // Object (a null value becomes an empty object first): sets member `key` to `value`, keeping
  // the place of an existing member, appending a new one. Returns *this, so calls chain.
  JsonValue& Set(std::string_view key, JsonValue value);
  // Array (a null value becomes an empty array first): appends `value`.
  void Push(JsonValue value);
};

struct JsonMember {
  std::string key;
  JsonValue value;
};

// Values a program writes (server responses); FormatJson writes them as any parsed value.
JsonValue JsonBool(bool value);
JsonValue JsonInt(int64_t value);
// A non-finite value formats as Python's Infinity/NaN, which is no JSON: callers clamp first.
JsonValue JsonFloat(double value);
JsonValue JsonString(std::string text);
JsonValue JsonArray(std::vector<JsonValue> items = {});
JsonValue JsonObject(std::vector<JsonMember> members = {});

// Parses one RFC 8259 JSON text (surrounding whitespace allowed; no NaN/Infinity, no comments,
// valid UTF-8 only, no lone surrogate escapes, nesting up to 512 levels). Numbers with a fraction
// or exponent are rounded to binary64 (overflow gives ±infinity, as Python does). Errors are
// InvalidArgument naming `what` and the byte offset.
Result<JsonValue> ParseJsonValue(std::string_view text, std::string_view what);

// True when `text` is exactly one valid JSON value by the rules of ParseJsonValue.
bool IsValidJson(std::string_view text);

// Python's json.dumps(value, ensure_ascii=False): separators ", " and ": ", keys in order,
// floats in repr form (§6.5).
std::string FormatJson(const JsonValue& value);
void AppendJson(const JsonValue& value, std::string& out);
// json.dumps of a string: quotes and the §6.5 escapes, everything else raw.
void AppendJsonString(std::string_view text, std::string& out);
std::string FormatJsonString(std::string_view text);
// Python repr of a binary64 value (`1000.0`, `1e-07`, `1e+16`, `-0.0`, `Infinity`).
std::string FormatPythonFloat(double value);

}  // namespace dsv41
