#include "tiny/tiny_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"
#include "checkpoint/checkpoint.h"
#include "config/engram_primes.h"
#include "config/layer_plan.h"
#include "config/tensor_inventory.h"
#include "engram/token_map.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"
#include "text/tokenizer.h"
#include "tiny/synthetic_tokenizer.h"
#include "tiny/tiny_random.h"

namespace dsv41 {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// The values a tensor is drawn from, by its role in the checkpoint (checkpoint.md §8.3).
struct ValueRule {
  float center = 0.0f;  // values are center + amplitude · u, u uniform in [-1, 1)
  float amplitude = 0.0f;
};

ValueRule RuleFor(std::string_view name, const Shape& logical_shape) {
  const bool is_matrix = logical_shape.size() == 2;
  const float fan_in = is_matrix ? static_cast<float>(logical_shape[1]) : 1.0f;
  const float unit_variance = std::sqrt(3.0f / fan_in);  // keeps activations around unit scale
  if (Contains(name, "norm")) return {1.0f, 0.1f};
  if (EndsWith(name, "engram.q_weight") || EndsWith(name, "engram.k_weight")) return {1.0f, 0.1f};
  if (EndsWith(name, "_scale") && Contains(name, ".hc_")) return {1.0f, 0.1f};
  if (EndsWith(name, "_base") && Contains(name, ".hc_")) return {0.0f, 0.1f};
  if (EndsWith(name, "_fn") && Contains(name, ".hc_")) return {0.0f, unit_variance};
  if (EndsWith(name, "attn_sink")) return {0.0f, 0.1f};
  if (EndsWith(name, "gate.bias") || EndsWith(name, "gate.bias_vl")) return {0.0f, 0.01f};
  if (name == "embed.weight" || EndsWith(name, "markov_head.embed.weight")) return {0.0f, 1.0f};
  if (name.substr(0, 6) == "image_") return {0.0f, 0.1f};
  // The tower's biases (vision.md §2): small, so the rows stay near unit scale.
  if ((name.starts_with("vision.") || name.starts_with("aligner.")) && EndsWith(name, ".bias")) {
    return {0.0f, 0.02f};
  }
  if (EndsWith(name, "engram.embed.weight")) return {0.0f, 1.0f};
  return {0.0f, unit_variance};
}

// Fills `out` with the tensor's logical values (never an exact zero, so no all-zero rows).
void DrawValues(uint64_t seed, std::string_view name, const Shape& logical_shape,
                std::vector<float>& out) {
  const ValueRule rule = RuleFor(name, logical_shape);
  SplitMix64 rng(StreamSeed(seed, name));
  for (float& v : out) {
    float u = rng.NextSigned();
    if (u == 0.0f) u = 0x1p-12f;
    v = rule.center + rule.amplitude * u;
  }
}

std::span<const std::byte> AsBytes(const std::vector<uint8_t>& v) {
  return std::as_bytes(std::span<const uint8_t>(v));
}

struct StoredBytes {
  std::vector<uint8_t> weight;  // the tensor itself
  std::vector<uint8_t> scale;   // its `.scale` companion (quantised weights only)
};

Result<StoredBytes> PlainBytes(uint64_t seed, const TensorSpec& spec) {
  std::vector<float> values(*NumElements(spec.shape));
  DrawValues(seed, spec.name, spec.shape, values);
  StoredBytes out;
  out.weight.resize(values.size() * DTypeSize(spec.dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (spec.dtype == DType::kBF16) {
      const uint16_t b = Bf16FromF32(values[i]);
      std::memcpy(&out.weight[2 * i], &b, 2);
    } else {
      std::memcpy(&out.weight[4 * i], &values[i], 4);
    }
  }
  return out;
}

// Strict format: multiplies each tile_rows × tile_cols tile of the row-major [rows, cols] values
// by its own power of two 2^(t + g): t in [-10, 10] for the whole tensor, g in [-4, 4] per tile,
// drawn from the tensor's stream. The E8M0 codes then differ between neighbouring blocks and
// spread over ~±14 around the tensor class's base across the checkpoint. The per-tile range stays
// narrow as in real weights: a matrix whose tiles span 2^28 is dominated by a few weights, and one
// FP8 activation code flipped by an fp32 rounding difference then moves whole outputs.
void ApplyStrictTileGains(uint64_t seed, std::string_view name, int64_t rows, int64_t cols,
                          int64_t tile_rows, int64_t tile_cols, std::vector<float>& values) {
  SplitMix64 rng(StreamSeed(seed, std::string(name) + "#tile-gains"));
  const int tensor_exponent = static_cast<int>(rng.NextBelow(21)) - 10;
  const int64_t tiles_per_row = (cols + tile_cols - 1) / tile_cols;
  std::vector<int> exponents(
      static_cast<size_t>((rows + tile_rows - 1) / tile_rows * tiles_per_row));
  for (int& e : exponents) e = tensor_exponent + static_cast<int>(rng.NextBelow(9)) - 4;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int e = exponents[static_cast<size_t>(r / tile_rows * tiles_per_row + c / tile_cols)];
      float& v = values[static_cast<size_t>(r * cols + c)];
      v = std::ldexp(v, e);
    }
  }
}

// TinySpec::released_magnitudes: the drawn values (uniform in ±amplitude) rescaled to the
// release's ranges — FP8 dense weights to ±0.102, Engram tables to ±3.25 — and routed experts made
// bell-shaped, v → v·(|v|/amplitude)^(1/4), so that a 32-block's E2M1 codes are ~88 % non-zero.
void ApplyReleasedMagnitudes(bool mxfp4, bool engram_table, std::vector<float>& values) {
  float amplitude = 0.0f;
  for (float v : values) amplitude = std::max(amplitude, std::fabs(v));
  if (amplitude == 0.0f) return;
  if (mxfp4) {
    for (float& v : values) {
      v = F32FromBf16(Bf16FromF32(v * std::pow(std::fabs(v) / amplitude, 0.25f)));
    }
    return;
  }
  const float target = engram_table ? 3.25f : 0.102f;
  for (float& v : values) v = F32FromBf16(Bf16FromF32(v * (target / amplitude)));
}

// Strict format: no packed FP4 byte holds two equal nibbles (element 2k ≠ element 2k+1), so
// reading the nibbles in the wrong order changes the weights. The high nibble moves to the
// neighbouring magnitude code.
void MakeNibblesDistinct(std::vector<uint8_t>& packed) {
  for (uint8_t& b : packed) {
    if ((b & 0x0F) == (b >> 4)) b ^= 0x10;
  }
}

// The stored bytes of a quantised weight (`spec` is the `.weight` tensor) and of its scale:
// MXFP4 experts (I8), Engram tables (e4m3, one scale per 32 values of a row) or FP8 32×32 tiles.
Result<StoredBytes> QuantizedBytes(uint64_t seed, const TensorSpec& spec, bool strict,
                                   bool released_magnitudes) {
  if (spec.shape.size() != 2) {
    return InternalError("tensor '%s': a quantised weight must be 2-D", spec.name.c_str());
  }
  const bool mxfp4 = spec.dtype == DType::kI8;
  const int64_t rows = spec.shape[0];
  const int64_t cols = mxfp4 ? spec.shape[1] * 2 : spec.shape[1];
  std::vector<float> values(static_cast<size_t>(rows * cols));
  DrawValues(seed, spec.name, Shape{rows, cols}, values);
  // Round through bf16 first: the release's weights were bf16 before quantisation.
  for (float& v : values) v = F32FromBf16(Bf16FromF32(v));
  const bool engram_table = EndsWith(spec.name, "engram.embed.weight");
  if (released_magnitudes) ApplyReleasedMagnitudes(mxfp4, engram_table, values);
  if (strict) {
    const int64_t tile_rows = mxfp4 || engram_table ? 1 : kFp8Tile;
    ApplyStrictTileGains(seed, spec.name, rows, cols, tile_rows, 32, values);
  }
  StoredBytes out;
  if (mxfp4) {
    DSV41_ASSIGN_OR_RETURN(Mxfp4Weights q, QuantizeMxfp4(rows, cols, values.data()));
    out.weight = std::move(q.weight);
    out.scale = std::move(q.scale);
    if (strict) MakeNibblesDistinct(out.weight);
  } else if (engram_table) {
    for (int64_t r = 0; r < rows; ++r) {
      DSV41_ASSIGN_OR_RETURN(Fp8BlockWeights q, QuantizeFp8Blocks(1, cols, &values[r * cols]));
      out.weight.insert(out.weight.end(), q.weight.begin(), q.weight.end());
      out.scale.insert(out.scale.end(), q.scale.begin(), q.scale.end());
    }
  } else {
    DSV41_ASSIGN_OR_RETURN(Fp8BlockWeights q, QuantizeFp8Blocks(rows, cols, values.data()));
    out.weight = std::move(q.weight);
    out.scale = std::move(q.scale);
  }
  return out;
}

// ---- bulk values (TinySpec::bulk_values)
// ---------------------------------------------------------

constexpr int64_t kBulkMinElements = int64_t{1} << 16;
constexpr size_t kBulkChunkBytes = size_t{16} << 20;

// Whether `weight` (the tensor a `.weight` or its `.scale` belongs to) is drawn in bulk.
bool DrawnInBulk(const TensorSpec& weight) {
  const int64_t elements = *NumElements(weight.shape);
  return elements >= kBulkMinElements && RuleFor(weight.name, weight.shape).center == 0.0f;
}

// The ue8m0 byte of the power of two nearest below `amplitude / max_code` (codes of magnitude up
// to max_code then span about ±amplitude).
uint8_t ScaleByteFor(float amplitude, float max_code) {
  const int e = static_cast<int>(std::floor(std::log2(amplitude / max_code)));
  return static_cast<uint8_t>(std::clamp(e + 127, 1, 254));
}

// The e4m3 code of the value (r / 2^15 − 1) · 448: uniform values, as quantising a uniformly drawn
// tensor gives. (Uniformly random codes would make the magnitudes log-uniform: a few weights then
// dominate every product, and one FP8 activation code flipped by an fp32 rounding difference moves
// the logits by O(1), so fast kernels could not be compared with the reference.)
uint8_t UniformE4m3Code(uint16_t r) {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(65536);
    for (uint32_t i = 0; i < t.size(); ++i) {
      t[i] = E4m3FromF32((static_cast<float>(i) / 32768.0f - 1.0f) * 448.0f);
    }
    return t;
  }();
  return table[r];
}

// Streams the stored bytes of a large tensor straight in its encoding: for a quantised weight
// (`has_scale`) the e4m3 codes of uniform values or random MXFP4 bytes, or, when `is_scale`, its
// scale bytes (the amplitude's power of two, ±1 at random per block); bf16 values with random signs
// and mantissas and exponents 0–3 below the amplitude's; fp32 the same.
Status WriteBulk(uint64_t seed, const TensorSpec& stored, const TensorSpec& weight, bool is_scale,
                 bool has_scale, const ByteSink& sink) {
  const Shape logical =
      weight.dtype == DType::kI8 ? Shape{weight.shape[0], weight.shape[1] * 2} : weight.shape;
  const float amplitude = RuleFor(weight.name, logical).amplitude;
  const uint64_t total = TensorBytes(stored);
  SplitMix64 rng(StreamSeed(seed, stored.name));
  uint8_t scale_byte = 127;
  if (is_scale) scale_byte = ScaleByteFor(amplitude, weight.dtype == DType::kI8 ? 6.0f : 448.0f);
  uint32_t bf16_exponent = 127;
  if (stored.dtype == DType::kBF16 || stored.dtype == DType::kF32) {
    bf16_exponent = static_cast<uint32_t>(
        std::clamp(static_cast<int>(std::floor(std::log2(amplitude))) + 127, 4, 250));
  }
  std::vector<uint8_t> chunk(kBulkChunkBytes);
  for (uint64_t done = 0; done < total;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBulkChunkBytes, total - done));
    for (size_t i = 0; i < n; i += 8) {
      uint64_t v = rng.Next();
      if (is_scale) {
        // Each byte: the base scale, one power of two up or down at random.
        uint64_t out = 0;
        for (int b = 0; b < 8; ++b) {
          const int step = static_cast<int>((v >> (8 * b)) % 3) - 1;
          out |= static_cast<uint64_t>(scale_byte + step) << (8 * b);
        }
        v = out;
      } else if (has_scale && stored.dtype == DType::kF8E4M3) {
        // Each byte: the e4m3 code of a value uniform in ±448, from 16 random bits.
        uint64_t out = 0;
        for (int b = 0; b < 4; ++b) {
          out |= static_cast<uint64_t>(UniformE4m3Code(static_cast<uint16_t>(v >> (16 * b))))
                 << (8 * b);
        }
        const uint64_t more = rng.Next();
        for (int b = 0; b < 4; ++b) {
          out |= static_cast<uint64_t>(UniformE4m3Code(static_cast<uint16_t>(more >> (16 * b))))
                 << (8 * (b + 4));
        }
        v = out;
      } else if (stored.dtype == DType::kBF16) {
        uint64_t out = 0;
        for (int h = 0; h < 4; ++h) {
          const uint64_t r = (v >> (16 * h)) & 0xFFFF;
          const uint64_t e = bf16_exponent - ((r >> 7) & 3);
          out |= (((r & 0x8000) | (e << 7) | (r & 0x7F)) & 0xFFFF) << (16 * h);
        }
        v = out;
      } else if (stored.dtype == DType::kF32) {
        uint64_t out = 0;
        for (int h = 0; h < 2; ++h) {
          const uint64_t r = (v >> (32 * h)) & 0xFFFFFFFFu;
          const uint64_t e = bf16_exponent - ((r >> 23) & 3);
          out |= ((r & 0x807FFFFFu) | (e << 23)) << (32 * h);
        }
        v = out;
      }
      std::memcpy(chunk.data() + i, &v, std::min<size_t>(8, n - i));
    }
    DSV41_RETURN_IF_ERROR(sink(std::as_bytes(std::span<const uint8_t>(chunk.data(), n))));
    done += n;
  }
  return Status();
}

// The inventory (with a vision tower: its tensors, vision.md §2) plus, without one, the release's
// image tensors (ignored by a text-only model but present in the release).
std::vector<TensorSpec> TensorsToWrite(const ModelConfig& config, const LayerPlan& plan) {
  std::vector<TensorSpec> specs = ExpectedTensors(config, plan, InventoryOptions{});
  if (config.vision.has_tower()) return specs;
  for (const char* name : {"image_start", "image_end", "image_newline"}) {
    specs.push_back(TensorSpec{name, DType::kBF16, Shape{config.hidden_size}});
  }
  return specs;
}

// Adds every tensor of `specs` to `writer` (SafetensorsWriter or ShardedCheckpointWriter) with a
// function that generates its bytes while the file is written. Returns the tensor bytes.
template <typename Writer>
Result<uint64_t> AddTensors(const std::vector<TensorSpec>& specs, const TinySpec& tiny,
                            Writer& writer) {
  const uint64_t seed = tiny.seed;
  const bool bulk = tiny.bulk_values;
  const bool strict = tiny.format == TinySpec::Format::kStrict;
  const bool released_magnitudes = tiny.released_magnitudes;
  std::unordered_map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& s : specs) by_name[s.name] = &s;
  uint64_t tensor_bytes = 0;
  for (const TensorSpec& s : specs) {
    const bool is_scale = EndsWith(s.name, ".scale");
    const TensorSpec* weight = &s;
    if (is_scale) {
      auto it = by_name.find(s.name.substr(0, s.name.size() - 6) + ".weight");
      if (it == by_name.end()) {
        return InternalError("tensor '%s' has no weight beside it", s.name.c_str());
      }
      weight = it->second;
    }
    bool has_scale = false;
    if (EndsWith(s.name, ".weight")) {
      has_scale = by_name.count(s.name.substr(0, s.name.size() - 7) + ".scale") > 0;
    }
    const TensorSpec* stored = &s;
    TensorBytesFn write = [seed, weight, stored, is_scale, has_scale, bulk, strict,
                           released_magnitudes](const ByteSink& sink) -> Status {
      if (bulk && DrawnInBulk(*weight)) {
        return WriteBulk(seed, *stored, *weight, is_scale, has_scale || is_scale, sink);
      }
      Result<StoredBytes> bytes = (is_scale || has_scale)
                                      ? QuantizedBytes(seed, *weight, strict, released_magnitudes)
                                      : PlainBytes(seed, *weight);
      if (!bytes.ok()) return bytes.status();
      return sink(AsBytes(is_scale ? bytes->scale : bytes->weight));
    };
    // Scale bytes are the same under either dtype (F8_E8M0 or U8).
    const DType dtype = is_scale && s.dtype == DType::kF8E8M0 ? tiny.scale_dtype : s.dtype;
    DSV41_RETURN_IF_ERROR(writer.Add(s.name, dtype, s.shape, std::move(write)));
    tensor_bytes += TensorBytes(s);
  }
  return tensor_bytes;
}

Status WriteJson(const std::filesystem::path& path, const OrderedJson& json) {
  return WriteStringToFile(path.string(), json.dump(2) + "\n");
}

}  // namespace

Result<TinyCheckpointSummary> WriteTinyCheckpoint(const TinySpec& spec, const std::string& dir,
                                                  const ProgressFn& progress) {
  if (!IsE8m0ScaleDType(spec.scale_dtype)) {
    return InvalidArgumentError("scale dtype %s: want F8_E8M0 or U8",
                                std::string(DTypeName(spec.scale_dtype)).c_str());
  }
  ModelConfig config = spec.config;
  DSV41_ASSIGN_OR_RETURN(SyntheticTokenizer synthetic,
                         BuildSyntheticTokenizer(config.vocab_size, spec.seed));
  config.dspark_noise_token_id = synthetic.system_id;
  config.image_token_id = synthetic.image_id;
  if (!config.engram_layer_ids.empty()) {
    DSV41_ASSIGN_OR_RETURN(
        std::vector<EngramLayerPrimes> primes,
        ComputeEngramPrimes(config.engram_layer_ids, config.engram_max_ngram_size,
                            config.engram_n_heads, config.engram_vocab_size));
    config.engram_num_embeddings.clear();
    for (const EngramLayerPrimes& layer : primes)
      config.engram_num_embeddings.push_back(layer.num_rows);
  }
  DSV41_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromJson(synthetic.json));
  DSV41_ASSIGN_OR_RETURN(EngramTokenMap token_map, BuildEngramTokenMap(tokenizer));
  config.engram_compressed_vocab_size = token_map.num_classes;
  DSV41_RETURN_IF_ERROR(ValidateConfig(config));
  const LayerPlan plan = PlanLayers(config);
  std::vector<TensorSpec> specs = TensorsToWrite(config, plan);
  if (spec.format == TinySpec::Format::kStrict) {
    std::stable_partition(specs.begin(), specs.end(),
                          [](const TensorSpec& t) { return !Contains(t.name, ".ffn.experts."); });
  }

  std::error_code ec;
  const std::filesystem::path root(dir);
  std::filesystem::create_directories(root / "inference", ec);
  if (ec) return IoError("%s: cannot create directory: %s", dir.c_str(), ec.message().c_str());

  TinyCheckpointSummary summary;
  if (spec.num_shards <= 1) {
    SafetensorsWriter writer;
    writer.SetMetadata("format", "pt");
    DSV41_ASSIGN_OR_RETURN(summary.tensor_bytes, AddTensors(specs, spec, writer));
    DSV41_RETURN_IF_ERROR(writer.Write((root / kSingleFileCheckpoint).string()));
  } else {
    ShardedCheckpointWriter writer(
        dir, ShardingOptions{.num_shards = static_cast<size_t>(spec.num_shards)});
    writer.SetShardMetadata("format", "pt");
    DSV41_ASSIGN_OR_RETURN(summary.tensor_bytes, AddTensors(specs, spec, writer));
    DSV41_RETURN_IF_ERROR(writer.Finish(progress));
  }

  DSV41_RETURN_IF_ERROR(WriteJson(root / "config.json", ConfigToHfJson(config)));
  DSV41_RETURN_IF_ERROR(
      WriteJson(root / "inference" / "config.json", ConfigToInferenceJson(config)));
  DSV41_RETURN_IF_ERROR(WriteStringToFile((root / "tokenizer.json").string(), synthetic.json));
  DSV41_RETURN_IF_ERROR(
      WriteStringToFile((root / "tokenizer_config.json").string(), synthetic.config_json));
  OrderedJson generation;
  generation["bos_token_id"] = config.bos_token_id;
  generation["eos_token_id"] = config.eos_token_id;
  generation["do_sample"] = true;
  generation["temperature"] = 1.0;
  generation["top_p"] = 1.0;
  DSV41_RETURN_IF_ERROR(WriteJson(root / "generation_config.json", generation));

  summary.config = std::move(config);
  summary.num_tensors = specs.size();
  return summary;
}

}  // namespace dsv41
