#include "server/generation_request.h"

namespace dsv41 {

bool ServedModel::Serves(const std::string& name) const {
  if (name.empty()) return true;
  for (const std::string& n : names) {
    if (n == name) return true;
  }
  return false;
}

OutputProcessorOptions ProcessorOptionsFor(const GenerationRequest& request,
                                           const ServedModel& served) {
  OutputProcessorOptions options =
      TextProcessorOptions(*served.tokenizer, request.submission.params);
  options.parse_chat = request.parse_chat;
  options.starts_in_reasoning = request.starts_in_reasoning;
  options.think_close_id = served.think_close_id;
  options.num_prompt_tokens = static_cast<int32_t>(request.submission.prompt_ids.size());
  return options;
}

}  // namespace dsv41
