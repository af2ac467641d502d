#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dsv41 {

// A byte-level BPE tokenizer.json in the DeepSeek layout, for synthetic checkpoints: BOS/EOS/pad
// at ids 0-2, the 256 byte tokens, merges learned from a built-in corpus (plus seeded pseudo-words
// for large vocabularies), the V4.1 added tokens by their real strings (chat tags, <think>,
// ｜DSML｜, task tokens), "<｜place▁holder▁no▁N｜>" fillers, and "<｜deepseek_image｜>" as the last
// id. The DeepSeek-V3 pre-tokenizer (three Split stages + ByteLevel). Exactly `vocab_size` ids.
struct SyntheticTokenizer {
  std::string json;         // tokenizer.json text
  std::string config_json;  // tokenizer_config.json text
  int32_t system_id = 0;    // "<｜System｜>": also the DSpark noise token, as in the release
  int32_t image_id = 0;     // "<｜deepseek_image｜>"
};

// Deterministic for (vocab_size, seed). InvalidArgument when vocab_size cannot hold the bytes and
// the added tokens.
Result<SyntheticTokenizer> BuildSyntheticTokenizer(int32_t vocab_size, uint64_t seed);

}  // namespace dsv41
