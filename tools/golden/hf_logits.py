"""Records HF transformers logits for a hub-format gpt-oss checkpoint folder (tests/models/data/*).

Run on the GPU machine (transformers 5.x + torch), e.g. through the device tool:
    python3 tools/golden/hf_logits.py tests/models/data/hf_tiny $OUT/hf_logits.f32
Reads DIR/tokens.i32 (int32 token ids), writes the fp32 logits [T, vocab] of every position.

Two traps make HF an imprecise oracle if left alone (measured with transformers 5.17.0):
* Mxfp4Config(dequantize=True) leaves the dequantized expert weights in bf16 even with
  dtype=float32, and the default experts implementation ("grouped_mm") then runs the experts in
  bf16: logits move by ~8% relative L2. model.float() after loading fixes it.
* attn_implementation must be "eager" (sinks are not in SDPA); experts "eager" is the plain loop.
"""
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, Mxfp4Config

model_dir, out_path = sys.argv[1], sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(
    model_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager",
    quantization_config=Mxfp4Config(dequantize=True), device_map="cpu")
model = model.float().eval()
tokens = np.fromfile(f"{model_dir}/tokens.i32", dtype=np.int32).astype(np.int64)
with torch.no_grad():
    logits = model(torch.tensor(tokens[None, :])).logits[0].float().numpy()
logits.astype(np.float32).tofile(out_path)
print("transformers", transformers.__version__, "torch", torch.__version__, "logits", logits.shape)
