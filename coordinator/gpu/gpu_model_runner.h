// ModelRunner on one CUDA device: the whole dense model (and, without workers, the experts) in
// GPU memory, a paged bf16 KV cache sized from what the weights and a step's activations leave
// of --gpu-memory-utilization, and one stream per runner. The engine, scheduler and block
// manager see the same interface as the CPU runner's; logits rows come back to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/engine/model_runner.h"
#include "coordinator/gpu/gpt_oss_gpu.h"
#include "coordinator/gpu/gpu_kv_cache.h"
#include "coordinator/models/moe_executor.h"
#include "core/model_config.h"
#include "core/safetensors.h"

namespace mxserve::gpu {

struct GpuRunnerOptions {
  int device = 0;                        // the N of cuda:N
  // Share of the card's memory this runner may hold in all (vLLM's --gpu-memory-utilization):
  // weights, activations and the KV cache, which gets what the others leave.
  double gpu_memory_utilization = 0.9;
  int64_t kv_cache_bytes = 0;            // > 0: exactly this much KV cache instead
  // Left free on the card beyond the budget: what worker processes sharing this GPU will still
  // allocate (their scratch grows with the batch after the KV cache is sized).
  int64_t leave_free_bytes = 0;
  int block_size = 16;
  int max_model_len = 0;                 // 0: min(max_position_embeddings, KV capacity)
  int max_num_batched_tokens = 2048;     // activations are sized for steps this large
  // Decode steps (one token per sequence, in-process experts) of up to this many sequences
  // replay a CUDA graph captured for their batch-size bucket; 0: always eager (vLLM's
  // --enforce-eager).
  int max_graph_batch = 256;
};

class GpuModelRunner : public ModelRunner {
 public:
  // moe == nullptr: experts in-process on the device; otherwise they run behind `moe` (workers),
  // which must outlive the runner. Errors name the tensor, the config field or the memory that
  // is missing.
  static absl::StatusOr<std::unique_ptr<GpuModelRunner>> Create(const ModelConfig& config,
                                                                const Checkpoint& checkpoint,
                                                                MoeExecutor* moe,
                                                                const GpuRunnerOptions& options);
  ~GpuModelRunner() override;

  // Checks the batch (CheckForwardBatch), then runs it; logits rows as ForwardOutput says.
  absl::StatusOr<ForwardOutput> Run(const ForwardBatch& batch) override;

  int vocab_size() const override { return vocab_size_; }
  int block_size() const override { return block_size_; }
  int num_blocks() const override { return num_blocks_; }
  int max_model_len() const override { return max_model_len_; }
  // One line for the log: card, weights, KV cache.
  const std::string& description() const { return description_; }

 private:
  GpuModelRunner() = default;
  absl::Status SizeKvCache(const ModelConfig& config, const GpuRunnerOptions& options);
  absl::StatusOr<GpuStep> Stage(const ForwardBatch& batch, ForwardOutput& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A decode step through the graph of its bucket (captured on first use); logits rows of the
  // real sequences only.
  absl::StatusOr<ForwardOutput> RunGraph(const ForwardBatch& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool GraphEligible(const ForwardBatch& batch) const;
  // The step's result to the host: logits rows, or their argmax ids alone when every chunk is
  // argmax_only.
  absl::Status CopyOut(const ForwardBatch& batch, int rows, ForwardOutput& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  int device_ = 0;
  size_t free_at_start_ = 0;  // free device memory before this runner allocated anything
  int vocab_size_ = 0, block_size_ = 0, num_blocks_ = 0, max_model_len_ = 0;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  absl::Mutex mu_;  // one step at a time: the cache and the scratch are written in place
  std::unique_ptr<GptOssGpu> model_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<GpuKvCache> cache_ ABSL_GUARDED_BY(mu_);
  // The step's int32 metadata: token ids, positions, sequences, block tables, logits rows.
  PinnedArray<int32_t> host_meta_ ABSL_GUARDED_BY(mu_);
  DeviceArray<int32_t> meta_ ABSL_GUARDED_BY(mu_);
  PinnedArray<float> host_logits_ ABSL_GUARDED_BY(mu_);
  DeviceArray<int32_t> argmax_ ABSL_GUARDED_BY(mu_);
  PinnedArray<int32_t> host_argmax_ ABSL_GUARDED_BY(mu_);
  // CUDA graphs: one per batch-size bucket, reading their metadata from graph_meta_ (fixed
  // addresses, block tables max_blocks_all_ wide). Padding tokens write and read KV block
  // scratch_block_, one block beyond what the scheduler hands out.
  bool in_process_experts_ = false;
  int max_graph_batch_ = 0, max_blocks_all_ = 0, scratch_block_ = 0;
  std::map<int, cudaGraphExec_t> graphs_ ABSL_GUARDED_BY(mu_);
  DeviceArray<int32_t> graph_meta_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mxserve::gpu
