#pragma once

// Base64 (RFC 4648 §4, the standard alphabet): image payloads of API requests (data: URLs,
// Anthropic base64 sources).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// The bytes `text` encodes. Padding '=' is optional; ASCII whitespace is skipped; any other
// character outside the alphabet, misplaced padding or a dangling single character is an
// InvalidArgument naming the offset. Decoding stops with an InvalidArgument naming the limit as
// soon as the output would pass `max_bytes`.
Result<std::vector<uint8_t>> DecodeBase64(std::string_view text, size_t max_bytes);

// The standard encoding with padding (tests, clients).
std::string EncodeBase64(const std::vector<uint8_t>& bytes);

}  // namespace dsv41
