#pragma once

#include <string_view>

namespace dsv41 {

// The V4.1 special-token strings (tokenizer-and-chat.md §5). Ids are always read from
// tokenizer.json by these strings, never hard-coded.
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kPad = "<｜▁pad▁｜>";
inline constexpr std::string_view kSystemToken = "<｜System｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kEotToken = "<|EOT|>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kImageToken = "<｜deepseek_image｜>";
inline constexpr std::string_view kFimTokens[] = {"<｜fim▁hole｜>", "<｜fim▁begin｜>",
                                                  "<｜fim▁end｜>"};
// Task tokens (§6.7), in release id order.
inline constexpr std::string_view kTaskTokens[] = {"<｜action｜>", "<｜query｜>", "<｜authority｜>",
                                                   "<｜domain｜>", "<｜title｜>", "<｜read_url｜>"};

}  // namespace dsv41
