#include "base/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsv41 {
namespace {

std::string HexOf(const std::string& text) {
  return Sha256Hex(Sha256Of(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
}

// FIPS 180-4 example vectors (NIST CSRC "SHA256.pdf") and the empty message.
TEST(Sha256Test, PublishedVectors) {
  EXPECT_EQ(HexOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(HexOf("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HexOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(HexOf(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Feeding the bytes in pieces of any size gives the digest of the whole.
TEST(Sha256Test, IncrementalEqualsWhole) {
  std::vector<uint8_t> bytes(300);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  const Sha256Digest whole = Sha256Of(bytes);
  for (size_t piece : {1, 7, 63, 64, 65, 128}) {
    Sha256 hash;
    for (size_t i = 0; i < bytes.size(); i += piece) {
      hash.Update(std::span<const uint8_t>(bytes).subspan(i, std::min(piece, bytes.size() - i)));
    }
    EXPECT_EQ(hash.Finish(), whole) << "pieces of " << piece;
  }
}

}  // namespace
}  // namespace dsv41
