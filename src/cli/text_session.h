#pragma once

// The thin driver `dsv41 logits` and `dsv41 run` share: a loaded model with its tokenizer and
// Engram hash constants, and one request fed chunk by chunk, whose Engram row ids are computed
// from the request's token history (model.md §9.5) before each forward.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engram/hash_constants.h"
#include "engram/row_ids.h"
#include "engram/token_map.h"
#include "model/forward.h"
#include "model/weights.h"
#include "text/tokenizer.h"

namespace dsv41 {

// Everything loaded once per process.
struct LoadedTextModel {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<TextModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  EngramTokenMap token_map;
  EngramHashConstants engram;

  static Result<LoadedTextModel> Load(const std::string& dir,
                                      const TextModelOptions& options = {}) {
    LoadedTextModel m;
    DSV41_ASSIGN_OR_RETURN(ModelWeights weights,
                           ModelWeights::Load(dir, LoadOptions{.include_dspark = false}));
    m.weights = std::make_unique<ModelWeights>(std::move(weights));
    DSV41_ASSIGN_OR_RETURN(m.model, TextModel::Load(*m.weights, options));
    DSV41_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::Load(dir + "/tokenizer.json"));
    m.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer));
    if (!m.weights->config().engram_layer_ids.empty()) {
      DSV41_ASSIGN_OR_RETURN(m.token_map, BuildEngramTokenMap(*m.tokenizer));
      DSV41_RETURN_IF_ERROR(
          CheckClassCount(m.token_map, m.weights->config().engram_compressed_vocab_size));
      DSV41_ASSIGN_OR_RETURN(m.engram,
                             ComputeEngramHashConstants(m.weights->config(), m.token_map));
    }
    return m;
  }
};

// One request: its caches and token history. Engine thread only.
class TextRequest {
 public:
  explicit TextRequest(const LoadedTextModel& m) : m_(m), caches_(m.model->NewCaches()) {}

  int32_t num_positions() const { return caches_->num_positions(); }

  // Feeds `ids` in chunks of at most `chunk` tokens (<= 0: one chunk). With all_logits, returns
  // the logits of every fed position [n, vocab]; otherwise of the last one [vocab].
  Result<std::vector<float>> Feed(const std::vector<int32_t>& ids, int32_t chunk, bool all_logits,
                                  ThreadPool* pool) {
    const int32_t vocab = m_.model->vocab_size();
    const int32_t total = static_cast<int32_t>(ids.size());
    if (chunk <= 0) chunk = std::max(total, 1);
    std::vector<float> out;
    for (int32_t begin = 0; begin < total; begin += chunk) {
      const int32_t n = std::min(chunk, total - begin);
      const bool last_chunk = begin + n == total;
      Batch batch;
      batch.token_ids.assign(ids.begin() + begin, ids.begin() + begin + n);
      const int32_t start = num_positions();
      batch.requests.push_back({.first_row = 0, .num_tokens = n, .start_pos = start});
      if (all_logits) {
        for (int32_t r = 0; r < n; ++r) batch.logit_rows.push_back(r);
      } else if (last_chunk) {
        batch.logit_rows.push_back(n - 1);
      }
      if (m_.engram.num_layers() > 0) {
        std::vector<int32_t> classes(n);
        DSV41_RETURN_IF_ERROR(MapTokensToEngramClasses(m_.token_map, batch.token_ids, classes));
        class_ids_.insert(class_ids_.end(), classes.begin(), classes.end());
        batch.engram_rows.resize(static_cast<size_t>(n) * m_.engram.num_layers() *
                                 m_.engram.num_cols());
        ComputeEngramRows(m_.engram, class_ids_, {}, start, n, batch.engram_rows);
      }
      std::vector<float> logits(batch.logit_rows.size() * vocab);
      RequestCaches* caches[] = {caches_.get()};
      DSV41_RETURN_IF_ERROR(m_.model->Forward(batch, caches, logits, pool));
      out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
  }

 private:
  const LoadedTextModel& m_;
  std::unique_ptr<RequestCaches> caches_;
  std::vector<int32_t> class_ids_;  // by absolute position
};

}  // namespace dsv41
