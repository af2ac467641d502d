#include "base/npy.h"

#include <gtest/gtest.h>

#include "base/mapped_file.h"

namespace dsv41 {
namespace {

const std::string kCases = std::string(DSV41_SHARED_DIR) + "/goldens/model/cases";

TEST(NpyTest, ReadsGoldenArraysOfEachType) {
  Result<NpyArray> ids = ReadNpy(kCases + "/tiny-a/chat5/input_ids.npy");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->shape, (std::vector<int64_t>{5}));
  Result<NpyArray> logits = ReadNpy(kCases + "/tiny-a/chat5/logits.npy");
  ASSERT_TRUE(logits.ok());
  EXPECT_EQ(logits->descr, "<f4");
  EXPECT_EQ(logits->shape, (std::vector<int64_t>{5, 512}));
  EXPECT_EQ(logits->ToFloat().size(), 5u * 512u);
}

TEST(NpyTest, WriteThenReadRoundTrips) {
  const std::vector<float> values = {1.5f, -2.0f, 0.0f, 3.25f, 7.0f, -0.5f};
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{6}, std::vector<int64_t>{2, 3}, std::vector<int64_t>{1, 2, 3}}) {
    const std::string bytes = SerializeNpyFloat32(values, shape);
    EXPECT_EQ((bytes.size() - values.size() * 4) % 64, 0u) << "header padded to 64";
    Result<NpyArray> back = ParseNpy(std::as_bytes(std::span(bytes.data(), bytes.size())), "mem");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->shape, shape);
    EXPECT_EQ(back->ToFloat(), values);
  }
}

TEST(NpyTest, Int64WriteThenReadRoundTrips) {
  const std::vector<int64_t> values = {462, -1, 0, int64_t{1} << 40, 376, 128799};
  const std::vector<int64_t> shape = {2, 3};
  const std::string bytes = SerializeNpyInt64(values, shape);
  EXPECT_EQ((bytes.size() - values.size() * 8) % 64, 0u) << "header padded to 64";
  Result<NpyArray> back = ParseNpy(std::as_bytes(std::span(bytes.data(), bytes.size())), "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->descr, "<i8");
  EXPECT_EQ(back->shape, shape);
  EXPECT_EQ(back->ToInt64(), values);
}

TEST(NpyTest, Uint8WriteThenReadRoundTrips) {
  const std::vector<uint8_t> values = {0, 127, 255, 1, 2, 3};
  const std::vector<int64_t> shape = {1, 2, 3};
  const std::string bytes = SerializeNpyUint8(values, shape);
  Result<NpyArray> back = ParseNpy(std::as_bytes(std::span(bytes.data(), bytes.size())), "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->descr, "|u1");
  EXPECT_EQ(back->shape, shape);
  EXPECT_EQ(back->ToInt64(), (std::vector<int64_t>{0, 127, 255, 1, 2, 3}));
}

TEST(NpyTest, WritesNumpysShapeSpelling) {
  const std::vector<float> v = {1, 2, 3};
  const std::vector<int64_t> one_dim = {3};
  const std::vector<int64_t> two_dim = {1, 3};
  EXPECT_NE(SerializeNpyFloat32(v, one_dim).find("'shape': (3,), }"), std::string::npos);
  EXPECT_NE(SerializeNpyFloat32(v, two_dim).find("'shape': (1, 3), }"), std::string::npos);
}

TEST(NpyTest, RejectsCorruptInputNamingIt) {
  const std::string good = SerializeNpyFloat32(std::vector<float>{1, 2}, std::vector<int64_t>{2});
  const auto parse = [](const std::string& s) {
    return ParseNpy(std::as_bytes(std::span(s.data(), s.size())), "x.npy");
  };
  EXPECT_FALSE(parse("not numpy").ok());
  EXPECT_FALSE(parse(good.substr(0, good.size() - 1)).ok()) << "truncated data";
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_FALSE(parse(fortran).ok());
  std::string big_endian = good;
  big_endian.replace(big_endian.find("<f4"), 3, ">f4");
  Result<NpyArray> r = parse(big_endian);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("x.npy"), std::string::npos);
}

}  // namespace
}  // namespace dsv41
