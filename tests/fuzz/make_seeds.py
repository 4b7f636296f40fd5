#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/ (committed; rerun after a format change).

  python3 tests/fuzz/make_seeds.py BUILD_DIR

BUILD_DIR is a normal build (kjit-cli, kjit_reliability_worker): the metadata and package-index
seeds are real files those tools write, the --set seeds follow `kjit-cli ops --json`.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
build = sys.argv[1]
cli = os.path.join(build, "tools/kjit-cli/kjit-cli")
worker = os.path.join(build, "tests/reliability/kjit_reliability_worker")


def out_dir(target):
    d = os.path.join(here, "corpus", target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


tmp = tempfile.mkdtemp()
env = dict(os.environ, KJIT_CACHE_DIR=os.path.join(tmp, "cache"))

# ---- metadata: real sidecars, then damaged variants
subprocess.run([worker, "build", "--spec", "tiny:1", "--spec", "op:rmsnorm:dtype=bf16,hidden=4096"],
               env=env, check=True, stdout=subprocess.DEVNULL)
d = out_dir("fuzz_metadata")
sidecars = []
for root, _, files in os.walk(os.path.join(tmp, "cache", "v1")):
    for f in sorted(files):
        if f.endswith(".json"):
            sidecars.append(open(os.path.join(root, f)).read())
for i, s in enumerate(sidecars):
    write(d, f"real_{i}.json", s)
j = json.loads(sidecars[0])
write(d, "minimal.json", json.dumps({k: j[k] for k in j if k not in ("registers", "shared_bytes")}))
j2 = dict(j, schema="1", cubin_size=-1)
write(d, "wrong_types.json", json.dumps(j2))
write(d, "truncated.json", sidecars[0][: len(sidecars[0]) // 2])
# Regression: a float no int holds and a negative size (undefined behaviour before the fix).
write(d, "regression_float_fields.json", json.dumps(dict(j, schema=1e300, cubin_size=-1,
                                                         registers=3.5e10)))

# ---- package index: a real one (two entries) and an empty one
pkg = os.path.join(tmp, "pkg")
subprocess.run([cli, "aot", "build", "--arch", "sm_90", "--ops", "argmax", "--out", pkg],
               env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
d = out_dir("fuzz_package_index")
index = json.load(open(os.path.join(pkg, "index.json")))
index["entries"] = index["entries"][:2]
write(d, "real.json", json.dumps(index, indent=2))
write(d, "empty.json", json.dumps(dict(index, entries=[])))
# Regressions: the fuzzer's input (a format_version no int holds, undefined behaviour before the
# fix), and a negative and an overflowing size.
write(d, "format_version_float.json",
      '{"format": "kjit-aot-package", "format_version": 3' + "3" * 69 + '1, "kjit_version": '
      '"0.1.0", "nvrtc_version": "13.0", "crt(ed": "2p262%T6:08:52Z", "archs": ["sm_9("], '
      '"entries": []}')
write(d, "regression_size_fields.json",
      json.dumps(dict(index, entries=[dict(index["entries"][0], size=-1,
                                           metadata_size=2**64)])))

# ---- --set parameters: every op with its first value of each axis (64 for integers)
ops = json.loads(subprocess.run([cli, "ops", "--json"], env=env, check=True,
                                capture_output=True).stdout)["ops"]
d = out_dir("fuzz_set_args")
for op in ops:
    lines = [op["name"]]
    for a in op["axes"]:
        lines.append(f"{a['name']}={a['values'][0] if a['values'] else 64}")
    write(d, op["name"] + ".txt", "\n".join(lines) + "\n")

# ---- DLTensor: the layout fuzz_dltensor.cpp reads (per tensor: ndim, dims, flags, strides,
# dtype, lanes, device, data, byte_offset)
def dim(v):
    return bytes([3, v])  # kind 3: a small value


def tensor(shape, strides=None, code=2, bits_log=1, data=0x10000000, offset=None):
    b = struct.pack("b", len(shape)) + b"".join(dim(s) for s in shape)
    flags = (1 if strides else 0) | (32 if offset is not None else 0)
    b += bytes([flags])
    if strides:
        b += b"".join(dim(s) for s in strides)
    b += bytes([code, bits_log]) + struct.pack("<Q", data)
    if offset is not None:
        b += struct.pack("<Q", offset)
    return b


d = out_dir("fuzz_dltensor")
write(d, "rows.bin", tensor([4, 16]) + tensor([16], code=4))
write(d, "strided.bin", tensor([4, 2, 8], [16, 8, 1]) + tensor([4, 2, 8], [32, 8, 1]))
write(d, "offset.bin", tensor([3, 5], offset=2) + tensor([3, 5], data=0x10000004))
write(d, "empty.bin", tensor([0, 8]) + tensor([1]))

# ---- safetensors: two tensors and metadata, as the writer lays them out
def safetensors(tensors, meta):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


d = out_dir("fuzz_safetensors")
write(d, "two.safetensors", safetensors(
    [("x", "BF16", [2, 3], bytes(12)), ("y", "F32", [4], struct.pack("<4f", 1, 2, 3, 4))],
    {"format": "pt"}))
write(d, "scalar.safetensors", safetensors([("s", "I64", [], struct.pack("<q", 7))], None))
write(d, "empty.safetensors", safetensors([], None))

shutil.rmtree(tmp)
print("seeds written to", os.path.join(here, "corpus"))
