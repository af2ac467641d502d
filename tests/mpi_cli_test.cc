// `mpirun -np N dsv41 ...` end to end (issue 20, docs/multinode.md): the logits files and the
// generated text are the bytes of one process; a rank with another checkpoint is refused at
// start-up; `serve` under mpirun answers and ends in order on SIGTERM (to rank 0: requests in
// flight finish, exit 0; to mpirun: every rank ends within the shutdown timeout); a rank killed
// or hung mid-step ends the whole job non-zero within the deadline, the hung one named. The
// other tests of the chat and messages APIs under mpirun are the SDK clients'
// (sdk_clients_mpi_test).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "cli_runner.h"
#include "serve_process.h"
#include "server/http_client.h"

namespace dsv41 {
namespace {

using Clock = std::chrono::steady_clock;

// mpirun as the tests launch it: oversubscribed (2 cores), allowed as root (containers), shared
// memory, OpenMPI's own leaks suppressed under the sanitizers (cmake/dsv41.cmake
// dsv41_mpi_test says why the slow unwinder; without the sanitizers both are ignored).
std::vector<std::string> Mpirun(int ranks) {
  const char* asan = std::getenv("ASAN_OPTIONS");
  return {DSV41_MPIEXEC,
          "--allow-run-as-root",
          "--oversubscribe",
          "--mca",
          "btl",
          "self,vader",
          "-x",
          "LSAN_OPTIONS=suppressions=" DSV41_SOURCE_ROOT "/tests/mpi/lsan.supp",
          "-x",
          std::string("ASAN_OPTIONS=") + (asan != nullptr ? asan : "") + ":fast_unwind_on_malloc=0",
          "-np",
          std::to_string(ranks)};
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Per process: ctest runs the tests of this file side by side, each in a process of its own.
// Everything a test writes (checkpoints, logits, server logs) lies in one directory, removed when
// the process ends.
const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string d = testing::TempDir() + "/dsv41_mpi_cli_" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

class ScratchCleanup : public testing::Environment {
 public:
  void TearDown() override { std::filesystem::remove_all(ScratchDir()); }
};
testing::Environment* const kScratchCleanup = testing::AddGlobalTestEnvironment(new ScratchCleanup);

std::string TempPath(const std::string& name) { return ScratchDir() + "/" + name; }

// A tiny checkpoint whose experts (13, top 4) and Engram rows (439, 803) no rank count divides.
std::string WriteTiny(const std::string& name, int seed) {
  const std::string dir = TempPath(name);
  std::filesystem::remove_all(dir);
  const RunResult written =
      RunCommand(kDsv41Binary + " tiny --out " + dir + " --experts 13 --experts-per-tok 4 " +
                 "--engram-heads 3 --seed " + std::to_string(seed) + " 2>/dev/null");
  EXPECT_EQ(written.exit_code, 0);
  return dir;
}

class MpiCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tiny_ = new std::string(WriteTiny("dsv41_mpi_cli_tiny", 1)); }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*tiny_);
    delete tiny_;
  }
  static inline std::string* tiny_ = nullptr;
};

TEST_F(MpiCliTest, LogitsOfSeveralRanksAreTheBytesOfOneProcess) {
  const std::string ids = "--ids 5,9,33,100,7,8,250,3,4,77,12,19,200,201,202,5,9,33,100,7,8,250";
  const std::string golden = std::string(DSV41_SHARED_DIR) + "/goldens/model/checkpoints/tiny-a";
  struct Case {
    std::string model;
    int ranks;
    int chunk;
  };
  std::vector<Case> cases = {Case{*tiny_, 2, 0}, Case{*tiny_, 2, 5}, Case{*tiny_, 3, 0},
                             Case{*tiny_, 3, 5}, Case{golden, 2, 0}};
#ifdef DSV41_SANITIZED_BUILD
  cases.resize(1);  // the other cases run in the release job (and in-process in mpi_engine_np2)
#endif
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.model << ", " << c.ranks << " ranks, chunk " << c.chunk);
    const std::string args = " logits --model " + c.model + " " + ids + " -t 1 --chunk " +
                             std::to_string(c.chunk) + " --mpi-timeout 60 --out ";
    const std::string one = TempPath("mpi_logits_one.npy");
    const std::string many = TempPath("mpi_logits_many.npy");
    ASSERT_EQ(RunCommand(kDsv41Binary + args + one + " 2>/dev/null").exit_code, 0);
    const RunResult run =
        RunCommand(Join(Mpirun(c.ranks)) + " " + kDsv41Binary + args + many + " 2>&1");
    ASSERT_EQ(run.exit_code, 0) << run.out;
    const std::string a = ReadFile(one), b = ReadFile(many);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << "the logits files differ";
  }
}

TEST_F(MpiCliTest, RunPrintsTheTextOfOneProcessWithAndWithoutDspark) {
  const std::string args = " run --model " + *tiny_ + " -p 'The sea is' -n 24 -t 1";
  const RunResult one = RunCommand(kDsv41Binary + args + " 2>/dev/null");
  ASSERT_EQ(one.exit_code, 0);
  for (const std::string& extra :
       {std::string(), std::string(" --speculative dspark --speculative-min-acceptance 0")}) {
    const RunResult many =
        RunCommand(Join(Mpirun(2)) + " " + kDsv41Binary + args + extra + " 2>/dev/null");
    ASSERT_EQ(many.exit_code, 0);
    EXPECT_EQ(many.out, one.out) << "flags:" << extra;
  }
}

// `dsv41 bench` under mpirun reports each rank's figures and the logits digest of one process.
TEST_F(MpiCliTest, BenchOnTwoRanksReportsTheRanksAndTheDigestOfOneProcess) {
#ifdef DSV41_SANITIZED_BUILD
  GTEST_SKIP() << "two minutes under the sanitizers; the release job runs it";
#endif
  const std::string args =
      " bench --model " + *tiny_ +
      " --json -r 2 --prompt-tokens 24 --decode-tokens 6 --concurrency 1,3 -t 1";
  const RunResult one = RunCommand(kDsv41Binary + args + " 2>/dev/null");
  ASSERT_EQ(one.exit_code, 0);
  const RunResult two = RunCommand(Join(Mpirun(2)) + " " + kDsv41Binary + args + " 2>/dev/null");
  ASSERT_EQ(two.exit_code, 0);
  std::istringstream one_lines(one.out), two_lines(two.out);
  std::string a, b;
  int levels = 0;
  while (std::getline(one_lines, a) && std::getline(two_lines, b)) {
    Result<Json> ja = ParseJson(a, "bench, one process");
    Result<Json> jb = ParseJson(b, "bench, two ranks");
    ASSERT_TRUE(ja.ok() && jb.ok()) << a << "\n" << b;
    EXPECT_EQ((*ja)["logits_digest"], (*jb)["logits_digest"]) << "level " << levels;
    EXPECT_TRUE((*jb)["logits_digest_stable"].get<bool>());
    EXPECT_FALSE(ja->contains("ranks"));
    ASSERT_TRUE(jb->contains("ranks"));
    ASSERT_EQ((*jb)["ranks"].size(), 2u);
    for (const Json& r : (*jb)["ranks"]) {
      EXPECT_GT(r["step_ms"].get<double>(), 0.0);
      EXPECT_GT(r["collectives_per_token"].get<double>(), 0.0);
      EXPECT_GT(r["bytes_per_token"].get<double>(), 0.0);
      EXPECT_TRUE(r.contains("blocked_ms_moe") && r.contains("blocked_ms_engram") &&
                  r.contains("blocked_ms_header") && r.contains("blocked_ms_tokens"));
    }
    EXPECT_GE((*jb)["expert_imbalance"].get<double>(), 1.0);
    ++levels;
  }
  EXPECT_EQ(levels, 2);
}

// A copy of `dir` with one value byte changed: the first byte of the first shard's data, which
// is the first tensor's (safetensors: 8 bytes of header length, the header, then the data).
std::string CopyWithOneByteChanged(const std::string& dir, const std::string& name) {
  const std::string copy = TempPath(name);
  std::filesystem::remove_all(copy);
  std::filesystem::copy(dir, copy, std::filesystem::copy_options::recursive);
  std::vector<std::string> shards;
  for (const auto& entry : std::filesystem::directory_iterator(copy)) {
    if (entry.path().extension() == ".safetensors") shards.push_back(entry.path().string());
  }
  std::sort(shards.begin(), shards.end());
  EXPECT_FALSE(shards.empty());
  std::fstream file(shards.front(), std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header = 0;
  file.read(reinterpret_cast<char*>(&header), sizeof(header));
  char byte = 0;
  file.seekg(static_cast<std::streamoff>(8 + header));
  file.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x5a);
  file.seekp(static_cast<std::streamoff>(8 + header));
  file.write(&byte, 1);
  EXPECT_TRUE(file.good());
  return copy;
}

// MPMD: rank 0 loads `a`, rank 1 `b`.
RunResult LogitsOnTwoModels(const std::string& a, const std::string& b) {
  const std::string rest = " logits --ids 1,2,3 --top-k 1 -t 1 --mpi-timeout 60 --model ";
  return RunCommand(Join(Mpirun(1)) + " " + kDsv41Binary + rest + a + " : -np 1 " + kDsv41Binary +
                    rest + b + " 2>&1");
}

// The run ends before any logits, naming rank 1.
TEST_F(MpiCliTest, ARankWithAnotherCheckpointIsRefusedAtStartUp) {
  const std::string values = CopyWithOneByteChanged(*tiny_, "dsv41_mpi_cli_values");
  const RunResult run = LogitsOnTwoModels(*tiny_, values);
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.out.find("rank 1's checkpoint"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("\"ids\""), std::string::npos) << "it ran: " << run.out;
  std::filesystem::remove_all(values);
  // Another seed also gives another config.json (its synthetic tokenizer's classes).
  const std::string other = WriteTiny("dsv41_mpi_cli_other", 2);
  const RunResult seeded = LogitsOnTwoModels(*tiny_, other);
  EXPECT_NE(seeded.exit_code, 0);
  EXPECT_NE(seeded.out.find("rank 1's"), std::string::npos) << seeded.out;
  EXPECT_EQ(seeded.out.find("\"ids\""), std::string::npos) << "it ran: " << seeded.out;
  std::filesystem::remove_all(other);
}

// The pid of rank `rank` among the children of mpirun `launcher` (their OMPI_COMM_WORLD_RANK).
pid_t RankPid(pid_t launcher, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadFile(entry.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string state;
    pid_t parent = 0;
    fields >> state >> parent;
    if (parent != launcher) continue;
    const std::string environ = ReadFile(entry.path().string() + "/environ");
    std::istringstream vars(environ);
    std::string var;
    while (std::getline(vars, var, '\0')) {
      if (var == want) return static_cast<pid_t>(std::stoi(name));
    }
  }
  return -1;
}

// Running (a zombie left for init to reap counts as ended).
bool Alive(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Ends the ranks at scope exit, whatever the test did: ServeProcess kills only mpirun, whose
// ranks would outlive it.
struct RankReaper {
  std::vector<pid_t> pids;
  ~RankReaper() {
    for (pid_t pid : pids) {
      if (Alive(pid)) kill(pid, SIGKILL);
    }
  }
};

// `dsv41 serve` on two ranks with a short deadline (and `extra` flags); nullptr after a test
// failure.
std::unique_ptr<ServeProcess> ServeOnTwoRanks(const std::string& model, const std::string& log,
                                              std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"-t", "1", "--served-model-name", "tiny", "--mpi-timeout", "5"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::string error;
  std::unique_ptr<ServeProcess> server =
      ServeProcess::Start(model, args, log, &error, std::chrono::seconds(120), Mpirun(2));
  EXPECT_NE(server, nullptr) << error;
  return server;
}

// A chat request for `max_tokens` tokens on a thread of its own (the step it runs is "mid-step"
// for the tests that break a rank).
std::thread LongRequest(int port, int max_tokens, int* status) {
  return std::thread([port, max_tokens, status] {
    HttpClient client("127.0.0.1", port, std::chrono::seconds(120));
    Result<HttpResponse> r = client.Post(
        "/v1/chat/completions",
        "{\"model\": \"tiny\", \"max_tokens\": " + std::to_string(max_tokens) +
            ", \"temperature\": 0, \"ignore_eos\": true, \"messages\": [{\"role\": \"user\", "
            "\"content\": \"Tell me about the sea.\"}]}");
    *status = r.ok() ? r->status : -1;
  });
}

TEST_F(MpiCliTest, SigtermToRankZeroFinishesTheRequestInFlightAndEndsEveryRank) {
  // Time enough for the request in flight under the sanitizers on a busy machine.
  std::unique_ptr<ServeProcess> server =
      ServeOnTwoRanks(*tiny_, TempPath("mpi_serve_term.log"), {"--shutdown-timeout", "300"});
  ASSERT_NE(server, nullptr);
  const pid_t rank0 = RankPid(server->pid(), 0), rank1 = RankPid(server->pid(), 1);
  const RankReaper reaper{{rank0, rank1}};
  ASSERT_GT(rank0, 0);
  ASSERT_GT(rank1, 0);
  int status = 0;
  std::thread request = LongRequest(server->port(), 200, &status);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(rank0, SIGTERM), 0);
  request.join();
  EXPECT_EQ(status, 200) << server->log();
  EXPECT_EQ(server->Stop(0, std::chrono::seconds(300)), 0) << server->log();
  EXPECT_FALSE(Alive(rank1));
}

TEST_F(MpiCliTest, SigtermToMpirunEndsEveryRankWithinTheShutdownTimeout) {
  std::unique_ptr<ServeProcess> server = ServeOnTwoRanks(*tiny_, TempPath("mpi_serve_mpirun.log"));
  ASSERT_NE(server, nullptr);
  const pid_t rank0 = RankPid(server->pid(), 0), rank1 = RankPid(server->pid(), 1);
  const RankReaper reaper{{rank0, rank1}};
  ASSERT_GT(rank0, 0);
  ASSERT_GT(rank1, 0);
  const Clock::time_point start = Clock::now();
  server->Stop(SIGTERM, std::chrono::seconds(10));  // --shutdown-timeout's default
  EXPECT_FALSE(server->running()) << "mpirun still runs after 10 s";
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(Alive(rank0));
  EXPECT_FALSE(Alive(rank1));
}

// What became of a two-rank server whose rank 1 got `sig` half a second into a long request.
struct BrokenRun {
  bool started = false;
  int exit_code = 0;  // mpirun's, -1 when it did not end within 60 s
  int request_status = 0;
  bool rank0_alive = false;
  std::string log;
};

BrokenRun BreakRankOneMidStep(const std::string& model, int sig, const std::string& log_name) {
  BrokenRun out;
  std::unique_ptr<ServeProcess> server = ServeOnTwoRanks(model, TempPath(log_name));
  if (server == nullptr) return out;
  const pid_t rank0 = RankPid(server->pid(), 0), rank1 = RankPid(server->pid(), 1);
  const RankReaper reaper{{rank0, rank1}};
  if (rank0 <= 0 || rank1 <= 0) return out;
  out.started = true;
  std::thread request = LongRequest(server->port(), 2000, &out.request_status);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(kill(rank1, sig), 0);
  out.exit_code = server->Stop(0, std::chrono::seconds(60));  // the deadline is 5 s
  request.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  out.rank0_alive = Alive(rank0);
  out.log = server->log();
  return out;
}

TEST_F(MpiCliTest, ARankKilledMidStepEndsTheJobNonZero) {
  const BrokenRun run = BreakRankOneMidStep(*tiny_, SIGKILL, "mpi_serve_kill.log");
  ASSERT_TRUE(run.started);
  EXPECT_NE(run.exit_code, 0) << run.log;
  EXPECT_NE(run.exit_code, -1) << "mpirun still runs 60 s after the kill";
  EXPECT_NE(run.request_status, 200);
  EXPECT_FALSE(run.rank0_alive);
}

TEST_F(MpiCliTest, ARankHungMidStepEndsTheJobNamingIt) {
  // Stopped, rank 1 is alive to mpirun and silent to rank 0: only the deadline ends the job.
  const BrokenRun run = BreakRankOneMidStep(*tiny_, SIGSTOP, "mpi_serve_hang.log");
  ASSERT_TRUE(run.started);
  EXPECT_NE(run.exit_code, 0) << run.log;
  EXPECT_NE(run.exit_code, -1) << "mpirun still runs 60 s after the hang";
  EXPECT_NE(run.request_status, 200);
  // Rank 0's deadline names rank 1: its part never came, or it never took rank 0's.
  const size_t line = run.log.find("dsv41: rank 0: the ");
  ASSERT_NE(line, std::string::npos) << run.log;
  const std::string message = run.log.substr(line, run.log.find('\n', line) - line);
  EXPECT_NE(message.find("(the deadline, --mpi-timeout)"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1 has not"), std::string::npos) << message;
}

}  // namespace
}  // namespace dsv41
