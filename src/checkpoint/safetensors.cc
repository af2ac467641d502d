#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "base/check.h"
#include "base/json.h"

namespace dsv41 {
namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr size_t kLengthFieldBytes = 8;

// Little-endian regardless of the host (checkpoint.md §3).
uint64_t LoadLe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

void StoreLe64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

// Reads a non-negative JSON integer that fits `max`; nullopt for anything else (negative, float,
// string, too large). Never converts a float, so a huge value cannot hit an undefined cast.
std::optional<uint64_t> NonNegativeInt(const Json& j, uint64_t max) {
  if (!j.is_number_unsigned()) return std::nullopt;
  const uint64_t v = j.get<uint64_t>();
  if (v > max) return std::nullopt;
  return v;
}

// Validates one tensor entry; `name` is the header key.
Result<TensorInfo> ParseEntry(const std::string& file, const std::string& name, const Json& entry,
                              uint64_t data_bytes) {
  const char* f = file.c_str();
  const char* n = name.c_str();
  if (!entry.is_object()) {
    return DataLossError("%s: tensor '%s': entry is a JSON %s, not an object", f, n,
                         entry.type_name());
  }
  TensorInfo info;
  info.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return DataLossError("%s: tensor '%s': missing string field 'dtype'", f, n);
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  const std::optional<DType> dtype = DTypeFromName(dtype_name);
  if (!dtype) return DataLossError("%s: tensor '%s': unknown dtype '%s'", f, n, dtype_name.c_str());
  info.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return DataLossError("%s: tensor '%s': missing array field 'shape'", f, n);
  }
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const Json& dim = (*shape_it)[i];
    const std::optional<uint64_t> v =
        NonNegativeInt(dim, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
    if (!v) {
      return DataLossError("%s: tensor '%s': shape[%zu] = %s is not a non-negative integer", f, n,
                           i, dim.dump().c_str());
    }
    info.shape.push_back(static_cast<int64_t>(*v));
  }

  const auto offsets_it = entry.find("data_offsets");
  std::optional<uint64_t> begin, end;
  if (offsets_it != entry.end() && offsets_it->is_array() && offsets_it->size() == 2) {
    begin = NonNegativeInt((*offsets_it)[0], std::numeric_limits<uint64_t>::max());
    end = NonNegativeInt((*offsets_it)[1], std::numeric_limits<uint64_t>::max());
  }
  if (!begin || !end) {
    return DataLossError(
        "%s: tensor '%s': 'data_offsets' must be [begin, end] of non-negative "
        "integers",
        f, n);
  }
  info.begin = *begin;
  info.end = *end;
  if (info.begin > info.end) {
    return DataLossError("%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         "] are reversed (begin > end)",
                         f, n, info.begin, info.end);
  }

  const uint64_t element_bytes = DTypeSize(info.dtype);
  const std::optional<uint64_t> num_bytes = TensorBytes(info.dtype, info.shape);
  if (!num_bytes) {
    return DataLossError("%s: tensor '%s': shape %s × %" PRIu64 " B overflows 64 bits", f, n,
                         ShapeString(info.shape).c_str(), element_bytes);
  }
  if (*num_bytes != info.end - info.begin) {
    return DataLossError("%s: tensor '%s': shape %s × %" PRIu64 " B = %" PRIu64
                         " B, data_offsets span %" PRIu64 " B",
                         f, n, ShapeString(info.shape).c_str(), element_bytes, *num_bytes,
                         info.end - info.begin);
  }
  if (info.end > data_bytes) {
    return DataLossError("%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         "] end beyond the %" PRIu64 " B data section (truncated file?)",
                         f, n, info.begin, info.end, data_bytes);
  }
  return info;
}

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// RFC 3629 UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (s.size() - i < len) return false;
    if (len > 1) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if (c1 < lo || c1 > hi) return false;
      for (size_t k = 2; k < len; ++k) {
        if (!IsContinuation(static_cast<unsigned char>(s[i + k]))) return false;
      }
    }
    i += len;
  }
  return true;
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

}  // namespace

Status CheckTensorName(std::string_view name) {
  if (name.empty()) return InvalidArgumentError("tensor name is empty");
  if (name == kMetadataKey) return InvalidArgumentError("'__metadata__' is not a tensor name");
  if (!IsValidUtf8(name)) {
    return InvalidArgumentError("tensor name '%.*s' is not UTF-8", static_cast<int>(name.size()),
                                name.data());
  }
  return OkStatus();
}

std::optional<uint64_t> TensorBytes(DType dtype, const Shape& shape) {
  const std::optional<uint64_t> num_elements = NumElements(shape);
  if (!num_elements) return std::nullopt;
  const uint64_t element_bytes = DTypeSize(dtype);
  if (*num_elements > std::numeric_limits<uint64_t>::max() / element_bytes) return std::nullopt;
  return *num_elements * element_bytes;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> file_bytes,
                                                 std::string_view file_name) {
  const std::string file(file_name);
  const char* f = file.c_str();
  if (file_bytes.size() < kLengthFieldBytes) {
    return DataLossError("%s: file is %zu B, shorter than the 8-byte header length", f,
                         file_bytes.size());
  }
  const uint64_t header_bytes = LoadLe64(file_bytes.data());
  const uint64_t after_length = file_bytes.size() - kLengthFieldBytes;
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    return DataLossError("%s: header length %" PRIu64 " B exceeds the %" PRIu64 " B limit", f,
                         header_bytes, kMaxSafetensorsHeaderBytes);
  }
  if (header_bytes > after_length) {
    return DataLossError("%s: header length %" PRIu64 " B runs beyond the file (%" PRIu64
                         " B after the length field)",
                         f, header_bytes, after_length);
  }
  const std::string_view text(reinterpret_cast<const char*>(file_bytes.data()) + kLengthFieldBytes,
                              static_cast<size_t>(header_bytes));
  Result<Json> header = ParseJsonRejectingDuplicateKeys(text, file + " header");
  if (!header.ok()) return Status(StatusCode::kDataLoss, header.status().message());
  if (!header->is_object()) {
    return DataLossError("%s: header is a JSON %s, not an object", f, header->type_name());
  }
  const uint64_t data_bytes = after_length - header_bytes;

  SafetensorsHeader parsed;
  std::vector<TensorInfo>& tensors = parsed.tensors;
  tensors.reserve(header->size());
  for (const auto& [key, entry] : header->items()) {
    if (key == kMetadataKey) {
      if (!entry.is_object()) {
        return DataLossError("%s: __metadata__ is a JSON %s, not an object", f, entry.type_name());
      }
      for (const auto& [meta_key, meta_value] : entry.items()) {
        if (!meta_value.is_string()) {
          return DataLossError("%s: __metadata__ '%s' is a JSON %s, not a string", f,
                               meta_key.c_str(), meta_value.type_name());
        }
        parsed.metadata.emplace_back(meta_key, meta_value.get<std::string>());
      }
      continue;
    }
    DSV41_ASSIGN_OR_RETURN(TensorInfo info, ParseEntry(file, key, entry, data_bytes));
    tensors.push_back(std::move(info));
  }

  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Zero-byte tensors occupy nothing and cannot overlap; among the others each must start at or
  // after the previous one's end.
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin == t.end) continue;
    if (previous != nullptr && t.begin < previous->end) {
      return DataLossError("%s: tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' [%" PRIu64
                           ", %" PRIu64 "] overlap",
                           f, previous->name.c_str(), previous->begin, previous->end,
                           t.name.c_str(), t.begin, t.end);
    }
    previous = &t;
  }
  parsed.data_start = kLengthFieldBytes + header_bytes;
  return parsed;
}

SafetensorsFile::SafetensorsFile(MappedFile file, std::vector<TensorInfo> tensors,
                                 std::vector<std::pair<std::string, std::string>> metadata,
                                 uint64_t data_start)
    : file_(std::move(file)),
      tensors_(std::move(tensors)),
      metadata_(std::move(metadata)),
      data_start_(data_start) {
  index_by_name_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) index_by_name_.emplace(tensors_[i].name, i);
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  DSV41_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeader(file.bytes(), path));
  return SafetensorsFile(std::move(file), std::move(header.tensors), std::move(header.metadata),
                         header.data_start);
}

std::optional<TensorView> SafetensorsFile::Find(std::string_view name) const {
  const auto it = index_by_name_.find(std::string(name));
  if (it == index_by_name_.end()) return std::nullopt;
  return View(it->second);
}

TensorView SafetensorsFile::View(size_t tensor_idx) const {
  DSV41_CHECK(tensor_idx < tensors_.size(), "tensor %zu of %zu", tensor_idx, tensors_.size());
  const TensorInfo& t = tensors_[tensor_idx];
  // ParseSafetensorsHeader guarantees data_start_ + end <= file size.
  return TensorView{t.name, t.dtype, t.shape,
                    file_.bytes().subspan(data_start_ + t.begin, t.end - t.begin)};
}

Status SafetensorsWriter::Add(std::string name, DType dtype, Shape shape,
                              std::span<const std::byte> bytes) {
  const std::optional<uint64_t> num_bytes = TensorBytes(dtype, shape);
  if (num_bytes && *num_bytes != bytes.size()) {
    return InvalidArgumentError("tensor '%s': shape %s × %zu B = %" PRIu64 " B, got %zu B",
                                name.c_str(), ShapeString(shape).c_str(), DTypeSize(dtype),
                                *num_bytes, bytes.size());
  }
  std::vector<std::byte> copy(bytes.begin(), bytes.end());
  return Add(std::move(name), dtype, std::move(shape),
             [data = std::move(copy)](const ByteSink& sink) { return sink(data); });
}

Status SafetensorsWriter::Add(std::string name, DType dtype, Shape shape, TensorBytesFn write) {
  DSV41_RETURN_IF_ERROR(CheckTensorName(name));
  if (index_by_name_.count(name) != 0) {
    return InvalidArgumentError("tensor '%s' added twice", name.c_str());
  }
  const std::optional<uint64_t> num_bytes = TensorBytes(dtype, shape);
  if (!num_bytes || *num_bytes > std::numeric_limits<uint64_t>::max() - data_bytes_) {
    return InvalidArgumentError("tensor '%s': shape %s has a negative dimension or is too large",
                                name.c_str(), ShapeString(shape).c_str());
  }
  if (!write) return InvalidArgumentError("tensor '%s': no byte source", name.c_str());
  index_by_name_.emplace(name, tensors_.size());
  data_bytes_ += *num_bytes;
  tensors_.push_back(
      Pending{std::move(name), dtype, std::move(shape), *num_bytes, std::move(write)});
  return OkStatus();
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

Status SafetensorsWriter::Write(const std::string& path) {
  for (const auto& [key, value] : metadata_) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return InvalidArgumentError("%s: __metadata__ '%s' is not UTF-8", path.c_str(), key.c_str());
    }
  }
  OrderedJson header = OrderedJson::object();
  if (!metadata_.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : metadata_) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = std::string(DTypeName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.num_bytes};
    // Names are unique (Add refuses a second one): append without ordered_map's linear lookup,
    // which made a header of n tensors cost n² string comparisons.
    header.get_ref<OrderedJson::object_t&>().Container::emplace_back(t.name, std::move(entry));
    offset += t.num_bytes;
  }
  std::string header_text = header.dump();
  // Pad so the data section (at 8 + header length) starts 8-byte aligned.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  char length_field[kLengthFieldBytes];
  StoreLe64(header_text.size(), length_field);

  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> out(std::fopen(tmp.c_str(), "wb"));
  if (!out) return IoError("%s: cannot open for writing: %s", tmp.c_str(), std::strerror(errno));
  const auto fail = [&](Status status) {
    out.reset();
    std::remove(tmp.c_str());
    return status;
  };
  if (std::fwrite(length_field, 1, sizeof(length_field), out.get()) != sizeof(length_field) ||
      std::fwrite(header_text.data(), 1, header_text.size(), out.get()) != header_text.size()) {
    return fail(IoError("%s: write failed: %s", tmp.c_str(), std::strerror(errno)));
  }
  for (Pending& t : tensors_) {
    uint64_t written = 0;
    const ByteSink sink = [&](std::span<const std::byte> chunk) -> Status {
      if (chunk.size() > t.num_bytes - written) {
        return InvalidArgumentError("%s: tensor '%s': byte source gave more than %" PRIu64 " B",
                                    path.c_str(), t.name.c_str(), t.num_bytes);
      }
      if (!chunk.empty() && std::fwrite(chunk.data(), 1, chunk.size(), out.get()) != chunk.size()) {
        return IoError("%s: write failed: %s", tmp.c_str(), std::strerror(errno));
      }
      written += chunk.size();
      return OkStatus();
    };
    if (!t.write) {
      return fail(
          InvalidArgumentError("%s: tensor '%s': bytes already consumed by an earlier "
                               "Write()",
                               path.c_str(), t.name.c_str()));
    }
    Status status = t.write(sink);
    t.write = nullptr;  // releases a copied tensor's bytes as soon as they are on disk
    if (!status.ok()) return fail(std::move(status));
    if (written != t.num_bytes) {
      return fail(InvalidArgumentError("%s: tensor '%s': byte source gave %" PRIu64
                                       " B, want %" PRIu64 " B",
                                       path.c_str(), t.name.c_str(), written, t.num_bytes));
    }
  }
  if (std::fflush(out.get()) != 0) {
    return fail(IoError("%s: write failed: %s", tmp.c_str(), std::strerror(errno)));
  }
  std::FILE* raw = out.release();
  if (std::fclose(raw) != 0) {
    std::remove(tmp.c_str());
    return IoError("%s: close failed: %s", tmp.c_str(), std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return IoError("%s: cannot rename into place: %s", path.c_str(), std::strerror(err));
  }
  return OkStatus();
}

}  // namespace dsv41
