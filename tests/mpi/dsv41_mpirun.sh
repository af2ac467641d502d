#!/usr/bin/env bash
# `dsv41` for the client tests under mpirun: `serve` runs as `mpirun -np ${DSV41_MPI_RANKS:-2}
# dsv41 serve ...`, any other command as the plain binary ($DSV41_MPIRUN_BINARY). SIGTERM and
# SIGINT go to rank 0 alone, which lets the requests in flight finish and then ends the other
# ranks, so the exit code is rank 0's (a SIGTERM to mpirun itself ends every rank within about a
# second, requests in flight included, and mpirun then exits 1: docs/multinode.md).
set -u
dsv41=${DSV41_MPIRUN_BINARY:?set DSV41_MPIRUN_BINARY to the dsv41 binary}
mpiexec=${DSV41_MPIEXEC:-mpirun}
serve=0
for arg in "$@"; do [[ "$arg" == serve ]] && serve=1; done
if ((serve == 0)); then exec "$dsv41" "$@"; fi
"$mpiexec" --allow-run-as-root --oversubscribe -np "${DSV41_MPI_RANKS:-2}" "$dsv41" "$@" &
launcher=$!
# Rank 0: the child of mpirun whose environment says OMPI_COMM_WORLD_RANK=0.
rank0() {
  local child
  for child in $(pgrep -P "$launcher"); do
    if tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0'; then
      echo "$child"
      return
    fi
  done
}
forward() {
  local pid
  pid=$(rank0)
  if [[ -n "$pid" ]]; then kill -"$1" "$pid"; else kill -"$1" "$launcher"; fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT
status=0
while :; do
  wait "$launcher"
  status=$?
  # wait returns early (> 128) when a trapped signal arrives; mpirun is still running then.
  kill -0 "$launcher" 2>/dev/null || break
done
exit "$status"
