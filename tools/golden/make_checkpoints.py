#!/usr/bin/env python3
"""Writes the golden-fixture checkpoints (tests/data/golden/<name>/) with our own tool.

Usage: tools/golden/make_checkpoints.py BIN_DIR [OUT_ROOT]   (OUT_ROOT: tests/data/golden)

Each config is `mxserve-make-model --preset P --seed S [--num-layers L]` (seeded random
weights in the exact hub layout, tokenizer files; preset tiny: gpt-oss, BF16/F32 dense tensors,
MXFP4 expert blocks/scales with BF16 biases; deepseek-tiny / kimi-k2-tiny: DeepSeek-V3 / Kimi K2,
bf16 per-expert tensors whose values are exact in MXFP4), then config.json edits that change no
tensor shape (top-k, sliding window, layer order, RoPE), plus prompts.json (seeded prompt token
ids). The bytes are committed;
rerunning this reproduces them bit for bit as long as the generator is unchanged (the committed
sha256 in prompts.json says which bytes the HF records were made from).
Then tools/golden/hf_golden.py records HF transformers' logits and greedy generations on them.
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys

ORDINARY_TOKENS = 956  # tiny tokenizer: ids >= 956 are special tokens

CONFIGS = [
    # The tiny preset as is (the model tests/integration uses): 4 layers sliding/full, window 8,
    # 8 experts top-4, YaRN x32 over 128 with truncate=false, sinks, attention + expert biases.
    {"name": "top4_4l", "seed": 7, "layers": None, "edits": {}},
    # Top-2, 3 layers (sliding, full, sliding), window 4.
    {"name": "top2_3l", "seed": 11, "layers": 3,
     "edits": {"num_experts_per_tok": 2, "experts_per_token": 2, "sliding_window": 4}},
    # Full layer first, window 3, another RoPE base and YaRN x8 over 512.
    {"name": "top4_2l_rope8", "seed": 23, "layers": 2,
     "edits": {"sliding_window": 3, "layer_types": ["full_attention", "sliding_attention"],
               "rope_theta": 10000.0, "initial_context_length": 512,
               "max_position_embeddings": 4096,
               "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0,
                                "beta_slow": 1.0, "original_max_position_embeddings": 512,
                                "truncate": False}}},
    # DeepSeek-V3 / Kimi K2 (not yet recorded, not yet in tests/models/golden): YaRN x4 over an
    # original length of 16, so that every prompt + its 20 new tokens crosses it.
    {"name": "dsv3_qlora_g4", "preset": "deepseek-tiny", "seed": 31, "layers": None,
     "edits": {"max_position_embeddings": 64,
               "rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                                "beta_slow": 1.0, "original_max_position_embeddings": 16,
                                "mscale": 1.0, "mscale_all_dim": 1.0}}},
    {"name": "k2_plain_q", "preset": "kimi-k2-tiny", "seed": 37, "layers": 4,
     "edits": {"max_position_embeddings": 64, "first_k_dense_replace": 2,
               "rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 1.0,
                                "beta_slow": 1.0, "original_max_position_embeddings": 16,
                                "mscale": 1.0, "mscale_all_dim": 1.0}}},
]
PROMPT_LENGTHS = [26, 9, 3]  # the first is longer than every sliding window above (x3 or more)
NEW_TOKENS = 20


def main():
    bin_dir = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "golden")
    for cfg in CONFIGS:
        out = os.path.join(root, cfg["name"])
        if os.path.isdir(out):
            shutil.rmtree(out)
        cmd = [os.path.join(bin_dir, "mxserve-make-model"), "--preset", cfg.get("preset", "tiny"),
               "--out", out,
               "--seed", str(cfg["seed"]), "--threads", "1"]
        if cfg["layers"]:
            cmd += ["--num-layers", str(cfg["layers"])]
        subprocess.run(cmd, check=True)
        path = os.path.join(out, "config.json")
        with open(path) as f:
            c = json.load(f)
        c.update(cfg["edits"])
        with open(path, "w") as f:
            json.dump(c, f, indent=2)
            f.write("\n")
        rng = random.Random(cfg["seed"])
        prompts = [[rng.randrange(ORDINARY_TOKENS) for _ in range(n)] for n in PROMPT_LENGTHS]
        with open(os.path.join(out, "model.safetensors"), "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(out, "prompts.json"), "w") as f:
            json.dump({"seed": cfg["seed"], "num_layers": cfg["layers"], "edits": cfg["edits"],
                       "model_safetensors_sha256": sha, "new_tokens": NEW_TOKENS,
                       "prompts": prompts}, f, indent=1)
            f.write("\n")
        print(cfg["name"], sha)


if __name__ == "__main__":
    main()
