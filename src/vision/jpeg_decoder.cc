// JPEG through libjpeg-turbo at its default settings (vision.md §4: ISLOW IDCT, fancy upsampling,
// no DCT scaling), the decoder Pillow uses, so the pixels are the same bits. libjpeg reports
// errors through error_exit, which must not return: it longjmps back, and every function that
// calls libjpeg after the setjmp holds only trivially destructible locals.
#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <vector>

#include "vision/image_decoders.h"

namespace dsv41 {
namespace {

// libjpeg-turbo's own guard against progressive files built to take forever (its
// TJFLAG_LIMITSCANS value).
constexpr int kMaxProgressiveScans = 500;

struct JpegErrorState {
  jpeg_error_mgr manager;  // first member: libjpeg passes a pointer to it
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
  bool truncated = false;
};

struct JpegSession {
  jpeg_decompress_struct cinfo;
  JpegErrorState error;
  jpeg_progress_mgr progress;
  bool created = false;
};

[[noreturn]] void OnJpegError(j_common_ptr cinfo) {
  auto* state = reinterpret_cast<JpegErrorState*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, state->message);
  std::longjmp(state->jump, 1);
}

// Warnings do not stop libjpeg; the one that means "the data ended early" fails the decode, as
// Pillow refuses truncated files. Corrupt-data warnings decode on, as in Pillow.
void OnJpegMessage(j_common_ptr cinfo, int level) {
  auto* state = reinterpret_cast<JpegErrorState*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) state->truncated = true;
}

void OnJpegProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->progressive_mode && dinfo->input_scan_number > kMaxProgressiveScans) {
    auto* state = reinterpret_cast<JpegErrorState*>(cinfo->err);
    std::snprintf(state->message, sizeof(state->message), "more than %d progressive scans",
                  kMaxProgressiveScans);
    std::longjmp(state->jump, 1);
  }
}

// Reads the header. False on a libjpeg error (session->error.message).
bool ReadJpegHeader(JpegSession* session, const uint8_t* data, size_t size) {
  if (setjmp(session->error.jump)) return false;
  jpeg_create_decompress(&session->cinfo);
  session->created = true;
  session->cinfo.progress = &session->progress;
  jpeg_mem_src(&session->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&session->cinfo, TRUE);
  return true;
}

// Decodes every scanline into `pixels` [height, width, 3]. False on a libjpeg error.
bool ReadJpegPixels(JpegSession* session, uint8_t* pixels) {
  if (setjmp(session->error.jump)) return false;
  jpeg_decompress_struct& cinfo = session->cinfo;
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const size_t row_bytes = static_cast<size_t>(cinfo.output_width) * 3;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels + cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

// Owns the libjpeg state of one decode.
class JpegReader {
 public:
  JpegReader() {
    session_.cinfo.err = jpeg_std_error(&session_.error.manager);
    session_.error.manager.error_exit = OnJpegError;
    session_.error.manager.emit_message = OnJpegMessage;
    session_.progress.progress_monitor = OnJpegProgress;
  }
  ~JpegReader() {
    if (session_.created) jpeg_destroy_decompress(&session_.cinfo);
  }
  JpegReader(const JpegReader&) = delete;
  JpegReader& operator=(const JpegReader&) = delete;

  JpegSession& session() { return session_; }

 private:
  JpegSession session_;
};

}  // namespace

Result<RgbImage> DecodeJpeg(std::span<const uint8_t> bytes, const ImageDecodeOptions& options) {
  JpegReader reader;
  JpegSession& session = reader.session();
  if (!ReadJpegHeader(&session, bytes.data(), bytes.size()) || session.error.truncated) {
    return InvalidArgumentError("JPEG: %s",
                                session.error.truncated ? "truncated data" : session.error.message);
  }
  const J_COLOR_SPACE color_space = session.cinfo.jpeg_color_space;
  if (color_space == JCS_CMYK || color_space == JCS_YCCK) {
    return InvalidArgumentError("JPEG: %s color space is not supported (gray, YCbCr, RGB are)",
                                color_space == JCS_CMYK ? "CMYK" : "YCCK");
  }
  if (color_space != JCS_GRAYSCALE && color_space != JCS_YCbCr && color_space != JCS_RGB) {
    return InvalidArgumentError("JPEG: color space %d with %d components is not supported",
                                static_cast<int>(color_space), session.cinfo.num_components);
  }
  DSV41_RETURN_IF_ERROR(
      CheckDecodedSize("JPEG", session.cinfo.image_width, session.cinfo.image_height, options));
  RgbImage image;
  image.width = static_cast<int32_t>(session.cinfo.image_width);
  image.height = static_cast<int32_t>(session.cinfo.image_height);
  image.pixels.resize(static_cast<size_t>(image.width) * image.height * 3);
  if (!ReadJpegPixels(&session, image.pixels.data()) || session.error.truncated) {
    return InvalidArgumentError("JPEG: %s",
                                session.error.truncated ? "truncated data" : session.error.message);
  }
  return image;
}

}  // namespace dsv41
