#!/usr/bin/env python3
"""Writes every tensor of a golden safetensors file (tests/data/golden, all fp64) as a raw little-endian file
<out>/<name>.f64 that a Fortran program reads with access='stream', and <out>/manifest.txt with one line per tensor:
"name ndim d0 d1 ..." (row-major shape, as the C API declares it). Python's standard library only: CI has no numpy.

    golden_raw.py tests/data/golden/flare_time_insitu.safetensors OUT_DIR"""
import json
import os
import struct
import sys


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    path, out = sys.argv[1], sys.argv[2]
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    data = blob[8 + header_len:]
    os.makedirs(out, exist_ok=True)
    lines = []
    for name, info in sorted(header.items()):
        if name == "__metadata__":
            continue
        if info["dtype"] != "F64":
            raise SystemExit(f"{path}: {name} is {info['dtype']}, not F64")
        begin, end = info["data_offsets"]
        with open(os.path.join(out, name + ".f64"), "wb") as f:
            f.write(data[begin:end])
        lines.append(" ".join([name, str(len(info["shape"]))] + [str(d) for d in info["shape"]]))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
