#!/usr/bin/env python3
"""Writes the seed corpus of safetensors_header_fuzz (fuzz/corpus/safetensors_header/).

Small valid files and one handcrafted fault per file (checkpoint.md §3). The files are committed;
rerun only to change the seeds: python3 fuzz/make_safetensors_header_seeds.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors_header")


def st(header, data=b"", length=None, pad=True):
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def all_dtypes():
    header, offset = {}, 0
    for dtype, size in [("BF16", 2), ("F32", 4), ("F8_E4M3", 1), ("F8_E8M0", 1), ("I8", 1),
                        ("U8", 1), ("F64", 8), ("I16", 2)]:
        header["t_" + dtype] = t(dtype, [1], offset, offset + size)
        offset += size
    return header  # 20 bytes of tensors


SEEDS = {
    "valid_two_tensors": st({"__metadata__": {"format": "pt"},
                             "layers.0.attn.wkv.weight": t("F8_E4M3", [4, 8], 0, 32),
                             "layers.0.attn.wkv.scale": t("F8_E8M0", [1, 1], 32, 33)},
                            bytes(range(33))),
    "valid_all_dtypes": st(all_dtypes(), bytes(30)),
    "valid_scalar_and_empty": st({"s": t("F32", [], 0, 4), "e": t("BF16", [0, 3], 4, 4)},
                                 b"\x00\x00\xc0\x3f"),
    "valid_empty_header": st({}),
    "valid_unaligned": st({"a": t("U8", [3], 0, 3), "b": t("F32", [1], 3, 7)}, bytes(7)),
    "short_file": b"\x05\x00\x00",
    "length_beyond_file": st({}, length=4096),
    "length_huge": st({}, length=1 << 62),
    "not_json": st(b"{\"a\": [1, 2", pad=False),
    "not_object": st(b"[1, 2, 3]"),
    "not_utf8": st(b"{\"\xff\xfe\": {}}"),
    "unknown_dtype": st({"w": t("F12", [1], 0, 1)}, b"x"),
    "negative_shape": st({"w": t("U8", [-1], 0, 1)}, b"x"),
    "float_shape": st({"w": t("U8", [1.5], 0, 1)}, b"x"),
    "reversed_offsets": st({"w": t("F32", [2], 8, 0)}, bytes(8)),
    "offsets_beyond": st({"w": t("F32", [2], 100, 108)}, bytes(8)),
    "size_mismatch": st({"w": t("F8_E4M3", [576, 256], 0, 1000)}, bytes(1000)),
    "overflow_shape": st({"w": t("U8", [1 << 62, 1 << 62], 0, 1)}, b"x"),
    "overlap": st({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}, bytes(12)),
    "duplicate_key": st(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy"),
    "truncated_data": st({"a": t("I16", [8], 0, 16)}, bytes(10)),
    "metadata_not_strings": st({"__metadata__": {"format": 1}}),
    "entry_not_object": st({"w": [1, 2]}),
    "deep_nesting": st(b"{\"w\":" + b"[" * 200 + b"]" * 200 + b"}"),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {OUT}")


if __name__ == "__main__":
    main()
