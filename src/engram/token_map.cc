#include "engram/token_map.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_map>

#include "base/mapped_file.h"

namespace dsv41 {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
constexpr UChar32 kSentinel = 0xE000;

bool IsMark(UChar32 c) {
  const int8_t type = u_charType(c);
  return type == U_NON_SPACING_MARK || type == U_COMBINING_SPACING_MARK || type == U_ENCLOSING_MARK;
}

bool IsAsciiSpaceRun(UChar32 c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

Result<std::string> NormalizeEngramKey(std::string_view decoded) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(error);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(error);
  if (U_FAILURE(error)) return InternalError("ICU normalizer: %s", u_errorName(error));
  const icu::UnicodeString source = icu::UnicodeString::fromUTF8(
      icu::StringPiece(decoded.data(), static_cast<int32_t>(decoded.size())));
  const icu::UnicodeString composed = nfkc->normalize(source, error);
  const icu::UnicodeString decomposed = nfd->normalize(composed, error);
  if (U_FAILURE(error)) return InternalError("ICU normalize: %s", u_errorName(error));

  // Marks dropped, then the full lowercase mapping of each code point on its own (no final-sigma
  // context: a lone capital sigma lowers to U+03C3).
  std::vector<UChar32> lowered;
  lowered.reserve(decomposed.length());
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 c = decomposed.char32At(i);
    i += U16_LENGTH(c);
    if (IsMark(c)) continue;
    std::array<UChar, 2> one{};
    int32_t one_length = 0;
    U16_APPEND_UNSAFE(one.data(), one_length, c);
    std::array<UChar, 8> lower{};
    const int32_t lower_length =
        u_strToLower(lower.data(), lower.size(), one.data(), one_length, "", &error);
    if (U_FAILURE(error)) return InternalError("ICU lowercase: %s", u_errorName(error));
    for (int32_t k = 0; k < lower_length;) {
      UChar32 l;
      U16_NEXT(lower.data(), k, lower_length, l);
      lowered.push_back(l);
    }
  }

  std::vector<UChar32> collapsed;
  collapsed.reserve(lowered.size());
  bool in_run = false;
  for (const UChar32 c : lowered) {
    if (IsAsciiSpaceRun(c)) {
      if (!in_run) collapsed.push_back(' ');
      in_run = true;
    } else {
      collapsed.push_back(c);
      in_run = false;
    }
  }
  if (collapsed.size() == 1 && collapsed[0] == ' ') collapsed[0] = kSentinel;
  size_t begin = 0;
  size_t end = collapsed.size();
  while (begin < end && u_isUWhiteSpace(collapsed[begin])) ++begin;
  while (end > begin && u_isUWhiteSpace(collapsed[end - 1])) --end;

  std::string key;
  for (size_t i = begin; i < end; ++i) {
    const UChar32 c = collapsed[i] == kSentinel ? ' ' : collapsed[i];
    icu::UnicodeString(c).toUTF8String(key);
  }
  if (key.empty()) return std::string(decoded);
  return key;
}

Result<EngramTokenMap> BuildEngramTokenMap(const Tokenizer& tokenizer) {
  EngramTokenMap map;
  map.class_of_token.resize(tokenizer.vocab_size());
  std::unordered_map<std::string, int32_t> class_of_key;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const int32_t one_id[] = {id};
    const std::string decoded = tokenizer.Decode(one_id);
    std::string key;
    if (decoded.find(kReplacementChar) != std::string::npos) {
      key = std::string(tokenizer.TokenString(id));
    } else {
      DSV41_ASSIGN_OR_RETURN(key, NormalizeEngramKey(decoded));
    }
    const auto [it, inserted] =
        class_of_key.emplace(std::move(key), static_cast<int32_t>(class_of_key.size()));
    map.class_of_token[id] = it->second;
  }
  map.num_classes = static_cast<int32_t>(class_of_key.size());
  return map;
}

Status CheckClassCount(const EngramTokenMap& map, int64_t engram_compressed_vocab_size) {
  if (map.num_classes != engram_compressed_vocab_size) {
    return InvalidArgumentError(
        "engram_compressed_vocab_size: config says %lld but the tokenizer's Engram token map has "
        "%d classes (model.md §9.2); the hash tables would be read with wrong multipliers",
        static_cast<long long>(engram_compressed_vocab_size), map.num_classes);
  }
  return OkStatus();
}

std::string SerializeEngramTokenMap(const EngramTokenMap& map) {
  std::string bytes;
  bytes.reserve(map.class_of_token.size() * 4);
  for (const int32_t value : map.class_of_token) {
    const auto u = static_cast<uint32_t>(value);
    for (int shift = 0; shift < 32; shift += 8) bytes.push_back(static_cast<char>(u >> shift));
  }
  return bytes;
}

Result<EngramTokenMap> ParseEngramTokenMap(std::string_view bytes, std::string_view what) {
  const auto name = [&] { return std::string(what); };
  if (bytes.size() % 4 != 0) {
    return DataLossError("%s: %zu bytes is not a whole number of int32 values", name().c_str(),
                         bytes.size());
  }
  EngramTokenMap map;
  map.class_of_token.resize(bytes.size() / 4);
  for (size_t i = 0; i < map.class_of_token.size(); ++i) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k)
      u |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[4 * i + k])) << (8 * k);
    const auto value = static_cast<int32_t>(u);
    if (value < 0) {
      return DataLossError("%s: token %zu has negative class %d", name().c_str(), i, value);
    }
    map.class_of_token[i] = value;
    map.num_classes = std::max(map.num_classes, value + 1);
  }
  return map;
}

Status WriteEngramTokenMap(const std::string& path, const EngramTokenMap& map) {
  return WriteStringToFile(path, SerializeEngramTokenMap(map));
}

Result<EngramTokenMap> ReadEngramTokenMap(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return ParseEngramTokenMap(bytes, path);
}

}  // namespace dsv41
