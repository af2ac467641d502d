// The Engram module (model.md §9.6): row dequantisation by hand, the resident row source's checks,
// and the whole fusion against the model goldens' engram_streams / engram_gate.

#include "model/engram_fusion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "base/npy.h"
#include "base/thread_pool.h"
#include "model/head.h"
#include "model/weights.h"

namespace dsv41 {
namespace {

const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model/";

Result<ModelWeights> LoadTiny(const std::string& name) {
  return ModelWeights::Load(kGoldens + "checkpoints/" + name, LoadOptions{});
}

// ---- Dequantisation -----------------------------------------------------------------------

TEST(DequantizeEngramRowsTest, ValueTimesPowerOfTwoScalePerBlockOf32) {
  // Two rows of 64: e4m3 codes by hand, 0x38 = 1.0, 0x40 = 2.0, 0xB8 = -1.0, 0x01 = 2^-9
  // (smallest subnormal), 0x7E = 448; scales 127 → 1, 130 → 8, 120 → 2^-7, 0 → 2^-127.
  std::vector<std::byte> values(128, std::byte{0});
  values[0] = std::byte{0x38};
  values[31] = std::byte{0x40};
  values[32] = std::byte{0xB8};
  values[64] = std::byte{0x01};
  values[100] = std::byte{0x7E};
  values[127] = std::byte{0x38};
  const std::vector<std::byte> scales = {std::byte{127}, std::byte{130}, std::byte{120},
                                         std::byte{0}};
  std::vector<float> out(128, -1.0f);
  DequantizeEngramRows(values, scales, 64, 2, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[31], 2.0f);
  EXPECT_EQ(out[32], -8.0f);
  EXPECT_EQ(out[64], std::ldexp(1.0f, -16));
  EXPECT_EQ(out[100], 448.0f * std::ldexp(1.0f, -127));
  EXPECT_EQ(out[127], std::ldexp(1.0f, -127));
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[65], 0.0f);
}

// ---- Resident rows ------------------------------------------------------------------------

TEST(MappedEngramRowSourceTest, CopiesTheCheckpointBytesOfEachRow) {
  Result<ModelWeights> weights = LoadTiny("tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  Result<MappedEngramRowSource> source = MappedEngramRowSource::Open(weights->checkpoint(), 1);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  Result<TensorView> table = weights->Get("layers.1.engram.embed.weight");
  Result<TensorView> scale = weights->Get("layers.1.engram.embed.scale");
  ASSERT_TRUE(table.ok() && scale.ok());
  ASSERT_EQ(source->num_rows(), table->shape[0]);
  ASSERT_EQ(source->row_dim(), weights->config().engram_head_dim);
  const int64_t dim = source->row_dim();
  const std::vector<int64_t> rows = {source->num_rows() - 1, 0, 7, 7};
  std::vector<std::byte> values(rows.size() * static_cast<size_t>(dim));
  std::vector<std::byte> scales(values.size() / 32);
  ASSERT_TRUE(source->FillRows(rows, values, scales).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_EQ(values[i * static_cast<size_t>(dim) + static_cast<size_t>(d)],
                table->bytes[static_cast<size_t>(rows[i] * dim + d)]);
    }
    for (int64_t b = 0; b < dim / 32; ++b) {
      ASSERT_EQ(scales[i * static_cast<size_t>(dim / 32) + static_cast<size_t>(b)],
                scale->bytes[static_cast<size_t>(rows[i] * (dim / 32) + b)]);
    }
  }
}

TEST(MappedEngramRowSourceTest, RowOutsideTheTableIsOutOfRangeNamingTheTable) {
  Result<ModelWeights> weights = LoadTiny("tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  Result<MappedEngramRowSource> source = MappedEngramRowSource::Open(weights->checkpoint(), 4);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const size_t dim = static_cast<size_t>(source->row_dim());
  std::vector<std::byte> values(dim);
  std::vector<std::byte> scales(dim / 32);
  for (int64_t row : {source->num_rows(), int64_t{-1}}) {
    const std::vector<int64_t> rows = {row};
    const Status status = source->FillRows(rows, values, scales);
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
    EXPECT_NE(status.ToString().find("layers.4.engram.embed"), std::string::npos)
        << status.ToString();
  }
}

TEST(EngramFusionTest, LayerWithoutEngramSlotIsRejected) {
  Result<ModelWeights> weights = LoadTiny("tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  // tiny-a's plan puts Engram on layers 1 and 4 only.
  Result<EngramFusion> fusion = EngramFusion::Load(*weights, 0);
  EXPECT_EQ(fusion.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(EngramFusion::Load(*weights, 99).ok());
  EXPECT_TRUE(EngramFusion::Load(*weights, 4).ok());
}

TEST(EngramFusionTest, DeadTokenHasZeroGateAndKeepsItsStreams) {
  Result<ModelWeights> weights = LoadTiny("tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  Result<EngramFusion> fusion = EngramFusion::Load(*weights, 1);
  ASSERT_TRUE(fusion.ok()) << fusion.status().ToString();
  const int64_t num_tokens = 2;
  const size_t stream_size = static_cast<size_t>(fusion->hc_mult() * fusion->hidden_size());
  std::vector<float> streams(2 * stream_size);
  for (size_t i = 0; i < streams.size(); ++i) {
    streams[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.125f;  // exact in bf16
  }
  const std::vector<float> before = streams;
  std::vector<int64_t> rows(static_cast<size_t>(num_tokens * fusion->num_cols()));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(3 * i + 1);
  std::vector<float> gate(static_cast<size_t>(num_tokens * fusion->hc_mult()), -1.0f);
  const std::vector<uint8_t> dead = {1, 0};
  OwnedExecContext exec(1);
  ASSERT_TRUE(fusion->Forward(rows, num_tokens, streams, gate, exec.ctx, dead).ok());
  for (int32_t j = 0; j < fusion->hc_mult(); ++j) {
    EXPECT_EQ(gate[static_cast<size_t>(j)], 0.0f);
    // sigmoid of a signed square root ≥ 1e-3 in magnitude: strictly inside (0, 1), not 1/2.
    const float live = gate[static_cast<size_t>(fusion->hc_mult() + j)];
    EXPECT_GT(live, 0.0f);
    EXPECT_LT(live, 1.0f);
    EXPECT_NE(live, 0.5f);
  }
  for (size_t i = 0; i < stream_size; ++i) ASSERT_EQ(streams[i], before[i]) << i;
  bool changed = false;
  for (size_t i = stream_size; i < 2 * stream_size; ++i) changed |= streams[i] != before[i];
  EXPECT_TRUE(changed);
}

// ---- Goldens ------------------------------------------------------------------------------

struct Case {
  const char* config;
  const char* prompt;
  bool reference_linear;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.config << "/" << c.prompt << (c.reference_linear ? " (LinearRef)" : " (Linear)");
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  std::string name = std::string(info.param.config) + "_" + info.param.prompt +
                     (info.param.reference_linear ? "_ref" : "_fast");
  for (char& c : name) c = (c == '-') ? '_' : c;
  return name;
}

Result<NpyArray> ReadArray(const std::string& path) { return ReadNpy(path); }

class EngramFusionGoldenTest : public testing::TestWithParam<Case> {};

// One case's golden arrays, flattened.
struct EngramGoldens {
  std::vector<int32_t> ids;
  std::vector<int64_t> hash;  // [≥ T, slots, cols]
  std::vector<float> streams_out, want_streams, want_gate, stability;
  int64_t num_tokens = 0;
  int64_t num_slots = 0;
  int64_t cols = 0;
};

// Compares one Engram layer's fused streams and gates ([T, hc · hidden], [T, hc]) with the
// goldens' rows of its slot, position by position, and prints the tally.
void CompareEngramLayer(const Case& c, size_t layer, int64_t slot, int64_t hc, size_t stream_size,
                        std::span<const float> streams, std::span<const float> gate,
                        const EngramGoldens& g) {
  const int64_t num_tokens = g.num_tokens;
  int64_t stable_tokens = 0;
  int64_t exact_tokens = 0;
  int64_t exact_stable_tokens = 0;
  float max_stream_err = 0.0f;
  float max_gate_err = 0.0f;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const bool stable = g.stability[static_cast<size_t>(t)] <= 1e-4f;
    bool exact = true;
    float stream_err = 0.0f;
    float gate_err = 0.0f;
    for (int64_t j = 0; j < hc; ++j) {
      const float got = gate[static_cast<size_t>(t * hc + j)];
      const float want = g.want_gate[static_cast<size_t>((slot * num_tokens + t) * hc + j)];
      exact = exact && got == want;
      gate_err = std::max(gate_err, std::fabs(got - want));
    }
    for (size_t i = 0; i < stream_size; ++i) {
      const float got = streams[static_cast<size_t>(t) * stream_size + i];
      const float want =
          g.want_streams[(static_cast<size_t>(slot * num_tokens + t)) * stream_size + i];
      exact = exact && got == want;
      stream_err = std::max(stream_err, std::fabs(got - want));
    }
    exact_tokens += exact ? 1 : 0;
    if (!stable) continue;
    ++stable_tokens;
    exact_stable_tokens += exact ? 1 : 0;
    max_stream_err = std::max(max_stream_err, stream_err);
    max_gate_err = std::max(max_gate_err, gate_err);
    // Both paths meet the README's 1e-3 (the fast one accumulates wkv's exact products in fp32).
    EXPECT_LE(stream_err, 1e-3f) << "layer " << layer << " position " << t;
    EXPECT_LE(gate_err, 1e-3f) << "layer " << layer << " position " << t;
    if (c.reference_linear) {
      // The goldens sum the wkv product exactly, as LinearRef: bit for bit.
      EXPECT_TRUE(exact) << "layer " << layer << " position " << t;
    }
  }
  std::printf(
      "[ Engram golden ] %s/%s layer %zu (%s): %lld of %lld positions stable, %lld of them "
      "bit-exact (all positions: %lld bit-exact); max stable |stream diff| %.3g, |gate diff| "
      "%.3g\n",
      c.config, c.prompt, layer, c.reference_linear ? "LinearRef" : "Linear",
      static_cast<long long>(stable_tokens), static_cast<long long>(num_tokens),
      static_cast<long long>(exact_stable_tokens), static_cast<long long>(exact_tokens),
      static_cast<double>(max_stream_err), static_cast<double>(max_gate_err));
}

// Reads and checks the shapes of a case's arrays.
void LoadEngramGoldens(const ModelConfig& config, const std::string& dir, EngramGoldens& g) {
  Result<NpyArray> ids_npy = ReadArray(dir + "input_ids.npy");
  Result<NpyArray> hash_npy = ReadArray(dir + "engram_hash.npy");
  Result<NpyArray> streams_npy = ReadArray(dir + "streams_out.npy");
  Result<NpyArray> want_streams_npy = ReadArray(dir + "engram_streams.npy");
  Result<NpyArray> want_gate_npy = ReadArray(dir + "engram_gate.npy");
  Result<NpyArray> stability_npy = ReadArray(dir + "stability_gemm32.npy");
  for (const Result<NpyArray>* a :
       {&ids_npy, &hash_npy, &streams_npy, &want_streams_npy, &want_gate_npy, &stability_npy}) {
    ASSERT_TRUE(a->ok()) << a->status().ToString();
  }
  g.num_tokens = ids_npy->num_elements();
  g.cols = config.n_hash_cols();
  g.num_slots = static_cast<int64_t>(config.engram_layer_ids.size());
  const int64_t hc = config.hc_mult;
  const int64_t hidden = config.hidden_size;
  ASSERT_EQ(hash_npy->shape.size(), 3u);
  ASSERT_GE(hash_npy->shape[0], g.num_tokens);
  ASSERT_EQ(hash_npy->shape[1], g.num_slots);
  ASSERT_EQ(hash_npy->shape[2], g.cols);
  ASSERT_EQ(want_streams_npy->shape, (std::vector<int64_t>{g.num_slots, g.num_tokens, hc, hidden}));
  ASSERT_EQ(want_gate_npy->shape, (std::vector<int64_t>{g.num_slots, g.num_tokens, hc}));
  const std::vector<int64_t> ids64 = ids_npy->ToInt64();
  g.ids.assign(ids64.begin(), ids64.end());
  g.hash = hash_npy->ToInt64();
  g.streams_out = streams_npy->ToFloat();
  g.want_streams = want_streams_npy->ToFloat();
  g.want_gate = want_gate_npy->ToFloat();
  g.stability = stability_npy->ToFloat();
}

// Given the streams entering each Engram layer (streams_out of the layer before, or the embedding
// for layer 0) and the golden row ids, the module reproduces engram_streams and engram_gate.
TEST_P(EngramFusionGoldenTest, ReproducesEngramStreamsAndGates) {
  const Case c = GetParam();
  Result<ModelWeights> weights = LoadTiny(c.config);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  const ModelConfig& config = weights->config();
  EngramGoldens g;
  LoadEngramGoldens(config, kGoldens + "cases/" + c.config + "/" + c.prompt + "/", g);
  if (HasFatalFailure()) return;
  const int64_t num_tokens = g.num_tokens;
  const int64_t hc = config.hc_mult;
  const int64_t cols = g.cols;
  const size_t stream_size = static_cast<size_t>(hc * config.hidden_size);

  OwnedExecContext exec(2, c.reference_linear ? Numerics::kReference : Numerics::kFast);
  int64_t slots_seen = 0;
  for (size_t layer = 0; layer < weights->plan().layers.size(); ++layer) {
    const LayerRole& role = weights->plan().layers[layer];
    if (!role.has_engram()) continue;
    const int64_t slot = *role.engram_slot;
    ++slots_seen;
    Result<EngramFusion> fusion = EngramFusion::Load(*weights, static_cast<int32_t>(layer));
    ASSERT_TRUE(fusion.ok()) << fusion.status().ToString();

    // Streams entering the layer.
    std::vector<float> streams(static_cast<size_t>(num_tokens) * stream_size);
    if (layer == 0) {
      Result<HeadWeights> head = GetHeadWeights(*weights);
      ASSERT_TRUE(head.ok()) << head.status().ToString();
      ASSERT_TRUE(EmbedTokens(*head, g.ids, config.hc_mult, streams).ok());
    } else {
      const size_t offset = (layer - 1) * static_cast<size_t>(num_tokens) * stream_size;
      std::copy_n(g.streams_out.begin() + static_cast<std::ptrdiff_t>(offset), streams.size(),
                  streams.begin());
    }
    std::vector<int64_t> rows(static_cast<size_t>(num_tokens * cols));
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t k = 0; k < cols; ++k) {
        rows[static_cast<size_t>(t * cols + k)] =
            g.hash[static_cast<size_t>((t * g.num_slots + slot) * cols + k)];
      }
    }
    std::vector<float> gate(static_cast<size_t>(num_tokens * hc));
    ASSERT_TRUE(fusion->Forward(rows, num_tokens, streams, gate, exec.ctx).ok());
    CompareEngramLayer(c, layer, slot, hc, stream_size, streams, gate, g);
  }
  EXPECT_EQ(slots_seen, g.num_slots);
}

INSTANTIATE_TEST_SUITE_P(
    Goldens, EngramFusionGoldenTest,
    testing::Values(Case{"tiny-a", "chat5", true}, Case{"tiny-a", "mix40", true},
                    Case{"tiny-a", "long120", true}, Case{"tiny-b", "chat5", true},
                    Case{"tiny-b", "mix40", true}, Case{"tiny-b", "long120", true},
                    Case{"tiny-c", "chat5", true}, Case{"tiny-c", "mix40", true},
                    Case{"tiny-c", "long120", true}, Case{"tiny-a", "long120", false},
                    Case{"tiny-b", "long120", false}, Case{"tiny-c", "long120", false}),
    CaseName);

}  // namespace
}  // namespace dsv41
