// libFuzzer target: chat-completions request bodies (tokenizer-and-chat.md §6) on arbitrary bytes.
// The JSON reader and the chat encoder must return a value or a Status, never crash; a parsed
// value re-serialised (§6.5) must parse back to the same text; a rendered prompt must start with
// BOS and equal its pieces concatenated, with no empty piece.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "text/chat_encoding.h"
#include "text/json_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  dsv41::Result<dsv41::JsonValue> value = dsv41::ParseJsonValue(body, "fuzz");
  if (value.ok()) {
    const std::string formatted = dsv41::FormatJson(*value);
    // Python writes non-finite floats as Infinity, which is not JSON; everything else round-trips.
    if (formatted.find("Infinity") == std::string::npos) {
      dsv41::Result<dsv41::JsonValue> again = dsv41::ParseJsonValue(formatted, "fuzz formatted");
      DSV41_CHECK(again.ok(), "formatted JSON does not parse: %s",
                  again.status().ToString().c_str());
      DSV41_CHECK(dsv41::FormatJson(*again) == formatted, "formatting is not idempotent");
    }
  }
  dsv41::Result<dsv41::ChatPrompt> prompt = dsv41::RenderChatCompletionsRequestText(body);
  if (!prompt.ok()) {
    DSV41_CHECK(prompt.status().code() == dsv41::StatusCode::kInvalidArgument &&
                    !prompt.status().message().empty(),
                "request errors are InvalidArgument with a message");
    return 0;
  }
  DSV41_CHECK(prompt->text.starts_with("<｜begin▁of▁sentence｜>"), "prompt without BOS");
  std::string joined;
  for (const dsv41::PromptPiece& piece : prompt->pieces) {
    DSV41_CHECK(!piece.text.empty(), "empty prompt piece");
    joined += piece.text;
  }
  DSV41_CHECK(joined == prompt->text, "pieces do not concatenate to the prompt");
  DSV41_CHECK(prompt->ends_in_reasoning == prompt->text.ends_with("<think>"),
              "ends_in_reasoning disagrees with the text");
  // With images accepted (vision.md §3), every image part is one placeholder piece, in order.
  dsv41::Result<dsv41::ChatPrompt> with_images =
      dsv41::RenderChatCompletionsRequest(*value, dsv41::ChatRequestOptions{.images = true});
  DSV41_CHECK(with_images.ok(), "a text-only prompt must render with images allowed");
  size_t placeholders = 0;
  for (const dsv41::PromptPiece& piece : with_images->pieces) {
    placeholders += piece.kind == dsv41::PromptPiece::Kind::kSpecialToken &&
                    piece.text == "<｜deepseek_image｜>";
  }
  DSV41_CHECK(placeholders == with_images->images.size(), "%zu placeholders for %zu images",
              placeholders, with_images->images.size());
  return 0;
}
