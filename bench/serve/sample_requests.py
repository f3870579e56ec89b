"""The prompts of a run: random prompts of exact token lengths, or the first turns of a
ShareGPT-format file. Tokens are counted by the server under test (POST /tokenize and
/detokenize, which vLLM and mxserve both answer), so no tokenizer is needed here."""

import asyncio
import json
import random
import string
from dataclasses import dataclass


@dataclass
class SampleRequest:
    prompt: object          # text, or token ids (the completions endpoint takes both)
    prompt_len: int         # tokens in `prompt`
    expected_output_len: int


class ServerTokenizer:
    """The server's tokenizer over HTTP."""

    def __init__(self, client, model):
        self._client, self._model = client, model

    async def encode(self, text):
        payload = {"model": self._model, "prompt": text, "add_special_tokens": False}
        status, body = await self._client.json_call("POST", "/tokenize", payload)
        if status != 200 or not isinstance(body, dict) or "tokens" not in body:
            raise RuntimeError(f"POST /tokenize answered {status}: {str(body)[:300]} (the random "
                               "and sharegpt datasets count tokens with the server's /tokenize)")
        return body["tokens"]

    async def decode(self, ids):
        status, body = await self._client.json_call(
            "POST", "/detokenize", {"model": self._model, "tokens": list(ids)})
        if status != 200 or not isinstance(body, dict) or "prompt" not in body:
            raise RuntimeError(f"POST /detokenize answered {status}: {str(body)[:300]}")
        return body["prompt"]


def random_lengths(rng, n, length, range_ratio, minimum):
    """n lengths drawn uniformly from [length * (1 - r), length * (1 + r)] (vLLM's rule),
    none below `minimum`."""
    lo = max(minimum, int(length * (1 - range_ratio)))
    hi = max(lo, int(length * (1 + range_ratio)))
    return [rng.randint(lo, hi) for _ in range(n)]


async def token_pool(tokenizer, rng, words=4000):
    """Ordinary token ids of the server's vocabulary: those of a seeded text of random
    lower- and upper-case words, digits and punctuation (no special tokens can arise)."""
    letters = string.ascii_lowercase
    parts = []
    for _ in range(words):
        w = "".join(rng.choice(letters) for _ in range(rng.randint(1, 9)))
        kind = rng.random()
        if kind < 0.1:
            w = w.capitalize()
        elif kind < 0.15:
            w = str(rng.randint(0, 99999))
        parts.append(w + rng.choice(" " * 12 + ",.;:!?\n"))
    ids = sorted(set(await tokenizer.encode("".join(parts))))
    if not ids:
        raise RuntimeError("POST /tokenize gave no tokens for a text of random words")
    return ids


async def text_of_length(tokenizer, ids, n, rng, pool, tries=8):
    """Text the server tokenizes to exactly n tokens, starting from the decoded `ids` (decoding
    and encoding again may merge or split tokens at the seams). Returns (text, its length); the
    length can differ from n only when `tries` rounds of trimming and padding did not settle."""
    text = await tokenizer.decode(ids)
    for _ in range(tries):
        got = await tokenizer.encode(text)
        if len(got) == n:
            return text, n
        if len(got) > n:
            text = await tokenizer.decode(got[:n])
        else:
            text += await tokenizer.decode([rng.choice(pool) for _ in range(n - len(got))])
    return text, len(await tokenizer.encode(text))


async def gather_bounded(coros, limit=16):
    sem = asyncio.Semaphore(limit)

    async def one(c):
        async with sem:
            return await c
    return await asyncio.gather(*(one(c) for c in coros))


async def sample_random(tokenizer, num, input_len, output_len, range_ratio, prefix_len, seed,
                        as_text):
    """num prompts of prefix_len shared tokens + a random input length, each token drawn
    uniformly from token_pool. Token ids for the completions endpoint (exact lengths); text of
    the same length for chat (as_text)."""
    rng = random.Random(seed)
    pool = await token_pool(tokenizer, rng)
    in_lens = random_lengths(rng, num, input_len, range_ratio, 1 if prefix_len == 0 else 0)
    out_lens = random_lengths(rng, num, output_len, range_ratio, 1)
    prefix = [rng.choice(pool) for _ in range(prefix_len)]
    ids = [prefix + [rng.choice(pool) for _ in range(n)] for n in in_lens]
    if not as_text:
        return [SampleRequest(p, len(p), o) for p, o in zip(ids, out_lens)]
    # One generator per prompt, seeded in order, keeps the padding reproducible under gather.
    rngs = [random.Random(rng.getrandbits(64)) for _ in ids]
    texts = await gather_bounded(text_of_length(tokenizer, p, len(p), r, pool)
                                 for p, r in zip(ids, rngs))
    return [SampleRequest(t, n, o) for (t, n), o in zip(texts, out_lens)]


def load_sharegpt(path):
    """(first human turn, first reply) of every conversation with at least two turns."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise RuntimeError(f"--dataset-path {path}: {e}") from None
    if not isinstance(data, list):
        raise RuntimeError(f"--dataset-path {path}: a ShareGPT file is a JSON list of "
                           "{\"conversations\": [{\"from\", \"value\"}, ...]} objects")
    pairs = []
    for entry in data:
        conv = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(conv, list) or len(conv) < 2:
            continue
        turns = [t.get("value") if isinstance(t, dict) else None for t in conv[:2]]
        if all(isinstance(t, str) for t in turns):
            pairs.append((turns[0], turns[1]))
    if not pairs:
        raise RuntimeError(f"--dataset-path {path}: no conversation with two text turns")
    return pairs


def valid_sharegpt_lengths(prompt_len, output_len, fixed_output):
    """vLLM's filter: prompts and replies of at least 4 tokens (replies unchecked when the
    output length is fixed), prompts up to 1024 tokens, prompt + reply up to 2048."""
    return (prompt_len >= 4 and (fixed_output or output_len >= 4) and prompt_len <= 1024
            and prompt_len + output_len <= 2048)


async def sample_sharegpt(tokenizer, path, num, output_len, seed):
    """num requests from a ShareGPT file, shuffled with the seed; the reply's token count is
    the output length unless `output_len` fixes it. Too few valid conversations are reused
    (in a seeded random order) to make up num."""
    rng = random.Random(seed)
    pairs = load_sharegpt(path)
    rng.shuffle(pairs)
    out = []
    batch = 64
    for i in range(0, len(pairs), batch):
        chunk = pairs[i:i + batch]
        lens = await gather_bounded(_sharegpt_lengths(tokenizer, p, c, output_len)
                                    for p, c in chunk)
        for (prompt, _), (pl, ol) in zip(chunk, lens):
            if valid_sharegpt_lengths(pl, ol, output_len is not None):
                out.append(SampleRequest(prompt, pl, ol))
                if len(out) == num:
                    return out
    if not out:
        raise RuntimeError(f"--dataset-path {path}: no conversation passes the length filter "
                           "(prompt 4..1024 tokens, reply at least 4, both at most 2048)")
    print(f"sharegpt: {len(out)} conversations pass the length filter; reusing them to make "
          f"up {num} requests")
    base = list(out)
    out += [rng.choice(base) for _ in range(num - len(base))]
    return out


async def _sharegpt_lengths(tokenizer, prompt, completion, output_len):
    pl = len(await tokenizer.encode(prompt))
    ol = output_len if output_len is not None else len(await tokenizer.encode(completion))
    return pl, ol
