#include "engine/loaded_model.h"

#include <utility>

#include "text/special_tokens.h"

namespace dsv41 {

Result<LoadedTextModel> LoadedTextModel::Load(const std::string& dir,
                                              const TextModelOptions& options, bool with_dspark) {
  LoadedTextModel m;
  DSV41_ASSIGN_OR_RETURN(ModelWeights weights,
                         ModelWeights::Load(dir, LoadOptions{.include_dspark = with_dspark}));
  m.weights = std::make_unique<ModelWeights>(std::move(weights));
  DSV41_ASSIGN_OR_RETURN(m.model, TextModel::Load(*m.weights, options));
  if (with_dspark) {
    DSV41_ASSIGN_OR_RETURN(
        m.dspark,
        DsparkModel::Load(*m.weights, DsparkOptions{.reference_linear = options.reference_linear}));
  }
  DSV41_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::Load(dir + "/tokenizer.json"));
  m.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer));
  if (!m.weights->config().engram_layer_ids.empty()) {
    DSV41_ASSIGN_OR_RETURN(m.token_map, BuildEngramTokenMap(*m.tokenizer));
    DSV41_RETURN_IF_ERROR(
        CheckClassCount(m.token_map, m.weights->config().engram_compressed_vocab_size));
    DSV41_ASSIGN_OR_RETURN(m.engram, ComputeEngramHashConstants(m.weights->config(), m.token_map));
  }
  return m;
}

int32_t LoadedTextModel::eos_token_id() const {
  return tokenizer->IdOf(kEos).value_or(config().eos_token_id);
}

}  // namespace dsv41
