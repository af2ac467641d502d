#include "tiny/synthetic_tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/json.h"
#include "text/special_tokens.h"
#include "tiny/tiny_random.h"

namespace dsv41 {
namespace {

// Original text for merge learning: ordinary English with digits, punctuation, code, accented
// words and a little CJK, so merges cover the pre-tokenizer's piece kinds.
constexpr std::string_view kCorpus =
    R"(The engine reads the model from disk and maps every shard into memory.
It never copies the weights; the kernels decode each tile when they need it.
A token is a small piece of text, and the model turns a list of tokens into the next token.
When the cache is full, the scheduler waits until a request finishes and its blocks are free.
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs into the forest.
She said: "Memory is the limit, not the arithmetic." He answered, 'Then stream it faster!'
In 2024 there were 365 days, 12 months and 52 weeks; 3.14159 is close to pi, and 2.71828 is e.
for (int i = 0; i < n; ++i) { sum += weight[i] * value[i]; }  // one dot product
def forward(self, tokens): return self.head(self.norm(self.layers(tokens)))
Thinking mode writes its reasoning first, then the answer; chat mode answers at once.
The tool returned a result, and the assistant used it to answer the user's question.
Über den Wolken ist die Freiheit grenzenlos. Le café est très chaud, et la crème est fraîche.
Naïve readers think the résumé is complete. ¿Dónde está la estación? Está cerca de aquí.
東京は日本の首都です。 今日はいい天気ですね。 数据在内存中。
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 12345 -7 +42 3/4 50% $19.99 #1 @home
Questions? Answers! Lists: first, second, third. Paths: /usr/local/bin and C:\Windows\System32.
The layer plan decides what each layer computes; the cache plan decides where its state lives.
)";

// The GPT-2 byte table (tokenizer-and-chat.md §3.4): printable bytes keep their code point, the
// other 68 bytes map to U+0100.. in increasing byte order.
std::array<char32_t, 256> ByteTable() {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Coarse word split for merge learning only (the runtime tokenizer uses the real regexes): an
// optional leading space plus a run of letters (bytes >= 0x80 count as letters), digit runs of at
// most 3, punctuation runs, and whitespace runs.
std::vector<std::string> SplitWords(std::string_view text) {
  auto is_alpha = [](unsigned char c) { return std::isalpha(c) || c >= 0x80; };
  auto is_digit = [](unsigned char c) { return c >= '0' && c <= '9'; };
  auto is_space = [](unsigned char c) { return c == ' ' || c == '\n' || c == '\t'; };
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    auto c = static_cast<unsigned char>(text[i]);
    if (c == ' ' && i + 1 < text.size() && is_alpha(static_cast<unsigned char>(text[i + 1]))) ++i;
    c = static_cast<unsigned char>(text[i]);
    if (is_alpha(c)) {
      while (i < text.size() && is_alpha(static_cast<unsigned char>(text[i]))) ++i;
    } else if (is_digit(c)) {
      while (i < text.size() && i - start < 3 && is_digit(static_cast<unsigned char>(text[i]))) ++i;
    } else if (is_space(c)) {
      while (i < text.size() && is_space(static_cast<unsigned char>(text[i]))) ++i;
    } else {
      while (i < text.size()) {
        const auto d = static_cast<unsigned char>(text[i]);
        if (is_alpha(d) || is_digit(d) || is_space(d)) break;
        ++i;
      }
    }
    words.emplace_back(text.substr(start, i - start));
  }
  return words;
}

// Seeded pseudo-words ("talemo", "krissan") so large vocabularies still get frequent pairs.
std::string PseudoText(size_t num_words, uint64_t seed) {
  static constexpr std::string_view kOnsets[] = {"b", "br", "d", "f", "g",  "k", "kr", "l", "m",
                                                 "n", "p",  "r", "s", "st", "t", "tr", "v", "z"};
  static constexpr std::string_view kVowels[] = {"a", "e", "i", "o", "u", "ai", "ou"};
  static constexpr std::string_view kCodas[] = {"", "", "n", "s", "r", "l", "m", "nd", "st"};
  SplitMix64 rng(seed);
  std::string text;
  for (size_t w = 0; w < num_words; ++w) {
    text += ' ';
    const int syllables = 1 + static_cast<int>(rng.NextBelow(3));
    for (int s = 0; s < syllables; ++s) {
      text += kOnsets[rng.NextBelow(std::size(kOnsets))];
      text += kVowels[rng.NextBelow(std::size(kVowels))];
      text += kCodas[rng.NextBelow(std::size(kCodas))];
    }
  }
  return text;
}

using Symbols = std::vector<std::string>;  // a word as byte-level-mapped symbols
using Pair = std::pair<std::string, std::string>;

// Learns up to `max_merges` merges (pairs seen at least twice), most frequent first; ties go to
// the lexicographically smallest pair so the result is deterministic.
std::vector<Pair> LearnMerges(const std::string& text, size_t max_merges,
                              const std::array<char32_t, 256>& byte_table) {
  std::map<std::string, int64_t> word_counts;
  for (std::string& w : SplitWords(text)) ++word_counts[w];
  std::vector<Symbols> words;
  std::vector<int64_t> counts;
  for (const auto& [word, count] : word_counts) {
    Symbols symbols;
    for (unsigned char b : word) {
      std::string s;
      AppendUtf8(byte_table[b], s);
      symbols.push_back(std::move(s));
    }
    words.push_back(std::move(symbols));
    counts.push_back(count);
  }
  std::map<Pair, int64_t> pair_counts;
  std::map<Pair, int64_t> counts_before;  // pairs touched by the current merge, old counts
  // The words each pair has appeared in (possibly no longer: checked before use), so a merge
  // visits only the words that may hold its pair — in increasing index, as a full scan would.
  std::map<Pair, std::vector<size_t>> words_of;
  auto add_pairs = [&](const Symbols& w, int64_t delta, size_t word) {
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      const Pair pair{w[i], w[i + 1]};
      int64_t& count = pair_counts[pair];
      counts_before.emplace(pair, count);
      count += delta;
      if (delta > 0) words_of[pair].push_back(word);
    }
  };
  for (size_t i = 0; i < words.size(); ++i) add_pairs(words[i], counts[i], i);
  std::set<std::pair<int64_t, Pair>> by_count;  // (-count, pair): begin() is the best
  for (const auto& [pair, count] : pair_counts) by_count.insert({-count, pair});

  std::vector<Pair> merges;
  while (merges.size() < max_merges && !by_count.empty()) {
    const auto [neg_count, best] = *by_count.begin();
    if (-neg_count < 2) break;
    merges.push_back(best);
    const std::string merged = best.first + best.second;
    counts_before.clear();
    std::vector<size_t> candidates = std::move(words_of[best]);
    words_of.erase(best);
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    for (const size_t i : candidates) {
      Symbols& w = words[i];
      bool has = false;
      for (size_t k = 0; k + 1 < w.size() && !has; ++k) {
        has = w[k] == best.first && w[k + 1] == best.second;
      }
      if (!has) continue;
      add_pairs(w, -counts[i], i);
      Symbols out;
      for (size_t k = 0; k < w.size(); ++k) {
        if (k + 1 < w.size() && w[k] == best.first && w[k + 1] == best.second) {
          out.push_back(merged);
          ++k;
        } else {
          out.push_back(w[k]);
        }
      }
      w = std::move(out);
      add_pairs(w, counts[i], i);
    }
    for (const auto& [pair, old_count] : counts_before) {
      const int64_t new_count = pair_counts[pair];
      if (old_count == new_count) continue;
      if (old_count > 0) by_count.erase({-old_count, pair});
      if (new_count > 0) by_count.insert({-new_count, pair});
    }
  }
  return merges;
}

struct AddedToken {
  std::string content;
  bool special;
};

// The V4.1 added tokens by their real strings (tokenizer-and-chat.md §5), in release id order.
std::vector<AddedToken> V41AddedTokens() {
  std::vector<AddedToken> tokens = {{std::string(kSystemToken), true}};
  for (std::string_view fim : kFimTokens) tokens.push_back({std::string(fim), true});
  tokens.push_back({std::string(kUserToken), true});
  tokens.push_back({std::string(kAssistantToken), true});
  tokens.push_back({std::string(kEotToken), true});
  tokens.push_back({std::string(kThinkOpen), false});
  tokens.push_back({std::string(kThinkClose), false});
  tokens.push_back({std::string(kDsml), false});
  tokens.push_back({std::string(kLatestReminderToken), true});
  for (std::string_view task : kTaskTokens) tokens.push_back({std::string(task), true});
  return tokens;
}

OrderedJson AddedTokenJson(int32_t id, const std::string& content, bool special) {
  OrderedJson t;
  t["id"] = id;
  t["content"] = content;
  t["single_word"] = false;
  t["lstrip"] = false;
  t["rstrip"] = false;
  t["normalized"] = false;
  t["special"] = special;
  return t;
}

OrderedJson SplitStage(const std::string& regex) {
  OrderedJson stage;
  stage["type"] = "Split";
  stage["pattern"] = {{"Regex", regex}};
  stage["behavior"] = "Isolated";
  stage["invert"] = false;
  return stage;
}

OrderedJson ByteLevelJson(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  OrderedJson b;
  b["type"] = "ByteLevel";
  b["add_prefix_space"] = add_prefix_space;
  b["trim_offsets"] = trim_offsets;
  b["use_regex"] = use_regex;
  return b;
}

// A BPE vocabulary in insertion order: Set(token, id) appends the token or, when it is there
// already, gives it the new id in place (what ordered_json's operator[] does, without its linear
// search per token, which made a 129280-token vocabulary cost ~10^10 string comparisons).
class OrderedVocab {
 public:
  void Set(const std::string& token, int32_t id) {
    const auto [it, inserted] = index_.emplace(token, entries_.size());
    if (inserted) {
      entries_.emplace_back(token, id);
    } else {
      entries_[it->second].second = id;
    }
  }
  OrderedJson ToJson() const {
    OrderedJson json = OrderedJson::object();
    auto& object = json.get_ref<OrderedJson::object_t&>();
    for (const auto& [token, id] : entries_) object.Container::emplace_back(token, id);
    return json;
  }

 private:
  std::vector<std::pair<std::string, int32_t>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace

Result<SyntheticTokenizer> BuildSyntheticTokenizer(int32_t vocab_size, uint64_t seed) {
  const std::vector<AddedToken> v41_tokens = V41AddedTokens();
  const int32_t num_fixed = 3 + 256 + static_cast<int32_t>(v41_tokens.size()) + 1;
  if (vocab_size < num_fixed) {
    return InvalidArgumentError("vocab_size %d is too small for a synthetic tokenizer (need >= %d)",
                                vocab_size, num_fixed);
  }
  const std::array<char32_t, 256> byte_table = ByteTable();
  const size_t max_merges = static_cast<size_t>(vocab_size - num_fixed);
  const std::string text = std::string(kCorpus) + PseudoText(max_merges * 3 + 64, seed);
  const std::vector<Pair> merges = LearnMerges(text, max_merges, byte_table);

  OrderedVocab vocab;
  OrderedJson added = OrderedJson::array();
  int32_t next_id = 0;
  for (std::string_view special : {kBos, kEos, kPad}) {
    const std::string s(special);
    added.push_back(AddedTokenJson(next_id, s, true));
    vocab.Set(s, next_id++);
  }
  // Byte tokens in the byte table's code-point order.
  std::vector<char32_t> byte_chars(byte_table.begin(), byte_table.end());
  std::sort(byte_chars.begin(), byte_chars.end());
  for (char32_t cp : byte_chars) {
    std::string s;
    AppendUtf8(cp, s);
    vocab.Set(s, next_id++);
  }
  OrderedJson merges_json = OrderedJson::array();
  for (const Pair& m : merges) {
    vocab.Set(m.first + m.second, next_id++);
    merges_json.push_back(m.first + " " + m.second);
  }
  SyntheticTokenizer out;
  auto add_token = [&](const std::string& content, bool special) {
    added.push_back(AddedTokenJson(next_id, content, special));
    vocab.Set(content, next_id);
    return next_id++;
  };
  for (const AddedToken& t : v41_tokens) {
    const int32_t id = add_token(t.content, t.special);
    if (t.content == kSystemToken) out.system_id = id;
  }
  for (int32_t n = 0; next_id < vocab_size - 1; ++n) {
    add_token("<｜place▁holder▁no▁" + std::to_string(n) + "｜>", true);
  }
  out.image_id = add_token(std::string(kImageToken), true);

  OrderedJson tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = std::move(added);
  tok["normalizer"] = {{"type", "Sequence"}, {"normalizers", OrderedJson::array()}};
  OrderedJson stages = OrderedJson::array();
  // The DeepSeek-V3 pre-tokenizer (tokenizer-and-chat.md §3.2).
  stages.push_back(SplitStage("\\p{N}{1,3}"));
  stages.push_back(SplitStage("[一-龥぀-ゟ゠-ヿ]+"));
  stages.push_back(
      SplitStage("[!\"#$%&'()*+,\\-./"
                 ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
                 " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"));
  stages.push_back(ByteLevelJson(false, true, false));
  tok["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", std::move(stages)}};
  tok["post_processor"] = ByteLevelJson(true, false, true);
  tok["decoder"] = ByteLevelJson(true, true, true);
  OrderedJson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  model["vocab"] = vocab.ToJson();
  model["merges"] = std::move(merges_json);
  tok["model"] = std::move(model);
  out.json = tok.dump(1);

  OrderedJson cfg;
  cfg["add_bos_token"] = false;
  cfg["add_eos_token"] = false;
  cfg["bos_token"] = kBos;
  cfg["eos_token"] = kEos;
  cfg["pad_token"] = kPad;
  cfg["unk_token"] = nullptr;
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["legacy"] = true;
  cfg["model_max_length"] = 1048576;
  cfg["tokenizer_class"] = "LlamaTokenizerFast";
  out.config_json = cfg.dump(2);
  return out;
}

}  // namespace dsv41
