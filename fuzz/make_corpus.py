#!/usr/bin/env python3
"""Rebuilds the seed corpora in fuzz/corpus/ from the repository's own inputs.

    python3 fuzz/make_corpus.py

hlo_parser: the small golden HLO modules and JAX fixtures; sharding: every distinct
`sharding={...}` in them plus XLA's other spellings; partition_spec: mesh shapes, axis names and
specs as `tessel shard` takes them; topology: configs/*.json; model_config: configs/models/*.json;
transport_wire: encoded headers of every message type (the layout of transport/internal/wire.h),
control bodies (u32-length-prefixed strings) and a header queue in the shared-memory layout.
The files are committed; run this again after changing the inputs it draws from.
"""
import hashlib
import pathlib
import re
import shutil
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def put(target, data, name=None):
    if isinstance(data, str):
        data = data.encode()
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / (name or hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)


def hlo_seeds():
    files = sorted(p for p in (ROOT / "tests" / "golden").rglob("*.hlo") if p.stat().st_size < 3000)
    files += sorted(p for p in (ROOT / "tests" / "fixtures" / "jax").glob("*.hlo")
                    if p.stat().st_size < 6000 and "xla_partitioned" not in p.name)
    for p in files[:80]:
        put("hlo_parser", p.read_bytes(), p.stem)
    return files


def sharding_seeds(hlo_files):
    seen = set()
    for p in hlo_files:
        for m in re.finditer(r"sharding=(\{(?:[^{}]|\{[^{}]*\})*\})", p.read_text()):
            seen.add(m.group(1))
    seen.update([
        "{replicated}", "{maximal device=3}", "{manual}", "{unreduced}",
        "{devices=[4,2]<=[2,4]T(1,0)}", "{devices=[2,4]<=[8]}",
        "{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}",
        "{{replicated}, {devices=[2]0,1}, /*index=2*/{manual}}",
    ])
    for s in sorted(seen)[:120]:
        put("sharding", s)


def partition_spec_seeds():
    for mesh, names, spec in [
        ("2,4", "", "0,None"), ("1,2,4", "r,b,m", "None,(r,m)"), ("2,4", "x,y", "x,y"),
        ("2,4", "x,y", "y,x"), ("2,4", "", "None,None"), ("2,4", "", ""), ("2,4", "", "0,None,1"),
        ("8", "data", "data,"), ("2,2,2", "a,b,c", "('a',\"b\"),None,c"), ("4,2", "x,y", "(x,y),_"),
        ("3", "x", "x,none"), ("2,4", "x,y", "x,(y"),
    ]:
        put("partition_spec", f"{mesh}\n{names}\n{spec}")


def json_seeds():
    for p in sorted((ROOT / "configs").glob("*.json")):
        put("topology", p.read_bytes(), p.stem)
    for p in sorted((ROOT / "configs" / "models").glob("*.json")):
        put("model_config", p.read_bytes(), p.stem)


def header(msg_type, channel=0, kind=0, dtype=0, reduce_kind=0xFF, payload=0, src_host=0):
    # wire.h: magic, version, type, channel, sequence, src, dst, src_host, phase, reserved[3],
    # step, segment, kind, dtype, reduce_kind, 5 zero bytes, element_count, group_id,
    # payload_bytes, checksum.
    return struct.pack("<IHBBQqqiB3xIIBBB5xqQQQ", 0x4C455354, 5, msg_type, channel, 7, 1, 0,
                       src_host, 0, 2, 0, kind, dtype, reduce_kind, 16, 0x1A2B3C4D5E6F7081,
                       payload, 0)


def pack_strings(strings):
    return b"".join(struct.pack("<I", len(s)) + s for s in strings)


def transport_seeds():
    for t in range(1, 9):
        put("transport_wire", header(t, channel=3 if t != 2 and t != 8 else 0, kind=1, dtype=5,
                                     reduce_kind=0, payload=64), f"header_type{t}")
    put("transport_wire", header(1)[:8], "prefix_only")
    put("transport_wire", struct.pack("<IHBB", 0x4C455354, 4, 1, 3) + bytes(80), "version4")
    put("transport_wire", pack_strings([b"the-job-token", b"shm2 123 7 00000000000000ff 2 8 65536"]),
        "hello_body")
    put("transport_wire", pack_strings([b"ipc:///run/user/1000/tessel/h0", b"tcp://127.0.0.1:5555"]),
        "table_body")
    # A header queue as the segment holds it: head, tail (one cache line each), then entries of
    # 128 bytes (header, slot index, zeros, checksum; the checksum depends on the segment's
    # nonce, so the fuzzer sees a bad one and must report the segment as corrupt).
    entry = header(8, payload=4096, src_host=0) + struct.pack("<I", 0)
    entry += bytes(120 - len(entry)) + struct.pack("<Q", 0)
    queue = struct.pack("<Q", 0) + bytes(56) + struct.pack("<Q", 1) + bytes(56) + entry
    put("transport_wire", queue, "shm_queue_one_entry")


def main():
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    hlo = hlo_seeds()
    sharding_seeds(hlo)
    partition_spec_seeds()
    json_seeds()
    transport_seeds()
    for d in sorted(CORPUS.iterdir()):
        files = list(d.iterdir())
        print(f"{d.name}: {len(files)} files, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
