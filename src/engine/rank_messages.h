#pragma once

// What the ranks of a multi-process run tell each other (docs/multinode.md). Rank 0 runs the
// frontend (the CLI command, the HTTP server) and leads; every rank runs the same engine core on
// the same requests, so the schedule, the caches and the drafts stay equal, and only what rank 0
// alone can know crosses the wire:
//   kHeader  rank 0's commands: open an engine (its options), a step (the requests admitted and
//            aborted since the last one, and what rank 0 scheduled, which the others check
//            against their own schedule), a report, close the engine, shut down;
//   kTokens  after a step's forward, the tokens rank 0 sampled (and whether each was an
//            accepted draft), which the others append instead of sampling;
//   kSetup   the per-rank reports (RankReport) and the start-up fingerprint.
// Messages are plain bytes (base/wire.h).

#include <cstdint>
#include <span>
#include <vector>

#include "base/communicator.h"
#include "base/status.h"
#include "engine/sampling_params.h"

namespace dsv41 {

// The first byte of every kHeader message.
enum class LeaderCommand : uint8_t {
  kOpen = 1,  // an engine with these options (EncodeEngineOptions)
  kStep,      // one Engine::Step (StepHeader)
  kReport,    // every rank sends its RankReport
  kClose,     // the engine ends
  kShutdown,  // the run ends
};

// A request rank 0 admitted, as the others admit it too.
struct AdmittedRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt_ids;
  SamplingParams params;  // the seed always set (rank 0's draw when the request had none)
  bool prompt_logits = false;
};

// A request's share of the step rank 0 scheduled.
struct ScheduledEntry {
  uint64_t request_id = 0;
  int64_t start = 0;  // num_computed
  int32_t num_new_tokens = 0;
  int32_t padding = 0;  // sent as bytes: no indeterminate ones

  bool operator==(const ScheduledEntry&) const = default;
};

struct StepHeader {
  uint64_t step = 0;  // from 1, per engine
  std::vector<AdmittedRequest> added;
  std::vector<uint64_t> aborted;
  std::vector<ScheduledEntry> scheduled;
  uint64_t block_tables_hash = 0;  // of the scheduled requests' block tables, in order
};

// One token rank 0 emitted for a verify row.
struct TokenVerdict {
  int32_t token_id = 0;
  uint8_t accepted = 0;  // the row's draft was this token
  uint8_t padding[3] = {};
};

// What one rank did while an engine ran, for `dsv41 bench` (fixed size: it is all-gathered).
struct RankReport {
  int32_t rank = 0;
  int32_t padding = 0;
  uint64_t steps = 0;
  double step_ms = 0;         // wall time inside the engine's steps
  double engram_wait_ms = 0;  // of that, the forward waiting for Engram rows
  uint64_t routed_rows = 0;   // ExecStats: routed (token, expert) rows of every MoE call
  uint64_t routed_rows_busiest_rank = 0;
  uint64_t logits_digest = 0;  // LogitsDigest over every step's logits
  CommCounters comm;           // cumulative since the communicator started
};

// The frame of a command: its byte, then `payload`.
void EncodeCommand(LeaderCommand command, std::span<const std::byte> payload,
                   std::vector<std::byte>& out);
// The command of a kHeader message and its payload; DataLoss for an empty or unknown one.
Status DecodeCommand(std::span<const std::byte> message, LeaderCommand& command,
                     std::span<const std::byte>& payload);

void EncodeStepHeader(const StepHeader& header, std::vector<std::byte>& out);
Status DecodeStepHeader(std::span<const std::byte> bytes, StepHeader& header);

// Every field of SamplingParams the engine reads (stop strings are the frontend's and stay
// behind).
void EncodeSamplingParams(const SamplingParams& params, std::vector<std::byte>& out);

// Folds `logits` (their bytes) into `digest`: FNV-1a over 64-bit words, so equal digests over a
// run mean, with overwhelming likelihood, equal logits bits at every step.
uint64_t LogitsDigest(uint64_t digest, std::span<const float> logits);
inline constexpr uint64_t kLogitsDigestSeed = 0xcbf29ce484222325ull;

}  // namespace dsv41
