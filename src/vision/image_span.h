#pragma once

// The span an image occupies in the token sequence (vision.md §10): START, then per token row W
// IMAGE positions and a NEWLINE, then END; L = H · (W + 1) + 2 positions, all holding
// image_token_id, told apart only by the recorded span starts. The roles are the goldens' `types`.

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "vision/image_plan.h"

namespace dsv41 {

enum class SpanRole : int8_t {
  kText = -1,
  kStart = 0,
  kImage = 1,
  kNewline = 2,
  kEnd = 3,
};

// The role of offset `offset` (0 .. L − 1) of a span of token_cols W and the index of the image
// row it takes (the aligner row k for kImage, in reading order; −1 otherwise).
struct SpanPosition {
  SpanRole role = SpanRole::kText;
  int32_t image_row = -1;
};
SpanPosition SpanPositionAt(const ImagePlan& plan, int64_t offset);

// A prompt after placeholder expansion.
struct ExpandedPrompt {
  std::vector<int32_t> ids;          // each placeholder replaced by L_k copies of image_token_id
  std::vector<int32_t> span_starts;  // index of image k's START in ids
  std::vector<int8_t> roles;         // SpanRole per position
};

// Replaces the k-th `image_token_id` of `ids` by the span of plans[k] (vision.md §10).
// InvalidArgument when the number of placeholders differs from the number of images (naming
// both counts).
Result<ExpandedPrompt> ExpandImagePlaceholders(std::span<const int32_t> ids, int32_t image_token_id,
                                               std::span<const ImagePlan> plans);

}  // namespace dsv41
