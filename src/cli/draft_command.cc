// `dsv41 draft`: the DSpark draft dump (issue 10): runs the prompt, then S greedy decode steps
// without speculation, drafting after each from the main model's greedy token, and writes
// dspark_ids.npy [S, 1 + block] int64, dspark_logits.npy [S, block, vocab] float32 and
// dspark_confidence.npy [S, block] float32 — the layout of the model goldens' arrays of the same
// names — into --out-dir.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "base/exec_context.h"
#include "base/npy.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/int_list.h"
#include "engine/draft_dump.h"
#include "engine/loaded_model.h"

namespace dsv41 {
namespace {

struct DraftFlags {
  std::string model_dir;
  std::string ids;
  int32_t steps = 15;
  std::string out_dir;
  int threads = 1;
  std::string numerics = "fast";
  EngineFlags engram;  // only its Engram offload fields are set (AddEngramFlags)
};

int RunDraft(const DraftFlags& flags) {
  Result<std::vector<int32_t>> ids = ParseIntList(flags.ids, "--ids", 0, INT32_MAX);
  Result<Numerics> numerics = ParseNumerics(flags.numerics);
  const std::string& prefetch = flags.engram.engram_prefetch;
  if (prefetch != "on" && prefetch != "off") {
    std::fprintf(stderr, "dsv41 draft: --engram-prefetch '%s': want on or off\n", prefetch.c_str());
    return 2;
  }
  if (!ids.ok() || !numerics.ok() || flags.steps < 1 || flags.threads < 1) {
    std::fprintf(stderr, "dsv41 draft: %s\n",
                 !ids.ok()        ? ids.status().ToString().c_str()
                 : !numerics.ok() ? numerics.status().ToString().c_str()
                                  : "want --steps >= 1 and -t >= 1");
    return 2;
  }
  Result<LoadedTextModel> m = LoadedTextModel::Load(flags.model_dir, {}, /*with_dspark=*/true);
  if (!m.ok()) {
    std::fprintf(stderr, "dsv41 draft: %s\n", m.status().ToString().c_str());
    return 1;
  }
  OwnedExecContext exec(flags.threads, *numerics);
  if (const Status engram = OpenEngramStorage(*m, exec.pool, flags.engram); !engram.ok()) {
    std::fprintf(stderr, "dsv41 draft: %s\n", engram.ToString().c_str());
    return engram.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  Result<DraftDump> dump =
      DumpDrafts(*m, *ids, flags.steps, exec.ctx, flags.engram.engram_prefetch == "on");
  if (!dump.ok()) {
    std::fprintf(stderr, "dsv41 draft: %s\n", dump.status().ToString().c_str());
    return dump.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::error_code ec;
  std::filesystem::create_directories(flags.out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "dsv41 draft: %s: %s\n", flags.out_dir.c_str(), ec.message().c_str());
    return 1;
  }
  const int64_t s = dump->steps, b = dump->block_size, v = dump->vocab_size;
  const std::string dir = flags.out_dir + "/";
  for (const Status& written :
       {WriteNpyInt64(dir + "dspark_ids.npy", dump->ids, std::vector<int64_t>{s, 1 + b}),
        WriteNpyFloat32(dir + "dspark_logits.npy", dump->logits, std::vector<int64_t>{s, b, v}),
        WriteNpyFloat32(dir + "dspark_confidence.npy", dump->confidence,
                        std::vector<int64_t>{s, b})}) {
    if (!written.ok()) {
      std::fprintf(stderr, "dsv41 draft: %s\n", written.ToString().c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "dsv41 draft: %lld steps of %lld drafts written to %s\n",
               static_cast<long long>(s), static_cast<long long>(b), flags.out_dir.c_str());
  return 0;
}

std::function<int()> SetupDraft(CLI::App& sub) {
  auto flags = std::make_shared<DraftFlags>();
  sub.add_option("-m,--model", flags->model_dir, "model directory (with its DSpark stages)")
      ->required();
  sub.add_option("--ids", flags->ids, "prompt token ids, comma-separated")->required();
  sub.add_option("--steps", flags->steps, "greedy decode steps, one draft after each")
      ->capture_default_str();
  sub.add_option("--out-dir", flags->out_dir, "where the three .npy files go")->required();
  sub.add_option("-t,--threads", flags->threads, "compute threads")->capture_default_str();
  sub.add_option("--numerics", flags->numerics,
                 "weight products: fast, reference (exact accumulation: the goldens' bits), fma or "
                 "bf16-dot")
      ->capture_default_str();
  AddEngramFlags(sub, flags->engram);
  return [flags] { return RunDraft(*flags); };
}

DSV41_REGISTER_COMMAND(kDraftCommand, "draft",
                       "dump the DSpark drafts after each greedy decode step (goldens' layout)",
                       SetupDraft);

}  // namespace
}  // namespace dsv41
