#include "base/communicator.h"

#include <cstdio>
#include <cstdlib>

#include "base/check.h"

namespace dsv41 {
namespace {

// The one process of a single-process run.
class SingleProcessCommunicator final : public Communicator {
 public:
  int32_t rank() const override { return 0; }
  int32_t size() const override { return 1; }

  CommTicket StartAllGather(CommKind /*kind*/, std::span<std::byte> buffer,
                            std::span<const CommSegment> segments) override {
    DSV41_CHECK(segments.size() == 1 && segments[0].offset <= buffer.size() &&
                    segments[0].size <= buffer.size() - segments[0].offset,
                "all-gather of %zu segments over %zu bytes in a single process", segments.size(),
                buffer.size());
    return CommTicket{};
  }
  void Wait(CommTicket /*ticket*/) override {}
  void Broadcast(CommKind /*kind*/, int32_t root, std::vector<std::byte>& /*bytes*/) override {
    DSV41_CHECK(root == 0, "broadcast from rank %d in a single process", root);
  }
  [[noreturn]] void Abort(const std::string& message) override {
    std::fprintf(stderr, "dsv41: %s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }
  CommCounters counters() const override { return {}; }
};

}  // namespace

std::string_view CommKindName(CommKind kind) {
  switch (kind) {
    case CommKind::kSetup:
      return "setup";
    case CommKind::kHeader:
      return "header";
    case CommKind::kEngram:
      return "engram";
    case CommKind::kMoe:
      return "moe";
    case CommKind::kTokens:
      return "tokens";
  }
  return "?";
}

Communicator& Communicator::SingleProcess() {
  static SingleProcessCommunicator single;  // stateless: no mutable global
  return single;
}

uint64_t ContiguousSegments(std::span<const uint64_t> sizes, std::vector<CommSegment>& segments) {
  segments.resize(sizes.size());
  uint64_t offset = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    segments[r] = CommSegment{.offset = offset, .size = sizes[r]};
    offset += sizes[r];
  }
  return offset;
}

}  // namespace dsv41
