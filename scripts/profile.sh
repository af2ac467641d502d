#!/usr/bin/env bash
# Where a forward's time goes, per module (docs/performance.md): `perf record -e cpu-clock` over
# `dsv41 bench`, self time bucketed by symbol into weight GEMMs, attention, indexer, mHC, exact
# sums, MoE routing, Engram, norms, threading, page faults and start-up (left out of the shares).
#   scripts/profile.sh MODEL_DIR decode [THREADS]    8-token prompt, 256 decode tokens
#   scripts/profile.sh MODEL_DIR prefill [THREADS]   512-token prompt, no decode
set -euo pipefail
model=${1:?model directory}
phase=${2:-decode}
threads=${3:-0}
binary=${DSV41:-build/release/dsv41}
case "$phase" in
  decode) shape=(--prompt-tokens 8 --decode-tokens 256) ;;
  prefill) shape=(--prompt-tokens 512 --decode-tokens 1 --max-num-batched-tokens 512) ;;
  *) echo "phase must be decode or prefill, not '$phase'" >&2; exit 2 ;;
esac
data=$(mktemp /tmp/dsv41-profile.XXXXXX)
trap 'rm -f "$data"' EXIT
perf record -q -e cpu-clock -o "$data" "$binary" bench -m "$model" "${shape[@]}" -r 1 \
  -t "$threads" >/dev/null 2>&1
perf report -i "$data" --stdio --no-children --sort sym 2>/dev/null | python3 -c '
import re, sys
buckets = [
    ("start-up (excluded)", r"ReadWordsSimd|FmaChains|Bf16DotChains|MeasureReadBandwidth|PrefaultPages|"
                            r"Tokenizer|Checkpoint|Safetensors|Inventory|BuildEngramTokenMap|ParseAdded"),
    ("weight GEMMs", r"RunOutputs|Bf16DotPrepare|Bf16DotOutputs|FmaOutputs|QuantizeActivations|"
                     r"PrepareLinearInput|LinearOutputs|RunLinearJobs|FakeQuant|Linear\b|LinearBf16|"
                     r"HeadLogits|Tile<|BufferedTile|ChunkDots|ChunkFma|DecodeChunk"),
    ("attention", r"SinkAttention|Attention::|DecodeSwaRow|DecodeKvRow|EncodeSwaRow|EncodeKvRow|Rope|"
                  r"Compressor|Pooling|PoolRows"),
    ("indexer", r"Indexer|IndexRow|TopK|CandidateMask"),
    ("mHC mix + Sinkhorn", r"HcPre|HcPost|Sinkhorn|Mix"),
    ("exact sums (mHC, attention)", r"SumTerms|ExactDot|ExactSum|ExactInDouble|ExactMean|Columns|DotSimd"),
    ("MoE routing + SwiGLU", r"RouteToken|Moe::|Swiglu|CrExp"),
    ("Engram", r"Engram"),
    ("norms", r"RmsNorm"),
    ("threading", r"ThreadPool|futex|sched|finish_task_switch|_raw_spin|schedule|try_to_wake|"
                  r"select_task|pick_next|dequeue|enqueue"),
    ("page faults, kernel memory", r"\[k\]"),
]
totals = {name: 0.0 for name, _ in buckets}
other = 0.0
for line in sys.stdin:
    m = re.match(r"\s+([0-9.]+)%\s+(\[.\])\s+(.*)", line)
    if not m:
        continue
    share, kind, sym = float(m.group(1)), m.group(2), m.group(3)
    text = kind + " " + sym
    for name, pattern in buckets:
        if re.search(pattern, text):
            totals[name] += share
            break
    else:
        other += share
startup = totals.pop("start-up (excluded)")
run = sum(totals.values()) + other
print("%-32s share of the run (start-up: %.1f %% of the samples, left out)" % ("module", startup))
for name, share in sorted(totals.items(), key=lambda kv: -kv[1]):
    print(f"{name:32s} {100 * share / run:5.1f} %")
print("%-32s %5.1f %%" % ("other", 100 * other / run))
'
