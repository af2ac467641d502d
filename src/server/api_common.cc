#include "server/api_common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>

namespace dsv41 {

Result<int32_t> OutputBudget(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                             const ServedModel& model, std::string_view prompt_field,
                             std::string_view max_tokens_field) {
  const int pf = static_cast<int>(prompt_field.size());
  const int mf = static_cast<int>(max_tokens_field.size());
  const long long limit = static_cast<long long>(model.max_model_len);
  if (prompt_tokens + 1 > model.max_model_len) {
    return InvalidArgumentError(
        "%.*s: the prompt has %lld tokens; the context holds %lld tokens (prompt and output)", pf,
        prompt_field.data(), static_cast<long long>(prompt_tokens), limit);
  }
  if (!max_tokens.has_value()) {
    int64_t budget = model.max_model_len - prompt_tokens;
    if (model.default_max_tokens > 0) budget = std::min(budget, model.default_max_tokens);
    return static_cast<int32_t>(std::min<int64_t>(budget, std::numeric_limits<int32_t>::max()));
  }
  if (*max_tokens < 1) {
    return InvalidArgumentError("%.*s: %lld must be >= 1", mf, max_tokens_field.data(),
                                static_cast<long long>(*max_tokens));
  }
  if (*max_tokens > model.max_model_len - prompt_tokens) {
    return InvalidArgumentError(
        "%.*s: %lld output tokens + %lld prompt tokens exceed the context of %lld tokens", mf,
        max_tokens_field.data(), static_cast<long long>(*max_tokens),
        static_cast<long long>(prompt_tokens), limit);
  }
  return static_cast<int32_t>(*max_tokens);
}

std::string RandomId(std::string_view prefix, size_t hex_chars) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  std::lock_guard<std::mutex> lock(mu);
  uint64_t bits = 0;
  for (size_t i = 0; i < hex_chars; ++i) {
    if (i % 16 == 0) bits = rng();
    id += kHex[bits & 15];
    bits >>= 4;
  }
  return id;
}

std::string TokenText(const Tokenizer& tokenizer, int32_t id) {
  std::string text;
  AppendUtf8Lossy(tokenizer.TokenBytes(id), /*final=*/true, &text);
  return text;
}

JsonValue TokenBytesJson(const Tokenizer& tokenizer, int32_t id) {
  JsonValue bytes = JsonArray();
  for (char c : tokenizer.TokenBytes(id)) bytes.Push(JsonInt(static_cast<unsigned char>(c)));
  return bytes;
}

JsonValue LogprobJson(float logprob) {
  return JsonFloat(std::isfinite(logprob) ? static_cast<double>(logprob) : -9999.0);
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace dsv41
