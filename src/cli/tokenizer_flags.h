#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "base/status.h"
#include "text/tokenizer.h"

namespace dsv41 {

// The flag group every tokenizer command shares: `--model DIR` (reads DIR/tokenizer.json) or
// `--tokenizer FILE`, exactly one of them.
struct TokenizerFlags {
  std::string model_dir;
  std::string tokenizer_path;

  void Add(CLI::App& sub) {
    CLI::Option* model =
        sub.add_option("-m,--model", model_dir, "model directory (reads DIR/tokenizer.json)");
    CLI::Option* file = sub.add_option("--tokenizer", tokenizer_path, "a tokenizer.json file");
    model->excludes(file);
    file->excludes(model);
  }

  // False (after printing the usage error) when neither flag was given; the action exits 2.
  bool Check() const {
    if (!model_dir.empty() || !tokenizer_path.empty()) return true;
    std::fprintf(stderr, "error: --model or --tokenizer is required\n");
    return false;
  }

  std::string Path() const {
    return tokenizer_path.empty() ? model_dir + "/tokenizer.json" : tokenizer_path;
  }

  Result<Tokenizer> Load() const { return Tokenizer::Load(Path()); }
};

}  // namespace dsv41
