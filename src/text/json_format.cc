#include "text/json_format.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>

namespace dsv41 {
namespace {

constexpr int kMaxDepth = 512;
// Objects with more members than this get a hash index for the duplicate-key check.
constexpr size_t kLinearKeySearchLimit = 16;

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Recursive-descent parser over a byte string; the first error stops it.
class JsonParser {
 public:
  JsonParser(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  Status ParseDocument(JsonValue& out) {
    SkipSpace();
    DSV41_RETURN_IF_ERROR(ParseValue(out, 0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the JSON value");
    return OkStatus();
  }

 private:
  Status Error(const char* why) const {
    return InvalidArgumentError("%.*s: invalid JSON at byte %zu: %s",
                                static_cast<int>(what_.size()), what_.data(), pos_, why);
  }

  void SkipSpace() {
    while (pos_ < text_.size() && IsJsonSpace(text_[pos_])) ++pos_;
  }

  bool ConsumeLiteral(std::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  Status ParseValue(JsonValue& out, int depth) {
    if (depth >= kMaxDepth) return Error("nesting too deep");
    if (pos_ >= text_.size()) return Error("unexpected end of text");
    const char c = text_[pos_];
    switch (c) {
      case '{':
        return ParseObject(out, depth);
      case '[':
        return ParseArray(out, depth);
      case '"':
        out.kind = JsonValue::Kind::kString;
        return ParseString(out.text);
      case 't':
      case 'f':
      case 'n':
        if (ConsumeLiteral("true")) {
          out.kind = JsonValue::Kind::kBool;
          out.bool_value = true;
        } else if (ConsumeLiteral("false")) {
          out.kind = JsonValue::Kind::kBool;
          out.bool_value = false;
        } else if (ConsumeLiteral("null")) {
          out.kind = JsonValue::Kind::kNull;
        } else {
          return Error("invalid literal");
        }
        return OkStatus();
      default:
        if (c == '-' || IsDigit(c)) return ParseNumber(out);
        return Error("unexpected character");
    }
  }

  Status ParseObject(JsonValue& out, int depth) {
    out.kind = JsonValue::Kind::kObject;
    ++pos_;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return OkStatus();
    }
    std::unordered_map<std::string, size_t> index;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a member name");
      std::string key;
      DSV41_RETURN_IF_ERROR(ParseString(key));
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      SkipSpace();
      JsonValue value;
      DSV41_RETURN_IF_ERROR(ParseValue(value, depth + 1));
      size_t existing = out.object.size();
      if (out.object.size() <= kLinearKeySearchLimit) {
        for (size_t i = 0; i < out.object.size(); ++i) {
          if (out.object[i].key == key) existing = i;
        }
      } else {
        if (index.empty()) {
          for (size_t i = 0; i < out.object.size(); ++i) index.emplace(out.object[i].key, i);
        }
        const auto it = index.find(key);
        if (it != index.end()) existing = it->second;
      }
      if (existing < out.object.size()) {
        out.object[existing].value = std::move(value);
      } else {
        if (!index.empty()) index.emplace(key, out.object.size());
        out.object.push_back({std::move(key), std::move(value)});
      }
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated object");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == '}') {
        ++pos_;
        return OkStatus();
      }
      return Error("expected ',' or '}'");
    }
  }

  Status ParseArray(JsonValue& out, int depth) {
    out.kind = JsonValue::Kind::kArray;
    ++pos_;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return OkStatus();
    }
    while (true) {
      SkipSpace();
      out.array.emplace_back();
      DSV41_RETURN_IF_ERROR(ParseValue(out.array.back(), depth + 1));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated array");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == ']') {
        ++pos_;
        return OkStatus();
      }
      return Error("expected ',' or ']'");
    }
  }

  Status ParseNumber(JsonValue& out) {
    const size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("invalid number");
    if (text_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    bool is_integer = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      is_integer = false;
      ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("invalid number fraction");
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      is_integer = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("invalid number exponent");
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    const std::string_view lexeme = text_.substr(start, pos_ - start);
    if (is_integer) {
      out.kind = JsonValue::Kind::kInteger;
      out.text = lexeme == "-0" ? "0" : std::string(lexeme);
      return OkStatus();
    }
    out.kind = JsonValue::Kind::kFloat;
    const std::from_chars_result parsed =
        std::from_chars(lexeme.data(), lexeme.data() + lexeme.size(), out.float_value);
    if (parsed.ec == std::errc::result_out_of_range) {
      // strtod rounds overflow to ±HUGE_VAL and underflow to (signed) zero or a subnormal, as
      // Python's float() does; from_chars leaves the value unset in that case.
      const std::string copy(lexeme);
      out.float_value = std::strtod(copy.c_str(), nullptr);
    } else if (parsed.ec != std::errc() || parsed.ptr != lexeme.data() + lexeme.size()) {
      return Error("invalid number");
    }
    return OkStatus();
  }

  Status ParseHex4(uint32_t& unit) {
    if (text_.size() - pos_ < 4) return Error("truncated \\u escape");
    unit = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      unit <<= 4;
      if (IsDigit(c)) {
        unit |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        unit |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        unit |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return Error("invalid \\u escape");
      }
    }
    return OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Length of the valid UTF-8 sequence starting at pos_ (lead byte >= 0x80), 0 if invalid.
  size_t Utf8SequenceLength() const {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(text_[pos_ + i]); };
    const size_t left = text_.size() - pos_;
    const uint8_t b0 = byte(0);
    size_t length = 0;
    uint8_t lo = 0x80;
    uint8_t hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      length = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      length = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;  // no UTF-16 surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      length = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return 0;
    }
    if (left < length) return 0;
    if (byte(1) < lo || byte(1) > hi) return 0;
    for (size_t i = 2; i < length; ++i) {
      if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
    }
    return length;
  }

  Status ParseString(std::string& out) {
    ++pos_;  // opening quote
    out.clear();
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return OkStatus();
      }
      if (static_cast<uint8_t>(c) < 0x20) return Error("control character in string");
      if (static_cast<uint8_t>(c) >= 0x80) {
        const size_t length = Utf8SequenceLength();
        if (length == 0) return Error("invalid UTF-8 in string");
        out.append(text_.substr(pos_, length));
        pos_ += length;
        continue;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size()) return Error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t unit = 0;
          DSV41_RETURN_IF_ERROR(ParseHex4(unit));
          if (unit >= 0xDC00 && unit <= 0xDFFF) return Error("lone low surrogate escape");
          if (unit >= 0xD800 && unit <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") return Error("lone high surrogate escape");
            pos_ += 2;
            uint32_t low = 0;
            DSV41_RETURN_IF_ERROR(ParseHex4(low));
            if (low < 0xDC00 || low > 0xDFFF) return Error("lone high surrogate escape");
            unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(unit, out);
          break;
        }
        default:
          return Error("invalid escape");
      }
    }
  }

  std::string_view text_;
  std::string_view what_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Find(std::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  for (const JsonMember& member : object) {
    if (member.key == key) return &member.value;
  }
  return nullptr;
}

JsonValue& JsonValue::Set(std::string_view key, JsonValue value) {
  if (kind == Kind::kNull) kind = Kind::kObject;
  for (JsonMember& m : object) {
    if (m.key == key) {
      m.value = std::move(value);
      return *this;
    }
  }
  object.push_back(JsonMember{std::string(key), std::move(value)});
  return *this;
}

void JsonValue::Push(JsonValue value) {
  if (kind == Kind::kNull) kind = Kind::kArray;
  array.push_back(std::move(value));
}

JsonValue JsonBool(bool value) {
  JsonValue v;
  v.kind = JsonValue::Kind::kBool;
  v.bool_value = value;
  return v;
}

JsonValue JsonInt(int64_t value) {
  JsonValue v;
  v.kind = JsonValue::Kind::kInteger;
  v.text = std::to_string(value);
  return v;
}

JsonValue JsonFloat(double value) {
  JsonValue v;
  v.kind = JsonValue::Kind::kFloat;
  v.float_value = value;
  return v;
}

JsonValue JsonString(std::string text) {
  JsonValue v;
  v.kind = JsonValue::Kind::kString;
  v.text = std::move(text);
  return v;
}

JsonValue JsonArray(std::vector<JsonValue> items) {
  JsonValue v;
  v.kind = JsonValue::Kind::kArray;
  v.array = std::move(items);
  return v;
}

JsonValue JsonObject(std::vector<JsonMember> members) {
  JsonValue v;
  v.kind = JsonValue::Kind::kObject;
  v.object = std::move(members);
  return v;
}

Result<JsonValue> ParseJsonValue(std::string_view text, std::string_view what) {
  JsonValue value;
  JsonParser parser(text, what);
  DSV41_RETURN_IF_ERROR(parser.ParseDocument(value));
  return value;
}

bool IsValidJson(std::string_view text) { return ParseJsonValue(text, "").ok(); }

void AppendJsonString(std::string_view text, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<uint8_t>(c) < 0x20) {
          out += "\\u00";
          out += kHex[static_cast<uint8_t>(c) >> 4];
          out += kHex[static_cast<uint8_t>(c) & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string FormatJsonString(std::string_view text) {
  std::string out;
  AppendJsonString(text, out);
  return out;
}

std::string FormatPythonFloat(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  // Shortest round-trip digits (as Python's repr), then Python's layout: positional notation for
  // decimal exponents -4..15, else d.ddde±XX.
  char buffer[64];
  const std::to_chars_result r =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  const std::string_view sci(buffer, static_cast<size_t>(r.ptr - buffer));
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out += '-';
    i = 1;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e_pos; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  const int num_digits = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      if (num_digits <= exponent + 1) {
        out += digits;
        out.append(static_cast<size_t>(exponent + 1 - num_digits), '0');
        out += ".0";
      } else {
        out += digits.substr(0, static_cast<size_t>(exponent + 1));
        out += '.';
        out += digits.substr(static_cast<size_t>(exponent + 1));
      }
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out += digits;
    }
    return out;
  }
  out += digits[0];
  if (num_digits > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += exponent < 0 ? "e-" : "e+";
  const int magnitude = exponent < 0 ? -exponent : exponent;
  if (magnitude < 10) out += '0';
  out += std::to_string(magnitude);
  return out;
}

void AppendJson(const JsonValue& value, std::string& out) {
  switch (value.kind) {
    case JsonValue::Kind::kNull:
      out += "null";
      return;
    case JsonValue::Kind::kBool:
      out += value.bool_value ? "true" : "false";
      return;
    case JsonValue::Kind::kInteger:
      out += value.text;
      return;
    case JsonValue::Kind::kFloat:
      out += FormatPythonFloat(value.float_value);
      return;
    case JsonValue::Kind::kString:
      AppendJsonString(value.text, out);
      return;
    case JsonValue::Kind::kArray:
      out += '[';
      for (size_t i = 0; i < value.array.size(); ++i) {
        if (i > 0) out += ", ";
        AppendJson(value.array[i], out);
      }
      out += ']';
      return;
    case JsonValue::Kind::kObject:
      out += '{';
      for (size_t i = 0; i < value.object.size(); ++i) {
        if (i > 0) out += ", ";
        AppendJsonString(value.object[i].key, out);
        out += ": ";
        AppendJson(value.object[i].value, out);
      }
      out += '}';
      return;
  }
}

std::string FormatJson(const JsonValue& value) {
  std::string out;
  AppendJson(value, out);
  return out;
}

}  // namespace dsv41
