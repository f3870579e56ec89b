#!/usr/bin/env python3
"""Records HF transformers' logits and greedy generations for the golden fixtures.

Run on the GPU machine (transformers 5.x + torch; computation on its CPU, in fp32), e.g. through
the device tool from the repository root:
    python3 tools/golden/hf_golden.py $OUT
For every tests/data/golden/<name>/ (written by tools/golden/make_checkpoints.py) and the older
tests/models/data/hf_tiny/, writes OUT/<name>/hf_logits.f32 and OUT/<name>/hf.json:
* greedy: NEW_TOKENS tokens per prompt by full-recompute argmax (no EOS stop: our side is asked
  with ignore_eos), the top1-top2 logit margin of every step, and HF's own generate() output
  (greedy, with its EOS handling) as a cross-check;
* hf_logits.f32: float32 logits [rows, vocab] of one forward pass over prompt + greedy[:-1] for
  every prompt in order (rows = len(prompt) + NEW_TOKENS - 1 each), i.e. the logits of every
  prompt position and of every generation step.
Then, if a real gpt-oss chat template is in a local HF cache (no network there), renders the
conversations of tests/tokenizer/data/harmony_render_fixtures.json with apply_chat_template.

DeepSeek-V3 / Kimi K2 folders (preset deepseek-tiny / kimi-k2-tiny) load without a quantization
config (their experts are bf16, exact in MXFP4), kimi_k2 mapped to deepseek_v3; not yet run.

Two traps make HF an imprecise oracle if left alone (measured with transformers 5.17.0):
* Mxfp4Config(dequantize=True) leaves the dequantized expert weights in bf16 even with
  dtype=float32, and the default experts implementation ("grouped_mm") then runs the experts in
  bf16: logits move by ~8% relative L2. model.float() after loading fixes it.
* attn_implementation must be "eager" (sinks are not in SDPA); experts "eager" is the plain loop.
"""
import glob
import json
import os
import sys
import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, Mxfp4Config

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def load_deepseek(model_dir):
    """DeepSeek-V3 / Kimi K2 (bf16 checkpoint in the hub's per-expert layout): HF 5.17 has
    DeepseekV3ForCausalLM but no kimi_k2 config type, so a kimi_k2 folder is read through a copy
    whose config.json says deepseek_v3. Every checkpoint tensor must be used and none missing."""
    import shutil
    import tempfile
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    tmp = None
    if config["model_type"] == "kimi_k2":
        tmp = tempfile.mkdtemp()
        for name in os.listdir(model_dir):
            shutil.copy(os.path.join(model_dir, name), tmp)
        config["model_type"] = "deepseek_v3"
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config, f)
    model, info = AutoModelForCausalLM.from_pretrained(
        tmp or model_dir, dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager", device_map="cpu", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    if tmp:
        shutil.rmtree(tmp)
    model = model.float().eval()
    bad = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
    assert not bad, bad
    return model


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        if json.load(f)["model_type"] in ("deepseek_v3", "kimi_k2"):
            return load_deepseek(model_dir)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager", quantization_config=Mxfp4Config(dequantize=True),
        device_map="cpu")
    model = model.float().eval()
    bad = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
    assert not bad, bad
    return model


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long)).logits[0].float()


def record(model_dir, out_dir):
    with open(os.path.join(model_dir, "prompts.json")) as f:
        spec = json.load(f)
    model = load(model_dir)
    n_new = spec["new_tokens"]
    rows, out = [], {"transformers": transformers.__version__, "torch": torch.__version__,
                     "new_tokens": n_new, "prompts": []}
    for prompt in spec["prompts"]:
        seq, margins = list(prompt), []
        for _ in range(n_new):
            last = logits_of(model, seq)[-1]
            top2 = torch.topk(last, 2)
            margins.append(float(top2.values[0] - top2.values[1]))
            seq.append(int(top2.indices[0]))
        greedy = seq[len(prompt):]
        full = logits_of(model, seq[:-1])
        assert full.shape[0] == len(prompt) + n_new - 1
        rows.append(full.numpy().astype(np.float32))
        one_pass = [int(x) for x in full[len(prompt) - 1:].argmax(-1)]
        try:
            with torch.no_grad():
                gen = model.generate(torch.tensor([prompt]), do_sample=False,
                                     max_new_tokens=n_new,
                                     attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
            gen = gen[0][len(prompt):]
        except Exception as e:  # a cross-check only
            print("generate() failed:", repr(e), flush=True)
            gen = []
        out["prompts"].append({
            "prompt": prompt, "greedy": greedy, "margins": margins,
            "one_pass_argmax_agrees": one_pass == greedy,
            "hf_generate": [int(x) for x in gen], "rows": int(full.shape[0])})
    os.makedirs(out_dir, exist_ok=True)
    np.concatenate(rows).tofile(os.path.join(out_dir, "hf_logits.f32"))
    with open(os.path.join(out_dir, "hf.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(os.path.basename(model_dir), [p["greedy"] for p in out["prompts"]],
          "min margin", min(min(p["margins"]) for p in out["prompts"]),
          "agree", [p["one_pass_argmax_agrees"] for p in out["prompts"]],
          "generate", [p["hf_generate"] == p["greedy"][:len(p["hf_generate"])]
                       for p in out["prompts"]], flush=True)


def hf_tiny_logits(out_dir):
    # The first fixture (tests/models/data/hf_tiny, WriteTinyModel seed 4242): its logits again.
    d = os.path.join(ROOT, "tests", "models", "data", "hf_tiny")
    tokens = np.fromfile(os.path.join(d, "tokens.i32"), dtype=np.int32).astype(np.int64)
    got = logits_of(load(d), [int(t) for t in tokens]).numpy().astype(np.float32)
    old = np.fromfile(os.path.join(d, "hf_logits.f32"), dtype=np.float32).reshape(got.shape)
    print("hf_tiny rel L2 vs committed", float(np.linalg.norm(got - old) / np.linalg.norm(old)))


def find_chat_templates():
    roots = [os.environ.get("HF_HOME", ""), os.path.expanduser("~/.cache/huggingface"),
             "/root/.cache/huggingface", "/models", "/data", "/opt", "/workspace"]
    found, deadline = [], time.time() + 20
    for r in roots:
        if not r or not os.path.isdir(r):
            continue
        for dirpath, dirnames, filenames in os.walk(r):
            if time.time() > deadline or dirpath.count(os.sep) - r.count(os.sep) > 7:
                dirnames[:] = []
                continue
            if "gpt-oss" in dirpath.lower() and ("chat_template.jinja" in filenames or
                                                 "tokenizer_config.json" in filenames):
                found.append(dirpath)
    return found


def render_harmony(out_root):
    dirs = find_chat_templates()
    print("gpt-oss chat template folders found:", dirs, flush=True)
    if not dirs:
        return
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(dirs[0], local_files_only=True)
    with open(os.path.join(ROOT, "tests", "tokenizer", "data", "harmony_render_fixtures.json")) as f:
        fx = json.load(f)
    results = []
    for c in fx["fixtures"]:
        kw = {}
        if c.get("reasoning_effort") is not None:
            kw["reasoning_effort"] = c["reasoning_effort"]
        try:
            text = tok.apply_chat_template(c["messages"], tools=c.get("tools"), tokenize=False,
                                           add_generation_prompt=c["add_generation_prompt"], **kw)
        except Exception as e:  # recorded, not fatal
            text = "ERROR: %r" % e
        results.append({"name": c["name"], "rendered": text})
    with open(os.path.join(out_root, "harmony_hf_apply_chat_template.json"), "w") as f:
        json.dump({"source": dirs[0], "transformers": transformers.__version__,
                   "renders": results}, f, indent=1)


def main():
    out_root = sys.argv[1]
    t0 = time.time()
    torch.manual_seed(0)
    torch.set_num_threads(8)
    for d in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "golden", "*", "prompts.json"))):
        d = os.path.dirname(d)
        try:
            record(d, os.path.join(out_root, os.path.basename(d)))
        except Exception as e:
            import traceback
            traceback.print_exc()
    try:
        hf_tiny_logits(out_root)
    except Exception as e:
        print("hf_tiny check failed:", repr(e))
    try:
        render_harmony(out_root)
    except Exception as e:
        print("harmony rendering skipped:", repr(e))
    print("transformers", transformers.__version__, "torch", torch.__version__,
          "seconds", round(time.time() - t0, 1))


if __name__ == "__main__":
    main()
