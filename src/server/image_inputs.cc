#include "server/image_inputs.h"

#include <cctype>
#include <memory>
#include <string>
#include <utility>

#include "base/base64.h"
#include "base/mapped_file.h"
#include "vision/image_input.h"
#include "vision/image_span.h"

namespace dsv41 {
namespace {

bool StartsWithCaseless(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

// `data:<mime>;base64,<payload>` (RFC 2397): the payload's bytes.
Result<std::vector<uint8_t>> DataUrlBytes(std::string_view url, const ImageServing& serving) {
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) {
    return InvalidArgumentError("a data: URL needs a ',' before its payload");
  }
  const std::string_view header = url.substr(5, comma - 5);
  if (!header.ends_with(";base64")) {
    return InvalidArgumentError("only base64 data: URLs are supported (data:<mime>;base64,...)");
  }
  return DecodeBase64(url.substr(comma + 1), serving.max_payload_bytes);
}

Result<std::vector<uint8_t>> LocalFileBytes(std::string_view url, const ImageServing& serving) {
  if (!serving.allow_local_files) {
    return InvalidArgumentError(
        "local image files are not allowed (the server needs --allow-local-image-files); send "
        "the image as a data: URL");
  }
  const std::string path(url.substr(7));  // file://<absolute path>
  if (path.empty() || path[0] != '/') {
    return InvalidArgumentError("a file: URL needs an absolute path (file:///...)");
  }
  Result<MappedFile> opened = MappedFile::Open(path);
  if (!opened.ok()) return InvalidArgumentError("%s", opened.status().message().c_str());
  const MappedFile& file = *opened;
  if (file.size() > serving.max_payload_bytes) {
    return InvalidArgumentError("the file holds %zu bytes, over the limit of %zu", file.size(),
                                serving.max_payload_bytes);
  }
  const auto bytes = file.bytes();
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                              reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size());
}

}  // namespace

Result<std::vector<uint8_t>> ResolveImageSource(const ChatImage& image,
                                                const ImageServing& serving) {
  if (image.url.empty()) {
    return DecodeBase64(image.data, serving.max_payload_bytes);  // an Anthropic base64 source
  }
  const std::string_view url = image.url;
  if (StartsWithCaseless(url, "data:")) return DataUrlBytes(url, serving);
  if (StartsWithCaseless(url, "file://")) return LocalFileBytes(url, serving);
  if (StartsWithCaseless(url, "http://") || StartsWithCaseless(url, "https://")) {
    return InvalidArgumentError(
        "image URLs are not fetched (http/https); send the image as a data: URL");
  }
  return InvalidArgumentError("unsupported image source (want a data: URL)");
}

Status AttachImages(std::span<const ChatImage> images, const ImageServing& serving,
                    Submission& submission) {
  if (images.empty()) return OkStatus();
  if (!serving.enabled) {
    return InvalidArgumentError("%s: this model has no vision tower; image input is not supported",
                                images[0].field.c_str());
  }
  if (images.size() > static_cast<size_t>(serving.max_images)) {
    return InvalidArgumentError("%s: %zu images in one request, over the limit of %d",
                                images[serving.max_images].field.c_str(), images.size(),
                                serving.max_images);
  }
  ImageDecodeOptions decode;
  decode.max_pixels = serving.max_pixels;
  std::vector<RequestImage> prepared;
  std::vector<ImagePlan> plans;
  for (const ChatImage& image : images) {
    Result<std::vector<uint8_t>> bytes = ResolveImageSource(image, serving);
    if (!bytes.ok()) return bytes.status().WithPrefix(image.field);
    Result<PreparedImage> ready = PrepareImage(*bytes, serving.plan, decode);
    if (!ready.ok()) return ready.status().WithPrefix(image.field);
    RequestImage request_image;
    request_image.plan = ready->plan;
    request_image.content_key = ImageSpanKey(ready->content_sha256, ready->plan);
    request_image.canvas = std::make_shared<const std::vector<uint8_t>>(std::move(ready->canvas));
    plans.push_back(request_image.plan);
    prepared.push_back(std::move(request_image));
  }
  Result<ExpandedPrompt> expanded =
      ExpandImagePlaceholders(submission.prompt_ids, serving.image_token_id, plans);
  if (!expanded.ok()) return expanded.status().WithPrefix(images[0].field);
  for (size_t k = 0; k < prepared.size(); ++k) prepared[k].span_start = expanded->span_starts[k];
  submission.prompt_ids = std::move(expanded->ids);
  submission.options.images = std::move(prepared);
  return OkStatus();
}

}  // namespace dsv41
