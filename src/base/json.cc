#include "base/json.h"

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

Result<Json> ReadJsonFile(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseJson(text, path);
}

}  // namespace dsv41
