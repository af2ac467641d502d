#pragma once

// For test binaries that run under mpirun (one process per rank, every rank running every test):
// the MPI communicator started before the first test and ended in order after the last, and the
// test log of rank 0 alone (the others print only their failures, prefixed with their rank).
// Deadline and heartbeat from DSV41_MPI_TIMEOUT_S / DSV41_MPI_HEARTBEAT_S (defaults 60 s, 0.2 s).

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "base/check.h"
#include "base/mpi_communicator.h"
#include "gtest/gtest.h"

namespace dsv41 {

class MpiTestEnvironment final : public ::testing::Environment {
 public:
  static Communicator& Comm() {
    DSV41_CHECK(comm_ != nullptr, "the MPI test environment is not set up");
    return *comm_;
  }

  void SetUp() override {
    MpiOptions options;
    if (const char* t = std::getenv("DSV41_MPI_TIMEOUT_S")) options.timeout_s = std::atof(t);
    if (const char* h = std::getenv("DSV41_MPI_HEARTBEAT_S")) options.heartbeat_s = std::atof(h);
    Result<std::unique_ptr<Communicator>> comm = StartMpiCommunicator(options);
    if (!comm.ok()) {
      std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
      std::exit(1);
    }
    comm_ = std::move(comm).value();
    if (comm_->rank() != 0) QuietListener::Install(comm_->rank());
  }
  void TearDown() override { comm_.reset(); }

 private:
  // Replaces the default printer on ranks other than 0: failures only, with the rank.
  class QuietListener final : public ::testing::EmptyTestEventListener {
   public:
    explicit QuietListener(int rank) : rank_(rank) {}
    static void Install(int rank) {
      ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new QuietListener(rank));
    }
    void OnTestPartResult(const ::testing::TestPartResult& result) override {
      if (!result.failed()) return;
      std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_,
                   result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                   result.summary());
    }

   private:
    int rank_;
  };

  static inline std::unique_ptr<Communicator> comm_;
};

// Registers the environment from a test file: `DSV41_MPI_TEST_ENVIRONMENT();` at namespace scope.
#define DSV41_MPI_TEST_ENVIRONMENT()                                          \
  [[maybe_unused]] static ::testing::Environment* const dsv41_mpi_test_env_ = \
      ::testing::AddGlobalTestEnvironment(new ::dsv41::MpiTestEnvironment)

}  // namespace dsv41
