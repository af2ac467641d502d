#include "server/json_path.h"

#include <charconv>

namespace dsv41 {

const JsonValue* JsonAt(const JsonValue& root, std::string_view path) {
  const JsonValue* v = &root;
  while (!path.empty() && v != nullptr) {
    const size_t dot = path.find('.');
    const std::string_view key = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    if (v->is_array()) {
      size_t i = 0;
      const std::from_chars_result r = std::from_chars(key.data(), key.data() + key.size(), i);
      v = r.ec == std::errc() && i < v->array.size() ? &v->array[i] : nullptr;
    } else {
      v = v->Find(key);
    }
  }
  return v;
}

std::string JsonText(const JsonValue& root, std::string_view path) {
  const JsonValue* v = JsonAt(root, path);
  return v != nullptr ? v->text : "<missing " + std::string(path) + ">";
}

std::optional<int64_t> JsonInteger(const JsonValue& root, std::string_view path) {
  const JsonValue* v = JsonAt(root, path);
  if (v == nullptr || v->kind != JsonValue::Kind::kInteger) return std::nullopt;
  int64_t out = 0;
  const std::from_chars_result r =
      std::from_chars(v->text.data(), v->text.data() + v->text.size(), out);
  if (r.ec != std::errc()) return std::nullopt;
  return out;
}

}  // namespace dsv41
