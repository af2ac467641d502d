#pragma once

// The collective layer of a multi-process run (DESIGN.md "Beyond one machine"): the few calls the
// engine makes between ranks, behind one interface with a single-process implementation (every
// call a no-op, nothing allocated) and an OpenMPI one (base/mpi_communicator.h). It moves bytes
// only: no floating-point reduction ever crosses it, so a multi-rank run sums in the
// single-process order and gives the same bits.
//
// Failure model: a collective that cannot complete ends the job. Every wait has a deadline; when
// it passes, or MPI reports an error, the communicator prints a message naming this rank, the
// collective and the ranks it was waiting for, and ends every rank (MPI_Abort). Callers therefore
// never see a communication error.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dsv41 {

// What a collective carries. Collectives of one kind are matched with each other only, in the
// order each rank starts them; kinds may interleave differently on different ranks (the Engram
// fetch thread and the forward run side by side).
enum class CommKind : uint8_t {
  kSetup,   // start-up and reports: the fingerprint exchange, per-rank figures, the final barrier
  kHeader,  // rank 0's commands: engine open and close, the step header, shutdown
  kEngram,  // Engram rows: each rank's fetch status, then the rows it owns
  kMoe,     // routed experts' outputs
  kTokens,  // rank 0's sampled tokens of a step
};
inline constexpr size_t kNumCommKinds = 5;

// "setup", "header", "engram", "moe", "tokens".
std::string_view CommKindName(CommKind kind);

// What this rank did per kind, cumulative since the communicator started.
struct CommKindCounters {
  uint64_t calls = 0;           // collectives started
  uint64_t bytes_sent = 0;      // payload bytes this rank sent (all peers)
  uint64_t bytes_received = 0;  // payload bytes it received
  double blocked_ms = 0;        // time callers spent waiting for these collectives to complete
};

struct CommCounters {
  std::array<CommKindCounters, kNumCommKinds> kinds{};

  const CommKindCounters& of(CommKind kind) const { return kinds[static_cast<size_t>(kind)]; }
};

// One rank's part of an all-gather: bytes [offset, offset + size) of the gathered buffer.
struct CommSegment {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A collective in flight: pass it to Wait before touching its buffer.
struct CommTicket {
  uint64_t id = 0;
};

// Thread-safe: any thread may start and wait for collectives (the forward's MoE gathers and the
// Engram fetch thread's at once), each waiting only for its own.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // Starts an all-gather in place. On entry `buffer` holds this rank's segment,
  // segments[rank()]; once Wait returns, every segment r holds rank r's bytes. `segments` has
  // size() entries, each inside `buffer`, pairwise disjoint, any of them empty (checked); every
  // rank passes the same segment sizes. The buffer must live, and this rank's segment stay
  // unchanged, until Wait.
  virtual CommTicket StartAllGather(CommKind kind, std::span<std::byte> buffer,
                                    std::span<const CommSegment> segments) = 0;
  // Blocks until the collective has completed. Ends the job when the deadline passes first.
  virtual void Wait(CommTicket ticket) = 0;
  // StartAllGather, then Wait.
  void AllGather(CommKind kind, std::span<std::byte> buffer,
                 std::span<const CommSegment> segments) {
    Wait(StartAllGather(kind, buffer, segments));
  }
  // Broadcasts `bytes` from rank `root`: on every other rank `bytes` is replaced by root's (any
  // size, 0 included). Blocking. A kHeader receive waits for rank 0's next command, which may
  // rightly not come for hours (an idle server): it ends the job only once root has been silent
  // (not even a heartbeat) for the deadline; other kinds wait at most the deadline.
  virtual void Broadcast(CommKind kind, int32_t root, std::vector<std::byte>& bytes) = 0;

  // Ends every rank of the job with exit code 1, after `message` (prefixed with this rank) went
  // to stderr. For faults one rank finds and the others cannot learn of.
  [[noreturn]] virtual void Abort(const std::string& message) = 0;

  virtual CommCounters counters() const = 0;

  // Rank 0 of 1: collectives only check their arguments; Abort exits the process. Stateless.
  static Communicator& SingleProcess();
};

// Segments of `sizes[r]` bytes each, laid out in rank order from offset 0, into `segments`
// (resized to sizes.size(), its capacity kept). Returns the total.
uint64_t ContiguousSegments(std::span<const uint64_t> sizes, std::vector<CommSegment>& segments);

// Every rank's `mine` (a fixed-size, trivially copyable value), in rank order: one all-gather.
template <typename T>
std::vector<T> AllGatherValue(Communicator& comm, CommKind kind, const T& mine) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T> all(static_cast<size_t>(comm.size()));
  all[static_cast<size_t>(comm.rank())] = mine;
  std::vector<uint64_t> sizes(all.size(), sizeof(T));
  std::vector<CommSegment> segments;
  ContiguousSegments(sizes, segments);
  comm.AllGather(kind, std::as_writable_bytes(std::span<T>(all)), segments);
  return all;
}

}  // namespace dsv41
