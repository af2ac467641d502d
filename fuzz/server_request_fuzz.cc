// libFuzzer target: request bodies of the server's endpoints (src/server/) on arbitrary bytes.
// The first byte picks the endpoint ('c' /v1/chat/completions, 'p' /v1/completions,
// 'm' /v1/messages, 't' /tokenize, 'd' /detokenize; anything else: all of them), the rest is the
// body. Parsing must return a request or an InvalidArgument with a message (never crash); an
// accepted generation request must fit the context with a prompt of in-vocabulary ids and pass
// the engine's sampling checks; the error bodies of both APIs must be JSON.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "engine/sampling_params.h"
#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/openai_api.h"
#include "server/tokenize_api.h"
#include "text/json_format.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"
#include "tiny/synthetic_tokenizer.h"

namespace {

const dsv41::ServedModel& Model() {
  static const dsv41::Tokenizer* tokenizer = [] {
    dsv41::Result<dsv41::SyntheticTokenizer> synthetic = dsv41::BuildSyntheticTokenizer(512, 7);
    DSV41_CHECK(synthetic.ok(), "%s", synthetic.status().ToString().c_str());
    dsv41::Result<dsv41::Tokenizer> t = dsv41::Tokenizer::FromJson(synthetic->json);
    DSV41_CHECK(t.ok(), "%s", t.status().ToString().c_str());
    return new dsv41::Tokenizer(std::move(t).value());
  }();
  static const dsv41::ServedModel model = [] {
    dsv41::ServedModel m;
    m.tokenizer = tokenizer;
    m.names = {"tiny"};
    m.max_model_len = 2048;
    m.vocab_size = tokenizer->vocab_size();
    m.think_close_id = tokenizer->IdOf(dsv41::kThinkClose).value_or(-1);
    // Images accepted with tiny-v's plan (goldens/vision/README.md), small enough to fuzz.
    m.images.enabled = true;
    m.images.image_token_id = tokenizer->IdOf(dsv41::kImageToken).value_or(-1);
    m.images.plan = {
        .patch_size = 14, .downsample_ratio = 3, .max_image_tokens = 120, .min_pixels = 40000};
    m.images.max_pixels = int64_t{1} << 22;
    return m;
  }();
  return model;
}

void CheckRefusal(const dsv41::Status& status) {
  DSV41_CHECK(status.code() == dsv41::StatusCode::kInvalidArgument && !status.message().empty(),
              "request errors are InvalidArgument with a message: %s", status.ToString().c_str());
  const dsv41::ApiError error = dsv41::ApiErrorFromStatus(status);
  DSV41_CHECK(error.status == 400, "a request error is a 400");
  DSV41_CHECK(dsv41::IsValidJson(dsv41::OpenAiErrorBody(error)), "OpenAI error body is JSON");
  DSV41_CHECK(dsv41::IsValidJson(dsv41::AnthropicErrorBody(error)), "Anthropic error body is JSON");
}

void CheckGeneration(const dsv41::Result<dsv41::GenerationRequest>& r) {
  if (!r.ok()) return CheckRefusal(r.status());
  const dsv41::ServedModel& m = Model();
  const dsv41::Submission& s = r->submission;
  DSV41_CHECK(!s.prompt_ids.empty(), "an accepted request has a prompt");
  for (int32_t id : s.prompt_ids) DSV41_CHECK(id >= 0 && id < m.vocab_size, "id %d", id);
  DSV41_CHECK(
      s.params.max_tokens >= 1 &&
          static_cast<int64_t>(s.prompt_ids.size()) + s.params.max_tokens <= m.max_model_len,
      "prompt %zu + max_tokens %d beyond the context", s.prompt_ids.size(), s.params.max_tokens);
  // Each image's span lies in the prompt, in order, on the image token.
  int64_t next_free = 0;
  for (const dsv41::RequestImage& image : s.options.images) {
    const int64_t end = int64_t{image.span_start} + image.plan.span_length;
    DSV41_CHECK(image.span_start >= next_free && end <= static_cast<int64_t>(s.prompt_ids.size()),
                "image span [%d, %lld) in a prompt of %zu", image.span_start,
                static_cast<long long>(end), s.prompt_ids.size());
    for (int64_t p = image.span_start; p < end; ++p) {
      DSV41_CHECK(s.prompt_ids[static_cast<size_t>(p)] == m.images.image_token_id,
                  "span position %lld holds %d", static_cast<long long>(p),
                  s.prompt_ids[static_cast<size_t>(p)]);
    }
    next_free = end;
  }
  const dsv41::Status sampling = dsv41::ValidateSamplingParams(s.params, m.vocab_size);
  DSV41_CHECK(sampling.ok(), "accepted sampling fields fail the engine: %s",
              sampling.ToString().c_str());
}

void CheckJsonResult(const dsv41::Result<dsv41::JsonValue>& r) {
  if (!r.ok()) return CheckRefusal(r.status());
  DSV41_CHECK(dsv41::IsValidJson(dsv41::FormatJson(*r)), "a response body is JSON");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char which = static_cast<char>(data[0]);
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  dsv41::Result<dsv41::JsonValue> body = dsv41::ParseJsonValue(text, "request body");
  if (!body.ok()) {
    CheckRefusal(body.status());
    return 0;
  }
  const dsv41::ServedModel& m = Model();
  const bool all = std::string_view("cpmtd").find(which) == std::string_view::npos;
  if (all || which == 'c') CheckGeneration(dsv41::ParseChatCompletionsRequest(*body, m));
  if (all || which == 'p') CheckGeneration(dsv41::ParseCompletionsRequest(*body, m));
  if (all || which == 'm') CheckGeneration(dsv41::ParseMessagesRequest(*body, m));
  if (all || which == 't') CheckJsonResult(dsv41::Tokenize(*body, m));
  if (all || which == 'd') CheckJsonResult(dsv41::Detokenize(*body, m));
  return 0;
}
