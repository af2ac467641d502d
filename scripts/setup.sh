#!/usr/bin/env bash
# Installs every Debian package dsv41 needs to build, test and benchmark. Idempotent; run as root.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config git python3
  clang libclang-rt-14-dev            # libFuzzer and sanitizer runtimes
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libhwy-dev libpcre2-dev libicu-dev
  libpng-dev libjpeg62-turbo-dev     # image input (vision.md §4): PNG and the JPEG decoder Pillow uses
  openmpi-bin libopenmpi-dev          # multi-process runs (docs/multinode.md); optional to build
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# node + npm: the server tests drive `dsv41 serve` with the official npm clients (openai,
# @anthropic-ai/sdk), and the tokenizer benchmark compares against HF tokenizers from npm. Use
# the machine's node if present.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
