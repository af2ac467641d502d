#include "cli/engine_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "cli/progress_printer.h"
#include "kernels/linear.h"
#include "kernels/simd_cap.h"

namespace dsv41 {

void AddEngineFlags(CLI::App& app, EngineFlags& flags) {
  app.add_option("--block-size", flags.block_size,
                 "tokens per KV block (a multiple of every compress ratio)")
      ->capture_default_str();
  app.add_option("--kv-cache-gib", flags.kv_cache_gib, "KV cache budget in GiB")
      ->capture_default_str();
  app.add_option("--num-blocks", flags.num_blocks, "KV blocks (overrides --kv-cache-gib; 0: off)")
      ->capture_default_str();
  app.add_option("--kv-profile", flags.kv_profile, "KV row format: seed, compact or packed")
      ->capture_default_str();
  app.add_option("--max-num-seqs", flags.max_num_seqs, "requests per step at most")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", flags.max_num_batched_tokens,
                 "tokens per step at most (longer prompts are prefilled in chunks)")
      ->capture_default_str();
  app.add_option("--max-model-len", flags.max_model_len,
                 "longest request in tokens (0: the model's max_position_embeddings)")
      ->capture_default_str();
  app.add_flag("--no-prefix-caching", flags.no_prefix_caching,
               "recompute every prompt instead of reusing cached prefix blocks");
  app.add_option("-t,--threads", flags.threads, "compute threads (0: all cores)")
      ->capture_default_str();
  app.add_option(
         "--numerics", flags.numerics,
         "weight products: fast (this CPU's fastest kernel, fp32 accumulation), reference "
         "(exact accumulation, slow), fma, bf16-dot or amx (force a fast kernel), plain-fp32 "
         "(fp32 sums in index order, slow: the goldens' noise probe)")
      ->capture_default_str();
  app.add_option("--simd", flags.simd,
                 "instruction sets the kernels may use: best (this CPU's), avx2 or scalar (caps, "
                 "for comparisons); default: the environment's DSV41_SIMD, else best");
  app.add_flag("--official-index-key-slot", flags.official_index_key_slot,
               "reproduce the official reference's index-key slot defect for comparisons with "
               "its code: a ratio-2 indexer whose keys complete no group in a step (decode at "
               "even positions) scores against the keys published last (layer 20's); off: the "
               "model, where decode equals prefill");
  app.add_flag("--no-prefault", flags.no_prefault,
               "leave the weights' pages to fault in on first use instead of reading them all at "
               "start-up (they are read ahead only when they fit in memory)");
  app.add_option("--weight-memory", flags.weight_memory,
                 "where resident weights live: copy (an anonymous copy in huge pages: one TLB "
                 "entry per 2 MiB of a step's weight stream), mapped (the page-cache mapping, "
                 "shared between processes) or auto (copy where the kernel has transparent huge "
                 "pages)")
      ->capture_default_str();
  app.add_option("--speculative", flags.speculative,
                 "speculative decoding: dspark (the draft network), ngram (prompt lookup) or off")
      ->capture_default_str();
  app.add_option("--num-speculative-tokens", flags.num_speculative_tokens,
                 "drafts a verify step checks (dspark: 1 to the draft block size)")
      ->capture_default_str();
  app.add_option("--speculative-min-acceptance", flags.speculative_min_acceptance,
                 "pause drafting for a request whose recent draft acceptance rate is below this "
                 "(0: never)")
      ->capture_default_str();
  app.add_option("--speculative-confidence", flags.speculative_confidence,
                 "dspark: verify only the drafts before the first whose sigmoid(confidence) is "
                 "below this (0: all)")
      ->capture_default_str();
  app.add_option("--prompt-lookup-min", flags.prompt_lookup_min,
                 "ngram: shortest suffix to look up")
      ->capture_default_str();
  app.add_option("--prompt-lookup-max", flags.prompt_lookup_max, "ngram: longest suffix to look up")
      ->capture_default_str();
  AddEngramFlags(app, flags);
  app.add_option("--mpi-timeout", flags.mpi_timeout_s,
                 "under mpirun: seconds a rank waits for another rank before the whole job ends "
                 "with an error naming it")
      ->capture_default_str();
}

void AddEngramFlags(CLI::App& app, EngineFlags& flags) {
  app.add_option("--engram-storage", flags.engram_storage,
                 "where the Engram tables' rows come from: resident (copied into memory at "
                 "load), mapped (the checkpoint mapping, page cache shared between processes) "
                 "or disk (only the needed rows read, into a hot-row cache)")
      ->capture_default_str();
  app.add_option("--engram-cache-gib", flags.engram_cache_gib,
                 "disk tier: hot-row cache in GiB over all Engram tables (0: none)")
      ->capture_default_str();
  app.add_option("--engram-io-threads", flags.engram_io_threads,
                 "disk tier: Engram row reads in flight per table")
      ->capture_default_str();
  app.add_option("--engram-prefetch", flags.engram_prefetch,
                 "on: fetch each step's Engram rows ahead of the forward; off: read them inside "
                 "the layer (for measurements only)")
      ->capture_default_str();
  app.add_flag("--engram-direct-io", flags.engram_direct_io,
               "disk tier: read the Engram tables with O_DIRECT (bypass the page cache)");
}

Result<EngramStoreOptions> ToEngramStoreOptions(const EngineFlags& flags) {
  EngramStoreOptions options;
  DSV41_ASSIGN_OR_RETURN(options.tier, ParseEngramTier(flags.engram_storage));
  if (!(flags.engram_cache_gib >= 0) || flags.engram_cache_gib > 1 << 20) {
    return InvalidArgumentError("--engram-cache-gib %g must be >= 0", flags.engram_cache_gib);
  }
  if (flags.engram_io_threads < 1 || flags.engram_io_threads > 1024) {
    return InvalidArgumentError("--engram-io-threads %d: want 1 .. 1024", flags.engram_io_threads);
  }
  options.cache_bytes =
      static_cast<uint64_t>(std::llround(flags.engram_cache_gib * (uint64_t{1} << 30)));
  options.io_threads = flags.engram_io_threads;
  options.direct_io = flags.engram_direct_io;
  return options;
}

Status OpenEngramStorage(LoadedTextModel& model, ThreadPool& pool, const EngineFlags& flags) {
  DSV41_ASSIGN_OR_RETURN(EngramStoreOptions options, ToEngramStoreOptions(flags));
  if (model.config().engram_layer_ids.empty()) return OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  if (options.tier != EngramTier::kMapped || model.engram_storage == nullptr) {
    ProgressPrinter printer;
    const Status opened =
        model.OpenEngramStorage(options, pool, flags.quiet ? ProgressFn() : printer.AsFn());
    printer.Done();
    DSV41_RETURN_IF_ERROR(opened);
  }
  if (flags.quiet) return OkStatus();
  const EngramStorage& storage = *model.engram_storage;
  const double gib = 1 << 30;
  std::string held = "nothing resident of its own";
  if (options.tier == EngramTier::kResident) {
    held = StrFormat("%.2f GiB resident (copied in %.1f s)",
                     static_cast<double>(storage.resident_bytes()) / gib,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } else if (options.tier == EngramTier::kDisk) {
    held = StrFormat(
        "%.2f GiB resident (hot-row cache of %.2f GiB, read buffers), %d I/O "
        "threads per table%s",
        static_cast<double>(storage.resident_bytes()) / gib,
        static_cast<double>(options.cache_bytes) / gib, options.io_threads,
        options.direct_io ? ", O_DIRECT" : "");
  } else {
    held = "0 GiB resident of its own (the page cache holds hot pages, MADV_RANDOM)";
  }
  std::fprintf(stderr, "engram: %s tier, %d tables, %.2f GiB in all, %s, prefetch %s\n",
               std::string(EngramTierName(options.tier)).c_str(), storage.num_tables(),
               static_cast<double>(storage.table_bytes()) / gib, held.c_str(),
               flags.engram_prefetch == "off" ? "off (rows read inside the layer)" : "on");
  return OkStatus();
}

Result<LoadedTextModel::WeightMemory> ParseWeightMemory(const std::string& name) {
  using WeightMemory = LoadedTextModel::WeightMemory;
  if (name == "auto") return WeightMemory::kAuto;
  if (name == "copy") return WeightMemory::kCopy;
  if (name == "mapped") return WeightMemory::kMapped;
  return InvalidArgumentError("--weight-memory '%s': want auto, copy or mapped", name.c_str());
}

void ResideWeights(LoadedTextModel& model, ThreadPool& pool, const EngineFlags& flags) {
  if (flags.no_prefault) {
    if (!flags.quiet) {
      std::fprintf(stderr,
                   "weights: not prefaulted (--no-prefault): pages fault in on first use\n");
    }
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Result<LoadedTextModel::WeightMemory> memory = ParseWeightMemory(flags.weight_memory);
  const LoadedTextModel::Residence r =
      model.ResideWeights(pool, memory.ok() ? *memory : LoadedTextModel::WeightMemory::kAuto);
  if (flags.quiet) return;
  const double gib = static_cast<double>(r.weight_bytes) / (1 << 30);
  const double avail = static_cast<double>(r.available_bytes) / (1 << 30);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.done) {
    std::fprintf(stderr,
                 "weights: %.2f GiB mapped, not prefaulted (more than 3/4 of the %.1f GiB "
                 "available): pages fault in on first use\n",
                 gib, avail);
  } else if (r.copied_bytes > 0) {
    std::fprintf(stderr,
                 "weights: %.2f GiB resident, %.2f GiB of it copied into huge pages in %.1f s "
                 "(%.1f GiB were available)\n",
                 gib, static_cast<double>(r.copied_bytes) / (1 << 30), seconds, avail);
  } else {
    std::fprintf(stderr,
                 "weights: %.2f GiB resident (prefaulted in %.1f s; %.1f GiB were available)\n",
                 gib, seconds, avail);
  }
  if (!r.copy_error.empty()) {
    std::fprintf(stderr, "weights: a copy failed, its pages stay mapped: %s\n",
                 r.copy_error.c_str());
  }
}

Result<Numerics> ParseNumerics(const std::string& name) {
  if (name == "fast") return Numerics::kFast;
  if (name == "reference") return Numerics::kReference;
  if (name == "fma") return Numerics::kFastFma;
  if (name == "plain-fp32") return Numerics::kPlainFp32;
  if (name == "amx") {
    if (!CpuHasAmxTiles()) {
      return InvalidArgumentError("--numerics amx: this CPU has no AMX-BF16 tiles");
    }
    return Numerics::kFastAmx;
  }
  if (name == "bf16-dot") {
    if (!CpuHasBf16Dot()) {
      return InvalidArgumentError("--numerics bf16-dot: this CPU has no AVX512-BF16");
    }
    return Numerics::kFastBf16Dot;
  }
  return InvalidArgumentError(
      "--numerics '%s': want fast, reference, fma, bf16-dot, amx or plain-fp32", name.c_str());
}

bool NeedsDspark(const EngineFlags& flags) { return flags.speculative == "dspark"; }

Result<EngineOptions> ToEngineOptions(const EngineFlags& flags) {
  EngineOptions options;
  DSV41_ASSIGN_OR_RETURN(options.profile, ParseKvProfile(flags.kv_profile));
  if (flags.block_size < 1) return InvalidArgumentError("--block-size %d", flags.block_size);
  if (!(flags.kv_cache_gib > 0) || flags.kv_cache_gib > 1 << 20) {
    return InvalidArgumentError("--kv-cache-gib %g must be positive", flags.kv_cache_gib);
  }
  if (flags.threads < 0) return InvalidArgumentError("-t %d must be >= 0", flags.threads);
  options.block_tokens = flags.block_size;
  options.kv_cache_bytes = static_cast<uint64_t>(std::llround(flags.kv_cache_gib * (1 << 30)));
  options.num_blocks = flags.num_blocks;
  options.max_num_seqs = flags.max_num_seqs;
  options.max_num_batched_tokens = flags.max_num_batched_tokens;
  options.max_model_len = flags.max_model_len;
  options.enable_prefix_caching = !flags.no_prefix_caching;
  if (flags.simd.empty()) {
    DSV41_RETURN_IF_ERROR(ApplySimdCapFromEnvironment());
  } else {
    DSV41_ASSIGN_OR_RETURN(const SimdCap simd, ParseSimdCap(flags.simd));
    DSV41_RETURN_IF_ERROR(ApplySimdCap(simd));
  }
  // After the cap and before --numerics, which ask what the CPU runs.
  DSV41_RETURN_IF_ERROR(ApplyFastKernelFromEnvironment());
  DSV41_ASSIGN_OR_RETURN(options.numerics, ParseNumerics(flags.numerics));
  options.official_index_key_slot = flags.official_index_key_slot;
  SpeculativeOptions& spec = options.speculative;
  DSV41_ASSIGN_OR_RETURN(spec.method, ParseSpeculativeMethod(flags.speculative));
  spec.num_speculative_tokens = flags.num_speculative_tokens;
  spec.min_acceptance = flags.speculative_min_acceptance;
  spec.confidence_threshold = flags.speculative_confidence;
  spec.prompt_lookup_min = flags.prompt_lookup_min;
  spec.prompt_lookup_max = flags.prompt_lookup_max;
  if (flags.engram_prefetch != "on" && flags.engram_prefetch != "off") {
    return InvalidArgumentError("--engram-prefetch '%s': want on or off",
                                flags.engram_prefetch.c_str());
  }
  options.engram_prefetch = flags.engram_prefetch == "on";
  DSV41_RETURN_IF_ERROR(ParseWeightMemory(flags.weight_memory).status());
  DSV41_RETURN_IF_ERROR(ToEngramStoreOptions(flags).status());
  return options;
}

int ComputeThreads(const EngineFlags& flags) {
  return flags.threads > 0 ? flags.threads
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void PrintNumerics(const EngineOptions& options) {
  const LinearWeight fp8{WeightFormat::kFp8Block, 0, 0, {}, {}};
  const GemmKernel kernel =
      SelectGemmKernel(fp8, LinearOptions{.quantize_activations = true}, options.numerics);
  std::fprintf(
      stderr, "numerics: %s weight products (%s), kernels %s\n", GemmKernelName(kernel),
      kernel == GemmKernel::kReference ? "exact accumulation" : "exact products, fp32 accumulation",
      ActiveSimdTargetName().c_str());
  if (options.official_index_key_slot) {
    std::fprintf(stderr,
                 "index keys: the official reference's single published slot "
                 "(--official-index-key-slot; decode no longer equals prefill)\n");
  }
}

void PrintEngineLayout(const Engine& engine, const EngineOptions& options) {
  PrintNumerics(options);
  const EngineLayout& l = engine.layout();
  std::fprintf(stderr,
               "kv cache: block %d tokens, %zu B per block id, %u blocks (%.3f GiB), longest "
               "request %lld tokens, profile %s, prefix caching %s\n",
               l.block_tokens, l.bytes_per_block_id, l.num_blocks,
               static_cast<double>(l.kv_cache_bytes) / (1 << 30),
               static_cast<long long>(l.max_request_tokens),
               std::string(KvProfileName(options.profile)).c_str(),
               options.enable_prefix_caching ? "on" : "off");
  const SpeculativeOptions& spec = options.speculative;
  if (spec.method != SpeculativeMethod::kOff) {
    std::fprintf(stderr, "speculative: %s, %d tokens, min acceptance %g\n",
                 std::string(SpeculativeMethodName(spec.method)).c_str(),
                 spec.num_speculative_tokens, spec.min_acceptance);
  }
}

}  // namespace dsv41
