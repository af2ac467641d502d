#include "checkpoint/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/mapped_file.h"

namespace dsv41 {
namespace {

using ::testing::HasSubstr;

// A safetensors file assembled by hand: 8-byte little-endian length, header text, data bytes.
std::string HandMadeFile(std::string_view header, std::string_view data, uint64_t length) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  out.append(header);
  out.append(data);
  return out;
}
std::string HandMadeFile(std::string_view header, std::string_view data) {
  return HandMadeFile(header, data, header.size());
}

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Parses `file` as "x.safetensors" and returns the error message ("" when it parsed).
std::string ParseError(const std::string& file) {
  Result<SafetensorsHeader> parsed = ParseSafetensorsHeader(AsBytes(file), "x.safetensors");
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss);
  return parsed.status().message();
}

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("dsv41_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(std::string_view name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

// ---- Handcrafted headers (STYLE.md §11) ----

TEST(SafetensorsHeaderTest, ParsesHandMadeFile) {
  const std::string header = R"({"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string file = HandMadeFile(header, std::string(11, 'x'));
  Result<SafetensorsHeader> parsed = ParseSafetensorsHeader(AsBytes(file), "x.safetensors");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->data_start, 8 + header.size());
  const std::vector<TensorInfo>& tensors = parsed->tensors;
  ASSERT_EQ(tensors.size(), 2u);
  // Data order, not key order.
  EXPECT_EQ(tensors[0].name, "a");
  EXPECT_EQ(tensors[0].dtype, DType::kF32);
  EXPECT_EQ(tensors[0].shape, Shape({2}));
  EXPECT_EQ(tensors[0].begin, 0u);
  EXPECT_EQ(tensors[0].end, 8u);
  EXPECT_EQ(tensors[1].name, "b");
  EXPECT_EQ(tensors[1].begin, 8u);
  EXPECT_EQ(tensors[1].end, 11u);
}

TEST(SafetensorsHeaderTest, AcceptsSpacePaddingMetadataScalarAndEmptyTensors) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"s":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},)"
      R"("e":{"dtype":"F32","shape":[0,7],"data_offsets":[1,1]}}     )";
  const std::string file = HandMadeFile(header, "ab");
  Result<SafetensorsHeader> parsed = ParseSafetensorsHeader(AsBytes(file), "x.safetensors");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->tensors.size(), 2u);
  EXPECT_EQ(parsed->metadata, (std::vector<std::pair<std::string, std::string>>{{"format", "pt"}}));
}

TEST(SafetensorsHeaderTest, FileShorterThanLengthFieldIsNamed) {
  EXPECT_EQ(ParseError(std::string(5, '\0')),
            "x.safetensors: file is 5 B, shorter than the 8-byte header length");
}

TEST(SafetensorsHeaderTest, HeaderLengthBeyondFileIsNamed) {
  const std::string file = HandMadeFile("{}", "", 1000);
  EXPECT_EQ(ParseError(file),
            "x.safetensors: header length 1000 B runs beyond the file (2 B after the length "
            "field)");
}

TEST(SafetensorsHeaderTest, HeaderLengthAboveCapIsNamed) {
  const std::string file = HandMadeFile("{}", "", uint64_t{1} << 40);
  EXPECT_THAT(ParseError(file), HasSubstr("header length 1099511627776 B exceeds"));
}

TEST(SafetensorsHeaderTest, HeaderNotJsonIsNamed) {
  EXPECT_THAT(ParseError(HandMadeFile("{\"a\": ", "")),
              HasSubstr("x.safetensors header: invalid JSON"));
}

TEST(SafetensorsHeaderTest, HeaderNotUtf8IsNamed) {
  EXPECT_THAT(ParseError(HandMadeFile("{\"\xff\": {}}", "")),
              HasSubstr("x.safetensors header: invalid JSON"));
}

TEST(SafetensorsHeaderTest, HeaderNotObjectIsNamed) {
  EXPECT_EQ(ParseError(HandMadeFile("[1, 2]", "")),
            "x.safetensors: header is a JSON array, not an object");
}

TEST(SafetensorsHeaderTest, UnknownDTypeNamesTensor) {
  const std::string header = R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, "x")),
            "x.safetensors: tensor 'w': unknown dtype 'F12'");
}

TEST(SafetensorsHeaderTest, NegativeShapeNamesTensor) {
  const std::string header = R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, "x")),
            "x.safetensors: tensor 'w': shape[0] = -1 is not a non-negative integer");
}

TEST(SafetensorsHeaderTest, NonIntegerShapeNamesTensor) {
  const std::string header = R"({"w":{"dtype":"U8","shape":[1, 2.5],"data_offsets":[0,1]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, "x")),
            "x.safetensors: tensor 'w': shape[1] = 2.5 is not a non-negative integer");
}

TEST(SafetensorsHeaderTest, MissingOffsetsNamesTensor) {
  const std::string header = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})";
  EXPECT_THAT(ParseError(HandMadeFile(header, "x")),
              HasSubstr("tensor 'w': 'data_offsets' must be [begin, end]"));
}

TEST(SafetensorsHeaderTest, ReversedOffsetsNameTensor) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, std::string(8, 'x'))),
            "x.safetensors: tensor 'w': data_offsets [8, 0] are reversed (begin > end)");
}

TEST(SafetensorsHeaderTest, OffsetsBeyondFileNameTensor) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[100,108]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, std::string(8, 'x'))),
            "x.safetensors: tensor 'w': data_offsets [100, 108] end beyond the 8 B data section "
            "(truncated file?)");
}

TEST(SafetensorsHeaderTest, TruncatedDataSectionNamesTensor) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"I16","shape":[6],"data_offsets":[4,16]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, std::string(10, 'x'))),
            "x.safetensors: tensor 'b': data_offsets [4, 16] end beyond the 10 B data section "
            "(truncated file?)");
}

TEST(SafetensorsHeaderTest, ShapeSizeMismatchNamesTensorAndBothSizes) {
  // 576 × 256 × 1 B = 147456 B by hand.
  const std::string header = R"({"layers.0.attn.wkv.weight":{"dtype":"F8_E4M3","shape":[576,256],)"
                             R"("data_offsets":[0,1000]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, std::string(1000, 'x'))),
            "x.safetensors: tensor 'layers.0.attn.wkv.weight': shape [576, 256] × 1 B = 147456 B, "
            "data_offsets span 1000 B");
}

TEST(SafetensorsHeaderTest, OverflowingShapeNamesTensor) {
  // 2^62 × 2^62 elements overflow 64 bits.
  const std::string header =
      R"({"w":{"dtype":"U8","shape":[4611686018427387904,4611686018427387904],)"
      R"("data_offsets":[0,1]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, "x")),
            "x.safetensors: tensor 'w': shape [4611686018427387904, 4611686018427387904] × 1 B "
            "overflows 64 bits");
}

TEST(SafetensorsHeaderTest, OverlappingTensorsAreNamed) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, std::string(12, 'x'))),
            "x.safetensors: tensors 'a' [0, 8] and 'b' [4, 12] overlap");
}

TEST(SafetensorsHeaderTest, IdenticalOffsetsOverlap) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})";
  EXPECT_THAT(ParseError(HandMadeFile(header, std::string(4, 'x'))), HasSubstr("overlap"));
}

TEST(SafetensorsHeaderTest, ZeroByteTensorInsideAnotherIsNoOverlap) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                             R"("z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, std::string(4, 'x'))), "");
}

TEST(SafetensorsHeaderTest, DuplicateTensorNamesAreNamed) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  EXPECT_EQ(ParseError(HandMadeFile(header, "xy")), "x.safetensors header: duplicate key 'a'");
}

TEST(SafetensorsHeaderTest, MetadataOfNonStringsIsNamed) {
  EXPECT_EQ(ParseError(HandMadeFile(R"({"__metadata__":{"format":1}})", "")),
            "x.safetensors: __metadata__ 'format' is a JSON number, not a string");
  EXPECT_EQ(ParseError(HandMadeFile(R"({"__metadata__":[]})", "")),
            "x.safetensors: __metadata__ is a JSON array, not an object");
}

TEST(SafetensorsHeaderTest, EntryNotObjectNamesTensor) {
  EXPECT_EQ(ParseError(HandMadeFile(R"({"w":7})", "")),
            "x.safetensors: tensor 'w': entry is a JSON number, not an object");
}

// ---- Writer and reader ----

using SafetensorsFileTest = TempDirTest;

// Distinct bytes per tensor so a swapped or shifted tensor shows.
std::vector<std::byte> Pattern(size_t n, int seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 31 + seed * 7 + 1) & 0xFF);
  return out;
}

TEST_F(SafetensorsFileTest, RoundTripsEveryDTypeAndScalarAndEmptyShapes) {
  struct Case {
    std::string name;
    DType dtype;
    Shape shape;
    size_t num_bytes;  // by hand: elements × element size
  };
  // Element sizes of the safetensors dtypes, from the format's documentation.
  const std::vector<Case> cases = {
      {"bool", DType::kBool, {2, 3}, 6},   {"u8", DType::kU8, {2, 3}, 6},
      {"i8", DType::kI8, {2, 3}, 6},       {"i16", DType::kI16, {2, 3}, 12},
      {"u16", DType::kU16, {2, 3}, 12},    {"f16", DType::kF16, {2, 3}, 12},
      {"bf16", DType::kBF16, {2, 3}, 12},  {"i32", DType::kI32, {2, 3}, 24},
      {"u32", DType::kU32, {2, 3}, 24},    {"f32", DType::kF32, {2, 3}, 24},
      {"f64", DType::kF64, {2, 3}, 48},    {"i64", DType::kI64, {2, 3}, 48},
      {"u64", DType::kU64, {2, 3}, 48},    {"e4m3", DType::kF8E4M3, {2, 3}, 6},
      {"e5m2", DType::kF8E5M2, {2, 3}, 6}, {"e8m0", DType::kF8E8M0, {2, 3}, 6},
      {"scalar", DType::kF32, {}, 4},      {"empty", DType::kBF16, {0, 4}, 0},
      {"empty1", DType::kU8, {0}, 0},      {"odd", DType::kU8, {3}, 3},
  };
  SafetensorsWriter writer;
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(writer
                    .Add(cases[i].name, cases[i].dtype, cases[i].shape,
                         Pattern(cases[i].num_bytes, static_cast<int>(i)))
                    .ok());
  }
  writer.SetMetadata("format", "pt");
  const std::string path = Path("all.safetensors");
  ASSERT_TRUE(writer.Write(path).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ(file->tensors().size(), cases.size());
  EXPECT_EQ(file->metadata(), (std::vector<std::pair<std::string, std::string>>{{"format", "pt"}}));
  EXPECT_EQ(file->data_start() % 8, 0u);
  size_t sum_bytes = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    std::optional<TensorView> view = file->Find(cases[i].name);
    ASSERT_TRUE(view.has_value());
    EXPECT_EQ(view->name, cases[i].name);
    EXPECT_EQ(view->dtype, cases[i].dtype);
    EXPECT_EQ(view->shape, cases[i].shape);
    const std::vector<std::byte> want = Pattern(cases[i].num_bytes, static_cast<int>(i));
    EXPECT_EQ(std::vector<std::byte>(view->bytes.begin(), view->bytes.end()), want);
    sum_bytes += cases[i].num_bytes;
  }
  EXPECT_EQ(file->file_bytes(), file->data_start() + sum_bytes);
  EXPECT_FALSE(file->Find("missing").has_value());
}

TEST_F(SafetensorsFileTest, WriterKeepsInsertionOrderPacksTensorsAndPadsHeaderWithSpaces) {
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("z", DType::kU8, {3}, Pattern(3, 0)).ok());
  ASSERT_TRUE(writer.Add("a", DType::kF32, {1}, Pattern(4, 1)).ok());
  const std::string path = Path("order.safetensors");
  ASSERT_TRUE(writer.Write(path).ok());

  Result<std::string> raw = ReadFileToString(path);
  ASSERT_TRUE(raw.ok());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>((*raw)[i]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = raw->substr(8, n);
  const size_t last_brace = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', last_brace + 1), std::string::npos) << header;
  // "z" first at [0, 3], "a" next at [3, 7]: insertion order, no gaps; "a" is unaligned.
  EXPECT_THAT(header, HasSubstr(R"("z":{"dtype":"U8","shape":[3],"data_offsets":[0,3]})"));
  EXPECT_THAT(header, HasSubstr(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[3,7]})"));
  EXPECT_LT(header.find("\"z\""), header.find("\"a\""));
  EXPECT_EQ(raw->size(), 8 + n + 7);
}

TEST_F(SafetensorsFileTest, UnalignedTensorReadsThroughMemcpy) {
  // F32 1.5 = 0x3FC00000 and -2.0 = 0xC0000000, little-endian, at data offset 3.
  const std::string header = R"({"pad":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                             R"("f":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  const std::string data =
      std::string("abc") + std::string("\x00\x00\xc0\x3f", 4) + std::string("\x00\x00\x00\xc0", 4);
  const std::string path = Path("unaligned.safetensors");
  ASSERT_TRUE(WriteStringToFile(path, HandMadeFile(header, data)).ok());
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  std::optional<TensorView> view = file->Find("f");
  ASSERT_TRUE(view.has_value());
  ASSERT_EQ(view->bytes.size(), 8u);
  float values[2];
  std::memcpy(values, view->bytes.data(), sizeof(values));
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], -2.0f);
}

TEST_F(SafetensorsFileTest, StreamedTensorIsWrittenInChunks) {
  SafetensorsWriter writer;
  const std::vector<std::byte> want = Pattern(1000, 3);
  ASSERT_TRUE(writer
                  .Add("big", DType::kBF16, {10, 50},
                       [&](const ByteSink& sink) -> Status {
                         for (size_t i = 0; i < want.size(); i += 64) {
                           DSV41_RETURN_IF_ERROR(sink(std::span<const std::byte>(want).subspan(
                               i, std::min<size_t>(64, want.size() - i))));
                         }
                         return OkStatus();
                       })
                  .ok());
  EXPECT_EQ(writer.data_bytes(), 1000u);
  const std::string path = Path("stream.safetensors");
  ASSERT_TRUE(writer.Write(path).ok());
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  std::optional<TensorView> view = file->Find("big");
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(std::vector<std::byte>(view->bytes.begin(), view->bytes.end()), want);
}

TEST_F(SafetensorsFileTest, ShortStreamFailsNamingTensorAndLeavesNoFile) {
  SafetensorsWriter writer;
  ASSERT_TRUE(
      writer.Add("w", DType::kF32, {4}, [](const ByteSink& sink) { return sink(Pattern(12, 0)); })
          .ok());
  const std::string path = Path("short.safetensors");
  Status status = writer.Write(path);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("tensor 'w': byte source gave 12 B, want 16 B"));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_F(SafetensorsFileTest, LongStreamFailsNamingTensor) {
  SafetensorsWriter writer;
  ASSERT_TRUE(
      writer.Add("w", DType::kU8, {4}, [](const ByteSink& sink) { return sink(Pattern(5, 0)); })
          .ok());
  Status status = writer.Write(Path("long.safetensors"));
  EXPECT_THAT(status.message(), HasSubstr("tensor 'w': byte source gave more than 4 B"));
}

TEST(SafetensorsWriterTest, RejectsBadTensorsNamingThem) {
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("w", DType::kU8, {2}, Pattern(2, 0)).ok());
  EXPECT_EQ(writer.Add("w", DType::kU8, {2}, Pattern(2, 0)).message(), "tensor 'w' added twice");
  EXPECT_EQ(writer.Add("v", DType::kF32, {2, 2}, Pattern(15, 0)).message(),
            "tensor 'v': shape [2, 2] × 4 B = 16 B, got 15 B");
  EXPECT_THAT(writer.Add("n", DType::kU8, {-2}, Pattern(0, 0)).message(),
              HasSubstr("tensor 'n': shape [-2] has a negative dimension"));
  EXPECT_FALSE(writer.Add("__metadata__", DType::kU8, {1}, Pattern(1, 0)).ok());
  EXPECT_FALSE(writer.Add("", DType::kU8, {1}, Pattern(1, 0)).ok());
  EXPECT_FALSE(writer.Add("\xff", DType::kU8, {1}, Pattern(1, 0)).ok());
  EXPECT_EQ(writer.num_tensors(), 1u);
}

TEST_F(SafetensorsFileTest, OpenNamesMissingAndCorruptFiles) {
  Result<SafetensorsFile> missing = SafetensorsFile::Open(Path("nope.safetensors"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.safetensors"));

  const std::string path = Path("bad.safetensors");
  ASSERT_TRUE(WriteStringToFile(path, "abc").ok());
  Result<SafetensorsFile> bad = SafetensorsFile::Open(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), path + ": file is 3 B, shorter than the 8-byte header length");
}

}  // namespace
}  // namespace dsv41
