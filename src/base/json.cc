#include "base/json.h"

#include <set>
#include <vector>

#include "base/mapped_file.h"

namespace dsv41 {
namespace {
template <typename J>
Result<J> ParseAs(std::string_view text, std::string_view what) {
  J parsed = J::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    // Parse again with exceptions on only to recover the position of the syntax error.
    try {
      const J reparsed = J::parse(text);
      (void)reparsed;
    } catch (const std::exception& e) {
      return InvalidArgumentError("%.*s: invalid JSON: %s", static_cast<int>(what.size()),
                                  what.data(), e.what());
    }
    return InvalidArgumentError("%.*s: invalid JSON", static_cast<int>(what.size()), what.data());
  }
  return parsed;
}
}  // namespace

Result<Json> ParseJson(std::string_view text, std::string_view what) {
  return ParseAs<Json>(text, what);
}
Result<OrderedJson> ParseOrderedJson(std::string_view text, std::string_view what) {
  return ParseAs<OrderedJson>(text, what);
}

Result<Json> ParseJsonRejectingDuplicateKeys(std::string_view text, std::string_view what) {
  // One key set per open object; the callback never throws and always keeps the value, it only
  // records the first repeated key.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  bool found_duplicate = false;
  const Json::parser_callback_t callback = [&](int /*depth*/, Json::parse_event_t event,
                                               Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!found_duplicate && !open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get_ref<const std::string&>()).second) {
          found_duplicate = true;
          duplicate = parsed.get_ref<const std::string&>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json parsed = Json::parse(text, callback, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return ParseJson(text, what);  // recovers the syntax error message
  if (found_duplicate) {
    return InvalidArgumentError("%.*s: duplicate key '%s'", static_cast<int>(what.size()),
                                what.data(), duplicate.c_str());
  }
  return parsed;
}

Result<Json> ReadJsonFile(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseJson(text, path);
}

}  // namespace dsv41
