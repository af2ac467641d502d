#!/usr/bin/env bash
# The real coding agents against `dsv41 serve`: Claude Code (`claude -p`, via ANTHROPIC_BASE_URL)
# and Codex CLI (`codex exec`, a model_providers entry speaking the Responses API).
#   tests/agents/run_agents_test.sh path/to/dsv41 scripted|tiny
# scripted: the server answers from a replies file (serve --scripted-replies). The first turn
#   is a DSML tool call (Claude Code's Read of notes.txt; Codex's exec_command running cat); the
#   agent runs it and sends the result back; the reply chosen because the prompt now holds the
#   file's text ends the session. The agent must print that text, and the server's log must show
#   the reply chosen by the file's text (the tool result arrived).
# tiny: the built-in tiny model (random weights: the words are noise). One turn completes without
#   an API error, and a second turn of the same session reports cached prompt tokens.
# The pinned CLIs are installed once into a cache (tests/lib); telemetry and updates are off.
set -euo pipefail
dsv41=$(realpath "$1")
mode=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/serve_lib.sh"
claude_version=2.1.332
codex_version=0.171.0
npm_cached "claude-code-${claude_version}_codex-${codex_version}" \
  "@anthropic-ai/claude-code@${claude_version}" "@openai/codex@${codex_version}"
bin="$npm_dir/node_modules/.bin"

work=$(mktemp -d)
server_pid=
trap '[[ -n "$server_pid" ]] && kill -9 "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/project" "$work/home/.codex"
export HOME="$work/home" CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 \
  DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 NO_UPDATE_NOTIFIER=1
"$dsv41" tiny --out "$work/model" >/dev/null 2>&1

fail() {
  echo "FAIL: $*"
  echo "--- serve log (tail)"; tail -n 40 "$work/serve.log"
  exit 1
}

# json_field FILE PATH: a member of the last JSON line of FILE ("a.b" paths), or "".
json_field() {
  node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
    let v = JSON.parse(lines[lines.length - 1]);
    for (const k of process.argv[2].split(".")) v = v == null ? undefined : v[k];
    process.stdout.write(v === undefined || v === null ? "" : String(v));' "$1" "$2"
}

run_claude() {  # run_claude OUT ARGS...
  local out=$1
  shift
  (cd "$work/project" && ANTHROPIC_BASE_URL="http://127.0.0.1:$port" ANTHROPIC_API_KEY=test-key \
    ANTHROPIC_MODEL=tiny ANTHROPIC_SMALL_FAST_MODEL=tiny timeout 900 "$bin/claude" "$@" \
    --output-format json < /dev/null > "$out" 2> "$out.err") ||
    { cat "$out" "$out.err"; fail "claude $*"; }
}

run_codex() {  # run_codex OUT ARGS...
  local out=$1
  shift
  (cd "$work/project" && DSV41_API_KEY=test-key timeout 900 "$bin/codex" "$@" < /dev/null \
    > "$out" 2> "$out.err") || { cat "$out" "$out.err"; fail "codex $*"; }
}

write_codex_config() {
  cat > "$HOME/.codex/config.toml" <<TOML
model = "tiny"
model_provider = "dsv41"
[model_providers.dsv41]
name = "dsv41"
base_url = "http://127.0.0.1:$port/v1"
wire_api = "responses"
env_key = "DSV41_API_KEY"
TOML
}

if [[ "$mode" == scripted ]]; then
  marker="ZEBRA-$$-$RANDOM"
  echo "The launch code is $marker." > "$work/project/notes.txt"
  call() {  # call TOOL PARAMETER VALUE: the DSML block of one tool call (a JSON string's body)
    printf '%s' "\\n\\n<｜DSML｜ calls>\\n<｜DSML｜ invoke name=\\\"$1\\\">\\n<｜DSML｜ parameter name=\\\"$2\\\" string=\\\"true\\\">$3</｜DSML｜ parameter>\\n</｜DSML｜ invoke>\\n</｜DSML｜ calls>"
  }
  cat > "$work/replies.json" <<JSON
{"replies": [
  {"when_prompt_contains": ["$marker", "exec_command"],
   "text": "The command printed the note.</think>Codex read it: the code is $marker. CODEX-SCRIPTED-DONE"},
  {"when_prompt_contains": ["$marker"],
   "text": "The tool returned the note.</think>Claude read it: the code is $marker. CLAUDE-SCRIPTED-DONE"},
  {"when_prompt_contains": ["exec_command"],
   "text": "The user wants the file.</think>Reading it.$(call exec_command cmd 'cat notes.txt')"},
  {"text": "The user wants the file.</think>Reading it.$(call Read file_path "$work/project/notes.txt")"}
]}
JSON
  start_serve "$work/serve.log" "$work/model" --served-model-name tiny --api-key test-key \
    --scripted-replies "$work/replies.json"
  write_codex_config

  run_claude "$work/claude.json" -p "What does notes.txt say?" --max-turns 3 --allowedTools Read
  [[ "$(json_field "$work/claude.json" is_error)" == false ]] || fail "claude: is_error"
  grep -q "CLAUDE-SCRIPTED-DONE" <<< "$(json_field "$work/claude.json" result)" ||
    { cat "$work/claude.json"; fail "claude did not print the scripted answer"; }
  grep -q "scripted reply 1 of" "$work/serve.log" || fail "claude: the Read result never came back"
  echo "ok: Claude Code ran Read and answered from the tool result"

  run_codex "$work/codex.out" exec --skip-git-repo-check --sandbox danger-full-access \
    "What does notes.txt say?"
  grep -q "CODEX-SCRIPTED-DONE" "$work/codex.out" ||
    { cat "$work/codex.out" "$work/codex.out.err"; fail "codex did not print the scripted answer"; }
  grep -q "scripted reply 0 of" "$work/serve.log" || fail "codex: the cat output never came back"
  echo "ok: Codex ran exec_command and answered from the command output"
elif [[ "$mode" == tiny ]]; then
  # Sampled noise from 512 tokens ends (EOS) after some hundreds of tokens; a turn cut by its
  # budget is an error to both agents, so the budget is far beyond that (Codex sets none: the
  # server's default applies).
  export CLAUDE_CODE_MAX_OUTPUT_TOKENS=8192
  start_serve "$work/serve.log" "$work/model" --served-model-name tiny --api-key test-key \
    --default-max-tokens 8192 -t 2
  write_codex_config

  run_claude "$work/claude1.json" -p "Say hello." --max-turns 2
  [[ "$(json_field "$work/claude1.json" is_error)" == false ]] ||
    { cat "$work/claude1.json"; fail "claude: the turn ended in an error"; }
  run_claude "$work/claude2.json" -c -p "Say it again." --max-turns 2
  cached=$(json_field "$work/claude2.json" usage.cache_read_input_tokens)
  [[ "${cached:-0}" -gt 0 ]] || { cat "$work/claude2.json"; fail "claude: no cached tokens"; }
  echo "ok: Claude Code, two turns on the tiny model; the second read $cached cached tokens"

  run_codex "$work/codex1.out" exec --skip-git-repo-check --json "Say hello."
  grep -q '"type":"turn.completed"' "$work/codex1.out" ||
    { cat "$work/codex1.out" "$work/codex1.out.err"; fail "codex: the turn did not complete"; }
  run_codex "$work/codex2.out" exec --skip-git-repo-check --json resume --last "Say it again."
  cached=$(grep '"type":"turn.completed"' "$work/codex2.out" | tail -n 1 |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{
      process.stdout.write(String(JSON.parse(s).usage.cached_input_tokens||0))})')
  [[ "$cached" -gt 0 ]] || { cat "$work/codex2.out"; fail "codex: no cached tokens"; }
  echo "ok: Codex, two turns on the tiny model; the second read $cached cached tokens"
else
  echo "usage: $0 path/to/dsv41 scripted|tiny" >&2
  exit 2
fi
stop_serve "$work/serve.log"
