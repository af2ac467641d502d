#pragma once

// How one API shapes a generation response, streaming (SSE text) or not (one JSON body). The HTTP
// layer drives every API through this interface. HTTP thread only (one per request).

#include <memory>
#include <string>

#include "engine/output_processor.h"
#include "server/api_error.h"
#include "server/generation_request.h"
#include "text/json_format.h"

namespace dsv41 {

class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // The events that open a stream (OpenAI: the role chunk; Anthropic: message_start).
  virtual std::string StreamStart(const OutputProcessor& processor) = 0;
  // The events for what one engine output released (may be empty).
  virtual std::string StreamDelta(const ProcessedOutput& delta,
                                  const OutputProcessor& processor) = 0;
  // The closing events once processor.ended(): final chunk, usage, [DONE] / message_delta,
  // message_stop; an error event when the engine failed or aborted the request.
  virtual std::string StreamEnd(const OutputProcessor& processor) = 0;
  // Sent while no output comes, so a client that went away is noticed (a failed write).
  virtual std::string Heartbeat() = 0;
  // The non-streaming body once processor.ended() (not for kError / kAbort: those are HTTP errors).
  virtual JsonValue Response(const OutputProcessor& processor) = 0;
};

// The error a request that ended with FinishReason::kAbort (503: the server is stopping) or kError
// (500, the engine's message) reports, in a stream's error event or as the HTTP answer.
ApiError EndedRequestError(const OutputProcessor& processor);

// The writer of request.api. `model` outlives it.
std::unique_ptr<ResponseWriter> MakeResponseWriter(const GenerationRequest& request,
                                                   const ServedModel& model);

// "data: <json>\n\n".
std::string SseData(const JsonValue& value);
// "event: <name>\ndata: <json>\n\n".
std::string SseEvent(std::string_view name, const JsonValue& value);

}  // namespace dsv41
