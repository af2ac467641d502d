#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "checkpoint/dtype.h"

namespace dsv41 {

// How RewriteCheckpoint lays out the copy.
struct RewriteOptions {
  size_t num_shards = 1;  // 1 writes model.safetensors, more a sharded checkpoint with its index
  // Relabels every `.scale` tensor stored as F8_E8M0 or U8 with this dtype (the bytes are the same
  // exponents either way); nullopt keeps each tensor's dtype.
  std::optional<DType> scale_dtype;
  // Tensors for which this returns true are written after all the others; the order is otherwise
  // the source's. Empty: the source's order.
  std::function<bool(std::string_view name)> place_last;
};

// Copies the checkpoint in `src_dir` into `dst_dir` (created) with every tensor's bytes unchanged,
// laid out as `options` says, together with every other file of the directory (config.json,
// tokenizer files, inference/ ...). For fixtures that check a loader against a layout: the same
// model stored with U8 scales, in many shards, with a layer's experts apart from its attention.
// Errors name the file or tensor.
Status RewriteCheckpoint(const std::string& src_dir, const std::string& dst_dir,
                         const RewriteOptions& options);

}  // namespace dsv41
