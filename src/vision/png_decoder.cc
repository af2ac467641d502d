// PNG through libpng (vision.md §4). libpng reports errors by longjmp out of its error callback;
// every function below that calls libpng after a setjmp holds only trivially destructible locals,
// so the jump skips no C++ destructor, and the pixel buffers live in the caller's frame.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "vision/image_decoders.h"

namespace dsv41 {
namespace {

// What one decode shares with libpng's callbacks.
struct PngSession {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  char error[512] = {};
  char warning[200] = {};  // the first warning: libpng explains some errors only there
  // From the header, after the transformations: 1 (gray or palette index) or 3 (RGB) bytes.
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  int bit_depth = 0;
  int color_type = 0;
  int channels = 0;
  size_t row_bytes = 0;
  // The palette, padded as Pillow pads it: entry i of a missing index is gray (i, i, i).
  uint8_t palette[256][3] = {};
};

[[noreturn]] void OnPngError(png_structp png, png_const_charp message) {
  auto* session = static_cast<PngSession*>(png_get_error_ptr(png));
  if (session->warning[0] != '\0') {
    std::snprintf(session->error, sizeof(session->error), "%.300s (%s)", message, session->warning);
  } else {
    std::snprintf(session->error, sizeof(session->error), "%s", message);
  }
  png_longjmp(png, 1);
}

void OnPngWarning(png_structp png, png_const_charp message) {
  auto* session = static_cast<PngSession*>(png_get_error_ptr(png));
  if (session->warning[0] == '\0') {
    std::snprintf(session->warning, sizeof(session->warning), "%s", message);
  }
}

void ReadPngBytes(png_structp png, png_bytep out, size_t count) {
  auto* session = static_cast<PngSession*>(png_get_io_ptr(png));
  if (session->size - session->offset < count) png_error(png, "truncated data");
  std::memcpy(out, session->data + session->offset, count);
  session->offset += count;
}

// Reads the header and sets up the transformations. False on a libpng error (session->error).
bool ReadPngHeader(PngSession* session) {
  if (setjmp(png_jmpbuf(session->png))) return false;
  png_set_read_fn(session->png, session, ReadPngBytes);
  png_read_info(session->png, session->info);
  session->width = png_get_image_width(session->png, session->info);
  session->height = png_get_image_height(session->png, session->info);
  session->bit_depth = png_get_bit_depth(session->png, session->info);
  session->color_type = png_get_color_type(session->png, session->info);
  if (session->bit_depth > 8) return true;  // refused by the caller before any pixel is read
  if (session->color_type == PNG_COLOR_TYPE_PALETTE) {
    png_colorp entries = nullptr;
    int num_entries = 0;
    for (int i = 0; i < 256; ++i) {
      session->palette[i][0] = session->palette[i][1] = session->palette[i][2] =
          static_cast<uint8_t>(i);
    }
    if (png_get_PLTE(session->png, session->info, &entries, &num_entries) != 0) {
      for (int i = 0; i < num_entries && i < 256; ++i) {
        session->palette[i][0] = entries[i].red;
        session->palette[i][1] = entries[i].green;
        session->palette[i][2] = entries[i].blue;
      }
    }
    png_set_packing(session->png);  // one index per byte
  } else if (session->color_type == PNG_COLOR_TYPE_GRAY ||
             session->color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    if (session->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(session->png);
  }
  if (session->color_type & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(session->png);
  png_set_interlace_handling(session->png);
  png_read_update_info(session->png, session->info);
  session->channels = png_get_channels(session->png, session->info);
  session->row_bytes = png_get_rowbytes(session->png, session->info);
  return true;
}

// Decodes every row into `rows` (pointers into the caller's buffer). False on a libpng error.
// The chunks after the image data are not read: like Pillow, a file whose pixels are complete
// decodes even when its trailing chunks are missing.
bool ReadPngRows(PngSession* session, png_bytepp rows) {
  if (setjmp(png_jmpbuf(session->png))) return false;
  png_read_image(session->png, rows);
  return true;
}

// `decoded` [height, width, channels] (1: gray or palette index, 3: RGB) to RGB.
void ConvertToRgb(const PngSession& session, const std::vector<uint8_t>& decoded,
                  std::vector<uint8_t>& rgb) {
  const size_t num_pixels = static_cast<size_t>(session.width) * session.height;
  rgb.resize(num_pixels * 3);
  if (session.channels == 3) {
    for (size_t y = 0; y < session.height; ++y) {
      std::memcpy(rgb.data() + y * session.width * 3, decoded.data() + y * session.row_bytes,
                  static_cast<size_t>(session.width) * 3);
    }
    return;
  }
  const bool palette = session.color_type == PNG_COLOR_TYPE_PALETTE;
  for (size_t y = 0; y < session.height; ++y) {
    const uint8_t* in = decoded.data() + y * session.row_bytes;
    uint8_t* out = rgb.data() + y * session.width * 3;
    for (size_t x = 0; x < session.width; ++x, out += 3) {
      if (palette) {
        std::memcpy(out, session.palette[in[x]], 3);
      } else {
        out[0] = out[1] = out[2] = in[x];
      }
    }
  }
}

// Owns the libpng structs of one decode.
class PngReader {
 public:
  PngReader() {
    session_.png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &session_, OnPngError, OnPngWarning);
    if (session_.png != nullptr) session_.info = png_create_info_struct(session_.png);
  }
  ~PngReader() { png_destroy_read_struct(&session_.png, &session_.info, nullptr); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  PngSession& session() { return session_; }

 private:
  PngSession session_;
};

}  // namespace

Result<RgbImage> DecodePng(std::span<const uint8_t> bytes, const ImageDecodeOptions& options) {
  PngReader reader;
  PngSession& session = reader.session();
  if (session.png == nullptr || session.info == nullptr) {
    return InternalError("PNG: libpng could not allocate its state");
  }
  session.data = bytes.data();
  session.size = bytes.size();
  if (!ReadPngHeader(&session)) return InvalidArgumentError("PNG: %s", session.error);
  if (session.bit_depth > 8) {
    return InvalidArgumentError("PNG: %d-bit samples are not supported (8-bit and below are)",
                                session.bit_depth);
  }
  DSV41_RETURN_IF_ERROR(CheckDecodedSize("PNG", session.width, session.height, options));
  if (session.channels != 1 && session.channels != 3) {
    return InvalidArgumentError("PNG: %d channels after conversion", session.channels);
  }
  std::vector<uint8_t> decoded(session.row_bytes * session.height);
  std::vector<png_bytep> rows(session.height);
  for (size_t y = 0; y < session.height; ++y) rows[y] = decoded.data() + y * session.row_bytes;
  if (!ReadPngRows(&session, rows.data())) return InvalidArgumentError("PNG: %s", session.error);
  RgbImage image;
  image.width = static_cast<int32_t>(session.width);
  image.height = static_cast<int32_t>(session.height);
  ConvertToRgb(session, decoded, image.pixels);
  return image;
}

}  // namespace dsv41
