#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/tokenizer.h"

namespace dsv41 {

// model.md §9.2: every token id's Engram compressed class. Classes are numbered by first
// appearance over ascending token ids, so the map is a pure function of the tokenizer.
struct EngramTokenMap {
  std::vector<int32_t> class_of_token;  // [vocab_size]: class id of each token id
  int32_t num_classes = 0;              // 1 + the largest class id
};

// The normalised key of one decoded token (§9.2 step 3): NFKC -> NFD -> drop marks (Mn, Mc, Me)
// -> full lowercase per code point -> [ \t\r\n]+ to one space -> a lone space survives as a
// space, other White_Space is stripped from both ends. An empty result gives `decoded` itself.
// Errors only if ICU fails (missing data).
Result<std::string> NormalizeEngramKey(std::string_view decoded);

// Builds the map for `tokenizer` (§9.2 steps 1-4): each id decoded alone, specials kept; a decoded
// text containing U+FFFD is keyed by the raw tokenizer.json string instead.
Result<EngramTokenMap> BuildEngramTokenMap(const Tokenizer& tokenizer);

// The class count must equal the config's engram_compressed_vocab_size (every hash multiplier
// derives from it): InvalidArgument naming both numbers otherwise.
Status CheckClassCount(const EngramTokenMap& map, int64_t engram_compressed_vocab_size);

// The map as little-endian int32 per token id (the cache/golden format).
std::string SerializeEngramTokenMap(const EngramTokenMap& map);
// Parses SerializeEngramTokenMap's format; `what` names the source in errors. Refuses a size not a
// multiple of 4 and negative class ids.
Result<EngramTokenMap> ParseEngramTokenMap(std::string_view bytes, std::string_view what);
Status WriteEngramTokenMap(const std::string& path, const EngramTokenMap& map);
Result<EngramTokenMap> ReadEngramTokenMap(const std::string& path);

}  // namespace dsv41
