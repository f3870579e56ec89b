#include "coordinator/gpu/gpu_model_runner.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/gpu/runner_sizing.h"
#include "coordinator/models/forward_batch_check.h"
#include "core/status.h"

namespace mxserve::gpu {
namespace {

using kernels::cuda::CudaCheck;

// Left free beyond the budget for what cuBLASLt and the CUDA context allocate on their own.
constexpr int64_t kHeadroomBytes = int64_t{256} << 20;

double GiB(int64_t b) { return static_cast<double>(b) / (1 << 30); }

// A step over metadata packed as ids [T], positions [T], sequences [T], logits rows [T], block
// tables [S, max_blocks] (device memory at d).
GpuStep StepFromMeta(const int32_t* d, int T, int R, int max_blocks, int block_size) {
  GpuStep step;
  step.num_tokens = T;
  step.token_ids = d;
  step.layout.num_tokens = T;
  step.layout.positions = d + T;
  step.layout.token_seq = d + 2 * T;
  step.layout.block_tables = d + 4 * T;
  step.layout.max_blocks = max_blocks;
  step.layout.block_size = block_size;
  step.num_rows = R;
  step.rows = d + 3 * T;
  return step;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuModelRunner>> GpuModelRunner::Create(
    const ModelConfig& config, const Checkpoint& checkpoint, MoeExecutor* moe,
    const GpuRunnerOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("--device cuda:", options.device, ": this host has ",
                                                   count, " CUDA device(s)"));
  }
  if (!(options.gpu_memory_utilization > 0 && options.gpu_memory_utilization <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu-memory-utilization ",
                                                   options.gpu_memory_utilization,
                                                   " must be in (0, 1]"));
  }
  if (options.block_size <= 0 || options.max_num_batched_tokens <= 0) {
    return absl::InvalidArgumentError("block_size and max_num_batched_tokens must be > 0");
  }
  RETURN_IF_ERROR(CudaCheck(cudaSetDevice(options.device), "cudaSetDevice"));
  std::unique_ptr<GpuModelRunner> r(new GpuModelRunner());
  r->device_ = options.device;
  RETURN_IF_ERROR(CudaCheck(cudaStreamCreateWithFlags(&r->stream_, cudaStreamNonBlocking),
                            "cudaStreamCreate"));
  absl::MutexLock lock(&r->mu_);
  size_t total_b = 0;
  RETURN_IF_ERROR(CudaCheck(cudaMemGetInfo(&r->free_at_start_, &total_b), "cudaMemGetInfo"));
  ASSIGN_OR_RETURN(r->model_, GptOssGpu::Create(config, checkpoint, moe, r->stream_));
  const int T = options.max_num_batched_tokens;
  RETURN_IF_ERROR(r->model_->Reserve(T, T));
  RETURN_IF_ERROR(r->host_logits_.Reserve(size_t(T) * config.vocab_size));
  r->vocab_size_ = config.vocab_size;
  r->block_size_ = options.block_size;
  RETURN_IF_ERROR(r->SizeKvCache(config, options));
  r->in_process_experts_ = moe == nullptr;
  r->max_graph_batch_ = r->in_process_experts_ ? std::min(options.max_graph_batch, T) : 0;
  r->max_blocks_all_ = (r->max_model_len_ + r->block_size_ - 1) / r->block_size_;
  if (r->max_graph_batch_ > 0) {
    if (!kernels::cuda::dense::ReserveAttentionWorkspace(r->stream_)) {
      return absl::ResourceExhaustedError("no memory for the attention split workspace");
    }
    RETURN_IF_ERROR(r->graph_meta_.Reserve(size_t(r->max_graph_batch_) * (4 + r->max_blocks_all_)));
    RETURN_IF_ERROR(r->host_meta_.Reserve(size_t(r->max_graph_batch_) * (4 + r->max_blocks_all_)));
  }
  return r;
}

absl::Status GpuModelRunner::SizeKvCache(const ModelConfig& c, const GpuRunnerOptions& o) {
  size_t free_b = 0, total_b = 0;
  RETURN_IF_ERROR(CudaCheck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
  const int64_t per_block =
      GpuKvCache::BytesPerBlock(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, o.block_size);
  KvBudget kb;
  kb.total_bytes = static_cast<int64_t>(total_b);
  kb.free_bytes = static_cast<int64_t>(free_b);
  kb.free_at_start = static_cast<int64_t>(free_at_start_);
  kb.utilization = o.gpu_memory_utilization;
  kb.kv_cache_bytes = o.kv_cache_bytes;
  kb.leave_free_bytes = o.leave_free_bytes;
  kb.headroom_bytes = kHeadroomBytes;
  kb.bytes_per_block = per_block;
  const int64_t used = kb.free_at_start - kb.free_bytes;
  const int64_t blocks = KvCacheBlocks(kb);
  if (blocks < 1) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cuda:%d: no memory left for the KV cache: weights (%.2f GiB) and activations take "
        "%.2f GiB of the %.2f GiB that --gpu-memory-utilization %.2f allows (%.2f GiB free on "
        "the card); raise it, or lower --max-num-batched-tokens",
        device_, GiB(model_->weight_bytes()), GiB(used),
        GiB(static_cast<int64_t>(o.gpu_memory_utilization * total_b)), o.gpu_memory_utilization,
        GiB(free_b)));
  }
  // The last block is the CUDA graphs' scratch (padding tokens), not the scheduler's.
  num_blocks_ = static_cast<int>(std::min<int64_t>(blocks - 1, 1 << 30));
  if (num_blocks_ < 1) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda:", device_,
                                                     ": room for one KV block only"));
  }
  scratch_block_ = num_blocks_;
  const int64_t capacity = int64_t{num_blocks_} * o.block_size;
  const int64_t model_max = c.max_position_embeddings;
  max_model_len_ = o.max_model_len > 0 ? o.max_model_len
                                       : static_cast<int>(std::min(model_max, capacity));
  if (max_model_len_ > model_max) {
    return absl::InvalidArgumentError(absl::StrCat("--max-model-len ", max_model_len_,
                                                   " exceeds the model's ", model_max));
  }
  if (capacity < max_model_len_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda:", device_, ": the KV cache holds ", capacity, " tokens, fewer than --max-model-len ",
        max_model_len_, "; raise --gpu-memory-utilization or lower --max-model-len"));
  }
  ASSIGN_OR_RETURN(cache_, GpuKvCache::Create(c.num_hidden_layers, c.num_key_value_heads,
                                              c.head_dim, num_blocks_ + 1, o.block_size));
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device_);
  description_ = absl::StrFormat(
      "cuda:%d (%s): weights %.2f GiB, KV cache %d blocks of %d tokens (%.2f GiB), "
      "max_model_len %d",
      device_, prop.name, GiB(model_->weight_bytes()), num_blocks_, o.block_size,
      GiB(int64_t{num_blocks_} * per_block), max_model_len_);
  return absl::OkStatus();
}

GpuModelRunner::~GpuModelRunner() {
  {
    absl::MutexLock lock(&mu_);
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (auto& [bucket, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
    model_.reset();
    cache_.reset();
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

// Packs the step's metadata into one page-locked array, copies it to the device in one
// transfer and points the GpuStep into it. Fills out's row offsets.
absl::StatusOr<GpuStep> GpuModelRunner::Stage(const ForwardBatch& batch, ForwardOutput& out) {
  const int S = static_cast<int>(batch.chunks.size());
  int T = 0, max_blocks = 1;
  for (const SequenceChunk& ch : batch.chunks) {
    T += static_cast<int>(ch.tokens.size());
    const int end = ch.start_pos + static_cast<int>(ch.tokens.size());
    max_blocks = std::max(max_blocks, (end + block_size_ - 1) / block_size_);
  }
  // Layout: ids [T], positions [T], token_seq [T], rows [T], block tables [S, max_blocks].
  const size_t n = size_t(4) * T + size_t(S) * max_blocks;
  RETURN_IF_ERROR(host_meta_.Reserve(n));
  RETURN_IF_ERROR(meta_.Reserve(n));
  int32_t* ids = host_meta_.get();
  int32_t* pos = ids + T;
  int32_t* seq = pos + T;
  int32_t* rows = seq + T;
  int32_t* tables = rows + T;
  out.vocab_size = vocab_size_;
  out.row_offset.resize(S);
  int t = 0, R = 0;
  for (int i = 0; i < S; ++i) {
    const SequenceChunk& ch = batch.chunks[i];
    const int len = static_cast<int>(ch.tokens.size());
    const int blocks = (ch.start_pos + len + block_size_ - 1) / block_size_;
    std::copy(ch.block_table.begin(), ch.block_table.begin() + blocks, tables + i * max_blocks);
    std::fill(tables + i * max_blocks + blocks, tables + (i + 1) * max_blocks, 0);
    out.row_offset[i] = R;
    for (int j = 0; j < len; ++j, ++t) {
      ids[t] = ch.tokens[j];
      pos[t] = ch.start_pos + j;
      seq[t] = i;
      if (ch.all_logits || j == len - 1) rows[R++] = t;
    }
  }
  RETURN_IF_ERROR(model_->Reserve(T, R));
  RETURN_IF_ERROR(host_logits_.Reserve(size_t(R) * vocab_size_));
  RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(meta_.get(), ids, n * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, stream_),
                            "copy step metadata"));
  return StepFromMeta(meta_.get(), T, R, max_blocks, block_size_);
}

absl::Status GpuModelRunner::CopyOut(const ForwardBatch& batch, int rows, ForwardOutput& out) {
  bool argmax_only = true;
  for (const SequenceChunk& ch : batch.chunks) argmax_only = argmax_only && ch.argmax_only;
  if (argmax_only) {
    RETURN_IF_ERROR(argmax_.Reserve(rows));
    RETURN_IF_ERROR(host_argmax_.Reserve(rows));
    kernels::cuda::dense::ArgmaxRows(model_->logits(), rows, vocab_size_, argmax_.get(), stream_);
    RETURN_IF_ERROR(CudaCheck(cudaGetLastError(), "argmax"));
    RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(host_argmax_.get(), argmax_.get(),
                                              rows * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                              stream_),
                              "copy argmax"));
    RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(stream_), "step"));
    out.argmax.assign(host_argmax_.get(), host_argmax_.get() + rows);
    return absl::OkStatus();
  }
  const size_t floats = size_t(rows) * vocab_size_;
  RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(host_logits_.get(), model_->logits(),
                                            floats * sizeof(float), cudaMemcpyDeviceToHost,
                                            stream_),
                            "copy logits"));
  RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(stream_), "step"));
  out.logits.assign(host_logits_.get(), host_logits_.get() + floats);
  return absl::OkStatus();
}

bool GpuModelRunner::GraphEligible(const ForwardBatch& batch) const {
  if (max_graph_batch_ <= 0 || batch.chunks.empty() ||
      static_cast<int>(batch.chunks.size()) > max_graph_batch_) {
    return false;
  }
  for (const SequenceChunk& ch : batch.chunks) {
    if (ch.tokens.size() != 1 || ch.all_logits) return false;
  }
  return true;
}

absl::StatusOr<ForwardOutput> GpuModelRunner::RunGraph(const ForwardBatch& batch) {
  const int B = static_cast<int>(batch.chunks.size());
  const int P = GraphBucket(B, max_graph_batch_), W = max_blocks_all_;
  // Layout as Stage's, P tokens wide, block tables W wide; padding sequences use the scratch
  // block at position 0.
  int32_t* ids = host_meta_.get();
  int32_t* pos = ids + P;
  int32_t* seq = pos + P;
  int32_t* rows = seq + P;
  int32_t* tables = rows + P;
  for (int i = 0; i < P; ++i) {
    int32_t* table = tables + size_t(i) * W;
    seq[i] = i;
    rows[i] = i;
    if (i < B) {
      const SequenceChunk& ch = batch.chunks[i];
      ids[i] = ch.tokens[0];
      pos[i] = ch.start_pos;
      const int blocks = ch.start_pos / block_size_ + 1;
      std::copy(ch.block_table.begin(), ch.block_table.begin() + blocks, table);
      std::fill(table + blocks, table + W, scratch_block_);
    } else {
      ids[i] = 0;
      pos[i] = 0;
      std::fill(table, table + W, scratch_block_);
    }
  }
  RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(graph_meta_.get(), ids,
                                            size_t(P) * (4 + W) * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, stream_),
                            "copy step metadata"));
  auto it = graphs_.find(P);
  if (it == graphs_.end()) {
    const GpuStep step = StepFromMeta(graph_meta_.get(), P, P, W, block_size_);
    cudaGraph_t graph = nullptr;
    RETURN_IF_ERROR(CudaCheck(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                              "cudaStreamBeginCapture"));
    const absl::Status forward = model_->Forward(step, *cache_, stream_);
    RETURN_IF_ERROR(CudaCheck(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture"));
    if (!forward.ok()) {
      cudaGraphDestroy(graph);
      return forward;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    RETURN_IF_ERROR(CudaCheck(e, "cudaGraphInstantiate"));
    it = graphs_.emplace(P, exec).first;
  }
  RETURN_IF_ERROR(CudaCheck(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch"));
  ForwardOutput out;
  out.vocab_size = vocab_size_;
  out.row_offset.resize(B);
  for (int i = 0; i < B; ++i) out.row_offset[i] = i;
  RETURN_IF_ERROR(CopyOut(batch, B, out));
  return out;
}

absl::StatusOr<ForwardOutput> GpuModelRunner::Run(const ForwardBatch& batch) {
  RETURN_IF_ERROR(CheckForwardBatch(
      batch, RunnerShape{vocab_size_, block_size_, num_blocks_, max_model_len_}));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CudaCheck(cudaSetDevice(device_), "cudaSetDevice"));
  if (GraphEligible(batch)) return RunGraph(batch);
  ForwardOutput out;
  ASSIGN_OR_RETURN(GpuStep step, Stage(batch, out));
  RETURN_IF_ERROR(model_->Forward(step, *cache_, stream_));
  RETURN_IF_ERROR(CopyOut(batch, step.num_rows, out));
  return out;
}

}  // namespace mxserve::gpu
