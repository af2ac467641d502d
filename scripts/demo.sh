#!/usr/bin/env bash
# The README's main job: installs dependencies, builds dsv41, writes the built-in tiny model
# (preset "tiny": every layer mode, both Engram placements, FP8 + MXFP4 weights) and prints its
# layer and cache plan, then generates text with it (random weights: the text is gibberish, the
# point is the whole forward running end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
# Compiler cache hits across clones: paths below the repository are hashed relative to it.
export CCACHE_BASEDIR="$PWD"
if [[ $(id -u) -eq 0 ]] || command -v sudo >/dev/null; then bash scripts/setup.sh; fi
dir=build/release
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j "$(nproc)" --target dsv41
model=${DSV41_DEMO_MODEL:-build/models/tiny}
"$dir/dsv41" tiny --preset tiny --out "$model"
"$dir/dsv41" plan --model "$model" --kv-cache-gib 1
"$dir/dsv41" run --model "$model" -p "The quick brown fox" --max-tokens 32
