#include "config/tensor_inventory.h"

#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "base/log.h"

namespace dsv41 {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Appends the tensors of one model in checkpoint.md §6's layout.
class InventoryBuilder {
 public:
  InventoryBuilder(const ModelConfig& config, std::vector<TensorSpec>* out)
      : c_(config), out_(out) {}

  void Add(std::string name, DType dtype, Shape shape) {
    out_->push_back({std::move(name), dtype, std::move(shape)});
  }
  void Bf16(std::string name, Shape shape) { Add(std::move(name), DType::kBF16, std::move(shape)); }
  void F32(std::string name, Shape shape) { Add(std::move(name), DType::kF32, std::move(shape)); }

  // A dense linear with logical weight [out, in] (checkpoint.md §4.1).
  void Linear(const std::string& prefix, int64_t out, int64_t in) {
    const QuantizationConfig& q = c_.quantization;
    if (!q.quantized) {
      Bf16(prefix + ".weight", {out, in});
      return;
    }
    Add(prefix + ".weight", DType::kF8E4M3, {out, in});
    Add(prefix + ".scale", DType::kF8E8M0,
        {CeilDiv(out, q.weight_block_rows), CeilDiv(in, q.weight_block_cols)});
  }

  // A routed-expert linear: MXFP4 with expert_dtype fp4 (checkpoint.md §4.2), else dense.
  void ExpertLinear(const std::string& prefix, int64_t out, int64_t in) {
    if (c_.quantization.quantized && c_.quantization.expert_dtype == "fp4") {
      Add(prefix + ".weight", DType::kI8, {out, in / 2});
      Add(prefix + ".scale", DType::kF8E8M0, {out, in / 32});
      return;
    }
    Linear(prefix, out, in);
  }

  // checkpoint.md §6.2: every backbone layer and DSpark stage.
  void Attention(const std::string& p) {
    const int64_t hidden = c_.hidden_size;
    Linear(p + ".attn.wq_a", c_.q_lora_rank, hidden);
    Bf16(p + ".attn.q_norm.weight", {c_.q_lora_rank});
    Linear(p + ".attn.wq_b", static_cast<int64_t>(c_.num_attention_heads) * c_.head_dim,
           c_.q_lora_rank);
    Linear(p + ".attn.wkv", c_.head_dim, hidden);
    Bf16(p + ".attn.kv_norm.weight", {c_.head_dim});
    Linear(p + ".attn.wo_a", c_.wo_a_out(), c_.group_in());
    Linear(p + ".attn.wo_b", hidden, c_.wo_a_out());
    F32(p + ".attn.attn_sink", {c_.num_attention_heads});
  }

  // checkpoint.md §6.3–6.4: ownership from the layer's role.
  void CompressorAndIndexer(const std::string& p, const LayerRole& role) {
    const int64_t hidden = c_.hidden_size;
    if (role.owns_compressor()) {
      Bf16(p + ".attn.compressor.wkv.weight", {c_.head_dim, hidden});
      if (role.owns_compressor_gate())
        Bf16(p + ".attn.compressor.wgate.weight", {c_.head_dim, hidden});
      Bf16(p + ".attn.compressor.norm.weight", {c_.head_dim});
    }
    if (role.owns_indexer_query()) {
      Linear(p + ".attn.indexer.wq_b", static_cast<int64_t>(c_.index_n_heads) * c_.index_head_dim,
             c_.q_lora_rank);
      Bf16(p + ".attn.indexer.weights_proj.weight", {c_.index_n_heads, hidden});
    }
    if (role.owns_indexer_key()) {
      Bf16(p + ".attn.indexer.wk.weight", {c_.index_head_dim, c_.head_dim});
      Bf16(p + ".attn.indexer.k_norm.weight", {c_.index_head_dim});
    }
  }

  // checkpoint.md §6.5.
  void NormsAndHc(const std::string& p) {
    Bf16(p + ".attn_norm.weight", {c_.hidden_size});
    Bf16(p + ".ffn_norm.weight", {c_.hidden_size});
    for (const char* site : {"attn", "ffn"}) {
      const std::string hc = p + ".hc_" + site;
      F32(hc + "_fn", {c_.hc_mix_rows(), c_.hc_dim()});
      F32(hc + "_base", {c_.hc_mix_rows()});
      F32(hc + "_scale", {3});
    }
  }

  // checkpoint.md §6.6 / §6.8.
  void Moe(const std::string& p, int32_t num_experts) {
    const int64_t hidden = c_.hidden_size;
    const int64_t inter = c_.moe_intermediate_size;
    Bf16(p + ".ffn.gate.weight", {num_experts, hidden});
    F32(p + ".ffn.gate.bias", {num_experts});
    F32(p + ".ffn.gate.bias_vl", {num_experts});
    for (int32_t e = 0; e < num_experts; ++e) {
      const std::string expert = p + ".ffn.experts." + std::to_string(e);
      ExpertLinear(expert + ".w1", inter, hidden);
      ExpertLinear(expert + ".w2", hidden, inter);
      ExpertLinear(expert + ".w3", inter, hidden);
    }
    Linear(p + ".ffn.shared_experts.w1", inter, hidden);
    Linear(p + ".ffn.shared_experts.w2", hidden, inter);
    Linear(p + ".ffn.shared_experts.w3", inter, hidden);
  }

  // checkpoint.md §4.3, §6.7: the tables stay FP8 even in unquantised checkpoints.
  void Engram(const std::string& p, int32_t slot) {
    const int64_t rows = c_.engram_num_embeddings[static_cast<size_t>(slot)];
    Add(p + ".engram.embed.weight", DType::kF8E4M3, {rows, c_.engram_head_dim});
    Add(p + ".engram.embed.scale", DType::kF8E8M0, {rows, c_.engram_head_dim / 32});
    Linear(p + ".engram.wkv", c_.engram_out(), c_.engram_in());
    Bf16(p + ".engram.q_weight", {c_.hc_mult, c_.hidden_size});
    Bf16(p + ".engram.k_weight", {c_.hc_mult, c_.hidden_size});
  }

  // vision.md §2: every tower tensor BF16; the aligner at the top level (not vision.aligner).
  void Vision() {
    const VisionConfig& v = c_.vision;
    const int64_t d = v.hidden_size;
    for (const char* name : {"image_start", "image_end", "image_newline"}) {
      Bf16(name, {c_.hidden_size});
    }
    Bf16("vision.patch_embed.proj.weight", {d, v.patch_values()});
    Bf16("vision.patch_embed.proj.bias", {d});
    for (int32_t i = 0; i < v.num_hidden_layers; ++i) {
      const std::string p = "vision.blocks." + std::to_string(i);
      Bf16(p + ".norm1.weight", {d});
      Bf16(p + ".attn.wqkv.weight", {3 * d, d});
      Bf16(p + ".attn.wqkv.bias", {3 * d});
      Bf16(p + ".attn.wo.weight", {d, d});
      Bf16(p + ".attn.wo.bias", {d});
      Bf16(p + ".norm2.weight", {d});
      Bf16(p + ".mlp.w1.weight", {2 * int64_t{v.intermediate_size}, d});
      Bf16(p + ".mlp.w2.weight", {d, v.intermediate_size});
    }
    Bf16("vision.norm.weight", {d});
    const int64_t r = v.downsample_ratio;
    Bf16("aligner.w1.weight", {c_.hidden_size, r * r * d});
    Bf16("aligner.w1.bias", {c_.hidden_size});
    Bf16("aligner.w2.weight", {c_.hidden_size, c_.hidden_size});
    Bf16("aligner.w2.bias", {c_.hidden_size});
  }

  // checkpoint.md §6.8: main_proj/main_norm on the first stage, the heads on the last.
  void DsparkStage(int32_t stage, int32_t num_stages) {
    const std::string p = "mtp." + std::to_string(stage);
    Attention(p);
    NormsAndHc(p);
    Moe(p, c_.dspark_n_routed_experts);
    if (stage == 0) {
      Linear(p + ".main_proj", c_.hidden_size, c_.dspark_in());
      Bf16(p + ".main_norm.weight", {c_.hidden_size});
    }
    if (stage == num_stages - 1) {
      Bf16(p + ".norm.weight", {c_.hidden_size});
      Bf16(p + ".markov_head.embed.weight", {c_.vocab_size, c_.dspark_markov_rank});
      Bf16(p + ".markov_head.head.weight", {c_.vocab_size, c_.dspark_markov_rank});
      Bf16(p + ".confidence_head.proj.weight", {1, c_.confidence_in()});
    }
  }

 private:
  const ModelConfig& c_;
  std::vector<TensorSpec>* out_;
};

// Tower tensors when the config has no tower (or include_vision is off).
bool IsIgnored(std::string_view name) {
  return name.starts_with("vision.") || name.starts_with("aligner.") || name.starts_with("image_");
}

constexpr size_t kMaxListed = 20;

}  // namespace

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config, const LayerPlan& plan,
                                        const InventoryOptions& options) {
  std::vector<TensorSpec> tensors;
  InventoryBuilder b(config, &tensors);
  b.Bf16("embed.weight", {config.vocab_size, config.hidden_size});
  for (const LayerRole& role : plan.layers) {
    const std::string p = "layers." + std::to_string(role.layer);
    b.Attention(p);
    b.CompressorAndIndexer(p, role);
    b.NormsAndHc(p);
    b.Moe(p, config.n_routed_experts);
    if (role.has_engram()) b.Engram(p, *role.engram_slot);
  }
  if (options.include_dspark) {
    for (int32_t k = 0; k < plan.num_dspark_stages; ++k) b.DsparkStage(k, plan.num_dspark_stages);
  }
  b.Bf16("norm.weight", {config.hidden_size});
  b.Bf16("head.weight", {config.vocab_size, config.hidden_size});
  if (options.include_vision && config.vision.has_tower()) b.Vision();
  return tensors;
}

uint64_t TensorBytes(const TensorSpec& tensor) {
  return NumElements(tensor.shape).value_or(0) * DTypeSize(tensor.dtype);
}

Status CheckTensors(const std::vector<TensorSpec>& expected,
                    const std::vector<TensorSpec>& present) {
  std::unordered_map<std::string_view, const TensorSpec*> present_by_name;
  std::vector<std::string> problems;
  for (const TensorSpec& tensor : present) {
    if (!present_by_name.emplace(tensor.name, &tensor).second) {
      problems.push_back("'" + tensor.name + "': present twice");
    }
  }
  std::unordered_set<std::string_view> expected_names;
  for (const TensorSpec& want : expected) {
    expected_names.insert(want.name);
    const auto it = present_by_name.find(want.name);
    if (it == present_by_name.end()) {
      problems.push_back("'" + want.name + "': missing");
      continue;
    }
    const TensorSpec& have = *it->second;
    const bool scale_bytes_ok =
        want.dtype == DType::kF8E8M0 && IsE8m0ScaleDType(have.dtype);  // U8 scales too
    if (have.dtype != want.dtype && !scale_bytes_ok) {
      problems.push_back("'" + want.name + "': dtype " + std::string(DTypeName(have.dtype)) +
                         ", want " + std::string(DTypeName(want.dtype)) +
                         (want.dtype == DType::kF8E8M0 ? " (or U8)" : ""));
    }
    if (have.shape != want.shape) {
      problems.push_back("'" + want.name + "': shape " + ShapeString(have.shape) + ", want " +
                         ShapeString(want.shape));
    }
  }
  size_t num_unexpected = 0;
  for (const TensorSpec& tensor : present) {
    if (expected_names.count(tensor.name) != 0 || IsIgnored(tensor.name)) continue;
    if (++num_unexpected <= kMaxListed) {
      DSV41_LOG_WARN("checkpoint: unexpected tensor '%s' (%s %s) is ignored", tensor.name.c_str(),
                     std::string(DTypeName(tensor.dtype)).c_str(),
                     ShapeString(tensor.shape).c_str());
    }
  }
  if (num_unexpected > kMaxListed) {
    DSV41_LOG_WARN("checkpoint: %zu more unexpected tensors are ignored",
                   num_unexpected - kMaxListed);
  }
  if (problems.empty()) return OkStatus();
  std::string message =
      StrFormat("checkpoint tensors do not match the config: %zu problem%s: ", problems.size(),
                problems.size() == 1 ? "" : "s");
  for (size_t i = 0; i < problems.size() && i < kMaxListed; ++i) {
    if (i > 0) message += "; ";
    message += problems[i];
  }
  if (problems.size() > kMaxListed) {
    message += StrFormat("; ... and %zu more", problems.size() - kMaxListed);
  }
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

}  // namespace dsv41
