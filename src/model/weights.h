#pragma once

#include <string>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "config/rank_shard.h"
#include "config/tensor_inventory.h"

namespace dsv41 {

struct LoadOptions {
  bool include_dspark = true;  // false: mtp.* tensors are neither required nor used
  bool include_vision = true;  // false: the vision tower's tensors are neither required nor used
  // This process's rank of a multi-process run: the modules take views of the routed experts
  // this rank computes only (config/rank_shard.h). Every tensor is still checked.
  RankShard shard = {};
};

// A model directory opened for inference: config, layer plan and the memory-mapped checkpoint,
// checked against the tensors the plan requires. Weights stay in their stored format inside the
// mappings; TensorViews into it live as long as this object. Move-only; thread-safe to read.
class ModelWeights {
 public:
  // Reads the config (model.md §1.1), derives the layer plan, maps every shard and checks that
  // exactly the expected tensors exist with the expected dtype and shape (one InvalidArgument
  // listing every missing, mis-shaped or wrong-dtype tensor, naming the directory).
  static Result<ModelWeights> Load(const std::string& dir, const LoadOptions& options = {},
                                   const ProgressFn& progress = {});

  const ModelConfig& config() const { return config_; }
  const LayerPlan& plan() const { return plan_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  const std::vector<TensorSpec>& expected() const { return expected_; }
  const RankShard& shard() const { return shard_; }

  // The tensor `name`, which Load checked exists with its expected dtype and shape.
  Result<TensorView> Get(std::string_view name) const { return checkpoint_.Get(name); }

 private:
  ModelWeights(ModelConfig config, LayerPlan plan, Checkpoint checkpoint,
               std::vector<TensorSpec> expected, RankShard shard);
  ModelConfig config_;
  LayerPlan plan_;
  Checkpoint checkpoint_;
  std::vector<TensorSpec> expected_;
  RankShard shard_;
};

// The tensors a checkpoint holds, as TensorSpecs (name, dtype, shape).
std::vector<TensorSpec> PresentTensors(const Checkpoint& checkpoint);

}  // namespace dsv41
