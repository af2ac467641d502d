#pragma once

#include <optional>
#include <string>

#include "config/config.h"

namespace dsv41 {

// One violated rule of model.md §1.6: `field` is the HF name (as in text_config, dotted under
// rope_scaling / quantization_config) so the parser can name the file and spelling it read.
struct ConfigIssue {
  std::string field;
  std::string why;
};

// The first violated validation rule, or nullopt when the config is valid. Used by
// ValidateConfig and ParseModelConfig.
std::optional<ConfigIssue> FindConfigIssue(const ModelConfig& config);

// Logs the non-fatal findings (YaRN original × factor != max_position_embeddings).
void WarnAboutConfig(const ModelConfig& config);

}  // namespace dsv41
