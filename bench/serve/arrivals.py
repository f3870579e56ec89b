"""When each request of a run is sent, as vLLM's get_request schedules them."""

import math


def arrival_offsets(n, request_rate, burstiness, rng):
    """Seconds after the start at which each of n requests is sent. An infinite rate sends all
    at once. Otherwise the gaps are Gamma(shape=burstiness, scale=1/(rate*burstiness)) draws
    (burstiness 1: exponential, a Poisson process; below 1 burstier, above 1 more even), and the
    offsets are scaled so that the last one falls at n / rate, as vLLM does to make throughput
    steadier across seeds."""
    if n <= 0:
        return []
    if not request_rate > 0:
        raise ValueError(f"--request-rate must be positive or inf, got {request_rate}")
    if not burstiness > 0:
        raise ValueError(f"--burstiness must be positive, got {burstiness}")
    if math.isinf(request_rate):
        return [0.0] * n
    theta = 1.0 / (request_rate * burstiness)
    offsets, t = [], 0.0
    for _ in range(n):
        t += rng.gammavariate(burstiness, theta)
        offsets.append(t)
    scale = (n / request_rate) / offsets[-1]
    return [o * scale for o in offsets]
