#pragma once

// What each rank of a multi-process run holds (DESIGN.md "Beyond one machine", phase 1): every
// rank holds the weights of attention, the routers, the shared experts, mHC, the embedding and
// the head, and runs them for every token; the routed experts of each MoE and the rows of each
// Engram table are split between the ranks. Pure functions of the config and the rank count,
// computed without weights, so `dsv41 plan --ranks N`, the loader and the forward agree.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "config/tensor_inventory.h"

namespace dsv41 {

// This process's place in the run: rank `rank` of `num_ranks` (1: a single process).
struct RankShard {
  int32_t rank = 0;
  int32_t num_ranks = 1;

  bool operator==(const RankShard&) const = default;
};

// Indices [begin, end).
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const { return end - begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
  bool operator==(const IndexRange&) const = default;
};

// The index of a MoE among all of a model's: layer N's is N, DSpark stage K's ("mtp.K") is
// num_hidden_layers + K.
int64_t MoeIndex(const ModelConfig& config, std::string_view prefix);

// The routed experts rank `shard.rank` computes in MoE `moe_idx` of `num_experts` experts: the
// experts are cut into num_ranks contiguous ranges of floor or ceil(E / N) experts (place p is
// [floor(E·p/N), floor(E·(p+1)/N))), and place p goes to rank (p + moe_idx) mod N, so that when N
// does not divide E the larger ranges rotate over the ranks from one MoE to the next. Every
// rank's experts are contiguous, so its outputs are one run of the expert-ordered assignments.
IndexRange ShardExperts(int64_t num_experts, int64_t moe_idx, RankShard shard);

// The rows of an Engram table of `num_rows` rows that rank `shard.rank` reads:
// [floor(n·r/N), floor(n·(r+1)/N)). The rank order is the row order, so the distinct rows of a
// step, sorted, fall into the ranks' parts in rank order.
IndexRange ShardEngramRows(int64_t num_rows, RankShard shard);

// The MoE and expert of a routed expert's tensor ("layers.3.ffn.experts.17.w1.weight" → (3, 17);
// "mtp.1.ffn.experts.2.w2.scale" → (num_hidden_layers + 1, 2)); nullopt for any other tensor.
struct RoutedExpertRef {
  int64_t moe_idx = 0;
  int64_t expert = 0;
};
std::optional<RoutedExpertRef> ParseRoutedExpert(const ModelConfig& config,
                                                 std::string_view tensor_name);

// Whether rank `shard.rank` needs tensor `name`: false only for other ranks' routed experts.
// (Engram tables are needed by every rank: each reads its own rows of them.)
bool RankNeedsTensor(const ModelConfig& config, std::string_view name, RankShard shard);

// The weight bytes one rank holds.
struct RankWeightBytes {
  uint64_t routed_experts = 0;  // its routed experts (backbone and DSpark stages)
  uint64_t replicated = 0;      // everything every rank holds (no Engram tables)
  uint64_t engram_rows = 0;     // its rows of the Engram tables (values and scales)
  uint64_t weights() const { return routed_experts + replicated; }
};

// Per rank of `num_ranks`, over `tensors` (ExpectedTensors of the config).
std::vector<RankWeightBytes> WeightBytesPerRank(const ModelConfig& config,
                                                const std::vector<TensorSpec>& tensors,
                                                int32_t num_ranks);

}  // namespace dsv41
