#include "engram/step_rows.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace dsv41 {

EngramLayerRows::EngramLayerRows(int32_t row_dim, size_t capacity)
    : row_dim_(static_cast<size_t>(row_dim)) {
  Reserve(capacity);
}

void EngramLayerRows::Reserve(size_t capacity) {
  if (capacity <= index_.size()) return;
  sorted_.resize(capacity);
  unique_.resize(capacity);
  index_.resize(capacity);
  values_.resize(capacity * row_dim_);
  scales_.resize(capacity * row_dim_ / 32);
}

void EngramLayerRows::Dedupe(std::span<const int64_t> rows, int64_t num_tokens, size_t slot,
                             size_t num_tables, size_t num_cols) {
  const size_t tokens = static_cast<size_t>(num_tokens);
  const size_t n = tokens * num_cols;
  DSV41_CHECK(n <= capacity(), "Engram rows: %zu slots, capacity %zu", n, capacity());
  for (size_t t = 0; t < tokens; ++t) {
    std::copy_n(rows.data() + (t * num_tables + slot) * num_cols, num_cols,
                sorted_.data() + t * num_cols);
  }
  const auto sorted_end = sorted_.begin() + static_cast<std::ptrdiff_t>(n);
  std::sort(sorted_.begin(), sorted_end);
  const auto end = std::unique_copy(sorted_.begin(), sorted_end, unique_.begin());
  unique_count_ = static_cast<size_t>(end - unique_.begin());
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t c = 0; c < num_cols; ++c) {
      const int64_t row = rows[(t * num_tables + slot) * num_cols + c];
      index_[t * num_cols + c] =
          static_cast<int32_t>(std::lower_bound(unique_.begin(), end, row) - unique_.begin());
    }
  }
  num_slots_ = n;
}

Status EngramLayerRows::Fill(const EngramRowSource& table) {
  return table.FillRows(unique(), std::span<std::byte>(values_.data(), unique_count_ * row_dim_),
                        std::span<std::byte>(scales_.data(), unique_count_ * row_dim_ / 32));
}

EngramFetchedRows EngramLayerRows::fetched() const {
  return EngramFetchedRows{
      .values = std::span<const std::byte>(values_.data(), unique_count_ * row_dim_),
      .scales = std::span<const std::byte>(scales_.data(), unique_count_ * row_dim_ / 32),
      .index = std::span<const int32_t>(index_.data(), num_slots_)};
}

SyncEngramStepRows::SyncEngramStepRows(std::vector<const EngramRowSource*> tables, int32_t num_cols)
    : tables_(std::move(tables)), num_cols_(static_cast<size_t>(num_cols)) {
  for (const EngramRowSource* table : tables_) layers_.emplace_back(table->row_dim(), 0);
}

void SyncEngramStepRows::StartStep(std::span<const int64_t> rows, int64_t num_tokens) {
  rows_ = rows;
  num_tokens_ = num_tokens;
}

Result<EngramFetchedRows> SyncEngramStepRows::WaitForLayer(int32_t engram_slot) {
  DSV41_CHECK(engram_slot >= 0 && static_cast<size_t>(engram_slot) < layers_.size(),
              "WaitForLayer: slot %d of %zu", engram_slot, layers_.size());
  const size_t slot = static_cast<size_t>(engram_slot);
  DSV41_CHECK(rows_.size() == static_cast<size_t>(num_tokens_) * tables_.size() * num_cols_,
              "Engram rows: %zu row ids for %lld tokens", rows_.size(),
              static_cast<long long>(num_tokens_));
  EngramLayerRows& layer = layers_[slot];
  layer.Reserve(static_cast<size_t>(num_tokens_) * num_cols_);
  layer.Dedupe(rows_, num_tokens_, slot, tables_.size(), num_cols_);
  const Status status = layer.Fill(*tables_[slot]);
  if (!status.ok()) {
    return status.WithPrefix(StrFormat("reading the Engram rows of slot %d", engram_slot));
  }
  return layer.fetched();
}

}  // namespace dsv41
