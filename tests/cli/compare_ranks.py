"""Compares two runs' trained values for tests/cli/mpi_ranks.sh (Python's standard
library only): the tensors of two f32 safetensors files, or the router logits of two
search states (search_state.bin). Prints the largest absolute difference and exits 1
when it exceeds the tolerance.

    compare_ranks.py weights A.safetensors B.safetensors TOL
    compare_ranks.py routers A/search_state.bin B/search_state.bin TOL
"""
import array
import json
import struct
import sys


def safetensors(path):
    data = open(path, "rb").read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, not F32")
        start, end = t["data_offsets"]
        out[name] = array.array("f", body[start:end])
    return out


def router_logits(path):
    data = open(path, "rb").read()
    if data[:8] != b"ACSEARCH":
        sys.exit(f"{path}: not a search state")
    (n,) = struct.unpack("<i", data[12:16])
    header = len(data) - 3 * 4 * n  # header, then logits, m, v
    return {"logits": array.array("f", data[header:header + 4 * n])}


def main():
    kind, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    read = safetensors if kind == "weights" else router_logits
    x, y = read(a), read(b)
    if x.keys() != y.keys():
        sys.exit(f"{a} and {b} hold different tensors")
    worst, where = 0.0, ""
    for name in x:
        if len(x[name]) != len(y[name]):
            sys.exit(f"{name}: {len(x[name])} vs {len(y[name])} values")
        for i, (u, v) in enumerate(zip(x[name], y[name])):
            if abs(u - v) > worst:
                worst, where = abs(u - v), f"{name}[{i}]: {u!r} vs {v!r}"
    print(f"{kind}: largest difference {worst:.3g}" + (f" at {where}" if where else ""))
    sys.exit(0 if worst <= tol else 1)


main()
