#include "checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"

namespace dsv41 {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> Pattern(size_t n, int seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 13 + seed * 5 + 3) & 0xFF);
  return out;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("dsv41_ckpt_" + std::string(info->name()) + "_" + std::to_string(::getpid())))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(std::string_view name) const { return dir_ + "/" + std::string(name); }

  // Writes U8 tensors t0, t1, ... of the given byte sizes with `options`.
  void WriteU8Tensors(const std::vector<size_t>& sizes, ShardingOptions options) {
    ShardedCheckpointWriter writer(dir_, options);
    writer.SetShardMetadata("format", "pt");
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_TRUE(writer
                      .Add(StrFormat("t%zu", i), DType::kU8, {static_cast<int64_t>(sizes[i])},
                           Pattern(sizes[i], int(i)))
                      .ok());
    }
    Status status = writer.Finish();
    ASSERT_TRUE(status.ok()) << status.ToString();
  }

  // weight_map of the written index, read independently of Checkpoint.
  std::map<std::string, std::string> WeightMap() const {
    Result<Json> index = ReadJsonFile(Path(kCheckpointIndexFile));
    EXPECT_TRUE(index.ok());
    std::map<std::string, std::string> out;
    if (!index.ok()) return out;
    for (const auto& [name, shard] : (*index)["weight_map"].items()) {
      out[name] = shard.get<std::string>();
    }
    return out;
  }

  void WriteIndex(const std::map<std::string, std::string>& weight_map) const {
    Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    ASSERT_TRUE(WriteStringToFile(Path(kCheckpointIndexFile), index.dump()).ok());
  }

  std::string dir_;
};

TEST(ShardedCheckpointWriterTest, ShardFileNamesHaveFiveDigits) {
  EXPECT_EQ(ShardedCheckpointWriter::ShardFileName(0, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(ShardedCheckpointWriter::ShardFileName(47, 48), "model-00048-of-00048.safetensors");
}

TEST_F(CheckpointTest, ShardedRoundTripResolvesEveryTensor) {
  const std::vector<size_t> sizes = {100, 7, 0, 64, 33, 1, 250};
  WriteU8Tensors(sizes, ShardingOptions{.num_shards = 3});
  for (int s = 1; s <= 3; ++s) {
    EXPECT_TRUE(std::filesystem::exists(Path(StrFormat("model-%05d-of-00003.safetensors", s))));
  }
  Result<Json> index = ReadJsonFile(Path(kCheckpointIndexFile));
  ASSERT_TRUE(index.ok());
  // 100 + 7 + 0 + 64 + 33 + 1 + 250 = 455 by hand.
  EXPECT_EQ((*index)["metadata"]["total_size"].get<uint64_t>(), 455u);
  EXPECT_EQ((*index)["weight_map"].size(), sizes.size());

  std::vector<std::string> stages;
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_, [&](const Progress& p) {
    stages.emplace_back(p.stage);
    return true;
  });
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_FALSE(stages.empty());
  EXPECT_EQ(checkpoint->shards().size(), 3u);
  EXPECT_EQ(checkpoint->num_tensors(), sizes.size());
  EXPECT_EQ(checkpoint->total_bytes(), 455u);
  EXPECT_EQ(checkpoint->index_total_size(), std::optional<uint64_t>(455));
  for (size_t i = 0; i < sizes.size(); ++i) {
    Result<TensorView> view = checkpoint->Get(StrFormat("t%zu", i));
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->dtype, DType::kU8);
    EXPECT_EQ(view->shape, Shape({static_cast<int64_t>(sizes[i])}));
    const std::vector<std::byte> want = Pattern(sizes[i], int(i));
    EXPECT_EQ(std::vector<std::byte>(view->bytes.begin(), view->bytes.end()), want) << i;
  }
  for (const SafetensorsFile& shard : checkpoint->shards()) {
    EXPECT_EQ(shard.metadata(),
              (std::vector<std::pair<std::string, std::string>>{{"format", "pt"}}));
  }
}

TEST_F(CheckpointTest, ByteBudgetStartsShardBeforeTensorThatWouldExceedIt) {
  // Budget 100: {40, 40} = 80, +40 > 100; {40}, +100 > 100; {100}, +10 > 100; {10}.
  WriteU8Tensors({40, 40, 40, 100, 10}, ShardingOptions{.max_shard_bytes = 100});
  const std::map<std::string, std::string> want = {{"t0", "model-00001-of-00004.safetensors"},
                                                   {"t1", "model-00001-of-00004.safetensors"},
                                                   {"t2", "model-00002-of-00004.safetensors"},
                                                   {"t3", "model-00003-of-00004.safetensors"},
                                                   {"t4", "model-00004-of-00004.safetensors"}};
  EXPECT_EQ(WeightMap(), want);
}

TEST_F(CheckpointTest, RequestedShardCountIsMetWithUnevenTensors) {
  // Target ceil(1003 / 3) = 335 B per shard: t0 fills shard 1; t1 starts shard 2 (1000 >= 335);
  // t2 starts shard 3 (1001 >= 670); t3 joins it (no shard left).
  WriteU8Tensors({1000, 1, 1, 1}, ShardingOptions{.num_shards = 3});
  const std::map<std::string, std::string> want = {{"t0", "model-00001-of-00003.safetensors"},
                                                   {"t1", "model-00002-of-00003.safetensors"},
                                                   {"t2", "model-00003-of-00003.safetensors"},
                                                   {"t3", "model-00003-of-00003.safetensors"}};
  EXPECT_EQ(WeightMap(), want);
}

TEST_F(CheckpointTest, RequestedShardCountUsesEveryShardForEqualTensors) {
  WriteU8Tensors({10, 10, 10, 10, 10, 10}, ShardingOptions{.num_shards = 3});
  const std::map<std::string, std::string> want = {
      {"t0", "model-00001-of-00003.safetensors"}, {"t1", "model-00001-of-00003.safetensors"},
      {"t2", "model-00002-of-00003.safetensors"}, {"t3", "model-00002-of-00003.safetensors"},
      {"t4", "model-00003-of-00003.safetensors"}, {"t5", "model-00003-of-00003.safetensors"}};
  EXPECT_EQ(WeightMap(), want);
}

TEST_F(CheckpointTest, SingleFileCheckpointWithoutIndexOpens) {
  std::filesystem::create_directories(dir_);
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("w", DType::kBF16, {2, 2}, Pattern(8, 1)).ok());
  ASSERT_TRUE(writer.Write(Path(kSingleFileCheckpoint)).ok());
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->tensor_names(), std::vector<std::string>{"w"});
  EXPECT_EQ(checkpoint->total_bytes(), 8u);
  EXPECT_FALSE(checkpoint->index_total_size().has_value());
}

TEST_F(CheckpointTest, EmptyDirectoryIsNotFound) {
  std::filesystem::create_directories(dir_);
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("neither model.safetensors.index.json nor model.safetensors"));
}

TEST_F(CheckpointTest, IndexPointingAtMissingShardNamesShardAndTensor) {
  WriteU8Tensors({4, 4}, ShardingOptions{.num_shards = 2});
  std::map<std::string, std::string> weight_map = WeightMap();
  weight_map["ghost"] = "model-00009-of-00009.safetensors";
  WriteIndex(weight_map);
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("model.safetensors.index.json: shard 'model-00009-of-00009.safetensors' "
                        "(of tensor 'ghost')"));
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("no such file"));
}

TEST_F(CheckpointTest, IndexListingTensorMissingFromShardNamesIt) {
  WriteU8Tensors({4, 4}, ShardingOptions{.num_shards = 2});
  std::map<std::string, std::string> weight_map = WeightMap();
  weight_map["ghost"] = "model-00002-of-00002.safetensors";
  WriteIndex(weight_map);
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("model.safetensors.index.json: tensor 'ghost' is missing from its shard "
                        "model-00002-of-00002.safetensors"));
}

TEST_F(CheckpointTest, IndexListingTensorInWrongShardNamesBoth) {
  // Target 6 B per shard: t0, t1 in shard 1, t2 in shard 2; t1 keeps shard 1 in the index.
  WriteU8Tensors({4, 4, 4}, ShardingOptions{.num_shards = 2});
  std::map<std::string, std::string> weight_map = WeightMap();
  weight_map["t0"] = "model-00002-of-00002.safetensors";
  WriteIndex(weight_map);
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("tensor 't0' is listed in model-00002-of-00002.safetensors but stored in "
                        "model-00001-of-00002.safetensors"));
}

TEST_F(CheckpointTest, TensorInTwoShardsIsNamed) {
  std::filesystem::create_directories(dir_);
  for (const char* shard : {"a.safetensors", "b.safetensors"}) {
    SafetensorsWriter writer;
    ASSERT_TRUE(writer.Add("dup", DType::kU8, {1}, Pattern(1, 0)).ok());
    ASSERT_TRUE(writer.Write(Path(shard)).ok());
  }
  WriteIndex({{"dup", "a.safetensors"}, {"other", "b.safetensors"}});
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("tensor 'dup' appears in both a.safetensors and b.safetensors"));
}

TEST_F(CheckpointTest, ShardNameOutsideDirectoryIsRejected) {
  WriteU8Tensors({4}, ShardingOptions{});
  WriteIndex({{"t0", "../model-00001-of-00001.safetensors"}});
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("weight_map['t0'] is not a shard file name in the directory"));
}

TEST_F(CheckpointTest, CorruptShardIsNamedThroughTheIndex) {
  WriteU8Tensors({4, 4}, ShardingOptions{.num_shards = 2});
  ASSERT_TRUE(WriteStringToFile(Path("model-00002-of-00002.safetensors"), "1234").ok());
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("shorter than the 8-byte header length"));
}

TEST_F(CheckpointTest, GetOfUnknownTensorNamesIt) {
  WriteU8Tensors({4}, ShardingOptions{});
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_);
  ASSERT_TRUE(checkpoint.ok());
  Result<TensorView> view = checkpoint->Get("layers.0.attn.wkv.weight");
  ASSERT_FALSE(view.ok());
  EXPECT_EQ(view.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(view.status().message(), HasSubstr("no tensor 'layers.0.attn.wkv.weight'"));
  EXPECT_FALSE(checkpoint->Find("nope").has_value());
}

TEST(ShardedCheckpointWriterTest, RejectsBadTensorsWhenAdded) {
  ShardedCheckpointWriter writer("unused", ShardingOptions{});
  ASSERT_TRUE(writer.Add("w", DType::kU8, {2}, Pattern(2, 0)).ok());
  EXPECT_EQ(writer.Add("w", DType::kU8, {2}, Pattern(2, 0)).message(), "tensor 'w' added twice");
  EXPECT_EQ(writer.Add("", DType::kU8, {1}, Pattern(1, 0)).message(), "tensor name is empty");
  EXPECT_THAT(writer.Add("v", DType::kF32, {2}, Pattern(7, 0)).message(),
              HasSubstr("tensor 'v': shape × 4 B = 8 B, got 7 B"));
  EXPECT_THAT(writer.Add("s", DType::kF32, {2}, TensorBytesFn()).message(),
              HasSubstr("tensor 's': no byte source"));
}

TEST_F(CheckpointTest, ProgressReturningFalseCancelsOpenAndFinish) {
  WriteU8Tensors({4, 4}, ShardingOptions{.num_shards = 2});
  EXPECT_FALSE(Checkpoint::Open(dir_, [](const Progress&) { return false; }).ok());

  ShardedCheckpointWriter writer(dir_ + "/cancelled", ShardingOptions{});
  ASSERT_TRUE(writer.Add("w", DType::kU8, {4}, Pattern(4, 0)).ok());
  Status status = writer.Finish([](const Progress&) { return false; });
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("cancelled"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/cancelled/" + std::string(kCheckpointIndexFile)));
}

// ---- The golden tiny checkpoints (read as shipped) ----

struct GoldenCase {
  const char* name;
  size_t num_shards;
  size_t num_tensors;  // counted from the shard headers with python3 while writing this test
  std::map<DType, size_t> dtype_counts;
  Shape embed_shape;
  uint8_t embed_first_bytes[4];  // first 4 bytes of embed.weight's data
};

class GoldenCheckpointTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenCheckpointTest, EveryIndexEntryResolvesAndBytesMatchTotalSize) {
  const GoldenCase& c = GetParam();
  const std::string dir =
      std::string(DSV41_SHARED_DIR) + "/goldens/model/checkpoints/" + std::string(c.name);
  Result<Json> index = ReadJsonFile(dir + "/" + std::string(kCheckpointIndexFile));
  ASSERT_TRUE(index.ok()) << index.status().ToString();

  Result<Checkpoint> checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->shards().size(), c.num_shards);
  EXPECT_EQ(checkpoint->num_tensors(), c.num_tensors);
  EXPECT_EQ((*index)["weight_map"].size(), c.num_tensors);
  EXPECT_EQ(checkpoint->total_bytes(), (*index)["metadata"]["total_size"].get<uint64_t>());

  std::map<DType, size_t> dtype_counts;
  for (const auto& [name, shard] : (*index)["weight_map"].items()) {
    Result<TensorView> view = checkpoint->Get(name);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->bytes.size(), TensorBytes(view->dtype, view->shape)) << name;
    ++dtype_counts[view->dtype];
  }
  EXPECT_EQ(dtype_counts, c.dtype_counts);

  // Each shard's tensors tile its data section exactly (true of these files: no gaps, no tail).
  for (const SafetensorsFile& shard : checkpoint->shards()) {
    uint64_t shard_bytes = 0;
    for (const TensorInfo& t : shard.tensors()) shard_bytes += t.end - t.begin;
    EXPECT_EQ(shard.data_start() + shard_bytes, shard.file_bytes()) << shard.path();
    EXPECT_EQ(shard.data_start() % 8, 0u) << shard.path();
  }

  Result<TensorView> embed = checkpoint->Get("embed.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ(embed->dtype, DType::kBF16);
  EXPECT_EQ(embed->shape, c.embed_shape);
  ASSERT_GE(embed->bytes.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(static_cast<uint8_t>(embed->bytes[i]), c.embed_first_bytes[i]) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyFixtures, GoldenCheckpointTest,
                         ::testing::Values(GoldenCase{"tiny-a",
                                                      3,
                                                      939,
                                                      {{DType::kBF16, 93},
                                                       {DType::kF32, 108},
                                                       {DType::kF8E8M0, 369},
                                                       {DType::kF8E4M3, 105},
                                                       {DType::kI8, 264}},
                                                      {512, 256},
                                                      {0x6f, 0x3f, 0x0a, 0xbe}},
                                           GoldenCase{"tiny-b",
                                                      2,
                                                      308,
                                                      {{DType::kBF16, 241},
                                                       {DType::kF32, 63},
                                                       {DType::kF8E8M0, 2},
                                                       {DType::kF8E4M3, 2}},
                                                      {448, 192},
                                                      {0x01, 0x3e, 0xa3, 0xbf}},
                                           GoldenCase{"tiny-c",
                                                      1,
                                                      939,
                                                      {{DType::kBF16, 93},
                                                       {DType::kF32, 108},
                                                       {DType::kF8E8M0, 369},
                                                       {DType::kF8E4M3, 105},
                                                       {DType::kI8, 264}},
                                                      {512, 256},
                                                      {0x6b, 0xbf, 0x9d, 0x3d}}),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace dsv41
