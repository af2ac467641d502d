#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// tokenizer-and-chat.md §3: how one string is encoded.
struct EncodeOptions {
  // Prepend the BOS token (the added token "<｜begin▁of▁sentence｜>"). The engine's chat encoder
  // writes BOS itself, so this stays false there.
  bool add_bos = false;
  // §6.10: treat added-token literals in the text as plain text (user-supplied strings) instead of
  // matching them (§3.1).
  bool special_tokens_as_text = false;
};

struct DecodeOptions {
  // Drop added tokens marked `special` (BOS, EOS, pad, ...).
  bool skip_special_tokens = false;
  // With skip_special_tokens: still keep the special tokens the chat output parser reads
  // (<think>, </think>, ｜DSML｜, EOS). Any other special token a model samples (an image
  // placeholder, <｜User｜>) is dropped, so no reply carries text a later turn could not send back.
  bool keep_chat_markers = false;
};

// Appends the UTF-8 decoding of `bytes` to `out`, replacing every maximal ill-formed subsequence by
// U+FFFD (the Unicode "maximal subpart" practice, as Rust's from_utf8_lossy and Python's
// errors="replace"). With `final` false, a trailing incomplete but so-far valid sequence is left
// undecoded. Returns the number of bytes consumed.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);

// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (tokenizer-and-chat.md §1-§4):
// added tokens, a Sequence of Split(Isolated) regex pre-tokenizers (PCRE2, UTF + UCP, JIT), the
// GPT-2 byte table, BPE merges by rank with a word cache. Thread-safe: all methods are const and
// may be called concurrently (the word cache is internally locked).
class Tokenizer {
 public:
  // Reads and parses `path`; errors name the path and the offending field.
  static Result<Tokenizer> Load(const std::string& path);
  // Parses tokenizer.json text; `what` names the source in errors.
  static Result<Tokenizer> FromJson(std::string_view json_text,
                                    std::string_view what = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  // Token ids of `text`, exactly as HF `tokenizers` encodes it without special-token templates.
  // Fails (InvalidArgument) only on invalid UTF-8 input, or when add_bos is set but the tokenizer
  // has no BOS token.
  Result<std::vector<int32_t>> Encode(std::string_view text,
                                      const EncodeOptions& options = {}) const;

  // The UTF-8 text of `ids` (§4): token bytes concatenated, invalid UTF-8 replaced by U+FFFD.
  // Ids outside [0, vocab_size()) or without a token decode to nothing.
  std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  // The raw bytes one token stands for (byte table mapped back, or an added token's own UTF-8).
  // Empty for an id without a token.
  std::string_view TokenBytes(int32_t id) const;
  // The token's string as stored in tokenizer.json (byte-level-mapped form for vocab entries).
  std::string_view TokenString(int32_t id) const;
  // The id of the token whose tokenizer.json string is `token` (added tokens first, then the BPE
  // vocab), e.g. IdOf("<｜end▁of▁sentence｜>") == 1 for DeepSeek.
  std::optional<int32_t> IdOf(std::string_view token) const;
  // True for added tokens marked `special`.
  bool IsSpecial(int32_t id) const;
  // True when decoding with `options` leaves token `id` out of the text.
  bool Skips(int32_t id, const DecodeOptions& options) const;
  // True for any added token.
  bool IsAdded(int32_t id) const;
  // Number of ids including added tokens: 1 + the largest id.
  int32_t vocab_size() const;
  // The BOS id if the tokenizer has "<｜begin▁of▁sentence｜>".
  std::optional<int32_t> bos_id() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns ids arriving one at a time into text that never ends in half a UTF-8 character
// (tokenizer-and-chat.md §4, streaming). The concatenation of every Push() plus Finish() equals
// Tokenizer::Decode of all ids. One per request; not thread-safe. The tokenizer must outlive it.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, DecodeOptions options = {});

  // Text completed by `id`; may be empty while a multi-byte character is incomplete.
  std::string Push(int32_t id);
  // The same, appended to `text` (no allocation once the buffers have grown).
  void Push(int32_t id, std::string& text);
  // Room for `bytes` held-back bytes (a token's bytes plus an incomplete character's).
  void Reserve(size_t bytes) { pending_bytes_.reserve(bytes); }
  // Flushes held-back bytes (an incomplete character becomes U+FFFD) and resets the state.
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_bytes_;  // at most 3 bytes of an incomplete character
};

}  // namespace dsv41
