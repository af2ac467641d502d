#!/usr/bin/env bash
# Where a forward's time goes, per module (docs/performance.md): `perf record -e cpu-clock` over
# `dsv41 bench`, samples bucketed by symbol into weight GEMMs, attention, indexer, mHC, exact
# sums, MoE routing, Engram, norms, threading, allocation and start-up (left out of the shares);
# kernel time counts for the user code that entered the kernel.
#   scripts/profile.sh MODEL_DIR decode [THREADS]    8-token prompt, 256 decode tokens
#   scripts/profile.sh MODEL_DIR prefill [THREADS]   512-token prompt, no decode
#   scripts/profile.sh MODEL_DIR decode8 [THREADS]   8 streams: 8-token prompts, 128 decode tokens
set -euo pipefail
model=${1:?model directory}
phase=${2:-decode}
threads=${3:-0}
binary=${DSV41:-build/release/dsv41}
case "$phase" in
  decode) shape=(--prompt-tokens 8 --decode-tokens 256) ;;
  prefill) shape=(--prompt-tokens 512 --decode-tokens 1 --max-num-batched-tokens 512) ;;
  decode8) shape=(--prompt-tokens 8 --decode-tokens 128 --concurrency 8) ;;
  *) echo "phase must be decode, prefill or decode8, not '$phase'" >&2; exit 2 ;;
esac
data=$(mktemp /tmp/dsv41-profile.XXXXXX)
trap 'rm -f "$data"' EXIT
perf record -q -g -e cpu-clock -o "$data" "$binary" bench -m "$model" "${shape[@]}" -r 1 \
  -t "$threads" >/dev/null 2>&1
# Each sample goes to its leaf symbol; a sample in the kernel (page faults, futex waits, ...) goes
# to the first user-space frame under it, i.e. to the code that entered the kernel.
perf script -i "$data" -F ip,sym,dso 2>/dev/null | python3 -c '
import re, sys
buckets = [
    ("start-up (excluded)", r"ReadWordsSimd|FmaChains|Bf16DotChains|MeasureReadBandwidth|MeasureMachine|"
                            r"PrefaultPages|Prefault|Tokenizer|Checkpoint|Safetensors|Inventory|"
                            r"BuildEngramTokenMap|ParseAdded|_dl_|LoadedTextModel::Load|ModelWeights::Load"),
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
    ("threading", r"ThreadPool|sched_yield|futex|pthread_cond|WorkerLoop"),
    ("allocation (malloc, free, mmap)", r"malloc|_int_free|cfree|operator new|operator delete|mmap|munmap"),
]
def classify(sym):
    for name, pattern in buckets:
        if re.search(pattern, sym):
            return name
    return None
totals = {name: 0.0 for name, _ in buckets}
totals["kernel, no user frame"] = 0.0
other = 0.0
def flush(frames):
    global other
    if not frames:
        return
    leaf = frames[0]
    if leaf[1]:  # in the kernel: charge the first user frame
        user = next((f for f in frames if not f[1]), None)
        if user is None:
            totals["kernel, no user frame"] += 1
            return
        leaf = user
    name = classify(leaf[0])
    if name is None:
        other += 1
    else:
        totals[name] += 1
frames = []
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        flush(frames)
        frames = []
        continue
    m = re.match(r"\s*[0-9a-f]+\s+(.*)\s+\((.*)\)$", line)
    if m:
        frames.append((m.group(1), "kernel.kallsyms" in m.group(2)))
flush(frames)
startup = totals.pop("start-up (excluded)")
run = sum(totals.values()) + other
allsamples = run + startup
print("%-32s share of the run (start-up: %.1f %% of the samples, left out)" % ("module", 100 * startup / allsamples))
for name, share in sorted(totals.items(), key=lambda kv: -kv[1]):
    print(f"{name:32s} {100 * share / run:5.1f} %")
print("%-32s %5.1f %%" % ("other", 100 * other / run))
'
