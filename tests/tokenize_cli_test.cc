// Runs the `dsv41 tokenize` and `dsv41 token-map` binaries on golden inputs (tokenizer-and-chat.md
// §3, model.md §9.2) and compares their stdout with the goldens.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"
#include "cli_runner.h"

namespace dsv41 {
namespace {

const std::string kSharedDir = DSV41_SHARED_DIR;
const std::string kBinary = kDsv41Binary;
const std::string kTokenizerDir = kSharedDir + "/data/deepseek-v3-tokenizer";
const std::string kTinyDir = kSharedDir + "/goldens/model/checkpoints/tiny-a";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

TEST(TokenizeCliTest, PrintsGoldenIdsAndDecodedTextPerLine) {
  std::ifstream golden_file(kSharedDir + "/goldens/tokenizer/deepseek_v3_encode.jsonl");
  std::vector<std::string> golden;
  std::string line;
  while (golden.size() < 40 && std::getline(golden_file, line)) golden.push_back(line);
  ASSERT_EQ(golden.size(), 40u);
  const std::string input_path = testing::TempDir() + "/tokenize_cli_input.jsonl";
  {
    std::ofstream input(input_path);
    for (const std::string& g : golden) input << g << "\n";  // extra members are ignored
  }
  const RunResult run =
      RunCommand(kBinary + " tokenize --model " + kTokenizerDir + " < " + input_path);
  EXPECT_EQ(run.exit_code, 0);
  const std::vector<std::string> out = Lines(run.out);
  ASSERT_EQ(out.size(), golden.size());
  for (size_t i = 0; i < golden.size(); ++i) {
    auto want = ParseJson(golden[i], "golden");
    auto got = ParseJson(out[i], "stdout");
    ASSERT_TRUE(want.ok() && got.ok()) << out[i];
    EXPECT_EQ((*got)["ids"], (*want)["ids"]) << "line " << i + 1;
    EXPECT_EQ((*got)["decoded"], (*want)["decoded"]) << "line " << i + 1;
  }
}

TEST(TokenizeCliTest, BadLineIsReportedByNumberOthersStillAnsweredExitOne) {
  const std::string input_path = testing::TempDir() + "/tokenize_cli_bad.jsonl";
  {
    std::ofstream input(input_path);
    input << R"({"text": "a"})"
          << "\n"
          << "not json\n"
          << R"({"text": "b"})"
          << "\n";
  }
  const RunResult run = RunCommand(kBinary + " tokenize --tokenizer " + kTinyDir +
                                   "/tokenizer.json < " + input_path + " 2>/dev/null");
  EXPECT_EQ(run.exit_code, 1);
  const std::vector<std::string> out = Lines(run.out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], R"({"ids":[67],"decoded":"a"})");  // "a" is id 67 in tiny-a's vocab
  EXPECT_NE(out[1].find("stdin line 2"), std::string::npos) << out[1];
  EXPECT_EQ(out[2], R"({"ids":[68],"decoded":"b"})");
}

TEST(TokenizeCliTest, MissingTokenizerFlagIsAUsageError) {
  EXPECT_EQ(RunCommand(kBinary + " tokenize < /dev/null 2>/dev/null").exit_code, 2);
}

TEST(TokenMapCliTest, WritesTheTinyGoldenMapAndPrintsTheClassCount) {
  // tiny-a: 512 ids, engram_compressed_vocab_size 373 in its config.json; the map itself is
  // cases/tiny-a/engram_token_map.npy, whose int32 payload is the last 512 * 4 bytes.
  const std::string out_path = testing::TempDir() + "/token_map_cli.i32";
  const RunResult run =
      RunCommand(kBinary + " token-map --model " + kTinyDir + " --out " + out_path);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "373\n");
  auto written = ReadFileToString(out_path);
  auto golden = ReadFileToString(kSharedDir + "/goldens/model/cases/tiny-a/engram_token_map.npy");
  ASSERT_TRUE(written.ok() && golden.ok());
  ASSERT_EQ(written->size(), 512u * 4);
  ASSERT_NE(golden->find("'descr': '<i4'"), std::string::npos);
  EXPECT_TRUE(*written == golden->substr(golden->size() - 512 * 4));
}

}  // namespace
}  // namespace dsv41
