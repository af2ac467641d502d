// libFuzzer target: Tokenizer::FromJson on arbitrary bytes (tokenizer-and-chat.md §2). A bad file
// must give a Status, never a crash; a tokenizer that loads must encode sample texts (and the input
// itself, when it is UTF-8) to ids inside its vocabulary, and streaming detokenisation must equal
// Decode.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "text/tokenizer.h"

namespace {

void CheckEncodeDecode(const dsv41::Tokenizer& tokenizer, std::string_view text) {
  for (const bool as_text : {false, true}) {
    dsv41::EncodeOptions options;
    options.special_tokens_as_text = as_text;
    auto ids = tokenizer.Encode(text, options);
    if (!ids.ok()) continue;  // invalid UTF-8 input
    for (const int32_t id : *ids) {
      DSV41_CHECK(id >= 0 && id < tokenizer.vocab_size(), "id %d of %d", id,
                  tokenizer.vocab_size());
    }
    const std::string decoded = tokenizer.Decode(*ids);
    dsv41::StreamingDetokenizer stream(tokenizer);
    std::string streamed;
    for (const int32_t id : *ids) streamed += stream.Push(id);
    streamed += stream.Finish();
    DSV41_CHECK(streamed == decoded, "streamed text differs from Decode");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = dsv41::Tokenizer::FromJson(json, "fuzz input");
  if (!tokenizer.ok()) {
    DSV41_CHECK(!tokenizer.status().message().empty());
    return 0;
  }
  CheckEncodeDecode(*tokenizer,
                    "Hello world, it's 2026!\n\n  <｜User｜>中文 テキスト\t🙂 x");
  CheckEncodeDecode(*tokenizer, json.substr(0, 4096));
  return 0;
}
