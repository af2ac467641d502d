#!/usr/bin/env bash
# Encode throughput of dsv41 against Hugging Face tokenizers (the npm package `tokenizers`, HF's
# official Node binding) on the same text, in the same run. Builds nothing: pass the dsv41 binary.
#   cd bench/tokenizer && npm install && ./run.sh ../../build/release/dsv41 [ROUNDS] [MEGABYTES]
# The text is every DeepSeek-V3 golden line joined and repeated to MEGABYTES (default 6). Two modes:
#   whole  one Encode call on the whole text;
#   chunk  the text cut after the first newline past every 4096 bytes (prompt-sized pieces), all
#          encoded in one process call (HF: one encodeBatch with TOKENIZERS_PARALLELISM=false).
# Each round runs dsv41 then HF for each mode (interleaved, STYLE.md §12); each process loads the
# tokenizer, does one untimed warm-up encode (word caches warm, as a server's are) and one timed
# encode. Reported: the median over ROUNDS (default 5) of MB/s per side and the ratio dsv41/HF.
# Both sides are single-threaded. Token counts of the two sides must agree.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dsv41="${1:?usage: run.sh DSV41_BINARY [ROUNDS] [MEGABYTES]}"
rounds="${2:-5}"
megabytes="${3:-6}"
shared="${DSV41_SHARED_DIR:-$here/../../../shared}"
tokenizer="$shared/data/deepseek-v3-tokenizer/tokenizer.json"
golden="$shared/goldens/tokenizer/deepseek_v3_encode.jsonl"
[[ -d "$here/node_modules/tokenizers" ]] || { echo "run 'npm install' in $here first" >&2; exit 2; }
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
node "$here/make_text.js" "$golden" "$work/text.txt" "$megabytes"
echo "text: $(stat -c %s "$work/text.txt") bytes; $rounds rounds" >&2

for mode in whole chunk; do : > "$work/dsv41_$mode.jsonl"; : > "$work/hf_$mode.jsonl"; done
for ((round = 1; round <= rounds; ++round)); do
  for mode in whole chunk; do
    chunk_bytes=0
    [[ $mode == chunk ]] && chunk_bytes=4096
    "$dsv41" bench-tokenize --tokenizer "$tokenizer" --file "$work/text.txt" --runs 1 --warmup 1 \
      --chunk-bytes "$chunk_bytes" >> "$work/dsv41_$mode.jsonl"
    node "$here/hf_encode.js" "$tokenizer" "$work/text.txt" 1 1 "$chunk_bytes" \
      >> "$work/hf_$mode.jsonl"
  done
  echo "round $round of $rounds done" >&2
done

node - "$work" <<'JS'
const fs = require('fs');
const dir = process.argv[2];
const load = (name) =>
  fs.readFileSync(`${dir}/${name}.jsonl`, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
for (const mode of ['whole', 'chunk']) {
  const [a, b] = [load(`dsv41_${mode}`), load(`hf_${mode}`)];
  const mbA = median(a.map((r) => r.median_mb_per_s));
  const mbB = median(b.map((r) => r.median_mb_per_s));
  console.log(`${mode}: ${a[0].bytes} bytes in ${a[0].chunks} call(s), ${a[0].tokens} tokens, ` +
              `median of ${a.length} interleaved rounds`);
  console.log(`  dsv41 ${mbA.toFixed(2).padStart(8)} MB/s`);
  console.log(`  hf    ${mbB.toFixed(2).padStart(8)} MB/s`);
  console.log(`  ratio dsv41/hf ${(mbA / mbB).toFixed(2)}`);
  if (a[0].tokens !== b[0].tokens || a[0].chunks !== b[0].chunks) {
    console.log(`  WARNING: dsv41 ${a[0].chunks} chunks/${a[0].tokens} tokens, ` +
                `hf ${b[0].chunks} chunks/${b[0].tokens} tokens`);
  }
}
JS
