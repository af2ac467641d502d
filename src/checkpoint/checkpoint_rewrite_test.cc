#include "checkpoint/checkpoint_rewrite.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "checkpoint/checkpoint.h"

namespace dsv41 {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/checkpoint_rewrite_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<std::byte> Pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>(seed + 7 * i);
  return bytes;
}

// A one-file checkpoint: an FP8 linear with its F8_E8M0 scale, an expert with its scale, a
// bf16 norm, and a config file beside it.
std::string WriteSource() {
  const std::string dir = FreshDir("src");
  SafetensorsWriter writer;
  EXPECT_TRUE(
      writer.Add("layers.0.attn.wq_a.weight", DType::kF8E4M3, {64, 64}, Pattern(4096, 1)).ok());
  EXPECT_TRUE(writer.Add("layers.0.attn.wq_a.scale", DType::kF8E8M0, {2, 2}, Pattern(4, 120)).ok());
  EXPECT_TRUE(
      writer.Add("layers.0.ffn.experts.0.w1.weight", DType::kI8, {64, 32}, Pattern(2048, 3)).ok());
  EXPECT_TRUE(
      writer.Add("layers.0.ffn.experts.0.w1.scale", DType::kF8E8M0, {64, 2}, Pattern(128, 110))
          .ok());
  EXPECT_TRUE(writer.Add("layers.0.attn_norm.weight", DType::kBF16, {64}, Pattern(128, 9)).ok());
  EXPECT_TRUE(writer.Write(dir + "/model.safetensors").ok());
  std::filesystem::create_directories(dir + "/inference");
  EXPECT_TRUE(WriteStringToFile(dir + "/config.json", "{\"a\": 1}\n").ok());
  EXPECT_TRUE(WriteStringToFile(dir + "/inference/config.json", "{\"b\": 2}\n").ok());
  return dir;
}

TEST(CheckpointRewriteTest, SameBytesWithU8ScalesInShardsWithExpertsLast) {
  const std::string src = WriteSource();
  const std::string dst = FreshDir("dst");
  RewriteOptions options;
  options.num_shards = 3;
  options.scale_dtype = DType::kU8;
  options.place_last = [](std::string_view n) {
    return n.find(".ffn.experts.") != std::string_view::npos;
  };
  const Status s = RewriteCheckpoint(src, dst, options);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Result<Checkpoint> a = Checkpoint::Open(src);
  Result<Checkpoint> b = Checkpoint::Open(dst);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->shards().size(), 3u);
  ASSERT_EQ(b->num_tensors(), a->num_tensors());
  for (const std::string& name : a->tensor_names()) {
    const TensorView x = *a->Find(name);
    const std::optional<TensorView> y = b->Find(name);
    ASSERT_TRUE(y.has_value()) << name;
    EXPECT_EQ(y->shape, x.shape) << name;
    ASSERT_EQ(y->bytes.size(), x.bytes.size()) << name;
    EXPECT_EQ(std::memcmp(y->bytes.data(), x.bytes.data(), x.bytes.size()), 0) << name;
    const bool scale = name.ends_with(".scale");
    EXPECT_EQ(y->dtype, scale ? DType::kU8 : x.dtype) << name;
  }
  // Expert tensors come after every other tensor: the last shard holds only experts.
  const std::vector<std::string>& order = b->tensor_names();
  bool seen_expert = false;
  for (const std::string& name : order) {
    const bool expert = name.find(".ffn.experts.") != std::string::npos;
    EXPECT_FALSE(seen_expert && !expert) << name << " after an expert tensor";
    seen_expert |= expert;
  }
  Result<std::string> inference = ReadFileToString(dst + "/inference/config.json");
  ASSERT_TRUE(inference.ok());
  EXPECT_EQ(*inference, "{\"b\": 2}\n");
  EXPECT_TRUE(std::filesystem::exists(dst + "/config.json"));
}

TEST(CheckpointRewriteTest, RefusesAScaleDtypeThatIsNotAnExponentByte) {
  const std::string src = WriteSource();
  RewriteOptions options;
  options.scale_dtype = DType::kF32;
  const Status s = RewriteCheckpoint(src, FreshDir("bad"), options);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("F32"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace dsv41
