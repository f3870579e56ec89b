#!/usr/bin/env python3
"""TTFT of a request whose long shared prefix (a "system prompt") is in the prefix cache, against
the same request cold, in one run: the tiny model on CPU, one coordinator, 127.0.0.1.

Each round sends a cold request (a fresh random prefix of PREFIX tokens plus a short tail, never
seen before) and then a warm one (the same prefix, another tail: the prefix's full blocks are
cached). Both stream one token (max_tokens 1); TTFT is the time to the first output chunk.
Prints per-round timings, the medians and the coordinator's prefix cache counters.
Usage: prefix_cache_ttft.py BIN_DIR [--prefix 2000] [--tail 16] [--rounds 5]"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from smoke_test import tail  # noqa: E402


def start(bin_dir, tmp, flags):
    model = os.path.join(tmp, "tiny")
    if not os.path.isdir(model):
        subprocess.run([os.path.join(bin_dir, "mxserve-make-model"), "--preset", "tiny", "--out",
                        model, "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
    ports = os.path.join(tmp, "ports.json")
    if os.path.exists(ports):
        os.remove(ports)
    log = open(os.path.join(tmp, "coordinator.log"), "w")
    proc = subprocess.Popen([os.path.join(bin_dir, "mxserve-coordinator"), "--model", model,
                             "--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                             "--port-file", ports, "--local-workers", "0", *flags],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the coordinator exited with {proc.returncode}:\n{tail(tmp)}")
        try:
            with open(ports) as f:
                port = json.load(f)["http_port"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5) as r:
                if r.status == 200:
                    return proc, port
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the coordinator was not ready within 120 s:\n{tail(tmp)}")


def ttft(port, prompt):
    body = json.dumps({"model": "", "prompt": prompt, "max_tokens": 1, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[5:])
            if first is None and ev.get("choices") and ev["choices"][0].get("text") is not None:
                first = time.perf_counter() - start
    if first is None:
        raise SystemExit("no output chunk")
    return first


def counters(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        page = r.read().decode()
    out = {}
    for line in page.splitlines():
        for name in ("mxserve:prefix_cache_queries_total", "mxserve:prefix_cache_hits_total"):
            if line.startswith(name):
                out[name] = float(line.split()[-1])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--prefix", type=int, default=2000)
    ap.add_argument("--tail", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(54)
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start(args.bin_dir, tmp, ["--max-num-batched-tokens", "4096"])
        try:
            ttft(port, [1, 2, 3])  # warm up the process (first-request costs)
            cold, warm = [], []
            for i in range(args.rounds):
                prefix = [rng.randrange(256) for _ in range(args.prefix)]
                tails = [[rng.randrange(256) for _ in range(args.tail)] for _ in range(2)]
                c = ttft(port, prefix + tails[0])
                w = ttft(port, prefix + tails[1])
                cold.append(c)
                warm.append(w)
                print(f"round {i}: cold {c * 1e3:8.1f} ms   cached prefix {w * 1e3:8.1f} ms")
            print(f"prompt {args.prefix} + {args.tail} tokens, tiny model, CPU, "
                  f"{args.rounds} rounds")
            print(f"median TTFT cold          {statistics.median(cold) * 1e3:8.1f} ms")
            print(f"median TTFT cached prefix {statistics.median(warm) * 1e3:8.1f} ms")
            print(f"speedup {statistics.median(cold) / statistics.median(warm):.1f}x")
            print(json.dumps(counters(port)))
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
