#!/usr/bin/env python3
"""Serving benchmark for any OpenAI-compatible server (mxserve, vLLM, ...): the metrics, flags
and result JSON of `vllm bench serve`, on Python's standard library alone. README.md says how
to run it and what each metric means."""

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from arrivals import arrival_offsets  # noqa: E402
from http_client import HttpClient  # noqa: E402
from metrics import calculate_metrics, percentile_name  # noqa: E402
from sample_requests import ServerTokenizer, sample_random, sample_sharegpt  # noqa: E402
from streaming_request import build_payload, send  # noqa: E402

METRIC_TITLES = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__)
    a = p.add_argument
    a("--base-url", help="server root, e.g. http://127.0.0.1:8000 (default: http://HOST:PORT)")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=8000)
    a("--endpoint", default="/v1/completions",
      choices=["/v1/completions", "/v1/chat/completions"])
    a("--model", help="model id to request (default: the first of GET /v1/models)")
    a("--api-key", default=os.environ.get("OPENAI_API_KEY", ""),
      help="sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)")
    a("--header", action="append", default=[], metavar="KEY=VALUE",
      help="an extra HTTP header on every request (repeatable)")
    a("--dataset-name", default="random", choices=["random", "sharegpt"])
    a("--dataset-path", help="ShareGPT-format JSON file (--dataset-name sharegpt)")
    a("--num-prompts", type=int, default=1000)
    a("--random-input-len", type=int, default=1024)
    a("--random-output-len", type=int, default=128)
    a("--random-range-ratio", type=float, default=0.0,
      help="lengths drawn from [len*(1-r), len*(1+r)]; 0 = exactly len")
    a("--random-prefix-len", type=int, default=0,
      help="random tokens shared by every prompt, before its own input")
    a("--sharegpt-output-len", type=int,
      help="fixed output length instead of each reply's token count")
    a("--request-rate", type=float, default=math.inf,
      help="requests per second (Poisson arrivals with --burstiness 1); inf = all at once")
    a("--burstiness", type=float, default=1.0,
      help="shape of the Gamma-distributed gaps: 1 Poisson, <1 burstier, >1 more even")
    a("--max-concurrency", type=int, help="most requests in flight at once (default: no limit)")
    a("--num-warmups", type=int, default=0,
      help="requests (the first prompt) sent and discarded before the measured run")
    a("--seed", type=int, default=0)
    a("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
      help="ask the server to ignore EOS so that each request makes its full output length "
           "(vLLM's flag; default on here, off in vLLM)")
    a("--temperature", type=float, help="sampling temperature (default: the server's)")
    a("--extra-body", type=json.loads, help="JSON object merged into every request body")
    a("--percentile-metrics", default="ttft,tpot,itl,e2el",
      help="comma-separated, of ttft, tpot, itl, e2el")
    a("--metric-percentiles", default="50,90,99", help="comma-separated percentiles")
    a("--result-file", help="write the result JSON here")
    a("--label", help="a name stored in the result JSON")
    a("--request-timeout", type=float, default=6 * 3600, help="seconds per request")
    a("--ready-check-timeout-sec", type=float, default=600,
      help="retry the first request this long while the server starts; 0 = one try")
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def check_args(p, args):
    if args.num_prompts < 1:
        p.error(f"--num-prompts must be at least 1, got {args.num_prompts}")
    if args.random_input_len < 0 or args.random_prefix_len < 0:
        p.error("--random-input-len and --random-prefix-len must not be negative")
    if args.random_input_len + args.random_prefix_len < 1:
        p.error("a random prompt needs at least one token (--random-input-len)")
    if args.random_output_len < 1:
        p.error(f"--random-output-len must be at least 1, got {args.random_output_len}")
    if not 0 <= args.random_range_ratio < 1:
        p.error(f"--random-range-ratio must be in [0, 1), got {args.random_range_ratio}")
    if args.sharegpt_output_len is not None and args.sharegpt_output_len < 1:
        p.error("--sharegpt-output-len must be at least 1")
    if args.dataset_name == "sharegpt" and not args.dataset_path:
        p.error("--dataset-name sharegpt needs --dataset-path")
    if not args.request_rate > 0:
        p.error(f"--request-rate must be positive or inf, got {args.request_rate}")
    if not args.burstiness > 0:
        p.error(f"--burstiness must be positive, got {args.burstiness}")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        p.error(f"--max-concurrency must be at least 1, got {args.max_concurrency}")
    if args.num_warmups < 0:
        p.error("--num-warmups must not be negative")
    if args.extra_body is not None and not isinstance(args.extra_body, dict):
        p.error("--extra-body must be a JSON object")
    for h in args.header:
        if "=" not in h:
            p.error(f"--header takes KEY=VALUE, got {h!r}")
    try:
        args.percentiles = [float(x) for x in args.metric_percentiles.split(",") if x.strip()]
    except ValueError:
        p.error(f"--metric-percentiles: not a list of numbers: {args.metric_percentiles!r}")
    if any(not 0 <= x <= 100 for x in args.percentiles):
        p.error("--metric-percentiles must lie in [0, 100]")
    args.metrics = [m.strip() for m in args.percentile_metrics.split(",") if m.strip()]
    for m in args.metrics:
        if m not in METRIC_TITLES:
            p.error(f"--percentile-metrics: unknown metric {m!r} (known: ttft, tpot, itl, e2el)")
    if args.base_url is None:
        args.base_url = f"http://{args.host}:{args.port}"


async def first_model(client):
    status, body = await client.json_call("GET", "/v1/models")
    try:
        return body["data"][0]["id"]
    except (TypeError, KeyError, IndexError):
        raise RuntimeError(f"GET /v1/models answered {status}: {str(body)[:300]} "
                           "(pass --model)") from None


def make_payload(args, req):
    payload = build_payload(args.endpoint.endswith("/chat/completions"), args.model, req.prompt,
                            req.expected_output_len, args.ignore_eos, args.extra_body)
    if args.temperature is not None:
        payload["temperature"] = args.temperature
    return payload


async def ready_check(args, client, req):
    """vLLM's initial single-prompt run: retried while the server is not up yet (a request the
    server rejects as malformed is not retried)."""
    deadline = time.monotonic() + args.ready_check_timeout_sec
    while True:
        out = await send(client, args.endpoint, make_payload(args, req), req.prompt_len,
                         args.request_timeout)
        if out.success:
            return
        rejected = 400 <= out.http_status < 500 and out.http_status not in (408, 429)
        if rejected or time.monotonic() >= deadline:
            raise RuntimeError(f"the initial test request failed: {out.error}")
        await asyncio.sleep(1)


async def run_requests(args, client, reqs, offsets):
    """Sends reqs at their offsets (seconds after the start), at most --max-concurrency at
    once; returns their outputs in order and the run's duration."""
    sem = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None
    done = 0
    tty = sys.stderr.isatty()

    async def one(req):
        nonlocal done
        payload = make_payload(args, req)
        if sem:
            async with sem:
                out = await send(client, args.endpoint, payload, req.prompt_len,
                                 args.request_timeout)
        else:
            out = await send(client, args.endpoint, payload, req.prompt_len, args.request_timeout)
        done += 1
        if tty:
            print(f"\r{done}/{len(reqs)} requests", end="", file=sys.stderr, flush=True)
        return out

    start = time.perf_counter()
    tasks = []
    for req, at in zip(reqs, offsets):
        wait = start + at - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one(req)))
    outputs = await asyncio.gather(*tasks)
    duration = time.perf_counter() - start
    if tty:
        print(file=sys.stderr)
    return outputs, duration


async def count_missing_output_tokens(tokenizer, outputs):
    """Output tokens of successful requests whose server sent no usage: the generated text
    tokenized by the server (or, failing that, the number of output chunks)."""
    for o in outputs:
        if o.success and o.output_tokens == 0:
            try:
                o.output_tokens = len(await tokenizer.encode(o.generated_text))
            except RuntimeError:
                o.output_tokens = len(o.itl) + 1


def print_table(args, result):
    row = "{:<40} {:<10}".format
    num = "{:<40} {:<10.2f}".format
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print(row("Successful requests:", result["completed"]))
    print(row("Failed requests:", result["failed"]))
    if args.max_concurrency is not None:
        print(row("Maximum request concurrency:", args.max_concurrency))
    if not math.isinf(args.request_rate):
        print(num("Request rate configured (RPS):", args.request_rate))
    print(num("Benchmark duration (s):", result["duration"]))
    print(row("Total input tokens:", result["total_input_tokens"]))
    print(row("Total generated tokens:", result["total_output_tokens"]))
    print(num("Request throughput (req/s):", result["request_throughput"]))
    print(num("Output token throughput (tok/s):", result["output_throughput"]))
    print(num("Peak output token throughput (tok/s):", result["max_output_tokens_per_s"]))
    print(row("Peak concurrent requests:", result["max_concurrent_requests"]))
    print(num("Total token throughput (tok/s):", result["total_token_throughput"]))
    for m in args.metrics:
        short, title = METRIC_TITLES[m]
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        print(num(f"Mean {short} (ms):", result[f"mean_{m}_ms"]))
        print(num(f"Median {short} (ms):", result[f"median_{m}_ms"]))
        for p in args.percentiles:
            if p != 50:  # the median line above is P50
                name = percentile_name(p)
                print(num(f"P{name} {short} (ms):", result[f"p{name}_{m}_ms"]))
    print("=" * 50)


async def benchmark(args):
    headers = {}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    for h in args.header:
        k, _, v = h.partition("=")
        headers[k.strip()] = v.strip()
    client = HttpClient(args.base_url, headers)
    try:
        if not args.model:
            args.model = await first_model(client)
        tokenizer = ServerTokenizer(client, args.model)
        chat = args.endpoint.endswith("/chat/completions")
        if args.dataset_name == "random":
            reqs = await sample_random(tokenizer, args.num_prompts, args.random_input_len,
                                       args.random_output_len, args.random_range_ratio,
                                       args.random_prefix_len, args.seed, as_text=chat)
        else:
            reqs = await sample_sharegpt(tokenizer, args.dataset_path, args.num_prompts,
                                         args.sharegpt_output_len, args.seed)
        print(f"{len(reqs)} prompts from the {args.dataset_name} dataset; "
              f"model {args.model} at {args.base_url}{args.endpoint}")
        print("Starting initial single prompt test run...")
        await ready_check(args, client, reqs[0])
        print("Initial test run completed.")
        if args.num_warmups:
            print(f"Warming up with {args.num_warmups} requests...")
            await run_requests(args, client, [reqs[0]] * args.num_warmups,
                               [0.0] * args.num_warmups)
            print("Warmup run completed.")
        offsets = arrival_offsets(len(reqs), args.request_rate, args.burstiness,
                                  random.Random(args.seed))
        print(f"Traffic request rate: {args.request_rate}")
        print(f"Burstiness factor: {args.burstiness} "
              f"({'Poisson process' if args.burstiness == 1 else 'Gamma distribution'})")
        print(f"Maximum request concurrency: {args.max_concurrency}")
        outputs, duration = await run_requests(args, client, reqs, offsets)
        await count_missing_output_tokens(tokenizer, outputs)
    finally:
        client.close()
    failed = [o for o in outputs if not o.success]
    if failed:
        print(f"{len(failed)} requests failed; the first errors:")
        for o in failed[:10]:
            print(f"  {o.error}")
    return calculate_metrics(outputs, duration, args.percentiles, args.metrics), outputs


def result_json(args, result, outputs):
    info = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "label": args.label,
        "base_url": args.base_url,
        "endpoint": args.endpoint,
        "model_id": args.model,
        "dataset_name": args.dataset_name,
        "dataset_path": args.dataset_path,
        "num_prompts": args.num_prompts,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "random_prefix_len": args.random_prefix_len,
        "request_rate": "inf" if math.isinf(args.request_rate) else args.request_rate,
        "burstiness": args.burstiness,
        "max_concurrency": args.max_concurrency,
        "num_warmups": args.num_warmups,
        "seed": args.seed,
        "ignore_eos": args.ignore_eos,
    }
    per_request = {
        "input_lens": [o.prompt_len for o in outputs],
        "ttfts": [o.ttft for o in outputs],
        "itls": [o.itl for o in outputs],
        "latencies": [o.latency for o in outputs],
        "start_times": [o.start_time for o in outputs],
        "generated_texts": [o.generated_text for o in outputs],
        "errors": [o.error for o in outputs],
    }
    return {**info, **result, **per_request}


def main(argv=None):
    args = parse_args(argv)
    try:
        result, outputs = asyncio.run(benchmark(args))
    except (RuntimeError, OSError, ValueError) as e:
        print(f"bench_serve: {args.base_url}: {e}", file=sys.stderr)
        return 1
    if args.result_file:  # before the table, which a closed pipe may cut short
        with open(args.result_file, "w", encoding="utf-8") as f:
            json.dump(result_json(args, result, outputs), f, indent=1)
    print_table(args, result)
    if args.result_file:
        print(f"wrote {args.result_file}")
    return 0 if result["completed"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
