#include "text/chat_tokens.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace dsv41 {

Result<std::vector<int32_t>> EncodeChatPrompt(const Tokenizer& tokenizer, const ChatPrompt& prompt,
                                              const ChatTokenizeOptions& options) {
  if (options.whole_string) return tokenizer.Encode(prompt.text, {});
  std::vector<int32_t> ids;
  EncodeOptions as_text;
  as_text.special_tokens_as_text = true;
  for (const PromptPiece& piece : prompt.pieces) {
    if (piece.kind == PromptPiece::Kind::kSpecialToken) {
      const std::optional<int32_t> id = tokenizer.IdOf(piece.text);
      if (!id.has_value()) {
        return InvalidArgumentError("chat prompt: the tokenizer has no token '%s'",
                                    piece.text.c_str());
      }
      ids.push_back(*id);
      continue;
    }
    DSV41_ASSIGN_OR_RETURN(std::vector<int32_t> piece_ids, tokenizer.Encode(piece.text, as_text));
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

}  // namespace dsv41
