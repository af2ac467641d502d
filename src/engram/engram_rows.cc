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
  const std::string scale_name = source.name_ + ".scale";
  DSV41_ASSIGN_OR_RETURN(TensorView scales, checkpoint.Get(scale_name));
  const Shape want_scale = {source.num_rows_, source.row_dim_ / 32};
  if (!IsE8m0ScaleDType(scales.dtype) || scales.shape != want_scale) {
    const std::string_view got = DTypeName(scales.dtype);
    return InvalidArgumentError("'%s': want F8_E8M0 (or U8) %s, got %.*s %s", scale_name.c_str(),
                                ShapeString(want_scale).c_str(), static_cast<int>(got.size()),
                                got.data(), ShapeString(scales.shape).c_str());
  }
  source.values_ = values.bytes;
  source.scales_ = scales.bytes;
  return source;
}

Status CopyEngramRows(std::string_view table, int64_t num_rows, EngramRowLayout layout,
                      std::span<const std::byte> table_values,
                      std::span<const std::byte> table_scales, std::span<const int64_t> row_ids,
                      std::span<std::byte> values, std::span<std::byte> scales) {
  return CopyHeldEngramRows(table, num_rows, 0, num_rows, layout, table_values, table_scales,
                            row_ids, values, scales);
}

Status CopyHeldEngramRows(std::string_view table, int64_t num_rows, int64_t held_begin,
                          int64_t held_end, EngramRowLayout layout,
                          std::span<const std::byte> held_values,
                          std::span<const std::byte> held_scales, std::span<const int64_t> row_ids,
                          std::span<std::byte> values, std::span<std::byte> scales) {
  const size_t value_bytes = static_cast<size_t>(layout.value_bytes);
  const size_t scale_bytes = static_cast<size_t>(layout.scale_bytes);
  DSV41_CHECK(values.size() == row_ids.size() * value_bytes &&
                  scales.size() == row_ids.size() * scale_bytes,
              "FillRows: %zu rows into %zu value and %zu scale bytes", row_ids.size(),
              values.size(), scales.size());
  for (size_t i = 0; i < row_ids.size(); ++i) {
    const int64_t row = row_ids[i];
    if (row < 0 || row >= num_rows) {
      return OutOfRangeError("'%.*s': row %lld outside the table of %lld rows",
                             static_cast<int>(table.size()), table.data(),
                             static_cast<long long>(row), static_cast<long long>(num_rows));
    }
    if (row < held_begin || row >= held_end) {
      return OutOfRangeError(
          "'%.*s': row %lld is another rank's (this one holds rows [%lld, %lld))",
          static_cast<int>(table.size()), table.data(), static_cast<long long>(row),
          static_cast<long long>(held_begin), static_cast<long long>(held_end));
    }
    std::memcpy(values.data() + i * value_bytes,
                held_values.data() + layout.ValueOffset(row - held_begin), value_bytes);
    std::memcpy(scales.data() + i * scale_bytes,
                held_scales.data() + layout.ScaleOffset(row - held_begin), scale_bytes);
  }
  return OkStatus();
}

Status MappedEngramRowSource::FillRows(std::span<const int64_t> row_ids,
                                       std::span<std::byte> values,
                                       std::span<std::byte> scales) const {
  return CopyEngramRows(name_, num_rows_, EngramRowLayout(row_dim_), values_, scales_, row_ids,
                        values, scales);
}

}  // namespace dsv41
