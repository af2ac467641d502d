#pragma once

// What the server's engine loop drives (serving.md §1): the engine, or a test double that
// replays scripted output. Engine thread only: the loop calls every method from its one thread.

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"

namespace dsv41 {

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // As Engine::AddRequest: the engine's id, or InvalidArgument naming the field.
  virtual Result<uint64_t> AddRequest(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                                      const AddRequestOptions& options) = 0;
  // As Engine::Abort: frees the request's blocks at once; its kAbort output comes with a Step.
  virtual Status Abort(uint64_t request_id) = 0;
  virtual Result<std::vector<RequestOutput>> Step() = 0;
  virtual bool HasUnfinished() const = 0;
  virtual EngineStats stats() const = 0;
};

// The Engine behind the interface. The engine must outlive it. Engine thread only.
class EngineBackend final : public GenerationBackend {
 public:
  explicit EngineBackend(Engine& engine) : engine_(engine) {}

  Result<uint64_t> AddRequest(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                              const AddRequestOptions& options) override {
    return engine_.AddRequest(std::move(prompt_ids), params, options);
  }
  Status Abort(uint64_t request_id) override { return engine_.Abort(request_id); }
  Result<std::vector<RequestOutput>> Step() override { return engine_.Step(); }
  bool HasUnfinished() const override { return engine_.HasUnfinished(); }
  EngineStats stats() const override { return engine_.stats(); }

 private:
  Engine& engine_;
};

}  // namespace dsv41
