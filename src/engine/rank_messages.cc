#include "engine/rank_messages.h"

#include <bit>
#include <cstring>

#include "base/wire.h"

namespace dsv41 {
namespace {

Status DecodeSamplingParams(WireReader& in, SamplingParams& p) {
  uint64_t seed = 0;
  uint8_t flags = 0;
  DSV41_RETURN_IF_ERROR(in.Get(p.temperature, "temperature"));
  DSV41_RETURN_IF_ERROR(in.Get(p.top_p, "top_p"));
  DSV41_RETURN_IF_ERROR(in.Get(p.top_k, "top_k"));
  DSV41_RETURN_IF_ERROR(in.Get(p.min_p, "min_p"));
  DSV41_RETURN_IF_ERROR(in.Get(seed, "seed"));
  DSV41_RETURN_IF_ERROR(in.Get(p.presence_penalty, "presence_penalty"));
  DSV41_RETURN_IF_ERROR(in.Get(p.frequency_penalty, "frequency_penalty"));
  DSV41_RETURN_IF_ERROR(in.Get(p.repetition_penalty, "repetition_penalty"));
  DSV41_RETURN_IF_ERROR(in.GetVector(p.stop_token_ids, "stop_token_ids"));
  DSV41_RETURN_IF_ERROR(in.Get(p.max_tokens, "max_tokens"));
  DSV41_RETURN_IF_ERROR(in.Get(p.logprobs, "logprobs"));
  DSV41_RETURN_IF_ERROR(in.Get(flags, "flags"));
  p.seed = seed;
  p.ignore_eos = (flags & 1) != 0;
  p.skip_special_tokens = (flags & 2) != 0;
  p.keep_chat_markers = (flags & 4) != 0;
  return OkStatus();
}

}  // namespace

void EncodeCommand(LeaderCommand command, std::span<const std::byte> payload,
                   std::vector<std::byte>& out) {
  out.clear();
  out.push_back(static_cast<std::byte>(command));
  out.insert(out.end(), payload.begin(), payload.end());
}

Status DecodeCommand(std::span<const std::byte> message, LeaderCommand& command,
                     std::span<const std::byte>& payload) {
  if (message.empty()) return DataLossError("rank 0's command: an empty message");
  const auto byte = static_cast<uint8_t>(message[0]);
  if (byte < static_cast<uint8_t>(LeaderCommand::kOpen) ||
      byte > static_cast<uint8_t>(LeaderCommand::kShutdown)) {
    return DataLossError("rank 0's command: unknown command %u", byte);
  }
  command = static_cast<LeaderCommand>(byte);
  payload = message.subspan(1);
  return OkStatus();
}

void EncodeSamplingParams(const SamplingParams& p, std::vector<std::byte>& out) {
  WireWriter w(out);
  w.Put(p.temperature);
  w.Put(p.top_p);
  w.Put(p.top_k);
  w.Put(p.min_p);
  w.Put<uint64_t>(p.seed.value_or(0));
  w.Put(p.presence_penalty);
  w.Put(p.frequency_penalty);
  w.Put(p.repetition_penalty);
  w.PutSpan(std::span<const int32_t>(p.stop_token_ids));
  w.Put(p.max_tokens);
  w.Put(p.logprobs);
  w.Put<uint8_t>((p.ignore_eos ? 1 : 0) | (p.skip_special_tokens ? 2 : 0) |
                 (p.keep_chat_markers ? 4 : 0));
}

void EncodeStepHeader(const StepHeader& h, std::vector<std::byte>& out) {
  WireWriter w(out);
  w.Put(h.step);
  w.Put<uint64_t>(h.added.size());
  for (const AdmittedRequest& a : h.added) {
    w.Put(a.id);
    w.PutSpan(std::span<const int32_t>(a.prompt_ids));
    EncodeSamplingParams(a.params, out);
    w.Put<uint8_t>(a.prompt_logits ? 1 : 0);
  }
  w.PutSpan(std::span<const uint64_t>(h.aborted));
  w.PutSpan(std::span<const ScheduledEntry>(h.scheduled));
  w.Put(h.block_tables_hash);
}

Status DecodeStepHeader(std::span<const std::byte> bytes, StepHeader& h) {
  WireReader in(bytes, "rank 0's step header");
  uint64_t num_added = 0;
  DSV41_RETURN_IF_ERROR(in.Get(h.step, "step"));
  DSV41_RETURN_IF_ERROR(in.Get(num_added, "request count"));
  if (num_added > bytes.size())
    return DataLossError("rank 0's step header: %llu requests",
                         static_cast<unsigned long long>(num_added));
  h.added.resize(static_cast<size_t>(num_added));
  for (AdmittedRequest& a : h.added) {
    uint8_t prompt_logits = 0;
    DSV41_RETURN_IF_ERROR(in.Get(a.id, "request id"));
    DSV41_RETURN_IF_ERROR(in.GetVector(a.prompt_ids, "prompt"));
    DSV41_RETURN_IF_ERROR(DecodeSamplingParams(in, a.params));
    DSV41_RETURN_IF_ERROR(in.Get(prompt_logits, "prompt_logits"));
    a.prompt_logits = prompt_logits != 0;
  }
  DSV41_RETURN_IF_ERROR(in.GetVector(h.aborted, "aborted requests"));
  DSV41_RETURN_IF_ERROR(in.GetVector(h.scheduled, "schedule"));
  DSV41_RETURN_IF_ERROR(in.Get(h.block_tables_hash, "block tables"));
  return in.Finish();
}

uint64_t LogitsDigest(uint64_t digest, std::span<const float> logits) {
  const std::span<const std::byte> bytes = std::as_bytes(logits);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, 8);
    digest = std::rotl(digest ^ word, 29) * 0x100000001b3ull;
  }
  for (; i < bytes.size(); ++i) {
    digest = (digest ^ static_cast<uint8_t>(bytes[i])) * 0x100000001b3ull;
  }
  return digest;
}

}  // namespace dsv41
