#include "text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "base/json.h"
#include "base/mapped_file.h"
#include "text/special_tokens.h"

namespace dsv41 {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
// Ids are dense tables; a bound far above any real vocabulary keeps a bad file from allocating
// gigabytes.
constexpr int64_t kMaxTokenId = (int64_t{1} << 21) - 1;

// Impl::special value of the special tokens DecodeOptions::keep_chat_markers keeps.
constexpr uint8_t kChatMarker = 2;
bool IsChatMarker(std::string_view content) {
  return content == kThinkOpen || content == kThinkClose || content == kDsml || content == kEos;
}

// ---------------------------------------------------------------------------------------------
// UTF-8 helpers.

// Length of the well-formed sequence a lead byte starts (Unicode Table 3-7) and the allowed range
// of its second byte; length 0 for a byte that can never start one.
struct LeadInfo {
  int length;
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo InfoOfLead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the well-formed character at s[i], or 0 if it is ill-formed; *incomplete is set when
// the bytes are a valid prefix cut by the end of `s`.
int WellFormedLength(std::string_view s, size_t i, bool* incomplete, size_t* valid_prefix) {
  *incomplete = false;
  const auto lead = static_cast<uint8_t>(s[i]);
  const LeadInfo info = InfoOfLead(lead);
  *valid_prefix = 1;
  if (info.length <= 1) return info.length;
  for (int k = 1; k < info.length; ++k) {
    if (i + k >= s.size()) {
      *incomplete = true;
      return 0;
    }
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t lo = k == 1 ? info.second_lo : 0x80;
    const uint8_t hi = k == 1 ? info.second_hi : 0xBF;
    if (b < lo || b > hi) return 0;
    *valid_prefix = k + 1;
  }
  return info.length;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool incomplete;
    size_t valid_prefix;
    const int length = WellFormedLength(s, i, &incomplete, &valid_prefix);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

// Byte length of the (valid) UTF-8 character starting with `lead`.
size_t CharLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes one code point of valid UTF-8 at s[*i] and advances *i.
char32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto lead = static_cast<uint8_t>(s[*i]);
  const size_t length = CharLength(lead);
  char32_t cp = length == 1 ? lead : lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
  *i += length;
  return cp;
}

// ---------------------------------------------------------------------------------------------
// tokenizer-and-chat.md §3.4: the GPT-2 byte table.

struct ByteTable {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int16_t, 0x144> byte_of_char{};  // -1: not in the table's image

  ByteTable() {
    byte_of_char.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      char_of_byte[b] = cp;
      byte_of_char[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTable& Bytes() {
  static const ByteTable table;
  return table;
}

// The raw bytes of a token string (§4): the byte table mapped back when every character is in its
// image, else the string's own UTF-8.
std::string BytesOfTokenString(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const char32_t cp = NextCodePoint(token, &i);
    if (cp >= Bytes().byte_of_char.size() || Bytes().byte_of_char[cp] < 0) {
      return std::string(token);
    }
    bytes.push_back(static_cast<char>(Bytes().byte_of_char[cp]));
  }
  return bytes;
}

// ---------------------------------------------------------------------------------------------
// A compiled Split regex.

struct RegexDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
using RegexPtr = std::unique_ptr<pcre2_code, RegexDeleter>;

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
using MatchDataPtr = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

// Rewrites an Oniguruma pattern (HF `tokenizers` uses Oniguruma) for PCRE2: `\s` there is the
// Unicode White_Space property, which includes U+0085 (NEL); PCRE2's UCP `\s` leaves NEL out.
Result<std::string> OnigurumaToPcre2(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S') {
        if (in_class) return UnimplementedError("\\S inside a character class");
        out += "[^\\s\\x{85}]";
      } else {
        out.push_back('\\');
        out.push_back(e);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' (or '^]') right after '[' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == '[' && in_class) {
      return UnimplementedError("nested character class");
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

Result<RegexPtr> CompileRegex(std::string_view pattern, bool literal) {
  std::string translated(pattern);
  if (!literal) {
    DSV41_ASSIGN_OR_RETURN(translated, OnigurumaToPcre2(pattern));
  }
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  const uint32_t options =
      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
  RegexPtr code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              options, &error_code, &error_offset, nullptr));
  if (!code) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error_code, message.data(), message.size());
    return InvalidArgumentError("regex compile error at offset %zu: %s",
                                static_cast<size_t>(error_offset),
                                reinterpret_cast<const char*>(message.data()));
  }
  // JIT is an optimisation: without it (unsupported platform) the interpreter gives equal results.
  pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
  return code;
}

// ---------------------------------------------------------------------------------------------
// Merge ranks: an open-addressing table keyed by the (left id, right id) pair.

class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged_id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void Reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity <<= 1;
    entries_.assign(capacity, Entry{});
    mask_ = capacity - 1;
  }
  // Later entries replace earlier ones for the same pair (as HF collects merges into a map).
  void Insert(int32_t left, int32_t right, int32_t rank, int32_t merged_id) {
    const uint64_t key = Key(left, right);
    size_t slot = Hash(key) & mask_;
    while (entries_[slot].key != kEmpty && entries_[slot].key != key) slot = (slot + 1) & mask_;
    entries_[slot] = Entry{key, rank, merged_id};
  }
  const Entry* Find(int32_t left, int32_t right) const {
    const uint64_t key = Key(left, right);
    size_t slot = Hash(key) & mask_;
    while (true) {
      const Entry& entry = entries_[slot];
      if (entry.key == key) return &entry;
      if (entry.key == kEmpty) return nullptr;
      slot = (slot + 1) & mask_;
    }
  }

 private:
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  static size_t Hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key);
  }
  std::vector<Entry> entries_;
  size_t mask_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Added-token matching (§3.1): a byte trie, leftmost-longest.

class AddedTokenTrie {
 public:
  AddedTokenTrie() { nodes_.push_back(-1); }
  void Insert(std::string_view content, int32_t id) {
    int32_t node = 0;
    for (const char c : content) {
      const uint64_t edge = EdgeKey(node, c);
      auto it = edges_.find(edge);
      if (it == edges_.end()) {
        nodes_.push_back(-1);
        it = edges_.emplace(edge, static_cast<int32_t>(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    nodes_[node] = id;
    first_bytes_[static_cast<uint8_t>(content[0])] = true;
    empty_ = false;
  }
  bool empty() const { return empty_; }
  // The longest token starting at text[pos]: its id and length, or length 0.
  std::pair<int32_t, size_t> LongestAt(std::string_view text, size_t pos) const {
    std::pair<int32_t, size_t> best{-1, 0};
    if (!first_bytes_[static_cast<uint8_t>(text[pos])]) return best;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto it = edges_.find(EdgeKey(node, text[i]));
      if (it == edges_.end()) break;
      node = it->second;
      if (nodes_[node] >= 0) best = {nodes_[node], i + 1 - pos};
    }
    return best;
  }

 private:
  static uint64_t EdgeKey(int32_t node, char c) {
    return (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
  }
  std::vector<int32_t> nodes_;  // node -> token id ending there, -1 if none
  std::unordered_map<uint64_t, int32_t> edges_;
  std::array<bool, 256> first_bytes_{};
  bool empty_ = true;
};

// ---------------------------------------------------------------------------------------------
// The word cache: pieces repeat a lot (§3.3). Sharded so concurrent encoders rarely contend.

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class WordCache {
 public:
  static constexpr size_t kNumShards = 64;
  static constexpr size_t kMaxEntriesPerShard = 4096;
  static constexpr size_t kMaxWordBytes = 128;

  // Appends the cached ids of `word` to `out` and returns true on a hit.
  bool Lookup(std::string_view word, size_t hash, std::vector<int32_t>* out) const {
    Shard& shard = shards_[hash % kNumShards];
    std::lock_guard<std::mutex> lock(shard.mutex);
    const auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out->insert(out->end(), it->second.begin(), it->second.end());
    return true;
  }
  void Insert(std::string_view word, size_t hash, std::span<const int32_t> ids) const {
    if (word.size() > kMaxWordBytes) return;
    Shard& shard = shards_[hash % kNumShards];
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.map.size() >= kMaxEntriesPerShard) return;  // full: stop caching, as HF does
    shard.map.emplace(std::string(word), std::vector<int32_t>(ids.begin(), ids.end()));
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kNumShards> shards_;
};

// Reads an optional boolean member; absent or null gives `fallback`.
Result<bool> OptionalBool(const Json& object, const char* key, bool fallback,
                          std::string_view where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return InvalidArgumentError("%.*s.%s: want a boolean", static_cast<int>(where.size()),
                                where.data(), key);
  }
  return it->get<bool>();
}

// A string member, or "" when absent or not a string (nlohmann's value() would throw).
std::string StringMember(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

bool IsNullOrEmptyString(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ||
         (it->is_string() && it->get_ref<const std::string&>().empty());
}

}  // namespace

size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    size_t ascii_end = i;
    while (ascii_end < bytes.size() && static_cast<uint8_t>(bytes[ascii_end]) < 0x80) ++ascii_end;
    out->append(bytes.substr(i, ascii_end - i));
    i = ascii_end;
    if (i == bytes.size()) break;
    bool incomplete;
    size_t valid_prefix;
    const int length = WellFormedLength(bytes, i, &incomplete, &valid_prefix);
    if (length > 0) {
      out->append(bytes.substr(i, length));
      i += length;
    } else if (incomplete && !final) {
      return i;
    } else {
      // One U+FFFD per maximal subpart: the lead byte and the continuation bytes that were valid.
      out->append(kReplacementChar);
      i += valid_prefix;
    }
  }
  return i;
}

// ---------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
  // Owns every vocab and added-token string; a deque never moves its elements, so the views
  // below stay valid while it grows. Per-id tables give ids without a token empty strings.
  std::deque<std::string> string_storage;
  std::vector<std::string_view> token_strings;
  std::string bytes_arena;            // every token's raw bytes, concatenated by id
  std::vector<size_t> bytes_offsets;  // [vocab_size + 1] offsets into bytes_arena
  std::vector<uint8_t> added;         // 1 for added tokens
  std::vector<uint8_t> special;       // 1 for special added tokens, kChatMarker for chat markers
  std::unordered_map<std::string_view, int32_t, StringHash> vocab;  // BPE strings
  // Only filled when ignore_merges is set.
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_by_bytes;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_ids;
  std::array<int32_t, 256> byte_ids{};  // id of each single-byte token, -1 if absent
  MergeTable merges;
  bool ignore_merges = false;
  AddedTokenTrie raw_added;         // normalized: false
  AddedTokenTrie normalized_added;  // normalized: true
  std::vector<RegexPtr> splits;     // pre-tokenizer stages, in order
  std::vector<bool> split_jitted;   // whether each stage has JIT code
  std::optional<int32_t> bos;
  WordCache cache;

  Status Parse(const Json& root);
  Status ParseModel(const Json& model);
  Status ParseAddedTokens(const Json& added_tokens);
  Status ParsePreTokenizer(const Json& pre_tokenizer);
  Status EncodeFree(std::string_view text, std::vector<MatchDataPtr>& match_data,
                    std::vector<int32_t>* ids) const;
  Status SplitStage(size_t stage, std::string_view piece, std::vector<MatchDataPtr>& match_data,
                    std::vector<int32_t>* ids) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
  void MergeWord(std::string_view word, std::vector<int32_t>* ids) const;
  void SplitAdded(std::string_view text, const AddedTokenTrie& trie,
                  const std::function<void(std::string_view)>& on_free,
                  std::vector<int32_t>* ids) const;
};

Status Tokenizer::Impl::Parse(const Json& root) {
  if (!root.is_object()) return InvalidArgumentError("top level: want an object");
  const auto model = root.find("model");
  if (model == root.end() || !model->is_object()) {
    return InvalidArgumentError("model: missing or not an object");
  }
  DSV41_RETURN_IF_ERROR(ParseModel(*model));
  const auto added_tokens = root.find("added_tokens");
  if (added_tokens != root.end() && !added_tokens->is_null()) {
    DSV41_RETURN_IF_ERROR(ParseAddedTokens(*added_tokens));
  }

  const auto normalizer = root.find("normalizer");
  if (normalizer != root.end() && !normalizer->is_null()) {
    const auto normalizers = normalizer->find("normalizers");
    const bool empty_sequence =
        normalizer->is_object() && StringMember(*normalizer, "type") == "Sequence" &&
        normalizers != normalizer->end() && normalizers->is_array() && normalizers->empty();
    if (!empty_sequence) {
      return UnimplementedError("normalizer: only null or an empty Sequence is supported, got %s",
                                normalizer->dump().substr(0, 200).c_str());
    }
  }
  const auto pre_tokenizer = root.find("pre_tokenizer");
  if (pre_tokenizer == root.end() || pre_tokenizer->is_null()) {
    return UnimplementedError("pre_tokenizer: missing; byte-level BPE needs a ByteLevel stage");
  }
  DSV41_RETURN_IF_ERROR(ParsePreTokenizer(*pre_tokenizer));
  const auto decoder = root.find("decoder");
  if (decoder != root.end() && !decoder->is_null() &&
      !(decoder->is_object() && StringMember(*decoder, "type") == "ByteLevel")) {
    return UnimplementedError("decoder: only ByteLevel is supported");
  }

  if (const auto it = added_ids.find(kBos); it != added_ids.end()) bos = it->second;
  return OkStatus();
}

Status Tokenizer::Impl::ParseModel(const Json& model) {
  const std::string type = StringMember(model, "type");
  if (type != "BPE") {
    return InvalidArgumentError("model.type: want \"BPE\", got \"%s\"", type.c_str());
  }
  DSV41_ASSIGN_OR_RETURN(const bool byte_fallback,
                         OptionalBool(model, "byte_fallback", false, "model"));
  if (byte_fallback) return UnimplementedError("model.byte_fallback: true is not supported");
  DSV41_ASSIGN_OR_RETURN(ignore_merges, OptionalBool(model, "ignore_merges", false, "model"));
  if (const auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    return UnimplementedError("model.dropout: only null is supported");
  }
  if (!IsNullOrEmptyString(model, "continuing_subword_prefix") ||
      !IsNullOrEmptyString(model, "end_of_word_suffix")) {
    return UnimplementedError(
        "model.continuing_subword_prefix/end_of_word_suffix: not supported for byte-level BPE");
  }

  const auto vocab_json = model.find("vocab");
  if (vocab_json == model.end() || !vocab_json->is_object()) {
    return InvalidArgumentError("model.vocab: missing or not an object");
  }
  int64_t max_id = -1;
  vocab.reserve(vocab_json->size());
  for (const auto& [token, id_json] : vocab_json->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > kMaxTokenId) {
      return InvalidArgumentError("model.vocab['%s']: want an integer id in [0, %lld]",
                                  token.c_str(), static_cast<long long>(kMaxTokenId));
    }
    if (token.empty() || !IsValidUtf8(token)) {
      return InvalidArgumentError("model.vocab: empty or invalid UTF-8 token (id %lld)",
                                  static_cast<long long>(id_json.get<int64_t>()));
    }
    max_id = std::max(max_id, id_json.get<int64_t>());
    vocab.emplace(string_storage.emplace_back(token), static_cast<int32_t>(id_json.get<int64_t>()));
  }
  token_strings.resize(max_id + 1);
  for (const auto& [token, id] : vocab) token_strings[id] = token;
  byte_ids.fill(-1);
  for (const auto& [token, id] : vocab) {
    // Single-byte tokens are one byte-table character: 1 or 2 UTF-8 bytes.
    if (token.size() > 2 && !ignore_merges) continue;
    std::string bytes = BytesOfTokenString(token);
    if (bytes.size() == 1) byte_ids[static_cast<uint8_t>(bytes[0])] = id;
    if (ignore_merges) vocab_by_bytes.emplace(std::move(bytes), id);
  }

  const auto merges_json = model.find("merges");
  if (merges_json == model.end() || !merges_json->is_array()) {
    return InvalidArgumentError("model.merges: missing or not an array");
  }
  merges.Reserve(merges_json->size());
  std::string_view left;
  std::string_view right;
  std::string merged;
  for (size_t rank = 0; rank < merges_json->size(); ++rank) {
    const Json& entry = (*merges_json)[rank];
    if (entry.is_string()) {
      const std::string& text = entry.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return InvalidArgumentError("model.merges[%zu]: '%s': want \"left right\" (one space)",
                                    rank, text.c_str());
      }
      left = std::string_view(text).substr(0, space);
      right = std::string_view(text).substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      left = entry[0].get_ref<const std::string&>();
      right = entry[1].get_ref<const std::string&>();
    } else {
      return InvalidArgumentError("model.merges[%zu]: want \"a b\" or [\"a\", \"b\"]", rank);
    }
    const auto left_it = vocab.find(left);
    const auto right_it = vocab.find(right);
    merged.assign(left).append(right);
    const auto merged_it = vocab.find(merged);
    if (left_it == vocab.end() || right_it == vocab.end() || merged_it == vocab.end()) {
      const std::string missing(left_it == vocab.end()    ? left
                                : right_it == vocab.end() ? right
                                                          : std::string_view(merged));
      return InvalidArgumentError("model.merges[%zu]: '%s' is not in model.vocab", rank,
                                  missing.c_str());
    }
    merges.Insert(left_it->second, right_it->second, static_cast<int32_t>(rank), merged_it->second);
  }
  return OkStatus();
}

Status Tokenizer::Impl::ParseAddedTokens(const Json& added_tokens) {
  if (!added_tokens.is_array()) return InvalidArgumentError("added_tokens: not an array");
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const Json& token = added_tokens[i];
    const auto id_it = token.find("id");
    const auto content_it = token.find("content");
    if (!token.is_object() || id_it == token.end() || !id_it->is_number_integer() ||
        id_it->get<int64_t>() < 0 || id_it->get<int64_t>() > kMaxTokenId) {
      return InvalidArgumentError("added_tokens[%zu].id: missing or not an integer in [0, %lld]", i,
                                  static_cast<long long>(kMaxTokenId));
    }
    if (content_it == token.end() || !content_it->is_string() ||
        content_it->get_ref<const std::string&>().empty()) {
      return InvalidArgumentError("added_tokens[%zu].content: missing or empty", i);
    }
    const std::string where = StrFormat("added_tokens[%zu]", i);
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      DSV41_ASSIGN_OR_RETURN(const bool set, OptionalBool(token, flag, false, where));
      if (set) return UnimplementedError("%s.%s: true is not supported", where.c_str(), flag);
    }
    DSV41_ASSIGN_OR_RETURN(const bool is_special, OptionalBool(token, "special", false, where));
    DSV41_ASSIGN_OR_RETURN(const bool normalized,
                           OptionalBool(token, "normalized", !is_special, where));
    const auto id = static_cast<int32_t>(id_it->get<int64_t>());
    const std::string& content = content_it->get_ref<const std::string&>();
    if (static_cast<size_t>(id) >= token_strings.size()) token_strings.resize(id + 1);
    token_strings[id] = string_storage.emplace_back(content);
    if (static_cast<size_t>(id) >= added.size()) {
      added.resize(id + 1, 0);
      special.resize(id + 1, 0);
    }
    added[id] = 1;
    special[id] = !is_special ? 0 : IsChatMarker(content) ? kChatMarker : 1;
    added_ids[content] = id;
    (normalized ? normalized_added : raw_added).Insert(content, id);
  }
  return OkStatus();
}

Status Tokenizer::Impl::ParsePreTokenizer(const Json& pre_tokenizer) {
  std::vector<const Json*> stages;
  if (pre_tokenizer.is_object() && StringMember(pre_tokenizer, "type") == "Sequence") {
    const auto list = pre_tokenizer.find("pretokenizers");
    if (list == pre_tokenizer.end() || !list->is_array()) {
      return InvalidArgumentError("pre_tokenizer.pretokenizers: missing or not an array");
    }
    for (const Json& stage : *list) stages.push_back(&stage);
  } else {
    stages.push_back(&pre_tokenizer);
  }
  for (size_t i = 0; i < stages.size(); ++i) {
    const Json& stage = *stages[i];
    const std::string where = StrFormat("pre_tokenizer.pretokenizers[%zu]", i);
    const std::string type = stage.is_object() ? StringMember(stage, "type") : "";
    if (type == "ByteLevel") {
      if (i + 1 != stages.size()) {
        return UnimplementedError("%s: ByteLevel must be the last stage", where.c_str());
      }
      DSV41_ASSIGN_OR_RETURN(const bool add_prefix_space,
                             OptionalBool(stage, "add_prefix_space", true, where));
      DSV41_ASSIGN_OR_RETURN(const bool use_regex, OptionalBool(stage, "use_regex", true, where));
      if (add_prefix_space || use_regex) {
        return UnimplementedError("%s: ByteLevel needs add_prefix_space and use_regex false",
                                  where.c_str());
      }
      return OkStatus();
    }
    if (type != "Split") {
      return UnimplementedError("%s.type: \"%s\" is not supported (Split, ByteLevel)",
                                where.c_str(), type.c_str());
    }
    if (StringMember(stage, "behavior") != "Isolated") {
      return UnimplementedError("%s.behavior: only \"Isolated\" is supported", where.c_str());
    }
    DSV41_ASSIGN_OR_RETURN(const bool invert, OptionalBool(stage, "invert", false, where));
    if (invert) return UnimplementedError("%s.invert: true is not supported", where.c_str());
    const auto pattern = stage.find("pattern");
    const Json* regex = nullptr;
    const Json* literal = nullptr;
    if (pattern != stage.end() && pattern->is_object()) {
      if (const auto it = pattern->find("Regex"); it != pattern->end()) regex = &*it;
      if (const auto it = pattern->find("String"); it != pattern->end()) literal = &*it;
    }
    const Json* text = regex != nullptr ? regex : literal;
    if (text == nullptr || !text->is_string()) {
      return InvalidArgumentError("%s.pattern: want {\"Regex\": ...} or {\"String\": ...}",
                                  where.c_str());
    }
    auto compiled = CompileRegex(text->get_ref<const std::string&>(), regex == nullptr);
    if (!compiled.ok()) return compiled.status().WithPrefix(where + ".pattern");
    size_t jit_size = 0;
    pcre2_pattern_info(compiled->get(), PCRE2_INFO_JITSIZE, &jit_size);
    split_jitted.push_back(jit_size > 0);
    splits.push_back(std::move(compiled).value());
  }
  return UnimplementedError("pre_tokenizer: no ByteLevel stage (byte-level BPE needs one)");
}

void Tokenizer::Impl::SplitAdded(std::string_view text, const AddedTokenTrie& trie,
                                 const std::function<void(std::string_view)>& on_free,
                                 std::vector<int32_t>* ids) const {
  size_t free_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [id, length] = trie.LongestAt(text, pos);
    if (length == 0) {
      ++pos;
      continue;
    }
    if (pos > free_start) on_free(text.substr(free_start, pos - free_start));
    ids->push_back(id);
    pos += length;
    free_start = pos;
  }
  if (free_start < text.size()) on_free(text.substr(free_start));
}

Status Tokenizer::Impl::EncodeFree(std::string_view text, std::vector<MatchDataPtr>& match_data,
                                   std::vector<int32_t>* ids) const {
  return SplitStage(0, text, match_data, ids);
}

// Applies Split stage `stage` (Isolated: matches and the gaps between them are pieces) to
// `piece`, recursing into the next stage; after the last stage each piece is a BPE word.
Status Tokenizer::Impl::SplitStage(size_t stage, std::string_view piece,
                                   std::vector<MatchDataPtr>& match_data,
                                   std::vector<int32_t>* ids) const {
  if (stage == splits.size()) {
    EncodeWord(piece, ids);
    return OkStatus();
  }
  pcre2_code* code = splits[stage].get();
  pcre2_match_data* data = match_data[stage].get();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t gap_start = 0;
  size_t pos = 0;
  while (pos < piece.size()) {
    // The subject is the piece alone: as in HF, a look-ahead never sees past the piece.
    // pcre2_jit_match skips pcre2_match's option checks (a few % of encode time).
    const int rc =
        split_jitted[stage]
            ? pcre2_jit_match(code, subject, piece.size(), pos, 0, data, nullptr)
            : pcre2_match(code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      return InternalError("pre_tokenizer stage %zu: regex match failed: %s", stage,
                           reinterpret_cast<const char*>(message.data()));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (end == start) {  // an empty match is no piece: move on by one character
      pos = start + CharLength(static_cast<uint8_t>(piece[start]));
      continue;
    }
    if (start > gap_start) {
      DSV41_RETURN_IF_ERROR(
          SplitStage(stage + 1, piece.substr(gap_start, start - gap_start), match_data, ids));
    }
    DSV41_RETURN_IF_ERROR(SplitStage(stage + 1, piece.substr(start, end - start), match_data, ids));
    gap_start = pos = end;
  }
  if (gap_start < piece.size()) {
    DSV41_RETURN_IF_ERROR(SplitStage(stage + 1, piece.substr(gap_start), match_data, ids));
  }
  return OkStatus();
}

void Tokenizer::Impl::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.size() == 1) {
    const int32_t id = byte_ids[static_cast<uint8_t>(word[0])];
    if (id >= 0) ids->push_back(id);
    return;
  }
  if (ignore_merges) {
    if (const auto it = vocab_by_bytes.find(word); it != vocab_by_bytes.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const size_t hash = StringHash{}(word);
  if (cache.Lookup(word, hash, ids)) return;
  const size_t first = ids->size();
  MergeWord(word, ids);
  cache.Insert(word, hash, std::span<const int32_t>(ids->data() + first, ids->size() - first));
}

// §3.3: repeatedly merge the adjacent pair of lowest rank (leftmost among equal ranks). Symbols
// form a linked list; candidate pairs sit in a min-heap and are re-checked when popped.
void Tokenizer::Impl::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t left;  // symbol index; indexes grow left to right
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (const char c : word) {
    const int32_t id = byte_ids[static_cast<uint8_t>(c)];
    if (id < 0) continue;  // no token for this byte and no unk token: HF drops it
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const MergeTable::Entry* entry = merges.Find(symbols[left].id, symbols[right].id);
    if (entry != nullptr)
      heap.push(Candidate{entry->rank, left, symbols[left].id, symbols[right].id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.left];
    // Stale if the left symbol was absorbed (id -1), or either side changed since the push.
    if (left.id != top.left_id || left.next < 0 || symbols[left.next].id != top.right_id) continue;
    const int32_t right = left.next;
    left.id = merges.Find(top.left_id, top.right_id)->merged_id;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = top.left;
    symbols[right].id = -1;
    push_pair(left.prev);
    push_pair(top.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

// ---------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::Load(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromJson(text, path);
}

Result<Tokenizer> Tokenizer::FromJson(std::string_view json_text, std::string_view what) {
  DSV41_ASSIGN_OR_RETURN(Json root, ParseJson(json_text, what));
  auto impl = std::make_unique<Impl>();
  Status status = impl->Parse(root);
  if (!status.ok()) return status.WithPrefix(what);
  const size_t size = impl->token_strings.size();
  impl->added.resize(size, 0);
  impl->special.resize(size, 0);
  impl->bytes_offsets.reserve(size + 1);
  impl->bytes_offsets.push_back(0);
  for (size_t id = 0; id < size; ++id) {
    const std::string_view token = impl->token_strings[id];
    if (impl->added[id]) {
      impl->bytes_arena += token;
    } else {
      impl->bytes_arena += BytesOfTokenString(token);
    }
    impl->bytes_offsets.push_back(impl->bytes_arena.size());
  }
  return Tokenizer(std::move(impl));
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                               const EncodeOptions& options) const {
  if (!IsValidUtf8(text)) return InvalidArgumentError("text to encode is not valid UTF-8");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (options.add_bos) {
    if (!impl_->bos) return InvalidArgumentError("add_bos: the tokenizer has no BOS token");
    ids.push_back(*impl_->bos);
  }
  std::vector<MatchDataPtr> match_data;
  for (const RegexPtr& code : impl_->splits) {
    match_data.emplace_back(pcre2_match_data_create_from_pattern(code.get(), nullptr));
  }
  Status status;
  auto encode_free = [&](std::string_view segment) {
    if (status.ok()) status = impl_->EncodeFree(segment, match_data, &ids);
  };
  if (options.special_tokens_as_text ||
      (impl_->raw_added.empty() && impl_->normalized_added.empty())) {
    encode_free(text);
  } else {
    // §3.1: non-normalized added tokens on the raw text, then normalized ones in the gaps.
    impl_->SplitAdded(
        text, impl_->raw_added,
        [&](std::string_view segment) {
          impl_->SplitAdded(segment, impl_->normalized_added, encode_free, &ids);
        },
        &ids);
  }
  if (!status.ok()) return status;
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (Skips(id, options)) continue;
    bytes += TokenBytes(id);
  }
  std::string text;
  text.reserve(bytes.size());
  AppendUtf8Lossy(bytes, /*final=*/true, &text);
  return text;
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  const size_t begin = impl_->bytes_offsets[id];
  return std::string_view(impl_->bytes_arena).substr(begin, impl_->bytes_offsets[id + 1] - begin);
}

std::string_view Tokenizer::TokenString(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->token_strings[id];
}

std::optional<int32_t> Tokenizer::IdOf(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) {
    return it->second;
  }
  if (const auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id] != 0;
}

bool Tokenizer::Skips(int32_t id, const DecodeOptions& options) const {
  if (!options.skip_special_tokens || !IsSpecial(id)) return false;
  return !(options.keep_chat_markers && impl_->special[id] == kChatMarker);
}

bool Tokenizer::IsAdded(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->added[id] != 0;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_strings.size()); }

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }

// ---------------------------------------------------------------------------------------------

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  std::string text;
  Push(id, text);
  return text;
}

void StreamingDetokenizer::Push(int32_t id, std::string& text) {
  if (tokenizer_->Skips(id, options_)) return;
  pending_bytes_ += tokenizer_->TokenBytes(id);
  const size_t consumed = AppendUtf8Lossy(pending_bytes_, /*final=*/false, &text);
  pending_bytes_.erase(0, consumed);
}

std::string StreamingDetokenizer::Finish() {
  std::string text;
  AppendUtf8Lossy(pending_bytes_, /*final=*/true, &text);
  pending_bytes_.clear();
  return text;
}

}  // namespace dsv41
