// The output processor on its own, over the real DeepSeek-V3 tokenizer: stop strings split across
// every token boundary and every grouping of tokens into engine outputs, the tokens after a stop
// dropped, the finish reasons the engine reports and the one the processor adds, the EOS text
// withheld, UTF-8 characters never split, chat stop strings on the content only.
#include "engine/output_processor.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace dsv41 {
namespace {

const Tokenizer& V3() {
  static const Tokenizer* tokenizer = [] {
    Result<Tokenizer> t = Tokenizer::Load(std::string(DSV41_SHARED_DIR) +
                                          "/data/deepseek-v3-tokenizer/tokenizer.json");
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return new Tokenizer(std::move(t).value());
  }();
  return *tokenizer;
}

// Every byte of `text` as its own token (the byte-level vocabulary's single-byte entries), so a
// stop string or a multi-byte character spans as many tokens as it has bytes.
std::vector<int32_t> ByteIds(std::string_view text) {
  static const std::array<int32_t, 256> byte_ids = [] {
    std::array<int32_t, 256> ids;
    ids.fill(-1);
    for (int32_t id = 0; id < V3().vocab_size(); ++id) {
      const std::string_view bytes = V3().TokenBytes(id);
      if (!V3().IsAdded(id) && bytes.size() == 1) ids[static_cast<unsigned char>(bytes[0])] = id;
    }
    return ids;
  }();
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(byte_ids[static_cast<unsigned char>(c)]);
  return ids;
}

// Whole characters only: the lossy decode (U+FFFD for broken bytes) leaves the text unchanged.
bool IsWholeUtf8(std::string_view text) {
  std::string decoded;
  AppendUtf8Lossy(text, /*final=*/true, &decoded);
  return decoded == text;
}

RequestOutput Output(std::vector<int32_t> ids, FinishReason finish = FinishReason::kNone) {
  RequestOutput out;
  out.request_id = 7;
  out.new_token_ids = std::move(ids);
  out.finish = finish;
  out.num_prompt_tokens = 3;
  return out;
}

OutputProcessorOptions TextOptions(std::vector<std::string> stop) {
  SamplingParams params;
  params.stop = std::move(stop);
  params.skip_special_tokens = false;
  return TextProcessorOptions(V3(), params);
}

// Feeds `ids` in outputs of `group` tokens, the last with `finish`; returns the deltas' text
// and counts the outputs after which the processor asked for an abort.
std::string Feed(OutputProcessor& p, const std::vector<int32_t>& ids, size_t group,
                 FinishReason finish, int* aborts) {
  std::string text;
  for (size_t i = 0; i < ids.size(); i += group) {
    const size_t end = std::min(ids.size(), i + group);
    const ProcessedOutput out =
        p.Push(Output(std::vector<int32_t>(ids.begin() + i, ids.begin() + end),
                      end == ids.size() ? finish : FinishReason::kNone));
    for (const OutputDelta& d : out.deltas) text += d.text;
    *aborts += p.needs_abort() ? 1 : 0;
  }
  return text;
}

TEST(OutputProcessorTest, StopStringAtEveryPlaceAndGroupingEndsRightBeforeIt) {
  const std::string text = "héllo wörld: ünïcode STOP and more after";
  const std::vector<int32_t> ids = ByteIds(text);
  for (size_t group = 1; group <= 5; ++group) {
    for (const std::string stop : {"STOP", "ö", "lo w", ": ü", "after"}) {
      SCOPED_TRACE("group " + std::to_string(group) + ", stop '" + stop + "'");
      OutputProcessor p(TextOptions({"never", stop}));
      int aborts = 0;
      const std::string streamed = Feed(p, ids, group, FinishReason::kLength, &aborts);
      const size_t at = text.find(stop);
      EXPECT_EQ(streamed, text.substr(0, at));
      EXPECT_EQ(p.content(), streamed);
      EXPECT_EQ(p.finish(), FinishReason::kStopString);
      EXPECT_EQ(p.stop_sequence(), stop);
      // Up to the token that completed the stop string; the rest of its output is dropped.
      EXPECT_EQ(p.token_ids().size(), at + stop.size());
      // The engine still ran the request unless the stop completed in its final output.
      const bool in_last_output = (at + stop.size() - 1) / group == (ids.size() - 1) / group;
      EXPECT_EQ(aborts, in_last_output ? 0 : 1);
    }
  }
}

TEST(OutputProcessorTest, NoStopStringStreamsWholeCharactersOnly) {
  const std::string text = "añb€c😀";
  const std::vector<int32_t> ids = ByteIds(text);
  OutputProcessor p(TextOptions({"😀x"}));  // a prefix held back until the end
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool last = i + 1 == ids.size();
    const ProcessedOutput out =
        p.Push(Output({ids[i]}, last ? FinishReason::kLength : FinishReason::kNone));
    for (const OutputDelta& d : out.deltas) {
      EXPECT_TRUE(IsWholeUtf8(d.text)) << "byte " << i;
      streamed += d.text;
    }
  }
  EXPECT_EQ(streamed, text) << "the held-back stop prefix is flushed at the end";
  EXPECT_EQ(p.finish(), FinishReason::kLength);
  EXPECT_EQ(p.completion_tokens(), static_cast<int32_t>(ids.size()));
}

TEST(OutputProcessorTest, EngineFinishReasonsPassThroughAndTheStopTokensTextIsWithheld) {
  const int32_t eos = *V3().IdOf("<｜end▁of▁sentence｜>");
  std::vector<int32_t> ids = ByteIds("done");
  ids.push_back(eos);
  RequestOutput end = Output(ids, FinishReason::kStop);
  end.ends_with_stop_token = true;
  OutputProcessor stopped(TextOptions({}));
  stopped.Push(end);
  EXPECT_EQ(stopped.finish(), FinishReason::kStop);
  EXPECT_EQ(stopped.content(), "done") << "EOS is counted, its text withheld";
  EXPECT_EQ(stopped.completion_tokens(), 5);
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kStopString), "stop");

  for (const FinishReason reason : {FinishReason::kLength, FinishReason::kAbort}) {
    OutputProcessor p(TextOptions({"nev"}));
    p.Push(Output(ByteIds("so ne")));
    p.Push(Output({}, reason));
    EXPECT_EQ(p.finish(), reason);
    EXPECT_EQ(p.content(), "so ne") << "held back for the stop string, flushed at the end";
    EXPECT_FALSE(p.needs_abort());
  }

  OutputProcessor failed(TextOptions({}));
  RequestOutput error = Output({}, FinishReason::kError);
  error.error = "request 7: the step failed";
  failed.Push(error);
  EXPECT_EQ(failed.finish(), FinishReason::kError);
  EXPECT_EQ(failed.error(), "request 7: the step failed");
  EXPECT_EQ(failed.prompt_tokens(), 3);

  // After the end, later outputs (the engine's kAbort after a stop string) change nothing.
  OutputProcessor after(TextOptions({"b"}));
  after.Push(Output(ByteIds("abc")));
  EXPECT_TRUE(after.needs_abort());
  after.Push(Output({}, FinishReason::kAbort));
  EXPECT_EQ(after.finish(), FinishReason::kStopString);
  EXPECT_FALSE(after.needs_abort()) << "asked once";
  EXPECT_EQ(after.content(), "a");
}

TEST(OutputProcessorTest, ChatStopStringsMatchTheContentNotTheReasoning) {
  Result<std::vector<int32_t>> ids = V3().Encode("think STOP here</think>answer STOP tail");
  ASSERT_TRUE(ids.ok());
  OutputProcessorOptions options = TextOptions({"STOP"});
  options.decode = DecodeOptions{.skip_special_tokens = true, .keep_chat_markers = true};
  options.parse_chat = true;
  options.starts_in_reasoning = true;
  options.think_close_id = V3().IdOf("</think>").value_or(-1);
  for (size_t group = 1; group <= 3; ++group) {
    OutputProcessor p(options);
    int aborts = 0;
    Feed(p, *ids, group, FinishReason::kLength, &aborts);
    EXPECT_EQ(p.reasoning(), "think STOP here");
    EXPECT_EQ(p.content(), "answer ");
    EXPECT_EQ(p.finish(), FinishReason::kStopString);
  }
}

}  // namespace
}  // namespace dsv41
