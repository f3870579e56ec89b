"""Metric definitions against hand-computed values (python3 -m unittest, run by ctest)."""

import random
import unittest

from metrics import (RequestOutput, calculate_metrics, peak_concurrency, percentile, std,
                     summarize, tpot)
from streaming_request import StreamTimer


def completion_chunk(text, finish=None):
    return {"object": "text_completion",
            "choices": [{"index": 0, "text": text, "finish_reason": finish}], "usage": None}


def usage_chunk(prompt, completion):
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                     "total_tokens": prompt + completion}}


def timed(start, prompt_len, times, texts, completion_tokens):
    """A RequestOutput from output chunks arriving at `times`, then a finish-only chunk and a
    usage chunk (the shape mxserve streams)."""
    t = StreamTimer(start, chat=False, prompt_len=0)
    for when, text in zip(times, texts):
        t.on_event(when, completion_chunk(text))
    t.on_event(times[-1] + 0.05, completion_chunk("", "length"))
    t.on_event(times[-1] + 0.06, usage_chunk(prompt_len, completion_tokens))
    return t.finish()


class PercentileTest(unittest.TestCase):
    def test_linear_interpolation_between_ranks(self):
        v = [4.0, 1.0, 3.0, 2.0]  # order must not matter
        self.assertAlmostEqual(percentile(v, 0), 1.0)
        self.assertAlmostEqual(percentile(v, 50), 2.5)
        self.assertAlmostEqual(percentile(v, 90), 3.7)   # rank 2.7: 3 + 0.7 * (4 - 3)
        self.assertAlmostEqual(percentile(v, 99), 3.97)  # rank 2.97
        self.assertAlmostEqual(percentile(v, 100), 4.0)
        self.assertAlmostEqual(percentile([7.0], 99), 7.0)
        self.assertEqual(percentile([], 99), 0.0)
        with self.assertRaises(ValueError):
            percentile(v, 101)

    def test_against_sorting_by_hand_on_random_samples(self):
        rng = random.Random(5)
        for _ in range(200):
            v = [rng.uniform(-5, 5) for _ in range(rng.randint(1, 40))]
            s = sorted(v)
            k = rng.randint(0, len(v) - 1)  # p that lands exactly on rank k
            p = 100.0 * k / (len(v) - 1) if len(v) > 1 else 50.0
            self.assertAlmostEqual(percentile(v, p), s[k], places=9)
            self.assertLessEqual(s[0], percentile(v, rng.uniform(0, 100)))

    def test_population_std_and_summary_in_ms(self):
        self.assertAlmostEqual(std([1.0, 2.0, 3.0, 4.0]), 1.25 ** 0.5)
        s = summarize([0.001, 0.003], [90, 99.9])
        self.assertAlmostEqual(s["mean"], 2.0)
        self.assertAlmostEqual(s["median"], 2.0)
        self.assertAlmostEqual(s["std"], 1.0)
        self.assertAlmostEqual(s["p90"], 2.8)
        self.assertAlmostEqual(s["p99.9"], 2.998)


class TimingTest(unittest.TestCase):
    def test_ttft_itl_tpot_of_one_request(self):
        o = timed(10.0, 16, [10.5, 10.7, 10.8, 11.1], ["a", "b", "c", "d"], 4)
        self.assertTrue(o.success)
        self.assertAlmostEqual(o.ttft, 0.5)
        self.assertAlmostEqual(o.latency, 1.1)  # the last output chunk, not the finish chunk
        self.assertEqual(len(o.itl), 3)          # the finish-only chunk adds no gap
        for got, want in zip(o.itl, [0.2, 0.1, 0.3]):
            self.assertAlmostEqual(got, want)
        self.assertEqual(o.output_tokens, 4)
        self.assertEqual(o.prompt_len, 16)
        self.assertEqual(o.generated_text, "abcd")
        self.assertAlmostEqual(tpot(o), 0.6 / 3)

    def test_chat_role_chunk_is_not_the_first_token(self):
        t = StreamTimer(0.0, chat=True, prompt_len=5)
        t.on_event(1.0, {"choices": [{"delta": {"role": "assistant", "content": ""}}]})
        t.on_event(2.0, {"choices": [{"delta": {"reasoning_content": "hm"}}]})
        t.on_event(3.0, {"choices": [{"delta": {"content": "hi"}}]})
        t.on_event(4.0, {"choices": [{"delta": {}, "finish_reason": "stop"}]})
        o = t.finish()
        self.assertEqual((o.ttft, o.latency, o.itl), (2.0, 3.0, [1.0]))
        self.assertEqual(o.generated_text, "hmhi")
        self.assertEqual(o.prompt_len, 5)  # no usage: the dataset's count stays

    def test_chunks_without_output_time_a_stream_that_has_nothing_else(self):
        t = StreamTimer(0.0, chat=False, prompt_len=3)
        t.on_event(1.0, completion_chunk(""))
        t.on_event(2.0, completion_chunk("", "stop"))
        o = t.finish()
        self.assertTrue(o.success)
        self.assertEqual((o.ttft, o.latency, o.itl), (1.0, 2.0, [1.0]))

    def test_failures(self):
        t = StreamTimer(0.0, chat=False, prompt_len=3)
        t.on_event(1.0, usage_chunk(3, 0))
        self.assertFalse(t.finish().success)
        t = StreamTimer(0.0, chat=False, prompt_len=3)
        t.on_event(1.0, completion_chunk("a"))
        t.on_event(2.0, {"error": {"message": "worker lost"}})
        o = t.finish()
        self.assertFalse(o.success)
        self.assertIn("worker lost", o.error)


class CalculateMetricsTest(unittest.TestCase):
    def test_hand_computed_run(self):
        a = timed(10.0, 16, [10.5, 10.7, 10.8, 11.1], list("abcd"), 4)
        b = timed(10.2, 8, [10.6], ["x"], 1)  # one token: no TPOT, no ITL
        c = RequestOutput(success=False, error="HTTP 500", prompt_len=16)
        r = calculate_metrics([a, b, c], 2.0, [90, 99])
        self.assertEqual((r["completed"], r["failed"]), (2, 1))
        self.assertEqual(r["total_input_tokens"], 24)  # failed requests count no input
        self.assertEqual(r["total_output_tokens"], 5)
        self.assertEqual(r["output_lens"], [4, 1, 0])
        self.assertAlmostEqual(r["request_throughput"], 1.0)
        self.assertAlmostEqual(r["output_throughput"], 2.5)
        self.assertAlmostEqual(r["total_token_throughput"], 14.5)
        want = {
            "ttft": (450, 450, 50, 490, 499),        # [0.5, 0.4] s
            "tpot": (200, 200, 0, 200, 200),         # only a: 0.6 / 3
            "itl": (200, 200, (0.02 / 3) ** 0.5 * 1000, 280, 298),  # [0.2, 0.1, 0.3]
            "e2el": (750, 750, 350, 1030, 1093),     # [1.1, 0.4]
        }
        for m, (mean_, med, sd, p90, p99) in want.items():
            self.assertAlmostEqual(r[f"mean_{m}_ms"], mean_, places=6, msg=m)
            self.assertAlmostEqual(r[f"median_{m}_ms"], med, places=6, msg=m)
            self.assertAlmostEqual(r[f"std_{m}_ms"], sd, places=6, msg=m)
            self.assertAlmostEqual(r[f"p90_{m}_ms"], p90, places=6, msg=m)
            self.assertAlmostEqual(r[f"p99_{m}_ms"], p99, places=6, msg=m)
        self.assertEqual(r["max_concurrent_requests"], 2)  # b runs inside a
        self.assertEqual(r["max_output_tokens_per_s"], 4.0)  # 10.5, 10.6, 10.7, 10.8

    def test_peak_concurrency_counts_back_to_back_requests_once(self):
        outs = [RequestOutput(success=True, start_time=s, latency=1.0) for s in (0.0, 1.0, 2.0)]
        self.assertEqual(peak_concurrency(outs), 1)

    def test_bad_input(self):
        with self.assertRaises(ValueError):
            calculate_metrics([], 0.0, [99])
        with self.assertRaises(ValueError):
            calculate_metrics([], 1.0, [99], ["ttft", "latency"])


if __name__ == "__main__":
    unittest.main()
