#!/usr/bin/env bash
# Runs sdk_test.cjs (the official npm clients) against `dsv41 serve` on a fresh tiny model.
#   tests/sdk/run_sdk_test.sh path/to/dsv41
# The pinned packages are installed once into a cache keyed by their versions (tests/lib).
set -euo pipefail
dsv41=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/serve_lib.sh"
openai_version=6.49.0
anthropic_version=1.15.0
npm_cached "openai-${openai_version}_anthropic-sdk-${anthropic_version}" \
  "openai@${openai_version}" "@anthropic-ai/sdk@${anthropic_version}"

work=$(mktemp -d)
server_pid=
trap '[[ -n "$server_pid" ]] && kill -9 "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
"$dsv41" tiny --out "$work/model" >/dev/null 2>&1
start_serve "$work/serve.log" "$work/model" --served-model-name tiny --api-key test-key \
  --max-num-seqs 2 --max-queue 0 -t 2

status=0
# The image tests send a vision golden's image (issue 21).
DSV41_TEST_IMAGE="$here/../../../shared/goldens/vision/images/grad_100x60.png" \
DSV41_BASE_URL="http://127.0.0.1:$port" DSV41_API_KEY=test-key NODE_PATH="$npm_dir/node_modules" \
  node --test-reporter=spec --test "$here/sdk_test.cjs" || status=$?
stop_serve "$work/serve.log"
exit "$status"
