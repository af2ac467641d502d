// libFuzzer target: ParseSafetensorsHeader on arbitrary bytes must return a Status or a header
// whose invariants hold, never crash, hang or read outside the input.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "base/check.h"
#include "checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  dsv41::Result<dsv41::SafetensorsHeader> parsed =
      dsv41::ParseSafetensorsHeader(bytes, "fuzz.safetensors");
  if (!parsed.ok()) {
    DSV41_CHECK(!parsed.status().message().empty(), "error without a message");
    return 0;
  }
  // What a successful parse promises (safetensors.h).
  const uint64_t data_start = parsed->data_start;
  DSV41_CHECK(data_start >= 8 && data_start <= size, "data_start %zu of %zu",
              static_cast<size_t>(data_start), size);
  const uint64_t data_bytes = size - data_start;
  uint64_t previous_end = 0;
  for (const dsv41::TensorInfo& t : parsed->tensors) {
    DSV41_CHECK(t.begin <= t.end && t.end <= data_bytes, "tensor outside the data section");
    const std::optional<uint64_t> num_bytes = dsv41::TensorBytes(t.dtype, t.shape);
    DSV41_CHECK(num_bytes.has_value() && *num_bytes == t.end - t.begin, "size mismatch");
    if (t.begin != t.end) {
      DSV41_CHECK(t.begin >= previous_end, "tensors overlap");
      previous_end = t.end;
    }
  }
  return 0;
}
