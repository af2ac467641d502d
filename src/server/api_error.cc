#include "server/api_error.h"

#include <cctype>

#include "text/json_format.h"

namespace dsv41 {

ApiError ApiErrorFromStatus(const Status& status) {
  if (status.code() == StatusCode::kNotFound) {
    return ApiError{
        .status = 404, .type = RequestErrorType::kNotFound, .message = status.message()};
  }
  const bool client =
      status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kOutOfRange;
  return ApiError{.status = client ? 400 : 500,
                  .type = client ? RequestErrorType::kInvalidRequest : RequestErrorType::kInternal,
                  .message = status.message()};
}

std::string ErrorParam(std::string_view message) {
  size_t end = 0;
  while (end < message.size()) {
    const unsigned char c = static_cast<unsigned char>(message[end]);
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']')) break;
    ++end;
  }
  // A field path is followed by ':' or ' ' and is not a plain word of a sentence start.
  if (end == 0 || end == message.size() || (message[end] != ':' && message[end] != ' ')) return "";
  const std::string_view param = message.substr(0, end);
  if (param.find_first_of("_.[") == std::string_view::npos && message[end] != ':') return "";
  return std::string(param);
}

std::string OpenAiErrorBody(const ApiError& error) {
  std::string_view type = "invalid_request_error";
  std::string_view code;
  switch (error.type) {
    case RequestErrorType::kInvalidRequest:
    case RequestErrorType::kTooLarge:
      break;
    case RequestErrorType::kAuthentication:
      type = "authentication_error";
      code = "invalid_api_key";
      break;
    case RequestErrorType::kNotFound:
      type = "not_found_error";
      code = "model_not_found";
      break;
    case RequestErrorType::kOverloaded:
      type = "rate_limit_error";
      code = "server_overloaded";
      break;
    case RequestErrorType::kUnavailable:
      type = "service_unavailable";
      break;
    case RequestErrorType::kInternal:
      type = "internal_error";
      break;
  }
  const std::string param = ErrorParam(error.message);
  JsonValue body = JsonObject(
      {{"error", JsonObject({
                     {"message", JsonString(error.message)},
                     {"type", JsonString(std::string(type))},
                     {"param", param.empty() ? JsonValue() : JsonString(param)},
                     {"code", code.empty() ? JsonValue() : JsonString(std::string(code))},
                 })}});
  return FormatJson(body);
}

std::string AnthropicErrorBody(const ApiError& error) {
  std::string_view type = "invalid_request_error";
  switch (error.type) {
    case RequestErrorType::kInvalidRequest:
      break;
    case RequestErrorType::kTooLarge:
      type = "request_too_large";
      break;
    case RequestErrorType::kAuthentication:
      type = "authentication_error";
      break;
    case RequestErrorType::kNotFound:
      type = "not_found_error";
      break;
    case RequestErrorType::kOverloaded:
    case RequestErrorType::kUnavailable:
      type = "overloaded_error";
      break;
    case RequestErrorType::kInternal:
      type = "api_error";
      break;
  }
  JsonValue body = JsonObject({{"type", JsonString("error")},
                               {"error", JsonObject({{"type", JsonString(std::string(type))},
                                                     {"message", JsonString(error.message)}})}});
  return FormatJson(body);
}

}  // namespace dsv41
