#include "engram/engram_rows.h"

#include <cstring>
#include <string>

#include "base/check.h"
#include "checkpoint/dtype.h"

namespace dsv41 {

Result<MappedEngramRowSource> MappedEngramRowSource::Open(const Checkpoint& checkpoint,
                                                          int32_t layer) {
  MappedEngramRowSource source;
  source.name_ = "layers." + std::to_string(layer) + ".engram.embed";
  DSV41_ASSIGN_OR_RETURN(TensorView values, checkpoint.Get(source.name_ + ".weight"));
  if (values.dtype != DType::kF8E4M3 || values.shape.size() != 2 || values.shape[1] <= 0 ||
      values.shape[1] % 32 != 0) {
    const std::string_view got = DTypeName(values.dtype);
    return InvalidArgumentError("'%s.weight': want F8_E4M3 [rows, 32·k], got %.*s %s",
                                source.name_.c_str(), static_cast<int>(got.size()), got.data(),
                                ShapeString(values.shape).c_str());
  }
  source.num_rows_ = values.shape[0];
  source.row_dim_ = static_cast<int32_t>(values.shape[1]);
  DSV41_ASSIGN_OR_RETURN(TensorView scales,
                         checkpoint.GetChecked(source.name_ + ".scale", DType::kF8E8M0,
                                               {source.num_rows_, source.row_dim_ / 32}));
  source.values_ = values.bytes;
  source.scales_ = scales.bytes;
  return source;
}

Status MappedEngramRowSource::FillRows(std::span<const int64_t> row_ids,
                                       std::span<std::byte> values,
                                       std::span<std::byte> scales) const {
  const size_t value_bytes = static_cast<size_t>(row_dim_);
  const size_t scale_bytes = value_bytes / 32;
  DSV41_CHECK(values.size() == row_ids.size() * value_bytes &&
                  scales.size() == row_ids.size() * scale_bytes,
              "FillRows: %zu rows into %zu value and %zu scale bytes", row_ids.size(),
              values.size(), scales.size());
  for (size_t i = 0; i < row_ids.size(); ++i) {
    const int64_t row = row_ids[i];
    if (row < 0 || row >= num_rows_) {
      return OutOfRangeError("'%s': row %lld outside the table of %lld rows", name_.c_str(),
                             static_cast<long long>(row), static_cast<long long>(num_rows_));
    }
    const size_t r = static_cast<size_t>(row);
    std::memcpy(values.data() + i * value_bytes, values_.data() + r * value_bytes, value_bytes);
    std::memcpy(scales.data() + i * scale_bytes, scales_.data() + r * scale_bytes, scale_bytes);
  }
  return OkStatus();
}

}  // namespace dsv41
