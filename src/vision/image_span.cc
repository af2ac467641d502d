#include "vision/image_span.h"

namespace dsv41 {

SpanPosition SpanPositionAt(const ImagePlan& plan, int64_t offset) {
  if (offset == 0) return {SpanRole::kStart, -1};
  if (offset == plan.span_length - 1) return {SpanRole::kEnd, -1};
  const int64_t row = (offset - 1) / (plan.token_cols + 1);
  const int64_t col = (offset - 1) % (plan.token_cols + 1);
  if (col == plan.token_cols) return {SpanRole::kNewline, -1};
  return {SpanRole::kImage, static_cast<int32_t>(row * plan.token_cols + col)};
}

Result<ExpandedPrompt> ExpandImagePlaceholders(std::span<const int32_t> ids, int32_t image_token_id,
                                               std::span<const ImagePlan> plans) {
  size_t num_placeholders = 0;
  for (int32_t id : ids) num_placeholders += id == image_token_id;
  if (num_placeholders != plans.size()) {
    return InvalidArgumentError(
        "the prompt holds %zu image placeholder%s (token %d) for %zu image%s", num_placeholders,
        num_placeholders == 1 ? "" : "s", image_token_id, plans.size(),
        plans.size() == 1 ? "" : "s");
  }
  ExpandedPrompt out;
  size_t total = ids.size();
  for (const ImagePlan& plan : plans) total += static_cast<size_t>(plan.span_length) - 1;
  out.ids.reserve(total);
  out.roles.reserve(total);
  size_t k = 0;
  for (int32_t id : ids) {
    if (id != image_token_id) {
      out.ids.push_back(id);
      out.roles.push_back(static_cast<int8_t>(SpanRole::kText));
      continue;
    }
    const ImagePlan& plan = plans[k++];
    out.span_starts.push_back(static_cast<int32_t>(out.ids.size()));
    for (int64_t offset = 0; offset < plan.span_length; ++offset) {
      out.ids.push_back(image_token_id);
      out.roles.push_back(static_cast<int8_t>(SpanPositionAt(plan, offset).role));
    }
  }
  return out;
}

}  // namespace dsv41
