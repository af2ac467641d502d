#pragma once

// What must be equal on every rank of a multi-process run for their results to be the same bits
// (docs/multinode.md): the config, the checkpoint and the kernels the weight products run on.
// Exchanged once at start-up; a rank that differs is refused before any step runs.

#include <cstdint>

#include "base/communicator.h"
#include "base/status.h"
#include "engine/loaded_model.h"

namespace dsv41 {

// Fixed size: it is all-gathered as bytes.
struct RunFingerprint {
  int32_t num_ranks = 0;
  int32_t padding = 0;
  uint64_t config_hash = 0;      // config.json's bytes
  uint64_t checkpoint_hash = 0;  // every shard's name, size, tensor table and sampled bytes
  char kernels[96] = {};         // SIMD target, fast kernel, bf16 dot unit, numerics
  char model_dir[192] = {};      // for the message only (paths may rightly differ)
};

// This rank's fingerprint of `model` run with `numerics`. The checkpoint hash covers the headers
// of every shard (names, dtypes, shapes, offsets), the file sizes, and the first and last 64
// bytes of every 64th tensor: a different checkpoint, or the same one with other values, differs
// without reading the weights. IoError naming the file when config.json cannot be read.
Result<RunFingerprint> ComputeRunFingerprint(const LoadedTextModel& model, Numerics numerics,
                                             int32_t num_ranks);

// Every rank's fingerprint against rank 0's (one all-gather). InvalidArgument naming the first
// rank that differs and what differs; every rank returns the same verdict.
Status CheckRunFingerprints(Communicator& comm, const RunFingerprint& mine);

}  // namespace dsv41
