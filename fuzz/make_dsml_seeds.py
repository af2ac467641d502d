#!/usr/bin/env python3
"""Writes the dsml_fuzz seed corpus (fuzz/corpus/dsml/) from the chat parse goldens.

Each seed is one control byte (bit 0: chat mode; the rest seeds the streaming split) followed by
a golden's generated text. Run from the repository root:
  python3 fuzz/make_dsml_seeds.py /work/shared/goldens/chat/parse.jsonl
"""
import json
import os
import sys


def main():
    goldens = sys.argv[1] if len(sys.argv) > 1 else "../shared/goldens/chat/parse.jsonl"
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "dsml")
    os.makedirs(out_dir, exist_ok=True)
    with open(goldens, encoding="utf-8") as f:
        for i, line in enumerate(f):
            case = json.loads(line)
            control = (1 if case["thinking_mode"] == "chat" else 0) | ((i % 64) << 1)
            with open(os.path.join(out_dir, case["name"]), "wb") as seed:
                seed.write(bytes([control]) + case["text"].encode("utf-8"))


if __name__ == "__main__":
    main()
