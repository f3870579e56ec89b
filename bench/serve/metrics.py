"""The serving metrics of `vllm bench serve`, computed from per-request timings.

Definitions (as vLLM's calculate_metrics): TTFT is the time from sending a request to its first
output chunk; E2E latency the time to its last output chunk; TPOT = (E2E - TTFT) /
(output tokens - 1), only for requests with more than one output token; ITL the gaps between
successive output chunks, pooled over all requests. Percentiles interpolate linearly between
closest ranks (numpy.percentile's default); an empty sample reads as 0, as in vLLM.
"""

import math
from dataclasses import dataclass, field


@dataclass
class RequestOutput:
    """What one streamed request measured. Times are seconds on the perf_counter clock."""

    success: bool = False
    error: str = ""
    http_status: int = 0        # of the response; 0 when none came
    start_time: float = 0.0     # when the request was sent
    ttft: float = 0.0           # first output chunk - start_time
    latency: float = 0.0        # last output chunk - start_time (E2E)
    itl: list = field(default_factory=list)  # gaps between successive output chunks
    prompt_len: int = 0         # the server's usage.prompt_tokens, else the dataset's count
    output_tokens: int = 0      # usage.completion_tokens, else counted after the run
    generated_text: str = ""


def percentile(values, p):
    """The p-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        return 0.0
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside [0, 100]")
    s = sorted(values)
    rank = (len(s) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def mean(values):
    return sum(values) / len(values) if values else 0.0


def std(values):
    """Population standard deviation (numpy.std's default)."""
    if not values:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def tpot(output: RequestOutput):
    """Time per output token after the first; None for fewer than two output tokens."""
    if output.output_tokens <= 1:
        return None
    return (output.latency - output.ttft) / (output.output_tokens - 1)


def summarize(values, percentiles):
    """mean, median, std and p<P> of `values` (seconds), in milliseconds."""
    out = {"mean": mean(values) * 1000, "median": percentile(values, 50) * 1000,
           "std": std(values) * 1000}
    for p in percentiles:
        out[f"p{percentile_name(p)}"] = percentile(values, p) * 1000
    return out


def percentile_name(p):
    """'99' for 99.0, '99.9' for 99.9 (the JSON key and table label vLLM uses)."""
    return str(int(p)) if int(p) == p else str(p)


def peak_output_tokens_per_s(outputs):
    """Most output chunks that arrived within one whole second of the run, as vLLM counts them
    (one per chunk: a server that sends one token per chunk makes this tokens per second)."""
    done = [o for o in outputs if o.success]
    if not done:
        return 0.0
    t0 = min(o.start_time for o in done)
    buckets = {}
    for o in done:
        t = o.start_time + o.ttft
        times = [t]
        for gap in o.itl:
            t += gap
            times.append(t)
        for t in times:
            b = int(t - t0)
            buckets[b] = buckets.get(b, 0) + 1
    return float(max(buckets.values()))


def peak_concurrency(outputs):
    """Most requests in flight at once (half-open [start, start + E2E) intervals)."""
    events = []
    for o in outputs:
        if o.success:
            events.append((o.start_time, 1))
            events.append((o.start_time + o.latency, -1))
    events.sort()  # at equal times -1 sorts first: an ending request frees its slot
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def calculate_metrics(outputs, duration, percentiles, metric_names=("ttft", "tpot", "itl", "e2el")):
    """The result dict: counts, throughputs and <stat>_<metric>_ms for every metric in
    `metric_names`. `outputs` are in request order; failed requests count 0 output tokens."""
    if duration <= 0:
        raise ValueError(f"benchmark duration must be positive, got {duration}")
    done = [o for o in outputs if o.success]
    total_input = sum(o.prompt_len for o in done)
    output_lens = [o.output_tokens if o.success else 0 for o in outputs]
    total_output = sum(output_lens)
    samples = {
        "ttft": [o.ttft for o in done],
        "tpot": [t for t in (tpot(o) for o in done) if t is not None],
        "itl": [gap for o in done for gap in o.itl],
        "e2el": [o.latency for o in done],
    }
    result = {
        "duration": duration,
        "completed": len(done),
        "failed": len(outputs) - len(done),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(done) / duration,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "max_output_tokens_per_s": peak_output_tokens_per_s(outputs),
        "max_concurrent_requests": peak_concurrency(outputs),
    }
    for name in metric_names:
        if name not in samples:
            raise ValueError(f"unknown metric {name!r} (known: {', '.join(samples)})")
        for stat, value in summarize(samples[name], percentiles).items():
            result[f"{stat}_{name}_ms"] = value
    result["output_lens"] = output_lens
    return result
