#!/usr/bin/env python3
"""Writes the chat_request_fuzz seed corpus (fuzz/corpus/chat_request/) from the chat render
goldens: each seed is one golden's request object, taken verbatim from its line so number
spellings (1e3, 2.50, big integers) survive. Run from the repository root:
  python3 fuzz/make_chat_request_seeds.py /work/shared/goldens/chat/render.jsonl
"""
import json
import os
import sys


def main():
    goldens = sys.argv[1] if len(sys.argv) > 1 else "../shared/goldens/chat/render.jsonl"
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "chat_request")
    os.makedirs(out_dir, exist_ok=True)
    decoder = json.JSONDecoder()
    with open(goldens, encoding="utf-8") as f:
        for line in f:
            name = json.loads(line)["name"]
            # The raw text of the "request" member: from its value start to the end of that value.
            start = line.index('"request": ') + len('"request": ')
            _, end = decoder.raw_decode(line, start)
            with open(os.path.join(out_dir, name), "wb") as seed:
                seed.write(line[start:end].encode("utf-8"))


if __name__ == "__main__":
    main()
