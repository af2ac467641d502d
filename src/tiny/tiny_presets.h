#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "checkpoint/dtype.h"
#include "config/config.h"

namespace dsv41 {

// A synthetic checkpoint to write: the model config plus how to lay it out on disk.
struct TinySpec {
  ModelConfig config;
  uint64_t seed = 1;
  int32_t num_shards = 3;  // model-0000k-of-0000N.safetensors; 1 writes model.safetensors
  // Large tensors (>= 2^16 elements, zero-centred) drawn directly in their stored encoding —
  // the e4m3 codes of uniform values, random MXFP4 bytes and bf16 values at the tensor's
  // magnitude, with scale bytes to match — instead of quantising drawn fp32 values: real-sized
  // checkpoints in seconds to minutes.
  bool bulk_values = false;
  // kStrict writes the released format where kSimple simplifies (trap list L1–L5): every FP8
  // 32×32 tile and MXFP4 / Engram 32-block gets its own power-of-two gain (2^±4 around a gain of
  // 2^±10 per tensor), so neighbouring E8M0 codes differ and spread over ~101..135 across the
  // checkpoint; every packed
  // FP4 byte holds two different nibbles; the routed experts come after every other tensor, so
  // with many shards they sit in shards apart from their layer's attention. Applies to tensors
  // drawn value by value (not to bulk_values tensors).
  enum class Format { kSimple, kStrict };
  Format format = Format::kSimple;
  // The released checkpoint's magnitudes (trap list E4) for the quantised weights drawn value by
  // value: FP8 dense weights span |w| <= 0.102, Engram table rows |v| <= 3.25, and the routed
  // experts are bell-shaped (about 88 % of their E2M1 codes non-zero), instead of unit-variance
  // uniform values — so scale exponents and rounding land where the real ones do.
  bool released_magnitudes = false;
  // The dtype of every `.scale` tensor: F8_E8M0 as released, or U8 as some converters store
  // the same bytes.
  DType scale_dtype = DType::kF8E8M0;
};

// Names of the built-in presets, the default first.
std::vector<std::string_view> TinyPresetNames();

// A preset by name:
//   tiny       every layer mode (SWA-only, Full r2, Reuse, Full r1 + candidate source, Reindex with
//              the candidate filter), Engram on a ratio-0 and a ratio-2 layer, 3 DSpark stages;
//              FP8 + MXFP4 weights (checkpoint.md §8.2). The Quick start's built-in model.
//   tiny-bf16  the same structure with unquantised BF16 weights (no .scale tensors).
//   tiny-strict the same structure in the strict format (TinySpec::Format::kStrict) at hidden 224,
//              q rank 96 (multiples of 32, not of 128), in 48 shards.
//   tiny-real  `tiny` with the released magnitudes (TinySpec::released_magnitudes).
//   small      the same structure at ~1.2 GB of weights, for speed baselines.
//   flash      the released model's layer shapes (hidden 5120, 64 heads of 512, q rank 1280, 8
//              output groups of rank 1024, indexer 32 × 128 top-512, window 128, experts of 2304,
//              vocabulary 129280, 4 mHC streams, the released Engram row format) in 4 layers —
//              SWA-only, Full r2 + Engram, Full r1 + candidate source, Reuse + Engram — with 16
//              routed experts (top 6) plus the shared one and 3 DSpark stages; bulk values;
//              Engram tables of 8 GiB in all (SetEngramTableGib changes that). About 14 GB.
// InvalidArgument naming the preset and the known names when unknown.
Result<TinySpec> TinyPreset(std::string_view name);

// Switches `config` to unquantised BF16 weights (the Engram tables stay FP8, model.md §1.1 rule 2).
void MakeUnquantized(ModelConfig& config);

// Sets engram_vocab_size (where the prime search starts) so that the Engram tables of `config`
// hold about `gib` GiB in all (FP8 rows of engram_head_dim bytes plus their ue8m0 scales).
// InvalidArgument for a config without Engram layers or a size below one row per prime.
Status SetEngramTableGib(ModelConfig& config, double gib);

}  // namespace dsv41
