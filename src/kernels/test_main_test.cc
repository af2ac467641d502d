// The scratch folder test_main.cc gives each test process.

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace dsv41 {
namespace {

// Tests that run as parallel processes write the same names under TempDir(); each process has
// its own folder, so none removes or overwrites another's files.
TEST(TestMainTest, TempDirIsAFolderOfThisProcessAlone) {
  const std::string dir = ::testing::TempDir();
  const std::string own = "dsv41_test_" + std::to_string(static_cast<long>(getpid())) + "/";
  ASSERT_GE(dir.size(), own.size());
  EXPECT_EQ(dir.substr(dir.size() - own.size()), own) << dir;
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
}

}  // namespace
}  // namespace dsv41
