#include "model/weights.h"

namespace dsv41 {

ModelWeights::ModelWeights(ModelConfig config, LayerPlan plan, Checkpoint checkpoint,
                           std::vector<TensorSpec> expected, RankShard shard)
    : config_(std::move(config)),
      plan_(std::move(plan)),
      checkpoint_(std::move(checkpoint)),
      expected_(std::move(expected)),
      shard_(shard) {}

std::vector<TensorSpec> PresentTensors(const Checkpoint& checkpoint) {
  std::vector<TensorSpec> present;
  present.reserve(checkpoint.num_tensors());
  for (const std::string& name : checkpoint.tensor_names()) {
    const std::optional<TensorView> view = checkpoint.Find(name);
    if (view) present.push_back(TensorSpec{name, view->dtype, view->shape});
  }
  return present;
}

Result<ModelWeights> ModelWeights::Load(const std::string& dir, const LoadOptions& options,
                                        const ProgressFn& progress) {
  if (options.shard.num_ranks < 1 || options.shard.rank < 0 ||
      options.shard.rank >= options.shard.num_ranks) {
    return InvalidArgumentError("%s: rank %d of %d ranks", dir.c_str(), options.shard.rank,
                                options.shard.num_ranks);
  }
  DSV41_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  LayerPlan plan = PlanLayers(config);
  DSV41_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir, progress));
  std::vector<TensorSpec> expected =
      ExpectedTensors(config, plan,
                      InventoryOptions{.include_dspark = options.include_dspark,
                                       .include_vision = options.include_vision});
  std::vector<TensorSpec> present = PresentTensors(checkpoint);
  if (!options.include_dspark) {
    std::erase_if(present, [](const TensorSpec& t) { return t.name.rfind("mtp.", 0) == 0; });
  }
  DSV41_RETURN_IF_ERROR(CheckTensors(expected, present).WithPrefix(dir));
  return ModelWeights(std::move(config), std::move(plan), std::move(checkpoint),
                      std::move(expected), options.shard);
}

}  // namespace dsv41
