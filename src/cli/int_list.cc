#include "cli/int_list.h"

#include <charconv>
#include <sstream>

namespace dsv41 {

Result<std::vector<int32_t>> ParseIntList(const std::string& text, const char* flag,
                                          int32_t min_value, int32_t max_value) {
  std::vector<int32_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    int32_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < min_value ||
        v > max_value) {
      return InvalidArgumentError(
          "%s: want a comma-separated list of integers in [%d, %d] like "
          "1,8, got '%s'",
          flag, min_value, max_value, text.c_str());
    }
    values.push_back(v);
  }
  if (values.empty()) return InvalidArgumentError("%s is empty", flag);
  return values;
}

}  // namespace dsv41
