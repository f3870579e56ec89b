#!/usr/bin/env python3
"""Hostile JSON against a running coordinator (issue 56, item 2 and duplicate keys).

Sends bodies nested 65 / 8,000 / 50,000 levels deep in tools[].function.parameters,
messages[].tool_calls and a tool call's arguments string, and bodies with a key given twice,
then checks /health/live still answers. Prints one line per probe: status, error code, param,
wall time. Python stdlib only.

  bench/hostile/json_probe.py --port 8000 [--api-key KEY]
  bench/hostile/config_probe.sh starts a coordinator on the tiny model and runs this.
"""
import argparse
import http.client
import json
import sys
import time


def post(port, path, body, key):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    t0 = time.monotonic()
    conn.request("POST", path, body=body.encode(), headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    dt = time.monotonic() - t0
    conn.close()
    try:
        err = json.loads(data).get("error", {})
    except ValueError:
        err = {}
    return resp.status, err.get("code"), err.get("param"), dt


def deep(depth):
    return "[" * depth + "]" * depth


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--api-key", default="")
    a = ap.parse_args()
    user = '{"role": "user", "content": "hi"}'
    probes = []
    for d in (65, 8000, 50000):
        probes.append((f"tools[].function.parameters depth {d}",
                       '{"messages": [%s], "max_tokens": 1, "tools": [{"type": "function", '
                       '"function": {"name": "f", "parameters": %s}}]}' % (user, deep(d))))
        probes.append((f"messages[].tool_calls depth {d}",
                       '{"messages": [%s, {"role": "assistant", "tool_calls": [{"type": '
                       '"function", "function": {"name": "f", "arguments": %s}}]}], '
                       '"max_tokens": 1}' % (user, deep(d))))
        probes.append((f"tool_calls arguments string depth {d}",
                       '{"messages": [%s, {"role": "assistant", "tool_calls": [{"type": '
                       '"function", "function": {"name": "f", "arguments": %s}}]}], '
                       '"max_tokens": 1}' % (user, json.dumps(deep(d)))))
    # A nested tool schema, the shape that made the schema renderer quadratic.
    schema = '{"type": "array", "items": ' * 8000 + '{"type": "object"}' + "}" * 8000
    probes.append(("nested tool schema depth 8000",
                   '{"messages": [%s], "max_tokens": 1, "tools": [{"type": "function", '
                   '"function": {"name": "f", "parameters": {"type": "object", "properties": '
                   '{"a": %s}}}}]}' % (user, schema)))
    probes.append(("duplicate top-level key",
                   '{"messages": [%s], "max_tokens": 1, "max_tokens": 2}' % user))
    probes.append(("duplicate nested key",
                   '{"messages": [{"role": "user", "content": "x", "role": "system"}]}'))
    failed = 0
    for name, body in probes:
        status, code, param, dt = post(a.port, "/v1/chat/completions", body, a.api_key)
        ok = status == 400
        failed += not ok
        print(f"{name:42s} {len(body):7d} B  -> {status} {code} param={param!r} {dt*1000:.1f} ms")
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
    conn.request("GET", "/health/live")
    live = conn.getresponse().status
    print(f"/health/live after the probes -> {live}")
    failed += live != 200
    print("all refused with 400, coordinator alive" if failed == 0 else f"{failed} probe(s) not refused")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
