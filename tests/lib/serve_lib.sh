# Shell helpers of the client tests (tests/sdk, tests/agents): pinned npm packages installed
# once into a cache, and `dsv41 serve` started on a free port and stopped. Source it; it sets
# no shell options of its own.

# npm_cached NAME PKG@VERSION...: installs the packages once into
# ${DSV41_NPM_CACHE:-$HOME/.cache/dsv41-npm}/NAME (the registry is needed only then) and sets
# npm_dir to it. A concurrent run that wins the race keeps its copy.
npm_cached() {
  local name=$1
  shift
  npm_dir="${DSV41_NPM_CACHE:-$HOME/.cache/dsv41-npm}/$name"
  [[ -f "$npm_dir/.complete" ]] && return 0
  mkdir -p "$(dirname "$npm_dir")"
  local staging
  staging=$(mktemp -d "${npm_dir}.XXXX")
  (cd "$staging" && echo '{"private": true}' > package.json &&
    npm install --no-audit --no-fund --loglevel=error "$@" >/dev/null) || {
    rm -rf "$staging"
    echo "npm install $* failed" >&2
    return 1
  }
  touch "$staging/.complete"
  rm -rf "$npm_dir"
  mv "$staging" "$npm_dir" 2>/dev/null || rm -rf "$staging"
}

# start_serve LOG ARGS...: runs `$dsv41 serve ARGS...` (stderr to LOG) and waits until it is
# ready; sets server_pid and port. Fails, printing LOG, when the server exits first.
start_serve() {
  local log=$1
  shift
  "$dsv41" --log-level info serve "$@" --port 0 2> "$log" &
  server_pid=$!
  port=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    if [[ -n "$port" ]] && grep -q "ready: serving" "$log"; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$log"; server_pid=; return 1; }
    sleep 0.1
  done
  echo "dsv41 serve not ready"; cat "$log"
  return 1
}

# stop_serve LOG: SIGTERM, and the server must exit 0.
stop_serve() {
  [[ -z "$server_pid" ]] && return 0
  kill -TERM "$server_pid"
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=
  if [[ $rc -ne 0 ]]; then echo "dsv41 serve exited $rc"; cat "$1"; return 1; fi
}
