// The MPI communicator of a build without MPI (OpenMPI was not found, or -DDSV41_MPI=OFF): the
// engine runs in one process; a launch under mpirun is refused with a message saying why.

#include <cstdlib>

#include "base/mpi_communicator.h"

namespace dsv41 {

bool MpiAvailable() { return false; }

bool LaunchedByMpiLauncher() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

Result<std::unique_ptr<Communicator>> StartMpiCommunicator(const MpiOptions& /*options*/) {
  return UnimplementedError(
      "this dsv41 was built without MPI (install libopenmpi-dev, scripts/setup.sh, and rebuild)");
}

}  // namespace dsv41
