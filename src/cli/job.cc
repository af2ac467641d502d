#include "cli/job.h"

#include <cstdio>

#include "base/mpi_communicator.h"
#include "engine/run_fingerprint.h"

namespace dsv41 {

Result<std::unique_ptr<Job>> Job::Start(EngineFlags& flags) {
  std::unique_ptr<Job> job(new Job());
  if (!LaunchedByMpiLauncher()) return job;
  DSV41_ASSIGN_OR_RETURN(job->comm_,
                         StartMpiCommunicator(MpiOptions{.timeout_s = flags.mpi_timeout_s}));
  job->shard_ = RankShard{job->comm_->rank(), job->comm_->size()};
  if (!job->leads()) {
    flags.quiet = true;
    // The results are rank 0's; nothing else may reach the terminal or a pipe.
    if (std::freopen("/dev/null", "w", stdout) == nullptr) {
      return IoError("rank %d: cannot send stdout to /dev/null", job->shard_.rank);
    }
  }
  return job;
}

Job::~Job() {
  if (comm_ != nullptr) ShutDownFollowers(*comm_);
}

int Job::Fail(const char* command, const Status& status, int code) {
  if (!distributed()) {
    std::fprintf(stderr, "%s: %s\n", command, status.ToString().c_str());
    return code;
  }
  comm_->Abort(StrFormat("%s: %s", command, status.ToString().c_str()));
  return code;  // not reached: Abort ends every rank
}

int Job::Follow(const char* command, const LoadedTextModel& model, ThreadPool& pool) {
  const Status followed = RunEngineFollower(model, pool, comm());
  return followed.ok() ? 0 : Fail(command, followed, 1);
}

Result<RankModel> LoadRankModel(Job& job, const char* command, const std::string& dir,
                                const EngineFlags& flags, const EngineOptions& options,
                                const ProgressFn& progress) {
  // This rank's own failures end a multi-process job at once; in one process they are returned.
  const auto local = [&](const Status& status) {
    if (job.distributed()) job.Fail(command, status, 1);
    return status;
  };
  RankModel out;
  Result<LoadedTextModel> model = LoadedTextModel::Load(dir, job.leads() ? progress : ProgressFn(),
                                                        NeedsDspark(flags), job.shard());
  if (!model.ok()) return local(model.status());
  out.model = std::move(model).value();
  out.pool = std::make_unique<ThreadPool>(ComputeThreads(flags));
  ResideWeights(out.model, *out.pool, flags);
  if (Status s = OpenEngramStorage(out.model, *out.pool, flags); !s.ok()) return local(s);
  if (job.distributed()) {
    Result<RunFingerprint> fingerprint =
        ComputeRunFingerprint(out.model, options.numerics, job.shard().num_ranks);
    if (!fingerprint.ok()) return local(fingerprint.status());
    DSV41_RETURN_IF_ERROR(CheckRunFingerprints(job.comm(), *fingerprint));
  }
  return out;
}

}  // namespace dsv41
