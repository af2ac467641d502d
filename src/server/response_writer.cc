#include "server/response_writer.h"

#include "server/anthropic_api.h"
#include "server/openai_api.h"
#include "server/responses_api.h"

namespace dsv41 {

std::unique_ptr<ResponseWriter> MakeResponseWriter(const GenerationRequest& request,
                                                   const ServedModel& model) {
  switch (request.api) {
    case Api::kChatCompletions:
      return MakeChatCompletionsWriter(request, model);
    case Api::kCompletions:
      return MakeCompletionsWriter(request, model);
    case Api::kMessages:
      return MakeMessagesWriter(request, model);
    case Api::kResponses:
      return MakeResponsesWriter(request, model);
  }
  return nullptr;
}

ApiError EndedRequestError(const OutputProcessor& processor) {
  if (processor.finish() == FinishReason::kAbort) {
    return {503, RequestErrorType::kUnavailable,
            "the request was aborted (the server is stopping)"};
  }
  return {500, RequestErrorType::kInternal, processor.error()};
}

std::string SseData(const JsonValue& value) { return "data: " + FormatJson(value) + "\n\n"; }

std::string SseEvent(std::string_view name, const JsonValue& value) {
  std::string out = "event: ";
  out.append(name);
  out += '\n';
  out += SseData(value);
  return out;
}

}  // namespace dsv41
