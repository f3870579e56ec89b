"""Prompt sampling (exact lengths, seeds, the ShareGPT filter) on a fake tokenizer, and the
arrival schedule."""

import asyncio
import json
import math
import os
import random
import tempfile
import unittest

from arrivals import arrival_offsets
from sample_requests import (load_sharegpt, random_lengths, sample_random, sample_sharegpt,
                             text_of_length)


class MergingTokenizer:
    """One token per character, except that "th" is one token: decoding ids and encoding the
    text again does not always give the same count, as with real BPE tokenizers."""

    ALPHABET = "abcdefghijklmnopqrstuvwxyz ,.;:!?\n0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    TH = len(ALPHABET)

    def __init__(self):
        self.calls = 0

    async def encode(self, text):
        self.calls += 1
        ids, i = [], 0
        while i < len(text):
            if text.startswith("th", i):
                ids.append(self.TH)
                i += 2
            else:
                ids.append(self.ALPHABET.index(text[i]))
                i += 1
        return ids

    async def decode(self, ids):
        return "".join("th" if i == self.TH else self.ALPHABET[i] for i in ids)


class WordTokenizer:
    async def encode(self, text):
        return [hash(w) % 1000 for w in text.split()]


def run(coro):
    return asyncio.run(coro)


class RandomDatasetTest(unittest.TestCase):
    def test_token_ids_have_exact_lengths_and_follow_the_seed(self):
        tok = MergingTokenizer()
        reqs = run(sample_random(tok, 20, 30, 5, 0.5, 3, seed=7, as_text=False))
        self.assertEqual(len(reqs), 20)
        prefix = reqs[0].prompt[:3]
        for r in reqs:
            self.assertEqual(len(r.prompt), r.prompt_len)
            self.assertTrue(3 + 15 <= r.prompt_len <= 3 + 45)
            self.assertTrue(2 <= r.expected_output_len <= 7)
            self.assertEqual(r.prompt[:3], prefix)  # the shared prefix
        again = run(sample_random(MergingTokenizer(), 20, 30, 5, 0.5, 3, seed=7, as_text=False))
        self.assertEqual([r.prompt for r in reqs], [r.prompt for r in again])
        other = run(sample_random(MergingTokenizer(), 20, 30, 5, 0.5, 3, seed=8, as_text=False))
        self.assertNotEqual([r.prompt for r in reqs], [r.prompt for r in other])
        fixed = run(sample_random(MergingTokenizer(), 5, 16, 8, 0.0, 0, seed=1, as_text=False))
        self.assertEqual([(r.prompt_len, r.expected_output_len) for r in fixed], [(16, 8)] * 5)

    def test_text_prompts_tokenize_to_the_requested_length(self):
        tok = MergingTokenizer()
        reqs = run(sample_random(tok, 30, 40, 8, 0.0, 0, seed=3, as_text=True))
        for r in reqs:
            self.assertIsInstance(r.prompt, str)
            self.assertEqual(r.prompt_len, 40)
            self.assertEqual(len(run(tok.encode(r.prompt))), 40)
        again = run(sample_random(MergingTokenizer(), 30, 40, 8, 0.0, 0, seed=3, as_text=True))
        self.assertEqual([r.prompt for r in reqs], [r.prompt for r in again])

    def test_text_of_length_trims_merged_seams(self):
        tok = MergingTokenizer()
        t, h = tok.ALPHABET.index("t"), tok.ALPHABET.index("h")
        text, n = run(text_of_length(tok, [t, h, t, h, 0], 5, random.Random(0), [0, 1, 2]))
        self.assertEqual(n, 5)
        self.assertEqual(len(run(tok.encode(text))), 5)

    def test_lengths(self):
        rng = random.Random(0)
        self.assertEqual(random_lengths(rng, 4, 10, 0.0, 1), [10] * 4)
        got = random_lengths(rng, 500, 10, 0.5, 1)
        self.assertEqual((min(got), max(got)), (5, 15))
        self.assertEqual(random_lengths(rng, 3, 1, 0.9, 1), [1] * 3)


class ShareGptTest(unittest.TestCase):
    def write(self, data):
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(data, f)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def conv(self, prompt_words, reply_words):
        return {"conversations": [{"from": "human", "value": " ".join(["w"] * prompt_words)},
                                  {"from": "gpt", "value": " ".join(["r"] * reply_words)}]}

    def test_filter_lengths_and_fixed_output(self):
        path = self.write([self.conv(5, 6), self.conv(3, 9), self.conv(8, 2),
                           self.conv(2000, 5), {"conversations": [{"value": "x"}]},
                           self.conv(10, 4), "junk"])
        reqs = run(sample_sharegpt(WordTokenizer(), path, 2, None, seed=0))
        self.assertEqual(sorted((r.prompt_len, r.expected_output_len) for r in reqs),
                         [(5, 6), (10, 4)])
        reqs = run(sample_sharegpt(WordTokenizer(), path, 3, 100, seed=0))
        self.assertEqual(sorted((r.prompt_len, r.expected_output_len) for r in reqs),
                         [(5, 100), (8, 100), (10, 100)])  # reply length unchecked when fixed

    def test_too_few_are_reused(self):
        path = self.write([self.conv(5, 6), self.conv(7, 8)])
        reqs = run(sample_sharegpt(WordTokenizer(), path, 6, None, seed=0))
        self.assertEqual(len(reqs), 6)
        self.assertEqual({r.prompt_len for r in reqs}, {5, 7})

    def test_bad_files(self):
        with self.assertRaises(RuntimeError):
            load_sharegpt(self.write({"conversations": []}))
        with self.assertRaises(RuntimeError):
            load_sharegpt(self.write([self.conv(1, 1)["conversations"][:1]]))
        with self.assertRaises(RuntimeError):
            load_sharegpt("/nonexistent/sharegpt.json")
        with self.assertRaises(RuntimeError):
            run(sample_sharegpt(WordTokenizer(), self.write([self.conv(2, 2)]), 1, None, 0))


class ArrivalsTest(unittest.TestCase):
    def test_infinite_rate_sends_at_once(self):
        self.assertEqual(arrival_offsets(3, math.inf, 1.0, random.Random(0)), [0.0] * 3)

    def test_scaled_to_n_over_rate_and_seeded(self):
        a = arrival_offsets(50, 5.0, 1.0, random.Random(1))
        self.assertAlmostEqual(a[-1], 10.0)
        self.assertTrue(all(x < y for x, y in zip(a, a[1:])))
        self.assertEqual(a, arrival_offsets(50, 5.0, 1.0, random.Random(1)))

    def test_burstiness_sets_the_spread_of_gaps(self):
        # Gamma(k) gaps have coefficient of variation 1/sqrt(k): 1 for Poisson arrivals.
        for k in (1.0, 4.0):
            a = arrival_offsets(20000, 2.0, k, random.Random(2))
            gaps = [y - x for x, y in zip([0.0] + a, a)]
            m = sum(gaps) / len(gaps)
            cv = math.sqrt(sum((g - m) ** 2 for g in gaps) / len(gaps)) / m
            self.assertAlmostEqual(cv, 1 / math.sqrt(k), delta=0.03)

    def test_bad_rates(self):
        for rate, b in ((0.0, 1.0), (-1.0, 1.0), (1.0, 0.0), (math.nan, 1.0)):
            with self.assertRaises(ValueError):
                arrival_offsets(2, rate, b, random.Random(0))


if __name__ == "__main__":
    unittest.main()
