// `dsv41 tokenize`: JSON lines {"text": ...} on stdin -> {"ids": [...], "decoded": ...} on stdout.
// `dsv41 bench-tokenize`: times Tokenizer::Encode on a file in-process (bench/tokenizer/run.sh).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"
#include "cli/command.h"
#include "cli/tokenizer_flags.h"
#include "text/tokenizer.h"

namespace dsv41 {
namespace {

struct TokenizeFlags {
  TokenizerFlags tokenizer;
  bool special_tokens_as_text = false;
};

// One input line to one output line; errors name the line.
Result<std::string> TokenizeLine(const Tokenizer& tokenizer, const EncodeOptions& options,
                                 const std::string& line, int line_number) {
  const std::string where = StrFormat("stdin line %d", line_number);
  DSV41_ASSIGN_OR_RETURN(Json request, ParseJson(line, where));
  if (!request.is_object() || !request.contains("text") || !request["text"].is_string()) {
    return InvalidArgumentError("%s: want an object with a string member \"text\"", where.c_str());
  }
  auto ids = tokenizer.Encode(request["text"].get_ref<const std::string&>(), options);
  if (!ids.ok()) return ids.status().WithPrefix(where);
  OrderedJson out;
  out["ids"] = *ids;
  out["decoded"] = tokenizer.Decode(*ids);
  return out.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

int RunTokenize(const TokenizeFlags& flags) {
  if (!flags.tokenizer.Check()) return 2;
  auto tokenizer = flags.tokenizer.Load();
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  EncodeOptions options;
  options.special_tokens_as_text = flags.special_tokens_as_text;
  std::string line;
  int line_number = 0;
  int num_errors = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto out = TokenizeLine(*tokenizer, options, line, line_number);
    if (out.ok()) {
      std::fwrite(out->data(), 1, out->size(), stdout);
    } else {
      // The error also goes to stdout so output line k still answers input line k.
      ++num_errors;
      std::fprintf(stderr, "error: %s\n", out.status().ToString().c_str());
      OrderedJson error;
      error["error"] = out.status().message();
      std::fputs(error.dump(-1, ' ', false, OrderedJson::error_handler_t::replace).c_str(), stdout);
    }
    std::fputc('\n', stdout);
  }
  return num_errors == 0 ? 0 : 1;
}

DSV41_REGISTER_COMMAND(
    kTokenizeCommand, "tokenize",
    "encode JSON lines {\"text\": ...} from stdin; print {\"ids\": [...], \"decoded\": ...} per "
    "line (added tokens matched, no BOS; a bad line prints {\"error\": ...} and exits 1 at the "
    "end)",
    [](CLI::App& sub) -> std::function<int()> {
      auto flags = std::make_shared<TokenizeFlags>();
      flags->tokenizer.Add(sub);
      sub.add_flag("--special-as-text", flags->special_tokens_as_text,
                   "encode added-token literals as plain text");
      return [flags] { return RunTokenize(*flags); };
    });

struct BenchFlags {
  TokenizerFlags tokenizer;
  std::string file;
  int runs = 5;
  int warmup = 1;
  size_t chunk_bytes = 0;
};

// Cuts `text` after the first newline at or beyond every `chunk_bytes` bytes (0: one chunk), the
// same rule bench/tokenizer/hf_encode.js uses, so both sides encode identical pieces.
std::vector<std::string_view> Chunks(std::string_view text, size_t chunk_bytes) {
  if (chunk_bytes == 0) return {text};
  std::vector<std::string_view> chunks;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', std::min(text.size(), start + chunk_bytes) - 1);
    end = end == std::string_view::npos ? text.size() : end + 1;
    chunks.push_back(text.substr(start, end - start));
    start = end;
  }
  return chunks;
}

int RunBenchTokenize(const BenchFlags& flags) {
  if (!flags.tokenizer.Check()) return 2;
  auto tokenizer = flags.tokenizer.Load();
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  auto text = ReadFileToString(flags.file);
  if (!text.ok()) {
    std::fprintf(stderr, "error: %s\n", text.status().ToString().c_str());
    return 1;
  }
  const std::vector<std::string_view> chunks = Chunks(*text, flags.chunk_bytes);
  std::vector<double> seconds;
  size_t num_tokens = 0;
  for (int run = 0; run < flags.warmup + flags.runs; ++run) {
    num_tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string_view chunk : chunks) {
      auto ids = tokenizer->Encode(chunk);
      if (!ids.ok()) {
        std::fprintf(stderr, "error: %s\n", ids.status().ToString().c_str());
        return 1;
      }
      num_tokens += ids->size();
    }
    const auto stop = std::chrono::steady_clock::now();
    if (run >= flags.warmup) seconds.push_back(std::chrono::duration<double>(stop - start).count());
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  OrderedJson out;
  out["bytes"] = text->size();
  out["chunks"] = chunks.size();
  out["tokens"] = num_tokens;
  out["seconds"] = seconds;
  out["median_seconds"] = median;
  out["median_mb_per_s"] = static_cast<double>(text->size()) / 1e6 / median;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

DSV41_REGISTER_COMMAND(
    kBenchTokenizeCommand, "bench-tokenize",
    "time Tokenizer::Encode on a whole file in-process; print a JSON line with the bytes, tokens, "
    "seconds per run and the median MB/s",
    [](CLI::App& sub) -> std::function<int()> {
      auto flags = std::make_shared<BenchFlags>();
      flags->tokenizer.Add(sub);
      sub.add_option("--file", flags->file, "UTF-8 text file to encode")->required();
      sub.add_option("--runs", flags->runs, "timed runs")->check(CLI::Range(1, 1000));
      sub.add_option("--warmup", flags->warmup, "untimed runs first")->check(CLI::Range(0, 100));
      sub.add_option("--chunk-bytes", flags->chunk_bytes,
                     "encode the file in pieces cut after the first newline past every N bytes "
                     "(0: one Encode call for the whole file)");
      return [flags] { return RunBenchTokenize(*flags); };
    });

}  // namespace
}  // namespace dsv41
