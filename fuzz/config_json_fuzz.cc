// libFuzzer target: config.json parsing and validation (model/config.h). Any bytes must give a
// Status or a valid config, never a crash; a config that parses must plan its layers and cache,
// and must read back equal from the config.json it writes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "base/json.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "config/tensor_inventory.h"
#include "kv/cache_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = dsv41::ParseJson(text, "fuzz input");
  if (!json.ok()) return 0;
  auto config = dsv41::ParseModelConfig(*json);
  if (!config.ok()) return 0;
  const dsv41::LayerPlan plan = dsv41::PlanLayers(*config);
  DSV41_CHECK(static_cast<int32_t>(plan.layers.size()) == config->num_hidden_layers);
  // Keep the inventory small enough for the fuzzer's memory limit.
  const int64_t experts = static_cast<int64_t>(config->num_hidden_layers) *
                          (config->n_routed_experts + config->dspark_n_routed_experts);
  if (experts < 100000) (void)dsv41::ExpectedTensors(*config, plan);
  (void)dsv41::PlanCache(*config, plan, dsv41::CachePlanOptions{});
  auto written = dsv41::ParseJson(dsv41::ConfigToHfJson(*config).dump(), "written config");
  DSV41_CHECK(written.ok(), "written config is not JSON");
  auto reread = dsv41::ParseModelConfig(*written);
  DSV41_CHECK(reread.ok(), "written config does not parse: %s", reread.status().ToString().c_str());
  DSV41_CHECK(*reread == *config, "written config reads back different");
  return 0;
}
