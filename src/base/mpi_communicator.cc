#include "base/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "base/check.h"

namespace dsv41 {
namespace {

using Clock = std::chrono::steady_clock;

// Tags: 8 · (collective sequence number mod kSeqModulus) + kind, so a message can only match the
// receive of the same collective of the same kind; 7 is the heartbeat. A rank whose sequence of
// collectives diverged waits for a message that never comes and the deadline names it.
constexpr int kTagKinds = 8;
constexpr int kHeartbeatTag = 7;
// Bytes per MPI message: MPI counts are int; larger segments go as several messages.
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 30;

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return StrFormat("MPI error %d", code);
  return std::string(text, static_cast<size_t>(length));
}

double MsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// One collective in flight. The comm thread alone touches the MPI fields; done, error and the
// peers' progress are read under the communicator's mutex.
struct Op {
  uint64_t id = 0;
  CommKind kind = CommKind::kSetup;
  uint64_t seq = 0;  // per kind, from 0
  bool is_broadcast = false;
  int32_t root = 0;
  std::span<std::byte> buffer;              // all-gather
  std::vector<CommSegment> segments;        // all-gather
  std::vector<std::byte>* bytes = nullptr;  // broadcast payload
  Clock::time_point start;
  // Posted by the comm thread.
  bool posted = false;
  bool probing = false;  // a broadcast receive still learning the payload's size
  std::vector<MPI_Request> requests;
  std::vector<int32_t> request_peer;
  std::vector<uint8_t> request_is_receive;
  // Under the mutex: done, error, and for the timeout message a copy of which peers are still
  // outstanding (the comm thread refreshes it after every poll).
  bool done = false;
  std::string error;
  struct PeerView {
    int32_t peer = 0;
    bool receive = false;
    bool open = true;
  };
  std::vector<PeerView> view;
  bool view_probing = false;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const MpiOptions& options) : options_(options) {}
  ~MpiCommunicator() override;

  // Starts the comm thread and waits for MPI's initialisation on it.
  Status Start();

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }
  CommTicket StartAllGather(CommKind kind, std::span<std::byte> buffer,
                            std::span<const CommSegment> segments) override;
  void Wait(CommTicket ticket) override;
  void Broadcast(CommKind kind, int32_t root, std::vector<std::byte>& bytes) override;
  [[noreturn]] void Abort(const std::string& message) override;
  CommCounters counters() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_;
  }

 private:
  // The comm thread: MPI_Init_thread, the polling loop, MPI_Finalize.
  void Run(std::promise<Status>& started);
  Status Initialise();
  void Poll();
  // Posts an op's sends and receives (or its probe).
  void Post(Op& op);
  // Advances an op; true once every request completed. Sets `error` on an MPI error.
  bool Progress(Op& op, std::string& error);
  void SendHeartbeats(Clock::time_point now);
  // Between polls while collectives are in flight: yield, or sleep longer the longer nothing
  // moved.
  void Pause(bool someone_waits);
  void DrainHeartbeats(Clock::time_point now);
  int Tag(const Op& op) const {
    return kTagKinds * static_cast<int>(op.seq % seq_modulus_) + static_cast<int>(op.kind);
  }
  CommTicket Submit(std::unique_ptr<Op> op);
  // The message a wait that timed out ends the job with (under the mutex).
  std::string TimeoutMessage(const Op& op, double waited_s) const;

  MpiOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int32_t rank_ = 0;
  int32_t size_ = 1;
  uint64_t seq_modulus_ = 1;
  std::thread thread_;
  std::vector<Op*> active_;                   // comm thread only: posted, not yet complete
  std::vector<MPI_Request> heartbeat_sends_;  // comm thread only
  Clock::time_point next_heartbeat_;          // comm thread only
  Clock::time_point last_progress_;           // comm thread only: an op posted or completed

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // the comm thread waits for ops
  std::condition_variable done_cv_;  // waiters wait for their op
  std::map<uint64_t, std::unique_ptr<Op>> ops_;
  std::vector<Op*> to_post_;
  std::array<uint64_t, kNumCommKinds> next_seq_{};
  uint64_t next_id_ = 1;
  int waiters_ = 0;
  bool stop_ = false;
  bool abort_ = false;
  Clock::time_point root_heard_;  // rank 0's last heartbeat (others)
  CommCounters counters_;
};

Status MpiCommunicator::Start() {
  std::promise<Status> started;
  std::future<Status> result = started.get_future();
  thread_ = std::thread([this, &started] { Run(started); });
  Status status = result.get();
  if (!status.ok()) thread_.join();
  return status;
}

Status MpiCommunicator::Initialise() {
  int provided = MPI_THREAD_SINGLE;
  int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (code != MPI_SUCCESS) return InternalError("MPI_Init_thread: %s", MpiErrorText(code).c_str());
  // This thread makes every MPI call, so FUNNELED suffices; OpenMPI gives MULTIPLE.
  if (provided < MPI_THREAD_FUNNELED) {
    return InternalError("MPI_Init_thread provides thread level %d, need MPI_THREAD_FUNNELED",
                         provided);
  }
  code = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  if (code != MPI_SUCCESS) return InternalError("MPI_Comm_dup: %s", MpiErrorText(code).c_str());
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &size);
  rank_ = rank;
  size_ = size;
  void* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &found);
  const int max_tag = found != 0 ? *static_cast<int*>(tag_ub) : 32767;
  seq_modulus_ = static_cast<uint64_t>(max_tag / kTagKinds);
  root_heard_ = Clock::now();
  next_heartbeat_ = Clock::now();
  return OkStatus();
}

void MpiCommunicator::Run(std::promise<Status>& started) {
  const Status init = Initialise();
  started.set_value(init);  // `started` is gone after this
  if (!init.ok()) return;
  for (;;) {
    std::vector<Op*> posting;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (abort_) break;
      if (active_.empty() && to_post_.empty()) {
        if (stop_) break;
        // Idle: sleep until work comes or the next heartbeat is due.
        const auto until =
            rank_ == 0 ? next_heartbeat_ : Clock::now() + std::chrono::milliseconds(20);
        work_cv_.wait_until(lock, until, [this] { return !to_post_.empty() || stop_ || abort_; });
        if (abort_) break;
      }
      posting.swap(to_post_);
    }
    for (Op* op : posting) {
      Post(*op);
      active_.push_back(op);
    }
    const size_t before = active_.size();
    Poll();
    if (!posting.empty() || active_.size() != before) last_progress_ = Clock::now();
    const bool someone_waits = [this] {
      std::lock_guard<std::mutex> lock(mutex_);
      return waiters_ > 0;
    }();
    if (!active_.empty()) Pause(someone_waits);
  }
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (abort_) {
      lock.unlock();
      MPI_Abort(comm_, 1);
      std::_Exit(1);  // not reached: MPI_Abort ends the process
    }
  }
  for (MPI_Request& r : heartbeat_sends_) MPI_Wait(&r, MPI_STATUS_IGNORE);
  MPI_Comm_free(&comm_);
  MPI_Finalize();
}

void MpiCommunicator::Post(Op& op) {
  op.posted = true;
  const int tag = Tag(op);
  auto add = [&](MPI_Request request, int32_t peer, bool receive) {
    op.requests.push_back(request);
    op.request_peer.push_back(peer);
    op.request_is_receive.push_back(receive ? 1 : 0);
  };
  // Pieces of at most kMaxMessageBytes, in order: both sides split a segment alike.
  auto pieces = [&](std::byte* data, uint64_t bytes, int32_t peer, bool receive) {
    for (uint64_t at = 0; at < bytes; at += kMaxMessageBytes) {
      const int n = static_cast<int>(std::min(kMaxMessageBytes, bytes - at));
      MPI_Request request = MPI_REQUEST_NULL;
      const int code = receive ? MPI_Irecv(data + at, n, MPI_BYTE, peer, tag, comm_, &request)
                               : MPI_Isend(data + at, n, MPI_BYTE, peer, tag, comm_, &request);
      if (code != MPI_SUCCESS) {
        std::lock_guard<std::mutex> lock(mutex_);
        op.error = StrFormat("posting a %s message %s rank %d: %s",
                             std::string(CommKindName(op.kind)).c_str(), receive ? "from" : "to",
                             peer, MpiErrorText(code).c_str());
        return;
      }
      add(request, peer, receive);
    }
  };
  if (op.is_broadcast) {
    if (rank_ == op.root) {
      DSV41_CHECK(op.bytes->size() <= kMaxMessageBytes, "a broadcast of %zu bytes",
                  op.bytes->size());
      for (int32_t peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        MPI_Request request = MPI_REQUEST_NULL;
        const int code = MPI_Isend(op.bytes->data(), static_cast<int>(op.bytes->size()), MPI_BYTE,
                                   peer, tag, comm_, &request);
        if (code != MPI_SUCCESS) {
          std::lock_guard<std::mutex> lock(mutex_);
          op.error = StrFormat("sending a %s broadcast to rank %d: %s",
                               std::string(CommKindName(op.kind)).c_str(), peer,
                               MpiErrorText(code).c_str());
          return;
        }
        add(request, peer, false);
      }
    } else {
      op.probing = true;  // its size comes with the message
    }
    return;
  }
  const CommSegment mine = op.segments[static_cast<size_t>(rank_)];
  for (int32_t peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const CommSegment theirs = op.segments[static_cast<size_t>(peer)];
    pieces(op.buffer.data() + theirs.offset, theirs.size, peer, true);
    pieces(op.buffer.data() + mine.offset, mine.size, peer, false);
  }
}

bool MpiCommunicator::Progress(Op& op, std::string& error) {
  if (op.probing) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    int code = MPI_Improbe(op.root, Tag(op), comm_, &found, &message, &status);
    if (code != MPI_SUCCESS) {
      error = StrFormat("probing for rank %d's %s broadcast: %s", op.root,
                        std::string(CommKindName(op.kind)).c_str(), MpiErrorText(code).c_str());
      return false;
    }
    if (found == 0) return false;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    op.bytes->resize(static_cast<size_t>(count));
    MPI_Request request = MPI_REQUEST_NULL;
    code = MPI_Imrecv(op.bytes->data(), count, MPI_BYTE, &message, &request);
    if (code != MPI_SUCCESS) {
      error = StrFormat("receiving rank %d's %s broadcast: %s", op.root,
                        std::string(CommKindName(op.kind)).c_str(), MpiErrorText(code).c_str());
      return false;
    }
    op.probing = false;
    op.requests.push_back(request);
    op.request_peer.push_back(op.root);
    op.request_is_receive.push_back(1);
  }
  if (op.requests.empty()) return true;
  int flag = 0;
  // Completed requests become MPI_REQUEST_NULL, so TimeoutMessage sees which peers are missing.
  for (size_t i = 0; i < op.requests.size(); ++i) {
    if (op.requests[i] == MPI_REQUEST_NULL) continue;
    MPI_Status status;
    const int code = MPI_Test(&op.requests[i], &flag, &status);
    if (code != MPI_SUCCESS) {
      error = StrFormat("%s %s rank %d: %s", std::string(CommKindName(op.kind)).c_str(),
                        op.request_is_receive[i] ? "message from" : "message to",
                        op.request_peer[i], MpiErrorText(code).c_str());
      return false;
    }
  }
  return std::all_of(op.requests.begin(), op.requests.end(),
                     [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
}

void MpiCommunicator::Pause(bool someone_waits) {
  // A caller blocked on a collective that is moving gets the fastest progress; a wait that has
  // seen nothing for a while (another rank still computing, or rank 0 idle between commands)
  // backs off to 1 ms polls, and so does a collective running beside this rank's compute: the
  // cores are the compute's.
  const auto quiet = Clock::now() - last_progress_;
  if (someone_waits && quiet < std::chrono::milliseconds(2)) {
    std::this_thread::yield();
    return;
  }
  const auto max_pause = std::chrono::microseconds(someone_waits ? 1000 : 200);
  const auto pause =
      std::min<Clock::duration>(max_pause, std::chrono::duration_cast<Clock::duration>(quiet) / 8 +
                                               std::chrono::microseconds(20));
  std::this_thread::sleep_for(pause);
}

void MpiCommunicator::Poll() {
  const Clock::time_point now = Clock::now();
  if (rank_ == 0) {
    SendHeartbeats(now);
  } else {
    DrainHeartbeats(now);
  }
  for (size_t i = 0; i < active_.size();) {
    Op& op = *active_[i];
    std::string error;
    const bool complete = op.error.empty() && Progress(op, error);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      op.view.resize(op.requests.size());
      for (size_t j = 0; j < op.requests.size(); ++j) {
        op.view[j] = Op::PeerView{.peer = op.request_peer[j],
                                  .receive = op.request_is_receive[j] != 0,
                                  .open = op.requests[j] != MPI_REQUEST_NULL};
      }
      op.view_probing = op.probing;
    }
    if (complete || !error.empty() || !op.error.empty()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error.empty()) op.error = std::move(error);
        op.done = true;
      }
      done_cv_.notify_all();
      active_[i] = active_.back();
      active_.pop_back();
    } else {
      ++i;
    }
  }
}

void MpiCommunicator::SendHeartbeats(Clock::time_point now) {
  // Finished heartbeat sends leave the list.
  std::erase_if(heartbeat_sends_, [](MPI_Request& r) {
    int flag = 0;
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  });
  if (now < next_heartbeat_) return;
  // Moved on even alone: the idle wait sleeps until it (a past time would spin).
  next_heartbeat_ = now + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(options_.heartbeat_s));
  for (int32_t peer = 1; peer < size_; ++peer) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(nullptr, 0, MPI_BYTE, peer, kHeartbeatTag, comm_, &request) == MPI_SUCCESS) {
      heartbeat_sends_.push_back(request);
    }
  }
}

void MpiCommunicator::DrainHeartbeats(Clock::time_point now) {
  for (;;) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    if (MPI_Improbe(0, kHeartbeatTag, comm_, &found, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
        found == 0) {
      return;
    }
    MPI_Mrecv(nullptr, 0, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    std::lock_guard<std::mutex> lock(mutex_);
    root_heard_ = now;
  }
}

CommTicket MpiCommunicator::Submit(std::unique_ptr<Op> op) {
  CommTicket ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    op->id = next_id_++;
    op->seq = next_seq_[static_cast<size_t>(op->kind)]++;
    op->start = Clock::now();
    CommKindCounters& c = counters_.kinds[static_cast<size_t>(op->kind)];
    ++c.calls;
    const auto peers = static_cast<uint64_t>(size_ - 1);
    if (op->is_broadcast) {
      if (rank_ == op->root) c.bytes_sent += op->bytes->size() * peers;
    } else {
      for (int32_t r = 0; r < size_; ++r) {
        const uint64_t bytes = op->segments[static_cast<size_t>(r)].size;
        if (r == rank_) {
          c.bytes_sent += bytes * peers;
        } else {
          c.bytes_received += bytes;
        }
      }
    }
    ticket.id = op->id;
    to_post_.push_back(op.get());
    ops_.emplace(op->id, std::move(op));
  }
  work_cv_.notify_one();
  return ticket;
}

CommTicket MpiCommunicator::StartAllGather(CommKind kind, std::span<std::byte> buffer,
                                           std::span<const CommSegment> segments) {
  DSV41_CHECK(segments.size() == static_cast<size_t>(size_), "all-gather of %zu segments, %d ranks",
              segments.size(), size_);
  for (size_t r = 0; r < segments.size(); ++r) {
    DSV41_CHECK(segments[r].offset <= buffer.size() &&
                    segments[r].size <= buffer.size() - segments[r].offset,
                "all-gather segment %zu [%llu, +%llu) outside %zu bytes", r,
                static_cast<unsigned long long>(segments[r].offset),
                static_cast<unsigned long long>(segments[r].size), buffer.size());
    for (size_t q = 0; q < r; ++q) {
      const bool apart = segments[q].size == 0 || segments[r].size == 0 ||
                         segments[q].offset + segments[q].size <= segments[r].offset ||
                         segments[r].offset + segments[r].size <= segments[q].offset;
      DSV41_CHECK(apart, "all-gather segments %zu and %zu overlap", q, r);
    }
  }
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->buffer = buffer;
  op->segments.assign(segments.begin(), segments.end());
  return Submit(std::move(op));
}

std::string MpiCommunicator::TimeoutMessage(const Op& op, double waited_s) const {
  std::string missing;
  if (op.view_probing || (op.is_broadcast && op.view.empty() && op.root != rank_)) {
    missing = StrFormat("rank %d has not sent it", op.root);
  }
  for (const Op::PeerView& v : op.view) {
    if (!v.open) continue;
    if (!missing.empty()) missing += ", ";
    missing += v.receive ? StrFormat("rank %d has not sent its part", v.peer)
                         : StrFormat("rank %d has not taken ours", v.peer);
  }
  return StrFormat(
      "the %s %s #%llu waited %.1f s (the deadline, --mpi-timeout): %s; the rank is gone, hung or "
      "its sequence of collectives diverged; ending the job",
      std::string(CommKindName(op.kind)).c_str(), op.is_broadcast ? "broadcast" : "all-gather",
      static_cast<unsigned long long>(op.seq), waited_s,
      missing.empty() ? "nothing outstanding" : missing.c_str());
}

void MpiCommunicator::Wait(CommTicket ticket) {
  const Clock::time_point begin = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  const auto it = ops_.find(ticket.id);
  DSV41_CHECK(it != ops_.end(), "waiting for collective %llu, which is not in flight",
              static_cast<unsigned long long>(ticket.id));
  Op& op = *it->second;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.timeout_s));
  // rank 0's next command may rightly be far off: its heartbeats keep the wait alive.
  const bool heartbeat_extends =
      op.kind == CommKind::kHeader && op.is_broadcast && op.root == 0 && rank_ != 0;
  ++waiters_;
  while (!op.done) {
    const Clock::time_point alive_since =
        heartbeat_extends ? std::max(op.start, root_heard_) : op.start;
    const Clock::time_point deadline = alive_since + timeout;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      const std::string message = TimeoutMessage(op, MsBetween(op.start, now) / 1e3);
      lock.unlock();
      Abort(message);
    }
    done_cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
  }
  --waiters_;
  if (!op.error.empty()) {
    const std::string message = op.error;
    lock.unlock();
    Abort(message);
  }
  const Clock::time_point end = Clock::now();
  CommKindCounters& c = counters_.kinds[static_cast<size_t>(op.kind)];
  c.blocked_ms += MsBetween(begin, end);
  if (op.is_broadcast && rank_ != op.root) c.bytes_received += op.bytes->size();
  ops_.erase(it);
}

void MpiCommunicator::Broadcast(CommKind kind, int32_t root, std::vector<std::byte>& bytes) {
  DSV41_CHECK(root >= 0 && root < size_, "broadcast from rank %d of %d", root, size_);
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->is_broadcast = true;
  op->root = root;
  op->bytes = &bytes;
  Wait(Submit(std::move(op)));
}

void MpiCommunicator::Abort(const std::string& message) {
  std::fprintf(stderr, "dsv41: rank %d: %s\n", rank_, message.c_str());
  std::fflush(stderr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_ = true;
  }
  work_cv_.notify_all();
  // The comm thread calls MPI_Abort, which ends this process; should it be stuck, end it here.
  std::this_thread::sleep_for(std::chrono::seconds(30));
  std::_Exit(1);
}

MpiCommunicator::~MpiCommunicator() {
  if (!thread_.joinable()) return;
  // The final barrier: no rank finalises while another still sends to it.
  AllGatherValue<uint8_t>(*this, CommKind::kSetup, 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

}  // namespace

bool MpiAvailable() { return true; }

bool LaunchedByMpiLauncher() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

Result<std::unique_ptr<Communicator>> StartMpiCommunicator(const MpiOptions& options) {
  if (!(options.timeout_s > 0) || !(options.heartbeat_s > 0) ||
      options.heartbeat_s >= options.timeout_s) {
    return InvalidArgumentError(
        "--mpi-timeout %g s must be positive and longer than the heartbeat of %g s",
        options.timeout_s, options.heartbeat_s);
  }
  auto comm = std::make_unique<MpiCommunicator>(options);
  DSV41_RETURN_IF_ERROR(comm->Start());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace dsv41
