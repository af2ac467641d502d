#include "base/npy.h"

#include <cstring>
#include <string>

#include "base/mapped_file.h"

namespace dsv41 {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

size_t ElementSize(std::string_view descr) {
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f8" || descr == "<i8") return 8;
  if (descr == "|i1" || descr == "|u1" || descr == "|b1") return 1;
  return 0;
}

// The value of `key` in numpy's header dict literal, e.g. 'descr': '<f4' -> <f4.
std::string_view FieldOf(std::string_view header, std::string_view key) {
  std::string quoted(1, '\'');
  quoted.append(key);
  quoted.push_back('\'');
  size_t pos = header.find(quoted);
  if (pos == std::string_view::npos) return {};
  pos = header.find(':', pos + quoted.size());
  if (pos == std::string_view::npos) return {};
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  if (pos >= header.size()) return {};
  size_t end;
  if (header[pos] == '\'') {
    end = header.find('\'', pos + 1);
    return end == std::string_view::npos ? std::string_view{}
                                         : header.substr(pos + 1, end - pos - 1);
  }
  if (header[pos] == '(') {
    end = header.find(')', pos);
    return end == std::string_view::npos ? std::string_view{} : header.substr(pos, end - pos + 1);
  }
  end = header.find_first_of(",}", pos);
  return header.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
}

}  // namespace

int64_t NpyArray::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> NpyArray::ToFloat() const {
  std::vector<float> out(static_cast<size_t>(num_elements()));
  const bool is_float = descr == "<f4" || descr == "<f8";
  const std::vector<int64_t> ints = is_float ? std::vector<int64_t>() : ToInt64();
  for (size_t i = 0; i < out.size(); ++i) {
    if (descr == "<f4") {
      std::memcpy(&out[i], data.data() + 4 * i, 4);
    } else if (descr == "<f8") {
      double v;
      std::memcpy(&v, data.data() + 8 * i, 8);
      out[i] = static_cast<float>(v);
    } else {
      out[i] = static_cast<float>(ints[i]);
    }
  }
  return out;
}

std::vector<int64_t> NpyArray::ToInt64() const {
  std::vector<int64_t> out(static_cast<size_t>(num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (descr == "<i4") {
      int32_t v;
      std::memcpy(&v, data.data() + 4 * i, 4);
      out[i] = v;
    } else if (descr == "<i8") {
      std::memcpy(&out[i], data.data() + 8 * i, 8);
    } else if (descr == "|i1") {
      out[i] = static_cast<int8_t>(data[i]);
    } else if (descr == "|u1" || descr == "|b1") {
      out[i] = static_cast<uint8_t>(data[i]);
    } else if (descr == "<f4") {
      float v;
      std::memcpy(&v, data.data() + 4 * i, 4);
      out[i] = static_cast<int64_t>(v);
    } else if (descr == "<f8") {
      double v;
      std::memcpy(&v, data.data() + 8 * i, 8);
      out[i] = static_cast<int64_t>(v);
    }
  }
  return out;
}

Result<NpyArray> ParseNpy(std::span<const std::byte> bytes, std::string_view what) {
  const auto fail = [&](const char* why) {
    return DataLossError("%.*s: %s", static_cast<int>(what.size()), what.data(), why);
  };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    return fail("not a .npy file");
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t header_len;
  size_t header_start;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return fail("truncated header");
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    header_start = 12;
  } else {
    return fail("unsupported .npy version");
  }
  if (header_start + header_len > bytes.size()) return fail("truncated header");
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + header_start,
                                header_len);
  NpyArray array;
  array.descr = std::string(FieldOf(header, "descr"));
  const size_t element_size = ElementSize(array.descr);
  if (element_size == 0) return fail("unsupported dtype (want <f4 <f8 <i4 <i8 |i1 |u1 |b1)");
  if (FieldOf(header, "fortran_order") != "False") return fail("Fortran order is not supported");
  const std::string_view shape = FieldOf(header, "shape");
  if (shape.size() < 2 || shape.front() != '(') return fail("bad shape");
  size_t pos = 1;
  while (pos < shape.size()) {
    while (pos < shape.size() && (shape[pos] == ' ' || shape[pos] == ',')) ++pos;
    if (pos >= shape.size() || shape[pos] == ')') break;
    int64_t dim = 0;
    bool digits = false;
    while (pos < shape.size() && shape[pos] >= '0' && shape[pos] <= '9') {
      dim = dim * 10 + (shape[pos] - '0');
      if (dim > (int64_t{1} << 40)) return fail("dimension too large");
      digits = true;
      ++pos;
    }
    if (!digits) return fail("bad shape");
    array.shape.push_back(dim);
  }
  const size_t data_start = header_start + header_len;
  const uint64_t want = static_cast<uint64_t>(array.num_elements()) * element_size;
  if (bytes.size() - data_start != want) return fail("data size does not match the shape");
  array.data.assign(bytes.begin() + static_cast<ptrdiff_t>(data_start), bytes.end());
  return array;
}

Result<NpyArray> ReadNpy(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  return ParseNpy(file.bytes(), path);
}

namespace {

// A format 1.0, C-order array of dtype `descr` whose little-endian element bytes are `data`.
std::string SerializeNpy(const char* descr, const void* data, size_t num_bytes,
                         std::span<const int64_t> shape) {
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) header += ", ";
    header += std::to_string(shape[i]);
  }
  header += shape.size() == 1 ? ",), }" : "), }";  // numpy writes "(3,)" but "(3, 4)"
  // Pad with spaces so magic + length + header + '\n' is a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, 6);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(data), num_bytes);
  return out;
}

}  // namespace

std::string SerializeNpyFloat32(std::span<const float> values, std::span<const int64_t> shape) {
  return SerializeNpy("<f4", values.data(), values.size() * sizeof(float), shape);
}

std::string SerializeNpyInt64(std::span<const int64_t> values, std::span<const int64_t> shape) {
  return SerializeNpy("<i8", values.data(), values.size() * sizeof(int64_t), shape);
}

Status WriteNpyFloat32(const std::string& path, std::span<const float> values,
                       std::span<const int64_t> shape) {
  return WriteStringToFile(path, SerializeNpyFloat32(values, shape));
}

std::string SerializeNpyUint8(std::span<const uint8_t> values, std::span<const int64_t> shape) {
  return SerializeNpy("|u1", values.data(), values.size(), shape);
}

Status WriteNpyUint8(const std::string& path, std::span<const uint8_t> values,
                     std::span<const int64_t> shape) {
  return WriteStringToFile(path, SerializeNpyUint8(values, shape));
}

Status WriteNpyInt64(const std::string& path, std::span<const int64_t> values,
                     std::span<const int64_t> shape) {
  return WriteStringToFile(path, SerializeNpyInt64(values, shape));
}

}  // namespace dsv41
