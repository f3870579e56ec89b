#!/usr/bin/env python3
"""bench_serve.py against a real coordinator: the tiny model on CPU, 127.0.0.1, ports picked by
the coordinator, an API key taken from OPENAI_API_KEY. Asserts the result JSON: every request
completed with exactly its token counts, and the metrics agree with the per-request timings.
Usage: smoke_test.py BIN_DIR"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "smoke-key"


def start_coordinator(bin_dir, tmp):
    model = os.path.join(tmp, "tiny")
    subprocess.run([os.path.join(bin_dir, "mxserve-make-model"), "--preset", "tiny", "--out",
                    model, "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
    ports = os.path.join(tmp, "ports.json")
    log = open(os.path.join(tmp, "coordinator.log"), "w")
    proc = subprocess.Popen([os.path.join(bin_dir, "mxserve-coordinator"), "--model", model,
                             "--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                             "--port-file", ports, "--local-workers", "1", "--api-key", KEY],
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
    raise SystemExit(f"the coordinator was not ready within 120 s:\n{tail(tmp)}")


def tail(tmp):
    with open(os.path.join(tmp, "coordinator.log")) as f:
        return "".join(f.readlines()[-40:])


def bench(port, tmp, name, *flags):
    out = os.path.join(tmp, f"{name}.json")
    cmd = [sys.executable, os.path.join(HERE, "bench_serve.py"), "--base-url",
           f"http://127.0.0.1:{port}", "--result-file", out, *flags]
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    print(p.stdout)
    if p.returncode != 0:
        raise SystemExit(f"bench_serve.py {name} exited with {p.returncode}:\n{tail(tmp)}")
    with open(out) as f:
        return json.load(f)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def close(a, b, what):
    check(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), f"{what}: {a} != {b}")


def check_consistent(r, n):
    """Counts and every summary statistic against the per-request lists."""
    check(r["completed"] == n and r["failed"] == 0, f"completed {r['completed']}, "
          f"failed {r['failed']}: {r['errors']}")
    check(r["errors"] == [""] * n, f"errors: {r['errors']}")
    close(r["request_throughput"], n / r["duration"], "request throughput")
    close(r["output_throughput"], sum(r["output_lens"]) / r["duration"], "output throughput")
    close(r["total_token_throughput"],
          (sum(r["input_lens"]) + sum(r["output_lens"])) / r["duration"], "total throughput")
    check(r["total_output_tokens"] == sum(r["output_lens"]), "total output tokens")
    check(r["total_input_tokens"] == sum(r["input_lens"]), "total input tokens")
    tpots = []
    for i in range(n):
        ttft, e2e, itl = r["ttfts"][i], r["latencies"][i], r["itls"][i]
        check(0 < ttft <= e2e, f"request {i}: ttft {ttft} e2e {e2e}")
        check(all(g >= 0 for g in itl), f"request {i}: negative gap {itl}")
        close(ttft + sum(itl), e2e, f"request {i}: ttft + gaps = e2e")
        if r["output_lens"][i] > 1:
            tpots.append((e2e - ttft) / (r["output_lens"][i] - 1))
    for m, values in (("ttft", r["ttfts"]), ("e2el", r["latencies"]), ("tpot", tpots),
                      ("itl", [g for gaps in r["itls"] for g in gaps])):
        if not values:  # e.g. no gaps when each reply came in one chunk: stats read 0
            check(r[f"mean_{m}_ms"] == r[f"p99_{m}_ms"] == 0, f"{m} of an empty sample")
            continue
        close(r[f"mean_{m}_ms"], 1000 * sum(values) / len(values), f"mean {m}")
        close(r[f"median_{m}_ms"], r[f"p50_{m}_ms"], f"median {m}")
        check(1000 * min(values) - 1e-9 <= r[f"p50_{m}_ms"] <= r[f"p90_{m}_ms"]
              <= r[f"p99_{m}_ms"] <= 1000 * max(values) + 1e-9, f"{m} percentiles out of order")
    check(1 <= r["max_concurrent_requests"] <= n, "peak concurrency")


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_coordinator(bin_dir, tmp)
        try:
            # 8 prompts of 16 tokens in, 8 out, 4 at a time; the model found via /v1/models.
            r = bench(port, tmp, "fixed", "--num-prompts", "8", "--random-input-len", "16",
                      "--random-output-len", "8", "--max-concurrency", "4", "--num-warmups", "2",
                      "--seed", "1")
            check_consistent(r, 8)
            check(r["input_lens"] == [16] * 8, f"input lens {r['input_lens']}")
            check(r["output_lens"] == [8] * 8, f"output lens {r['output_lens']}")
            check(r["max_concurrent_requests"] <= 4, "more than --max-concurrency in flight")
            check(all(len(g) <= 7 for g in r["itls"]), f"more gaps than tokens: {r['itls']}")
            check(r["model_id"] == "tiny", f"model {r['model_id']}")
            # Chat, Poisson arrivals: the template adds to the prompt, and a chat stop token
            # may end a reply early even with ignore_eos (as in vLLM).
            r = bench(port, tmp, "chat", "--endpoint", "/v1/chat/completions", "--model", "tiny",
                      "--num-prompts", "6", "--random-input-len", "12", "--random-output-len",
                      "6", "--request-rate", "50", "--seed", "2")
            check_consistent(r, 6)
            check(all(n > 12 for n in r["input_lens"]), f"chat input lens {r['input_lens']}")
            check(all(1 <= n <= 6 for n in r["output_lens"]), f"chat outputs {r['output_lens']}")
            check(r["request_rate"] == 50, "request rate recorded")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print("bench_serve smoke test: PASS")


if __name__ == "__main__":
    main()
