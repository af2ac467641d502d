#include "base/base64.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsv41 {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// RFC 4648 §10's test vectors, both ways, with and without padding.
TEST(Base64Test, Rfc4648Vectors) {
  const std::vector<std::pair<std::string, std::string>> vectors = {{"", ""},
                                                                    {"f", "Zg=="},
                                                                    {"fo", "Zm8="},
                                                                    {"foo", "Zm9v"},
                                                                    {"foob", "Zm9vYg=="},
                                                                    {"fooba", "Zm9vYmE="},
                                                                    {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(EncodeBase64(Bytes(plain)), encoded);
    Result<std::vector<uint8_t>> decoded = DecodeBase64(encoded, 100);
    ASSERT_TRUE(decoded.ok()) << encoded;
    EXPECT_EQ(*decoded, Bytes(plain));
    std::string unpadded = encoded;
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
    decoded = DecodeBase64(unpadded, 100);
    ASSERT_TRUE(decoded.ok()) << unpadded;
    EXPECT_EQ(*decoded, Bytes(plain));
  }
  Result<std::vector<uint8_t>> spaced = DecodeBase64("Zm9v\nYmFy\r\n", 100);
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(*spaced, Bytes("foobar"));
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(*DecodeBase64(EncodeBase64(all), 256), all);
}

TEST(Base64Test, BadInputIsRefused) {
  for (const char* bad : {"Zm9v!", "Z", "Zm9vY", "Zg=a", "Zg===", "=Zg="}) {
    EXPECT_FALSE(DecodeBase64(bad, 100).ok()) << bad;
  }
  Result<std::vector<uint8_t>> big = DecodeBase64("Zm9vYmFy", 5);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("over the limit of 5"), std::string::npos)
      << big.status().message();
  EXPECT_FALSE(DecodeBase64(std::string(4000, 'A'), 100).ok());
}

}  // namespace
}  // namespace dsv41
