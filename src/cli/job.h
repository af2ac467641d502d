#pragma once

// The run an engine command is part of (docs/multinode.md): one process, or rank r of `mpirun -np
// N dsv41 run|logits|bench|serve ...`, where every rank loads its share of the model and rank 0
// runs the command while the others follow it (engine/engine.h RunEngineFollower), printing
// nothing but errors.
//
// Failures: a usage error is found by every rank alike before the run starts. After it starts,
// what only one rank finds (its model does not load, its step failed) ends every rank at once
// (Communicator::Abort, the message naming the rank), so nobody waits for it; what every rank
// finds alike (the fingerprints differ) is returned by each, and the run ends in order.

#include <memory>
#include <string>

#include "base/communicator.h"
#include "base/progress.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "cli/engine_flags.h"
#include "config/rank_shard.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"

namespace dsv41 {

class Job {
 public:
  // Under an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE): starts the MPI communicator with
  // --mpi-timeout as its deadline; on ranks other than 0 sets flags.quiet and sends stdout to
  // /dev/null. Otherwise a single process. Errors: MPI refused, or this build has no MPI.
  static Result<std::unique_ptr<Job>> Start(EngineFlags& flags);
  // Rank 0 tells the others the run is over; then every rank's communicator ends in order.
  ~Job();

  Communicator& comm() { return comm_ != nullptr ? *comm_ : Communicator::SingleProcess(); }
  RankShard shard() const { return shard_; }
  bool leads() const { return shard_.rank == 0; }
  bool distributed() const { return shard_.num_ranks > 1; }

  // The exit code of a failure of `command` (e.g. "dsv41 run"): in one process `status` goes to
  // stderr and `code` is returned; in a multi-process run the job ends here (every rank, exit
  // code 1) with the message naming this rank.
  int Fail(const char* command, const Status& status, int code);

  // Ranks other than 0: follows rank 0's commands on `model` until it shuts the run down. 0, or
  // the job ends with this rank's error.
  int Follow(const char* command, const LoadedTextModel& model, ThreadPool& pool);

 private:
  Job() = default;
  std::unique_ptr<Communicator> comm_;  // null: one process
  RankShard shard_;
};

// What every rank of an engine command has before rank 0 runs it.
struct RankModel {
  LoadedTextModel model;
  std::unique_ptr<ThreadPool> pool;
};

// Loads `dir` for this rank (its routed experts and Engram rows only), makes the compute pool,
// prefaults the weights, opens the Engram storage the flags ask for and, with several ranks,
// checks that every rank has the same config, checkpoint and kernels (RunFingerprint). Progress
// goes to `progress` (rank 0 only). Errors name the file, tensor, field or rank; in a
// multi-process run an error of this rank alone ends the job (Job::Fail, as `command`), so the
// one returned is every rank's (the fingerprints differ).
Result<RankModel> LoadRankModel(Job& job, const char* command, const std::string& dir,
                                const EngineFlags& flags, const EngineOptions& options,
                                const ProgressFn& progress = {});

}  // namespace dsv41
