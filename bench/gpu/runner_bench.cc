// The GPU model runner's decode throughput on one model folder beside the card's memory-read
// floor, measured in the same run: each sequence is prefilled to --context tokens, then
// --steps decode steps run at each batch size. tok/s = batch * steps / time. The floor for
// batch 1 is the bytes one token must read (every dense weight, lm_head, top-k experts per
// layer, the KV rows it attends) over the card's device-to-device copy bandwidth (a 1 GiB copy
// reads and writes 1 GiB each). Prints a table and, with --csv, its CSV rows
// (bench/results/gpu_runner_*.csv).
//   mxserve-bench-runner --model DIR [--batches 1,8,64] [--context 1024] [--steps 64] [--eager]
//                        [--csv]
// --eager: no CUDA graphs (each kernel launched; what a profiler sees kernel by kernel).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "coordinator/gpu/gpu_model_runner.h"
#include "core/model_config.h"
#include "core/safetensors.h"

namespace mxserve {
namespace {

double CopyBandwidthGBs() {
  const size_t n = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) return 0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
  float best = 1e30f;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(e0);
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    best = std::min(best, ms);
  }
  cudaFree(a);
  cudaFree(b);
  return 2.0 * n / (best * 1e-3) / 1e9;
}

// Bytes one batch-1 decode token must read: dense weights (bf16), lm_head, k experts
// per layer (MXFP4 blocks + scales + bf16 biases), and its KV rows.
double BytesPerToken(const ModelConfig& c, int context) {
  const double H = c.hidden_size, d = c.head_dim, nq = c.num_attention_heads;
  const double nkv = c.num_key_value_heads, I = c.intermediate_size;
  const double attn = 2 * ((nq + 2 * nkv) * d * H + H * nq * d);
  const double router = 2.0 * c.num_local_experts * H;  // bf16 in the checkpoint
  const double expert = (2 * I * H + H * I) / 2 + (2 * I * H + H * I) / 32 + 2 * (2 * I + H);
  double kv = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const double keys = c.IsSlidingLayer(l) ? std::min(context, c.sliding_window) : context;
    kv += 2 * keys * nkv * d * 2;
  }
  return c.num_hidden_layers * (attn + router + c.num_experts_per_tok * expert) +
         2.0 * c.vocab_size * H + kv;
}

int Run(int argc, char** argv) {
  std::string model;
  std::vector<int> batches = {1, 8, 64};
  int context = 1024, steps = 64;
  bool csv = false, eager = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") {
      model = next();
    } else if (a == "--batches") {
      batches.clear();
      for (auto p : absl::StrSplit(next(), ',')) {
        int b = 0;
        if (absl::SimpleAtoi(p, &b) && b > 0) batches.push_back(b);
      }
    } else if (a == "--context") {
      context = atoi(next().c_str());
    } else if (a == "--steps") {
      steps = atoi(next().c_str());
    } else if (a == "--csv") {
      csv = true;
    } else if (a == "--eager") {
      eager = true;
    } else {
      fprintf(stderr, "usage: %s --model DIR [--batches 1,8,64] [--context N] [--steps N] [--eager] [--csv]\n",
              argv[0]);
      return 2;
    }
  }
  auto cfg = ModelConfig::Load(model);
  auto ck = Checkpoint::Open(model);
  if (!cfg.ok() || !ck.ok()) {
    fprintf(stderr, "cannot open %s\n", model.c_str());
    return 1;
  }
  int max_batch = 1;
  for (int b : batches) max_batch = std::max(max_batch, b);
  gpu::GpuRunnerOptions o;
  o.block_size = 16;
  o.max_model_len = context + steps + 16;
  o.max_num_batched_tokens = std::max(context, max_batch);
  o.max_graph_batch = eager ? 0 : std::max(max_batch, 1);
  auto runner = gpu::GpuModelRunner::Create(*cfg, **ck, nullptr, o);
  if (!runner.ok()) {
    fprintf(stderr, "%s\n", std::string(runner.status().message()).c_str());
    return 1;
  }
  ck->reset();
  fprintf(stderr, "%s\n", (*runner)->description().c_str());
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double bw = CopyBandwidthGBs();
  const double floor_tps = bw * 1e9 / BytesPerToken(*cfg, context);
  printf("%-28s %6s %8s %6s %10s %12s %8s\n", "model", "batch", "context", "steps", "tok/s",
         "floor tok/s", "% floor");
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, cfg->vocab_size - 1);
  const int per_seq_blocks = (o.max_model_len + o.block_size - 1) / o.block_size;
  for (int B : batches) {
    if (int64_t{B} * per_seq_blocks > (*runner)->num_blocks()) {
      printf("batch %d: the KV cache holds too few blocks\n", B);
      continue;
    }
    std::vector<SequenceChunk> seqs(B);
    for (int s = 0; s < B; ++s) {
      seqs[s].seq_id = s;
      for (int b = 0; b < per_seq_blocks; ++b) seqs[s].block_table.push_back(s * per_seq_blocks + b);
      seqs[s].tokens.resize(context);
      for (int& t : seqs[s].tokens) t = tok(rng);
      auto r = (*runner)->Run(ForwardBatch{{seqs[s]}});
      if (!r.ok()) {
        fprintf(stderr, "prefill: %s\n", std::string(r.status().message()).c_str());
        return 1;
      }
      seqs[s].start_pos = context;
      seqs[s].tokens = {tok(rng)};
      seqs[s].argmax_only = true;  // greedy serving: ids, not logits rows, come back
    }
    double secs = 0;
    for (int i = 0; i < steps + 2; ++i) {
      ForwardBatch batch{seqs};
      const auto t0 = std::chrono::steady_clock::now();
      auto r = (*runner)->Run(batch);
      const auto t1 = std::chrono::steady_clock::now();
      if (!r.ok()) {
        fprintf(stderr, "decode: %s\n", std::string(r.status().message()).c_str());
        return 1;
      }
      if (i >= 2) secs += std::chrono::duration<double>(t1 - t0).count();  // 2 warm-up steps
      for (auto& s : seqs) ++s.start_pos;
    }
    const double tps = B * steps / secs;
    const std::string name = model.substr(model.find_last_of('/') + 1);
    printf("%-28s %6d %8d %6d %10.1f %12.1f %7.1f%%\n", name.c_str(), B, context, steps, tps,
           B == 1 ? floor_tps : 0.0, B == 1 ? 100 * tps / floor_tps : 0.0);
    if (csv) {
      printf("CSV,%s,%s,%s,%d,%d,%.1f,%.1f,%.1f\n", prop.name, name.c_str(),
             eager ? "eager" : "graphs", B, context, tps, floor_tps, bw);
    }
  }
  return 0;
}

}  // namespace
}  // namespace mxserve

int main(int argc, char** argv) { return mxserve::Run(argc, argv); }
