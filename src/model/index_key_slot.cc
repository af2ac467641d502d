#include "model/index_key_slot.h"

#include "base/check.h"

namespace dsv41 {

bool CompletesGroup(int32_t ratio, int32_t start_pos, int32_t num_tokens) {
  DSV41_CHECK(ratio >= 1 && start_pos >= 0 && num_tokens >= 0, "ratio %d, positions %d +%d", ratio,
              start_pos, num_tokens);
  return (start_pos + num_tokens) / ratio > start_pos / ratio;
}

int32_t IndexKeySourceLayer(const LayerPlan& plan, const LayerRole& role, int32_t start_pos,
                            int32_t num_tokens, bool official_slot) {
  DSV41_CHECK(role.is_index_source && role.kv_source_layer.has_value() && role.ratio > 0,
              "layer %d is not an index source", role.layer);
  const int32_t own = *role.kv_source_layer;
  if (!official_slot || CompletesGroup(role.ratio, start_pos, num_tokens)) return own;
  const int32_t end = start_pos + num_tokens;
  const int32_t needed = end / role.ratio;
  // The borrowed cache must hold the rows the layer reads as its own entries 0 .. needed − 1.
  auto usable = [&](const LayerRole& k) { return end / k.ratio >= needed; };
  // Published earlier in this forward (the layers before `role` ran at the same positions).
  for (int32_t l = role.layer - 1; l >= 0; --l) {
    const LayerRole& k = plan.layers[static_cast<size_t>(l)];
    if (k.is_kv_source && CompletesGroup(k.ratio, start_pos, num_tokens)) {
      return usable(k) ? l : own;
    }
  }
  // Else published last in the previous forward, which ended at position start_pos − 1.
  if (start_pos == 0) return own;
  for (int32_t l = static_cast<int32_t>(plan.layers.size()) - 1; l >= 0; --l) {
    const LayerRole& k = plan.layers[static_cast<size_t>(l)];
    if (k.is_kv_source && CompletesGroup(k.ratio, start_pos - 1, 1)) return usable(k) ? l : own;
  }
  return own;
}

}  // namespace dsv41
