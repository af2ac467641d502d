#!/usr/bin/env bash
# Runs sdk_test.cjs (the official npm clients) against `dsv41 serve` on a fresh tiny model.
#   tests/sdk/run_sdk_test.sh path/to/dsv41
# The pinned packages are installed once into a cache keyed by their versions
# (${DSV41_NPM_CACHE:-$HOME/.cache/dsv41-npm}/<versions>); the npm registry is needed only then.
set -euo pipefail
bin=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
openai_version=6.49.0
anthropic_version=1.15.0
cache="${DSV41_NPM_CACHE:-$HOME/.cache/dsv41-npm}/openai-${openai_version}_anthropic-sdk-${anthropic_version}"
if [[ ! -d "$cache/node_modules/openai" || ! -d "$cache/node_modules/@anthropic-ai/sdk" ]]; then
  staging=$(mktemp -d "${cache}.XXXX" 2>/dev/null || { mkdir -p "$(dirname "$cache")"; mktemp -d "${cache}.XXXX"; })
  (cd "$staging" && echo '{"private": true}' > package.json &&
    npm install --no-audit --no-fund --loglevel=error \
      "openai@${openai_version}" "@anthropic-ai/sdk@${anthropic_version}" >/dev/null)
  rm -rf "$cache"
  mv "$staging" "$cache" 2>/dev/null || rm -rf "$staging"  # another run may have won the race
fi

work=$(mktemp -d)
server_pid=
cleanup() {
  [[ -n "$server_pid" ]] && kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$bin" tiny --out "$work/model" >/dev/null 2>&1
"$bin" serve "$work/model" --port 0 --served-model-name tiny --api-key test-key \
  --max-num-seqs 2 --max-queue 0 -t 2 2> "$work/serve.log" &
server_pid=$!
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log")
  if [[ -n "$port" ]] && grep -q "ready: serving" "$work/serve.log"; then break; fi
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
  sleep 0.1
done
grep -q "ready: serving" "$work/serve.log" || { echo "dsv41 serve not ready"; cat "$work/serve.log"; exit 1; }

status=0
DSV41_BASE_URL="http://127.0.0.1:$port" DSV41_API_KEY=test-key NODE_PATH="$cache/node_modules" \
  node --test-reporter=spec --test "$here/sdk_test.cjs" || status=$?
kill -TERM "$server_pid"
wait "$server_pid" || { echo "dsv41 serve exited $?"; cat "$work/serve.log"; exit 1; }
server_pid=
exit "$status"
