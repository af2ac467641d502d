#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "checkpoint/dtype.h"
#include "config/config.h"
#include "config/layer_plan.h"

namespace dsv41 {

// One stored tensor: its checkpoint name, element type and shape.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kBF16;
  Shape shape;

  bool operator==(const TensorSpec&) const = default;
};

struct InventoryOptions {
  bool include_dspark = true;  // false: no mtp.* tensors (`--dspark off`)
  bool include_vision = true;  // false: no vision.*, aligner.* and image_* tensors
};

// Every tensor the text model needs (checkpoint.md §6), derived from the config's sizes and the
// plan's roles: top level (embed, then the layers, then the DSpark stages, then norm and head),
// each layer's modules in a fixed order (attention, compressor, indexer, norms, mHC, MoE, Engram).
// Quantised checkpoints store FP8 weights with one F8_E8M0 scale per weight_block_size tile and,
// with expert_dtype fp4, routed experts as MXFP4 (I8 [out, in/2] + scale [out, in/32]);
// unquantised ones store BF16 weights without scales. Engram tables are always F8_E4M3 + F8_E8M0
// [rows, head_dim/32]. With a vision tower in the config (and include_vision), the tower's
// BF16 tensors follow (vision.md §2: image_start/end/newline, vision.*, aligner.*); without one,
// tensors of those names are ignored.
std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config, const LayerPlan& plan,
                                        const InventoryOptions& options = {});

// Bytes of one tensor's data (elements × dtype size).
uint64_t TensorBytes(const TensorSpec& tensor);

// Compares the tensors a checkpoint holds with the expected ones. Ok, or one InvalidArgument
// listing every missing, mis-shaped, wrong-dtype and duplicated tensor (the first 20, then a
// count). Present tensors that are not expected are logged as warnings, except vision.* and
// image_*, which are ignored.
Status CheckTensors(const std::vector<TensorSpec>& expected,
                    const std::vector<TensorSpec>& present);

}  // namespace dsv41
