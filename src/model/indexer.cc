#include "model/indexer.h"

#include <algorithm>
#include <limits>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/index_score_tile.h"
#include "kernels/indexer_topk.h"
#include "kernels/rope.h"
#include "model/index_key_slot.h"
#include "model/indexer_sizing.h"
#include "model/linear_weight.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Floor division (model.md §7.5: (0 − 1) // 8 = −1).
int32_t FloorDiv(int32_t a, int32_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Tokens per scoring item (a prefill chunk's rows share each decoded key tile).
constexpr int64_t kScoreTokenChunk = 16;
constexpr int32_t kTile = static_cast<int32_t>(kIndexKeyTileEntries);

}  // namespace

std::vector<int32_t> TopKAscending(std::span<const float> scores, int32_t k) {
  std::vector<int32_t> order(scores.size());
  std::vector<int32_t> out(scores.size());
  out.resize(static_cast<size_t>(TopKAscendingSimd(scores, k, order, out)));
  return out;
}

int32_t CandidateBlocks(std::span<const float> scores, int32_t num_visible, int32_t num_blocks,
                        int32_t block_size, std::span<int32_t> blocks, std::span<float> block_score,
                        std::span<int32_t> order, std::span<int32_t> picks) {
  const int32_t n = static_cast<int32_t>(scores.size());
  DSV41_CHECK(block_size >= 1 && num_blocks >= 0, "blocks %d of %d", num_blocks, block_size);
  const int32_t n_blocks = (n + block_size - 1) / block_size;
  DSV41_CHECK(block_score.size() >= static_cast<size_t>(n_blocks) &&
                  order.size() >= block_score.size() && picks.size() >= block_score.size(),
              "candidate scratch of %zu blocks, %d wanted", block_score.size(), n_blocks);
  block_score = block_score.first(static_cast<size_t>(n_blocks));
  std::fill(block_score.begin(), block_score.end(), -kInf);
  for (int32_t i = 0; i < n; ++i) {
    float& b = block_score[i / block_size];
    b = std::max(b, scores[i]);
  }
  const int32_t pinned = FloorDiv(num_visible - 1, block_size);
  if (pinned >= 0 && pinned < n_blocks) block_score[pinned] = kInf;
  const int32_t num_picks =
      TopKAscendingSimd(block_score, std::min(num_blocks, n_blocks),
                        order.first(block_score.size()), picks.first(block_score.size()));
  int32_t kept = 0;
  for (int32_t b : picks.first(static_cast<size_t>(num_picks))) {
    if (block_score[b] > -kInf) blocks[kept++] = b;
  }
  return kept;
}

void CandidateMask(std::span<const float> scores, int32_t num_visible, int32_t num_blocks,
                   int32_t block_size, std::span<uint8_t> mask) {
  DSV41_CHECK(mask.size() == scores.size(), "mask %zu, scores %zu", mask.size(), scores.size());
  const size_t n_blocks = (scores.size() + block_size - 1) / std::max(block_size, 1);
  std::vector<float> block_score(n_blocks);
  std::vector<int32_t> order(n_blocks), picks(n_blocks), blocks(n_blocks);
  const int32_t kept = CandidateBlocks(scores, num_visible, num_blocks, block_size, blocks,
                                       block_score, order, picks);
  std::fill(mask.begin(), mask.end(), uint8_t{0});
  for (int32_t b : std::span<const int32_t>(blocks).first(static_cast<size_t>(kept))) {
    for (size_t i = static_cast<size_t>(b) * block_size;
         i < std::min(mask.size(), static_cast<size_t>(b + 1) * block_size); ++i) {
      mask[i] = 1;
    }
  }
}

void IndexerForwardState::Candidates::RowMask(int64_t t, std::span<uint8_t> mask) const {
  std::fill(mask.begin(), mask.end(), uint8_t{0});
  for (int32_t b : Row(t)) {
    for (size_t i = static_cast<size_t>(b) * block_size;
         i < std::min(mask.size(), static_cast<size_t>(b + 1) * block_size); ++i) {
      mask[i] = 1;
    }
  }
}

float IndexWeightScale(const ModelConfig& config) {
  // A config constant, converted once (§12.8 item 5). The reference rounds the double product
  // index_head_dim^−½ · index_n_heads^−½ to fp32; that product is within two double ulps of
  // 1/√(index_head_dim · index_n_heads), whose correctly rounded fp32 value CrRsqrt gives: the
  // two agree unless the exact value lies within ~2^−52 of an fp32 rounding midpoint (the test
  // pins the released and tiny constants against the double product).
  return CrRsqrt(
      static_cast<float>(static_cast<int64_t>(config.index_head_dim) * config.index_n_heads));
}

std::span<IndexerForwardState> IndexerForwardState::Create(size_t num_requests, size_t num_layers,
                                                           StepArena& arena) {
  std::span<IndexerForwardState> states = arena.Alloc<IndexerForwardState>(num_requests);
  for (IndexerForwardState& s : states) {
    s.topk = arena.Alloc<TopK>(num_layers);
    s.candidates = arena.Alloc<Candidates>(num_layers);
    std::fill(s.topk.begin(), s.topk.end(), TopK{});
    std::fill(s.candidates.begin(), s.candidates.end(), Candidates{});
  }
  return states;
}

CompressedSelection IndexerForwardState::SelectionFor(const LayerRole& role) const {
  DSV41_CHECK(role.index_source_layer.has_value(), "layer %d has no index source", role.layer);
  const int32_t source = *role.index_source_layer;
  DSV41_CHECK(
      source >= 0 && static_cast<size_t>(source) < topk.size() && topk[source].per_token > 0,
      "layer %d: index source %d has not run", role.layer, source);
  return CompressedSelection{.entries = topk[source].entries, .per_token = topk[source].per_token};
}

Indexer::Indexer(const ModelConfig& config, const LayerPlan& plan, const LayerRole& role)
    : config_(config),
      plan_(plan),
      role_(role),
      rope_(Rope::ForTable(config, RopeTable::kCompress)),
      weight_scale_(IndexWeightScale(config)) {}

Result<std::unique_ptr<Indexer>> Indexer::Create(const ModelWeights& weights, int32_t layer) {
  const LayerPlan& plan = weights.plan();
  if (layer < 0 || layer >= static_cast<int32_t>(plan.layers.size())) {
    return InvalidArgumentError("indexer: layer %d of %zu", layer, plan.layers.size());
  }
  return Create(weights, "layers." + std::to_string(layer) + ".attn", plan.layers[layer]);
}

Result<std::unique_ptr<Indexer>> Indexer::Create(const ModelWeights& weights,
                                                 const std::string& prefix, const LayerRole& role) {
  if (!role.is_index_source || role.ratio <= 0 || !role.kv_source_layer.has_value()) {
    return InvalidArgumentError("indexer '%s': layer %d is not an index source", prefix.c_str(),
                                role.layer);
  }
  const ModelConfig& c = weights.config();
  std::unique_ptr<Indexer> ix(new Indexer(c, weights.plan(), role));
  const int64_t index_q_dim = static_cast<int64_t>(c.index_n_heads) * c.index_head_dim;
  DSV41_ASSIGN_OR_RETURN(ix->wq_b_,
                         GetLinear(weights, prefix + ".indexer.wq_b", index_q_dim, c.q_lora_rank));
  DSV41_ASSIGN_OR_RETURN(ix->weights_proj_, GetLinear(weights, prefix + ".indexer.weights_proj",
                                                      c.index_n_heads, c.hidden_size));
  return ix;
}

namespace {

// Draws what the layer publishes for each request (its top-k lists and, for a candidate source,
// its mask) from the arena outside the caller's scope: it lives to the end of the forward.
void DrawPublishedState(const ModelConfig& config, const LayerRole& role,
                        std::span<const BatchRequest> requests,
                        std::span<IndexerForwardState> states, StepArena& arena) {
  DSV41_CHECK(states.size() == requests.size(), "%zu states for %zu requests", states.size(),
              requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& r = requests[i];
    DSV41_CHECK(static_cast<size_t>(role.layer) < states[i].topk.size(),
                "indexer state of %zu layers", states[i].topk.size());
    IndexerForwardState::TopK& out = states[i].topk[role.layer];
    out.per_token = config.index_topk;
    out.entries = arena.Alloc<int32_t>(static_cast<size_t>(r.num_tokens) * config.index_topk);
    if (role.candidate_mode == CandidateMode::kProduce) {
      IndexerForwardState::Candidates& cand = states[i].candidates[role.layer];
      cand.num_entries = (r.start_pos + r.num_tokens) / role.ratio;
      cand.block_size = config.candidate_block_size;
      cand.per_token =
          std::max(0, std::min(config.candidate_topk_blocks,
                               (cand.num_entries + cand.block_size - 1) / cand.block_size));
      cand.blocks = arena.Alloc<int32_t>(static_cast<size_t>(r.num_tokens) * cand.per_token);
      cand.counts = arena.AllocZeroed<int32_t>(static_cast<size_t>(r.num_tokens));
    }
  }
}

// One request's view of the step's indexer queries: its rows of qi and w and its entry count.
struct RequestQueries {
  const float* qi;                      // [num_tokens, num_heads * head_dim]
  const float* w;                       // [num_tokens, num_heads]
  std::span<const uint8_t> head_exact;  // [num_tokens, num_heads]: IndexerQueryHeadsExact
  int64_t num_heads;
  int64_t head_dim;
  int32_t start_pos;
  int32_t ratio;
  int32_t num_entries;  // n: the entries visible to the request's last token
};

// Where a request's index keys lie: its kv source's index rows through its block table.
struct ScoreSource {
  const KvCacheView* cache;
  const KvRowPlace* place;
  std::span<const uint32_t> table;
};

// A candidate filter's view of its source's candidates for one pass: token t of the pass is row
// row0 + t. `cand` null: no filter.
struct CandidateRows {
  const IndexerForwardState::Candidates* cand = nullptr;
  int64_t row0 = 0;
  // Whether token t keeps an entry of [begin, end).
  bool KeepsAny(int64_t t, int32_t begin, int32_t end) const {
    const std::span<const int32_t> row = cand->Row(row0 + t);
    const auto it = std::lower_bound(row.begin(), row.end(), begin / cand->block_size);
    return it != row.end() && *it <= (end - 1) / cand->block_size;
  }
};

// Steps 3–4 straight from the paged index-key rows: scores[t, n] over the visible entries, −inf
// elsewhere (and where a candidate filter's mask, when given, rules out a whole tile). Items are
// (chunk of kScoreTokenChunk tokens, tile of kIndexKeyTileEntries entries) pairs, enumerated
// chunk by chunk over the tiles the chunk's last token sees, so the threads get equal shares of a
// prefill's triangle; each tile is decoded once per item and each score is computed by one item
// (IndexerScoresTile has the reference's bits), so the split never matters.
void ScoreEntries(const RequestQueries& q, int64_t t_req, const ScoreSource& source,
                  const CandidateRows& filter, std::span<float> scores,
                  std::span<IndexKeyTile> tiles, std::span<float> scratch_of, ExecContext& ctx) {
  const int32_t n = q.num_entries;
  const int64_t num_heads = q.num_heads;
  const int64_t head_dim = q.head_dim;
  const size_t scratch_floats = IndexerScoresTileScratch(num_heads, head_dim);
  std::fill(scores.begin(), scores.end(), -kInf);
  const int64_t num_chunks = (t_req + kScoreTokenChunk - 1) / kScoreTokenChunk;
  ArenaScope scope(ctx.arena);
  std::span<int64_t> first_item = ctx.arena.Alloc<int64_t>(num_chunks + 1);
  first_item[0] = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t last = std::min(t_req, (c + 1) * kScoreTokenChunk) - 1;
    const int32_t visible = (q.start_pos + static_cast<int32_t>(last) + 1) / q.ratio;
    const int64_t num_tiles = (visible + kTile - 1) / kTile;
    first_item[c + 1] = first_item[c] + num_tiles;
  }
  auto score_items = [&](int64_t begin, int64_t end, int thread_idx) {
    IndexKeyTile& tile = tiles[static_cast<size_t>(thread_idx)];
    const std::span<float> scratch =
        scratch_of.subspan(thread_idx * scratch_floats, scratch_floats);
    int64_t c =
        std::upper_bound(first_item.begin(), first_item.end(), begin) - first_item.begin() - 1;
    const std::byte* rows[kIndexKeyTileEntries];
    for (int64_t item = begin; item < end; ++item) {
      while (item >= first_item[c + 1]) ++c;
      const int64_t t_begin = c * kScoreTokenChunk;
      const int64_t t_end = std::min(t_req, t_begin + kScoreTokenChunk);
      const int32_t chunk_visible = (q.start_pos + static_cast<int32_t>(t_end)) / q.ratio;
      const int32_t e_begin = static_cast<int32_t>((item - first_item[c]) * kTile);
      const int32_t e_count = std::min<int32_t>(kTile, chunk_visible - e_begin);
      for (int32_t i = 0; i < e_count; ++i) {
        rows[i] = source.cache->RowAt(*source.place, source.table, e_begin + i);
      }
      DecodeIndexKeyTile(std::span<const std::byte* const>(rows, static_cast<size_t>(e_count)),
                         static_cast<size_t>(head_dim), tile);
      for (int64_t t = t_begin; t < t_end; ++t) {
        const int32_t visible = (q.start_pos + static_cast<int32_t>(t) + 1) / q.ratio;
        const int32_t count = std::min(e_count, visible - e_begin);
        if (count <= 0) continue;
        if (filter.cand != nullptr && !filter.KeepsAny(t, e_begin, e_begin + count)) continue;
        IndexerScoresTile(
            std::span<const float>(q.qi + t * num_heads * head_dim, num_heads * head_dim),
            std::span<const float>(q.w + t * num_heads, num_heads),
            q.head_exact.subspan(t * num_heads, num_heads), tile,
            scores.subspan(t * n + e_begin, count), scratch);
      }
    }
  };
  ctx.pool.ParallelFor(first_item[num_chunks], 1, score_items);
}

// The candidates a candidate filter reads (its source's, for the same request), or none.
CandidateRows FilterFor(const ModelConfig& config, const LayerRole& role,
                        const IndexerForwardState& state, int32_t n, int64_t t_req) {
  if (role.candidate_mode != CandidateMode::kFilter) return {};
  const int32_t source = config.candidate_source_layer_id;
  DSV41_CHECK(source >= 0 && static_cast<size_t>(source) < state.candidates.size() &&
                  !state.candidates[source].counts.empty(),
              "layer %d: candidate source %d has not run", role.layer, source);
  const IndexerForwardState::Candidates& cand = state.candidates[source];
  DSV41_CHECK(cand.num_entries == n && cand.counts.size() == static_cast<size_t>(t_req),
              "layer %d: candidates of %zu tokens over %d entries, keys %d of %lld tokens",
              role.layer, cand.counts.size(), cand.num_entries, n, static_cast<long long>(t_req));
  return CandidateRows{.cand = &cand, .row0 = 0};
}

// Step 5 over one pass's scores ([t_pass, n_pass], the request's tokens row0..): a candidate
// source publishes each token's kept blocks; a candidate filter sets the scores outside its
// source's blocks to −inf.
void ApplyCandidateLevel(const ModelConfig& config, const LayerRole& role, const RequestQueries& q,
                         int64_t t_pass, int64_t row0, IndexerForwardState& state,
                         const CandidateRows& filter, std::span<float> scores, StepArena& arena) {
  const int32_t n = q.num_entries;
  if (role.candidate_mode == CandidateMode::kProduce) {
    IndexerForwardState::Candidates& cand = state.candidates[role.layer];
    ArenaScope scope(arena);
    const size_t n_blocks = static_cast<size_t>((n + cand.block_size - 1) / cand.block_size);
    const std::span<float> block_score = arena.Alloc<float>(n_blocks);
    const std::span<int32_t> order = arena.Alloc<int32_t>(n_blocks);
    const std::span<int32_t> picks = arena.Alloc<int32_t>(n_blocks);
    for (int64_t t = 0; t < t_pass; ++t) {
      const int32_t visible = (q.start_pos + static_cast<int32_t>(t) + 1) / q.ratio;
      const std::span<int32_t> row =
          cand.blocks.subspan((row0 + t) * cand.per_token, cand.per_token);
      std::fill(row.begin(), row.end(), -1);
      cand.counts[row0 + t] = CandidateBlocks(std::span<const float>(scores.subspan(t * n, n)),
                                              visible, config.candidate_topk_blocks,
                                              cand.block_size, row, block_score, order, picks);
    }
  } else if (filter.cand != nullptr) {
    const int32_t block_size = filter.cand->block_size;
    for (int64_t t = 0; t < t_pass; ++t) {
      const std::span<float> row = scores.subspan(t * n, n);
      int32_t next = 0;  // entries before the next kept block go to −inf
      for (int32_t b : filter.cand->Row(filter.row0 + t)) {
        const int32_t begin = std::min(n, b * block_size);
        std::fill(row.begin() + next, row.begin() + std::max(next, begin), -kInf);
        next = std::min(n, (b + 1) * block_size);
      }
      std::fill(row.begin() + next, row.end(), -kInf);
    }
  }
}

// Whether the top-k boundary of one token's row is an exact tie: the k-th highest score among
// the (ascending) picks equals the best one left out.
bool TopKBoundaryTies(std::span<const float> row, std::span<const int32_t> picked) {
  float kth = kInf;
  for (int32_t e : picked) kth = std::min(kth, row[e]);
  float next = -kInf;
  size_t p = 0;
  for (int32_t e = 0; e < static_cast<int32_t>(row.size()); ++e) {
    if (p < picked.size() && picked[p] == e) {
      ++p;
      continue;
    }
    next = std::max(next, row[e]);
  }
  return kth == next;
}

// Step 6: top-k among each token's visible entries into `entries` ([t_req, topk], ascending, −1
// padded). When `tie` is non-empty it receives the boundary-tie flag of each token.
void SelectTopK(const RequestQueries& q, int64_t t_req, int32_t topk, std::span<const float> scores,
                std::span<int32_t> entries, std::span<uint8_t> tie, StepArena& arena) {
  const int32_t n = q.num_entries;
  std::fill(entries.begin(), entries.end(), -1);
  std::span<int32_t> order = arena.Alloc<int32_t>(static_cast<size_t>(n));
  for (int64_t t = 0; t < t_req; ++t) {
    const int32_t visible = (q.start_pos + static_cast<int32_t>(t) + 1) / q.ratio;
    std::span<const float> row = scores.subspan(t * n, visible);
    const std::span<int32_t> picks = entries.subspan(t * topk, topk);
    const int32_t num_picks = TopKAscendingSimd(row, topk, order, picks);
    if (!tie.empty() && topk < visible) {
      tie[t] = TopKBoundaryTies(row, picks.first(static_cast<size_t>(num_picks))) ? 1 : 0;
    }
  }
}

}  // namespace

void Indexer::FinishQueries(std::span<const BatchRequest> requests, std::span<float> qi,
                            std::span<float> w, StepArena& arena) const {
  const int64_t num_heads = config_.index_n_heads;
  const int64_t head_dim = config_.index_head_dim;
  for (float& v : w) v = Bf16Round(v * weight_scale_);
  const int64_t half = rope_.rope_dim() / 2;
  std::span<float> cos = arena.Alloc<float>(half);
  std::span<float> sin = arena.Alloc<float>(half);
  for (const BatchRequest& r : requests) {
    for (int32_t t = 0; t < r.num_tokens; ++t) {
      rope_.Angles(r.start_pos + t, cos, sin);
      const std::span<float> heads =
          qi.subspan((r.first_row + t) * num_heads * head_dim, num_heads * head_dim);
      RopeRotateRowsSimd(heads, 1, num_heads, cos, sin, /*inverse=*/false);
      for (int64_t h = 0; h < num_heads; ++h) {
        FakeQuantFq4B32Pow2(heads.subspan(h * head_dim, head_dim));
      }
    }
  }
}

namespace {

// Steps 3–6 for tokens [t0, t0 + t_pass) of request `request_idx` (of t_req new tokens): their
// scores in a matrix of their own, the candidate level, their top-k rows.
void ScorePass(const ModelConfig& config, const LayerRole& role, const RequestQueries& q,
               int64_t t_req, int64_t t0, int64_t t_pass, const ScoreSource& keys,
               size_t request_idx, IndexerForwardState& state, std::span<IndexKeyTile> tiles,
               std::span<float> scratch_of, ExecContext& ctx) {
  StepArena& arena = ctx.arena;
  ArenaScope scope(arena);
  const int64_t heads = q.num_heads;
  const RequestQueries pass{
      .qi = q.qi + t0 * heads * q.head_dim,
      .w = q.w + t0 * heads,
      .head_exact = q.head_exact.subspan(t0 * heads, t_pass * heads),
      .num_heads = heads,
      .head_dim = q.head_dim,
      .start_pos = q.start_pos + static_cast<int32_t>(t0),
      .ratio = q.ratio,
      .num_entries = (q.start_pos + static_cast<int32_t>(t0 + t_pass)) / q.ratio};
  CandidateRows filter = FilterFor(config, role, state, q.num_entries, t_req);
  filter.row0 = t0;
  std::span<float> scores =
      arena.Alloc<float>(IndexerScoreElements(pass.start_pos, t_pass, role.ratio));
  ScoreEntries(pass, t_pass, keys, filter, scores, tiles, scratch_of, ctx);
  ApplyCandidateLevel(config, role, pass, t_pass, t0, state, filter, scores, arena);
  ForwardObserver& observer = ctx.observer;
  const bool observed = observer.WantsIndexerScores();
  const std::span<uint8_t> tie =
      observed ? arena.AllocZeroed<uint8_t>(static_cast<size_t>(t_pass)) : std::span<uint8_t>();
  const int32_t topk = config.index_topk;
  SelectTopK(pass, t_pass, topk, scores,
             state.topk[role.layer].entries.subspan(t0 * topk, t_pass * topk), tie, arena);
  if (observed) observer.OnIndexerScores(role.layer, request_idx, scores, tie);
}

}  // namespace

void Indexer::Forward(std::span<const float> x, std::span<const float> qr,
                      std::span<const BatchRequest> requests, const KvCacheView& cache,
                      std::span<IndexerForwardState> states, ExecContext& ctx) const {
  AllocateState(requests, states, ctx.arena);
  ArenaScope scope(ctx.arena);
  const int64_t t_count = static_cast<int64_t>(x.size()) / config_.hidden_size;
  DSV41_CHECK(static_cast<int64_t>(x.size()) == t_count * config_.hidden_size, "x %zu", x.size());
  DSV41_CHECK(static_cast<int64_t>(qr.size()) == t_count * config_.q_lora_rank, "qr %zu",
              qr.size());
  ProductsOfInput of_x(x, t_count);
  ProductsOfInput of_qr(qr, t_count);
  const Projections projections = QueueProjections(of_x, of_qr, ctx.arena);
  of_qr.Run(ctx);
  of_x.Run(ctx);
  ForwardProjected(projections, requests, cache, states, ctx);
}

void Indexer::AllocateState(std::span<const BatchRequest> requests,
                            std::span<IndexerForwardState> states, StepArena& arena) const {
  DrawPublishedState(config_, role_, requests, states, arena);
}

Indexer::Projections Indexer::QueueProjections(ProductsOfInput& of_x, ProductsOfInput& of_qr,
                                               StepArena& arena) const {
  DSV41_CHECK(of_x.rows() == of_qr.rows(), "x %lld rows, qr %lld rows",
              static_cast<long long>(of_x.rows()), static_cast<long long>(of_qr.rows()));
  // Steps 1–2's products: bf16(wq_b · qr) and bf16(weights_proj · x).
  Projections p;
  p.qi = arena.Alloc<float>(of_qr.rows() * config_.index_n_heads * config_.index_head_dim);
  of_qr.Add(wq_b_, p.qi, /*round_bf16=*/true);
  p.w = arena.Alloc<float>(of_x.rows() * config_.index_n_heads);
  of_x.Add(weights_proj_, p.w, /*round_bf16=*/true);
  return p;
}

void Indexer::ForwardProjected(const Projections& projections,
                               std::span<const BatchRequest> requests, const KvCacheView& cache,
                               std::span<IndexerForwardState> states, ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  StepArena& arena = ctx.arena;
  const int64_t num_heads = config_.index_n_heads;
  const int64_t head_dim = config_.index_head_dim;
  const int64_t t_count = static_cast<int64_t>(projections.w.size()) / num_heads;
  const KvCacheLayout& layout = *cache.layout;
  const KvSourcePlaces& source = *layout.sources[*role_.kv_source_layer];
  DSV41_CHECK(static_cast<int64_t>(projections.w.size()) == t_count * num_heads &&
                  static_cast<int64_t>(projections.qi.size()) == t_count * num_heads * head_dim,
              "layer %d: qi %zu, w %zu", role_.layer, projections.qi.size(), projections.w.size());
  DSV41_CHECK(states.size() == requests.size(), "%zu states for %zu requests", states.size(),
              requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    DSV41_CHECK(static_cast<size_t>(role_.layer) < states[i].topk.size() &&
                    static_cast<int64_t>(states[i].topk[role_.layer].entries.size()) ==
                        int64_t{requests[i].num_tokens} * config_.index_topk,
                "layer %d: request %zu's state was not allocated for this step (AllocateState)",
                role_.layer, i);
  }
  DSV41_CHECK(layout.index_head_dim == head_dim && source.ratio == role_.ratio,
              "layer %d: index keys of %d dims, ratio %d", role_.layer, layout.index_head_dim,
              source.ratio);
  ForwardObserver& observer = ctx.observer;
  const bool observed = observer.WantsIndexerScores();

  // Steps 1–2 over every row of the step.
  const std::span<float> qi = projections.qi;
  const std::span<float> w = projections.w;
  FinishQueries(requests, qi, w, arena);

  // Which query heads the tiled scores may take (fq4 queries: all of them).
  std::span<uint8_t> head_exact = arena.Alloc<uint8_t>(t_count * num_heads);
  for (int64_t row = 0; row < t_count; ++row) {
    IndexerQueryHeadsExact(qi.subspan(row * num_heads * head_dim, num_heads * head_dim), num_heads,
                           head_exact.subspan(row * num_heads, num_heads));
  }
  // Per-thread key tiles and scratch, drawn before the parallel regions.
  const int num_threads = ctx.pool.num_threads();
  std::span<IndexKeyTile> tiles = arena.Alloc<IndexKeyTile>(num_threads);
  std::span<float> scratch_of =
      arena.Alloc<float>(num_threads * IndexerScoresTileScratch(num_heads, head_dim));
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& r = requests[i];
    const RequestQueries q{
        .qi = qi.data() + r.first_row * num_heads * head_dim,
        .w = w.data() + r.first_row * num_heads,
        .head_exact = head_exact.subspan(r.first_row * num_heads, r.num_tokens * num_heads),
        .num_heads = num_heads,
        .head_dim = head_dim,
        .start_pos = r.start_pos,
        .ratio = role_.ratio,
        .num_entries = (r.start_pos + r.num_tokens) / role_.ratio};
    // The clean rule: the own kv source's keys; the official slot may name another source.
    const KvSourcePlaces& key_source = *layout.sources[IndexKeySourceLayer(
        plan_, role_, r.start_pos, r.num_tokens, ctx.official_index_key_slot)];
    const ScoreSource keys{.cache = &cache,
                           .place = &key_source.index,
                           .table = r.block_tables[key_source.kv.group_idx]};
    // An observer sees each request's whole score matrix; otherwise long contexts score their
    // tokens in passes within the budget.
    const int64_t per_pass = observed ? r.num_tokens
                                      : IndexerTokensPerPass(r.start_pos, r.num_tokens, role_.ratio,
                                                             ctx.indexer_score_budget_bytes);
    for (int64_t t0 = 0; t0 < r.num_tokens; t0 += per_pass) {
      ScorePass(config_, role_, q, r.num_tokens, t0, std::min(per_pass, r.num_tokens - t0), keys, i,
                states[i], tiles, scratch_of, ctx);
    }
  }
}

}  // namespace dsv41
