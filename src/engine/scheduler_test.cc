// The scheduler and the KV cache manager together, without a model (the scheduler never touches
// tensors): a randomised run of many requests with shared prefixes, random arrivals, lengths and
// aborts on a pool small enough to preempt, checking every step's budget and block coverage and,
// at the end, that every block is back.

#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "config/config.h"
#include "config/layer_plan.h"
#include "kv/cache_plan.h"
#include "kv/kv_layout.h"

namespace dsv41 {
namespace {

// Six layers over two ratio-2 sources and a ratio-1 one: G_KV, G_RING and three SWA groups.
ModelConfig SmallConfig() {
  ModelConfig config;
  config.num_hidden_layers = 6;
  config.head_dim = 64;
  config.index_head_dim = 32;
  config.sliding_window = 8;
  config.compress_ratios = {0, 2, 2, 1, 1, 2};
  config.kv_source_layer_ids = {1, 3, 5};
  config.index_source_layer_ids = {1, 3, 5};
  config.max_position_embeddings = 4096;
  return config;
}

struct SimRequest {
  std::unique_ptr<Request> request;
  int32_t target_outputs = 0;
};

// Every live request's tables hold each block once; each block's reference count equals the
// number of live tables that hold it; ring blocks are never cached.
void CheckReferences(const KvCacheManager& kv, const CachePlan& plan,
                     const std::map<uint64_t, SimRequest>& live) {
  std::map<uint32_t, uint32_t> refs;
  for (const auto& [id, sim] : live) {
    std::vector<uint32_t> own;
    const std::vector<std::vector<uint32_t>>& tables = sim.request->blocks.tables;
    for (size_t g = 0; g < tables.size(); ++g) {
      for (uint32_t b : tables[g]) {
        if (b == kNoBlock) continue;
        own.push_back(b);
        ++refs[b];
        if (static_cast<int32_t>(g) == plan.ring_group_idx) {
          ASSERT_FALSE(kv.pool().is_cached(b)) << "ring block " << b << " is hashed";
        }
      }
    }
    std::sort(own.begin(), own.end());
    ASSERT_EQ(std::adjacent_find(own.begin(), own.end()), own.end())
        << "request " << id << " holds a block twice";
  }
  for (uint32_t b = 0; b < kv.pool().num_blocks(); ++b) {
    const auto it = refs.find(b);
    ASSERT_EQ(kv.pool().ref_count(b), it == refs.end() ? 0u : it->second) << "block " << b;
  }
}

class SchedulerRandomTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SchedulerRandomTest, BudgetsHoldAndEveryBlockComesBack) {
  const uint32_t seed = GetParam();
  std::mt19937 rng(seed);
  const ModelConfig config = SmallConfig();
  Result<CachePlan> plan =
      PlanCache(config, PlanLayers(config), CachePlanOptions{.block_tokens = 4});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const KvCacheLayout layout = LayoutFromPlan(*plan, config);
  const uint32_t num_blocks = 60 + seed % 40;
  KvCacheManager kv(*plan, num_blocks, KvManagerOptions{.enable_prefix_caching = true});
  const SchedulerOptions options{.max_num_seqs = 6, .max_num_batched_tokens = 24};
  Scheduler scheduler(kv, options);

  // A few shared prefixes so that prompts hit each other's cached blocks.
  std::vector<std::vector<int32_t>> prefixes(3);
  for (auto& p : prefixes) {
    p.resize(4 + rng() % 20);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % 50);
  }
  std::map<uint64_t, SimRequest> live;
  uint64_t next_id = 1;
  int num_finished = 0, num_aborted = 0, num_hits = 0;
  const int kSteps = 3000;
  for (int step = 0; step < kSteps || !live.empty(); ++step) {
    ASSERT_LT(step, kSteps * 10) << "requests never finish";
    if (step < kSteps && rng() % 4 == 0) {  // an arrival
      SimRequest sim;
      sim.request = std::make_unique<Request>();
      Request& r = *sim.request;
      r.id = next_id++;
      r.arrival = r.id;
      std::vector<int32_t> prompt = prefixes[rng() % prefixes.size()];
      prompt.resize(prompt.size() * (rng() % 2), 0);  // half start from a shared prefix
      const size_t extra = 1 + rng() % 30;
      for (size_t i = 0; i < extra; ++i) prompt.push_back(static_cast<int32_t>(rng() % 50));
      r.num_prompt_tokens = static_cast<int32_t>(prompt.size());
      ASSERT_TRUE(r.history.Append(prompt, std::vector<int32_t>(prompt.size(), 0)).ok());
      sim.target_outputs = 1 + static_cast<int32_t>(rng() % 12);
      scheduler.Add(&r);
      live.emplace(r.id, std::move(sim));
    }
    if (!live.empty() && rng() % 40 == 0) {  // an abort
      auto it = std::next(live.begin(), rng() % live.size());
      scheduler.Remove(it->second.request.get());
      live.erase(it);
      ++num_aborted;
    }
    const SchedulerOutput out = scheduler.Schedule();
    ASSERT_LE(out.num_tokens, options.max_num_batched_tokens);
    ASSERT_LE(scheduler.num_running(), options.max_num_seqs);
    for (const ScheduledRequest& s : out.scheduled) {
      const Request& r = *s.request;
      ASSERT_GE(s.num_new_tokens, 1);
      ASSERT_LE(r.num_computed + s.num_new_tokens, r.num_tokens());
      num_hits += r.num_cached_prompt_tokens > 0;
      const BatchRequest br{.first_row = 0,
                            .num_tokens = s.num_new_tokens,
                            .start_pos = static_cast<int32_t>(r.num_computed),
                            .block_tables = r.blocks.tables};
      const Status covered = CheckBlockTables(layout, num_blocks, br, config.sliding_window);
      ASSERT_TRUE(covered.ok()) << "step " << step << ": " << covered.ToString();
    }
    scheduler.Update(out);
    // "Sampling": a request at the end of its tokens gets a new one or finishes.
    for (const ScheduledRequest& s : out.scheduled) {
      Request& r = *s.request;
      if (r.num_computed != r.num_tokens()) continue;
      if (r.num_output_tokens() >= live.at(r.id).target_outputs) {
        scheduler.Remove(&r);
        live.erase(r.id);
        ++num_finished;
        continue;
      }
      const int32_t token = static_cast<int32_t>(rng() % 50);
      const int32_t cls = 0;
      ASSERT_TRUE(r.history.Append(std::span(&token, 1), std::span(&cls, 1)).ok());
    }
    ASSERT_TRUE(kv.CheckConsistency().ok()) << kv.CheckConsistency().ToString();
    if (step % 50 == 0) CheckReferences(kv, *plan, live);
  }
  EXPECT_EQ(kv.pool().num_free(), num_blocks) << "free + cached blocks = all blocks";
  CheckReferences(kv, *plan, live);
  EXPECT_GT(num_finished, 100);
  EXPECT_GT(num_aborted, 10);
  EXPECT_GT(scheduler.num_preemptions(), 0u) << "the pool is meant to be small enough to preempt";
  EXPECT_GT(num_hits, 10) << "shared prefixes are meant to hit";
  std::printf("seed %u: %d finished, %d aborted, %llu preemptions, %d scheduled with a hit\n", seed,
              num_finished, num_aborted,
              static_cast<unsigned long long>(scheduler.num_preemptions()), num_hits);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerRandomTest, ::testing::Values(1u, 2u, 3u, 4u, 5u));

}  // namespace
}  // namespace dsv41
