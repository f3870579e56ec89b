#!/usr/bin/env python3
"""Hostile-client probes against the coordinator's HTTP front door (Python 3 stdlib only).

Starts a coordinator with the tiny model on port 0 (or probes --url), runs each probe and
prints a table: probe, expected, observed, and whether they agree; then the coordinator's
resident memory before and at its peak while 200 keyless connections hold 8 MB bodies, and
what an accept loop out of descriptors costs in CPU. Exit status 1 if any probe disagrees.

  bench/hostile/http_probe.py --build build            # starts build/bin/mxserve-coordinator
  bench/hostile/http_probe.py --url http://127.0.0.1:8000 --api-key KEY [--pid PID]
"""
import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

KEY = "probe-key"


def conn(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def read_response(s, limit=10.0):
    """Status code of the first response on s (0: closed or nothing within limit)."""
    s.settimeout(limit)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    if not data.startswith(b"HTTP/1."):
        return 0, data
    return int(data[9:12]), data


def exchange(port, raw, half_close=False, limit=10.0):
    s = conn(port)
    try:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return read_response(s, limit)
    finally:
        s.close()


def alive(port):
    try:
        return exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", limit=5)[0] == 200
    except OSError:
        return False


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Coordinator:
    """A coordinator on the tiny model, ports picked by the kernel."""

    def __init__(self, build, model, extra=(), nofile=None):
        self.dir = tempfile.mkdtemp(prefix="http-probe-")
        port_file = os.path.join(self.dir, "ports.json")
        cmd = [os.path.join(build, "bin", "mxserve-coordinator"), "--model", model,
               "--host", "127.0.0.1", "--http_port", "0", "--grpc_port", "0",
               "--port_file", port_file, *extra]
        env = dict(os.environ, MXSERVE_API_KEY=KEY)

        def limit():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=self.log,
                                     preexec_fn=limit)
        deadline = time.time() + 120
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("coordinator did not start: " + open(self.log.name).read()[-2000:])
            time.sleep(0.1)
        time.sleep(0.1)
        self.port = json.load(open(port_file))["http_port"]
        self.pid = self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def post(path, body, key=None, extra=b""):
    auth = b"Authorization: Bearer " + key.encode() + b"\r\n" if key else b""
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + auth + extra + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def probes(port, model_id, key):
    """(name, expected status(es), function returning the observed status)."""
    # /ping is open and takes POST, so these bodies are read (the POST /health is now
    # refused on its header with 405, before any body).
    chunked = b"POST /ping HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    big = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n"
    prompt = json.dumps({"model": model_id, "prompt": "a" * (7 << 20)}).encode()
    return [
        ("issue's repro: POST /health, 65,534 B trailer", {405},
         lambda: exchange(port, chunked.replace(b"/ping", b"/health") + b"0\r\nX: " + b"a" * 65534
                          + b"\r\n\r\n")[0]),
        ("POST /ping, trailer field 65,534 B (no key)", {400},
         lambda: exchange(port, chunked + b"0\r\nX: " + b"a" * 65534 + b"\r\n\r\n")[0]),
        ("trailer field 1 MiB", {400},
         lambda: exchange(port, chunked + b"0\r\nX: " + b"a" * (1 << 20) + b"\r\n\r\n")[0]),
        ("chunk extension 1 MiB", {400},
         lambda: exchange(port, chunked + b"1;e=" + b"x" * (1 << 20) + b"\r\nz\r\n0\r\n\r\n")[0]),
        ("20,000 one-byte chunks", {200},
         lambda: exchange(port, chunked + b"1\r\nz\r\n" * 20000 + b"0\r\n\r\n")[0]),
        ("header field 70,000 B", {400, 431},
         lambda: exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"h" * 70000 + b"\r\n\r\n")[0]),
        ("no key, Expect: 100-continue, 8 MB", {401},
         lambda: exchange(port, big + b"Expect: 100-continue\r\n\r\n")[0]),
        ("no key, 8 MB body never sent", {401},
         lambda: exchange(port, big + b"\r\n" + b"{" * 1000, limit=5)[0]),
        ("no key, unknown path, 8 MB", {401},
         lambda: exchange(port, b"PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n", limit=5)[0]),
        ("Transfer-Encoding: xchunked + Content-Length", {400},
         lambda: exchange(port, b"POST /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n"
                                b"Content-Length: 3\r\n\r\nabc")[0]),
        ("Transfer-Encoding: xchunked", {400},
         lambda: exchange(port, b"POST /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n")[0]),
        ("Transfer-Encoding: gzip, chunked", {501},
         lambda: exchange(port, b"POST /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n"
                                b"\r\n0\r\n\r\n")[0]),
        ("HTTP/1.1 without Host", {400},
         lambda: exchange(port, b"GET /health HTTP/1.1\r\n\r\n")[0]),
        ("half-close after the request", {200},
         lambda: exchange(port, post("/v1/completions",
                                     json.dumps({"model": model_id, "prompt": "Hi", "max_tokens": 2}).encode(),
                                     key), half_close=True, limit=60)[0]),
        (f"/v2/models/{model_id}/ready without key", {200},
         lambda: exchange(port, f"GET /v2/models/{model_id}/ready HTTP/1.1\r\nHost: x\r\n\r\n".encode())[0]),
        ("/v1/models without key", {401},
         lambda: exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")[0]),
        ("7 MiB prompt (key)", {400},
         lambda: exchange(port, post("/v1/completions", prompt, key), limit=60)[0]),
    ]


def keyless_flood(port, pid, n=200):
    """n keyless connections announcing 8 MB bodies and sending 1 MB each; returns the
    coordinator's RSS (KiB) before and at its peak, and how many were answered 401."""
    before = rss_kib(pid)
    peak = [before]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample)
    t.start()
    socks, answered = [], 0
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n"
    for _ in range(n):
        try:
            s = conn(port, timeout=5)
            s.sendall(head)
            socks.append(s)
        except OSError:
            pass
    chunk = b"{" * (1 << 16)
    for s in socks:
        try:
            for _ in range(16):
                s.sendall(chunk)
        except OSError:
            pass
    for s in socks:
        if read_response(s, 5)[0] == 401:
            answered += 1
        s.close()
    stop.set()
    t.join()
    return before, peak[0], answered


def health_under_load(port, model_id, key, heavy=8):
    """Seconds /health/live takes while `heavy` requests with 7 MiB prompts are in flight, and
    how long the slowest of those took."""
    body = json.dumps({"model": model_id, "prompt": "a " * (7 << 19)}).encode()
    threads = [threading.Thread(target=lambda: exchange(port, post("/tokenize", body, key), limit=120))
               for _ in range(heavy)]
    start = time.time()
    for t in threads:
        t.start()
    time.sleep(0.2)
    t0 = time.time()
    status = exchange(port, b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n", limit=60)[0]
    took = time.time() - t0
    for t in threads:
        t.join()
    return status, took, time.time() - start


def descriptor_exhaustion(build, model, nofile=64, clients=120, secs=3.0):
    """A coordinator limited to `nofile` descriptors and `clients` connections at once, each
    sending GET /health: the CPU it burns over `secs` while they wait, and how many were served
    (200), told to go (503 or closed) or left hanging; and whether it serves once they leave."""
    c = Coordinator(build, model, nofile=nofile)
    try:
        socks = []
        for _ in range(clients):
            try:
                s = conn(c.port, timeout=2)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                socks.append(s)
            except OSError:
                pass
        time.sleep(0.5)
        cpu0 = cpu_seconds(c.pid)
        time.sleep(secs)
        cpu = cpu_seconds(c.pid) - cpu0
        served = told = hanging = 0
        for s in socks:
            status, data = read_response(s, 0.5)
            if status == 200:
                served += 1
            elif status == 503 or (status == 0 and not data and _closed(s)):
                told += 1
            else:
                hanging += 1
            s.close()
        time.sleep(0.5)
        return cpu / secs, served, told, hanging, alive(c.port)
    finally:
        c.stop()


def _closed(s):
    s.settimeout(0.1)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build folder with bin/mxserve-coordinator")
    ap.add_argument("--model", help="model folder (default: a fresh tiny model)")
    ap.add_argument("--url", help="probe this server instead of starting one")
    ap.add_argument("--api-key", default=KEY)
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    tmp = None
    coord = None
    if args.url:
        port = int(args.url.rsplit(":", 1)[1].split("/")[0])
        pid = args.pid
        key = args.api_key
    else:
        model = args.model
        if not model:
            tmp = tempfile.mkdtemp(prefix="http-probe-model-")
            model = os.path.join(tmp, "tiny")
            subprocess.run([os.path.join(args.build, "bin", "mxserve-make-model"), "--preset", "tiny",
                            "--out", model], check=True, stdout=subprocess.DEVNULL)
        coord = Coordinator(args.build, model, extra=["--max_connections", "512"])
        port, pid, key = coord.port, coord.pid, KEY
    model_id = json.loads(exchange(port, f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
                                   .encode())[1].split(b"\r\n\r\n", 1)[1])["data"][0]["id"]
    rows, bad = [], 0
    for name, expected, fn in probes(port, model_id, key):
        try:
            got = fn()
        except OSError as e:
            got = f"error {e.__class__.__name__}"
        up = alive(port)
        ok = got in expected and up
        bad += not ok
        rows.append((name, "/".join(map(str, sorted(expected))) + ", up", f"{got}, {'up' if up else 'DOWN'}", ok))
    if pid:
        before, peak, answered = keyless_flood(port, pid)
        ok = answered == 200 and alive(port)
        bad += not ok
        rows.append(("200 keyless conns x 8 MB bodies", "401 each, up", f"{answered} x 401", ok))
    status, took, heavy_took = health_under_load(port, model_id, key)
    rows.append(("/health/live, 8 x 7 MiB /tokenize refused", "200",
                 f"{status} in {took:.3f} s (the 8: {heavy_took:.1f} s)", status == 200))
    bad += status != 200
    if coord:
        # The same with the byte limit lifted, so that the 7 MiB prompts are tokenized (on the
        # handler threads): the probe must not wait for them.
        heavy = Coordinator(args.build, model, extra=["--max_prompt_bytes", str(1 << 30)])
        try:
            status, took, heavy_took = health_under_load(heavy.port, model_id, key)
        finally:
            heavy.stop()
        rows.append(("/health/live, 8 x 7 MiB /tokenize tokenized", "200",
                     f"{status} in {took:.3f} s (the 8: {heavy_took:.1f} s)", status == 200))
        bad += status != 200
    w = max(len(r[0]) for r in rows)
    print(f"{'probe':<{w}}  {'expected':<14}  {'observed':<30}  ok")
    for name, exp, got, ok in rows:
        print(f"{name:<{w}}  {exp:<14}  {got:<30}  {'yes' if ok else 'NO'}")
    if pid:
        print(f"\ncoordinator RSS: {before / 1024:.1f} MiB before the keyless flood, "
              f"{peak / 1024:.1f} MiB at its peak")
    if coord:
        cpu, served, told, hanging, up = descriptor_exhaustion(args.build, model)
        print(f"descriptors limited to 64, 120 clients at once: {cpu:.2f} CPU s per s while they "
              f"wait; {served} served, {told} told 503 or closed, {hanging} left hanging; "
              f"serving afterwards: {'yes' if up else 'NO'}")
        bad += not up or hanging > 0
        alive_at_end = coord.proc.poll() is None
        print(f"coordinator still running after every probe: {'yes' if alive_at_end else 'NO'}")
        bad += not alive_at_end
        coord.stop()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
