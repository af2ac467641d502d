#pragma once

// The OpenMPI communicator (DESIGN.md "Beyond one machine"). One thread of its own owns every MPI
// call: it initialises MPI (MPI_Init_thread asking for MPI_THREAD_MULTIPLE), posts the
// collectives other threads start as point-to-point messages, and polls them to completion while
// the compute runs, so a gather started before the shared expert progresses during it. Point to
// point, because then a wait that times out knows which ranks it still waits for, and because no
// MPI reduction is ever needed. Rank 0 sends the others a heartbeat every second, so their wait
// for its next command can tell an idle leader from a vanished one.

#include <memory>
#include <string>

#include "base/communicator.h"
#include "base/status.h"

namespace dsv41 {

struct MpiOptions {
  double timeout_s = 300.0;  // a wait's deadline (--mpi-timeout)
  double heartbeat_s = 1.0;  // how often rank 0 tells the others it is alive
};

// Whether this build has the MPI communicator (OpenMPI found at configure time).
bool MpiAvailable();
// Whether mpirun (or another MPI launcher) started this process: OMPI_COMM_WORLD_SIZE or
// PMIX_RANK is set.
bool LaunchedByMpiLauncher();

// Initialises MPI on the communicator's own thread and duplicates MPI_COMM_WORLD. Unimplemented
// in a build without MPI; Internal when MPI refuses (naming its error). The returned
// communicator ends the run in order when destroyed: a barrier with the deadline, then
// MPI_Finalize — so every rank must destroy it (after its last collective), none may exit
// without.
Result<std::unique_ptr<Communicator>> StartMpiCommunicator(const MpiOptions& options);

}  // namespace dsv41
