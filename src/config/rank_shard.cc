#include "config/rank_shard.h"

#include <charconv>
#include <string>

#include "base/check.h"
#include "config/weight_summary.h"

namespace dsv41 {
namespace {

// floor(n · p / N) for 0 <= p <= N without overflow: with n = q·N + m it is q·p + floor(m·p / N),
// and m·p < N² fits for any rank count.
int64_t Cut(int64_t n, int64_t p, int64_t num_ranks) {
  return n / num_ranks * p + n % num_ranks * p / num_ranks;
}

// Parses the decimal number at the start of `s` into `value`; returns the rest, or nullopt.
std::optional<std::string_view> ParseNumber(std::string_view s, int64_t& value) {
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (error != std::errc() || end == s.data()) return std::nullopt;
  return s.substr(static_cast<size_t>(end - s.data()));
}

}  // namespace

int64_t MoeIndex(const ModelConfig& config, std::string_view prefix) {
  int64_t n = 0;
  if (prefix.starts_with("layers.") && ParseNumber(prefix.substr(7), n)) return n;
  if (prefix.starts_with("mtp.") && ParseNumber(prefix.substr(4), n)) {
    return config.num_hidden_layers + n;
  }
  DSV41_CHECK(false, "'%.*s' is not a MoE prefix", static_cast<int>(prefix.size()), prefix.data());
  return 0;
}

IndexRange ShardExperts(int64_t num_experts, int64_t moe_idx, RankShard shard) {
  const int64_t n = shard.num_ranks;
  DSV41_CHECK(n >= 1 && shard.rank >= 0 && shard.rank < n && moe_idx >= 0, "rank %d of %d",
              shard.rank, shard.num_ranks);
  const int64_t place = ((shard.rank - moe_idx) % n + n) % n;
  return IndexRange{.begin = Cut(num_experts, place, n), .end = Cut(num_experts, place + 1, n)};
}

IndexRange ShardEngramRows(int64_t num_rows, RankShard shard) {
  const int64_t n = shard.num_ranks;
  DSV41_CHECK(n >= 1 && shard.rank >= 0 && shard.rank < n, "rank %d of %d", shard.rank,
              shard.num_ranks);
  return IndexRange{.begin = Cut(num_rows, shard.rank, n), .end = Cut(num_rows, shard.rank + 1, n)};
}

std::optional<RoutedExpertRef> ParseRoutedExpert(const ModelConfig& config,
                                                 std::string_view tensor_name) {
  constexpr std::string_view kExperts = ".ffn.experts.";
  const size_t at = tensor_name.find(kExperts);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view prefix = tensor_name.substr(0, at);
  int64_t number = 0;
  if (!(prefix.starts_with("layers.") && ParseNumber(prefix.substr(7), number)) &&
      !(prefix.starts_with("mtp.") && ParseNumber(prefix.substr(4), number))) {
    return std::nullopt;
  }
  int64_t expert = 0;
  const std::optional<std::string_view> rest =
      ParseNumber(tensor_name.substr(at + kExperts.size()), expert);
  if (!rest || !rest->starts_with(".")) return std::nullopt;
  return RoutedExpertRef{.moe_idx = MoeIndex(config, prefix), .expert = expert};
}

bool RankNeedsTensor(const ModelConfig& config, std::string_view name, RankShard shard) {
  if (shard.num_ranks == 1) return true;
  const std::optional<RoutedExpertRef> expert = ParseRoutedExpert(config, name);
  if (!expert) return true;
  const bool dspark = expert->moe_idx >= config.num_hidden_layers;
  const int64_t num_experts = dspark ? config.dspark_n_routed_experts : config.n_routed_experts;
  return ShardExperts(num_experts, expert->moe_idx, shard).contains(expert->expert);
}

std::vector<RankWeightBytes> WeightBytesPerRank(const ModelConfig& config,
                                                const std::vector<TensorSpec>& tensors,
                                                int32_t num_ranks) {
  std::vector<RankWeightBytes> out(static_cast<size_t>(num_ranks));
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = TensorBytes(t);
    if (ClassifyTensor(t.name) == WeightKind::kEngramTables) {
      const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
      const uint64_t row_bytes = rows > 0 ? bytes / static_cast<uint64_t>(rows) : 0;
      for (int32_t r = 0; r < num_ranks; ++r) {
        const IndexRange mine = ShardEngramRows(rows, RankShard{r, num_ranks});
        out[static_cast<size_t>(r)].engram_rows += static_cast<uint64_t>(mine.size()) * row_bytes;
      }
      continue;
    }
    const bool routed = ParseRoutedExpert(config, t.name).has_value();
    for (int32_t r = 0; r < num_ranks; ++r) {
      if (!RankNeedsTensor(config, t.name, RankShard{r, num_ranks})) continue;
      (routed ? out[static_cast<size_t>(r)].routed_experts
              : out[static_cast<size_t>(r)].replicated) += bytes;
    }
  }
  return out;
}

}  // namespace dsv41
