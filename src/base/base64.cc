#include "base/base64.h"

#include <algorithm>
#include <array>
#include <string>

namespace dsv41 {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// 0..63 for alphabet characters, -1 otherwise.
constexpr std::array<int8_t, 256> DecodeTable() {
  std::array<int8_t, 256> table{};
  table.fill(-1);
  for (int i = 0; i < 64; ++i) table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kDecode = DecodeTable();

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

Result<std::vector<uint8_t>> DecodeBase64(std::string_view text, size_t max_bytes) {
  const size_t bound = text.size() / 4 * 3 + 2;
  std::vector<uint8_t> out;
  out.reserve(std::min(bound, max_bytes));
  uint32_t bits = 0;
  int num_bits = 0;
  size_t padding = 0;
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (IsSpace(c)) continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const int8_t value = kDecode[static_cast<uint8_t>(c)];
    if (value < 0 || padding > 0) {
      return InvalidArgumentError("invalid base64 at offset %zu", i);
    }
    ++chars;
    bits = bits << 6 | static_cast<uint32_t>(value);
    num_bits += 6;
    if (num_bits >= 8) {
      num_bits -= 8;
      if (out.size() == max_bytes) {
        return InvalidArgumentError("base64 payload is over the limit of %zu bytes", max_bytes);
      }
      out.push_back(static_cast<uint8_t>(bits >> num_bits));
    }
  }
  if (chars % 4 == 1 || padding > 2 || (padding > 0 && (chars + padding) % 4 != 0)) {
    return InvalidArgumentError("invalid base64: %zu characters and %zu padding", chars, padding);
  }
  return out;
}

std::string EncodeBase64(const std::vector<uint8_t>& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = uint32_t{bytes[i]} << 16 |
                       (i + 1 < bytes.size() ? uint32_t{bytes[i + 1]} << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t{bytes[i + 2]} : 0);
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

}  // namespace dsv41
