#include "experts/expert_executor.h"

#include <vector>

#include "wire/tensor_wire.h"

namespace mxserve {

absl::Status ExpertExecutor::RunBf16(const ExpertBatch& batch, const void* x, void* out) {
  // Per-thread scratch that keeps its capacity: fresh multi-MB buffers on every call cost more in
  // page faults than the conversion itself.
  thread_local std::vector<float> x_scratch, out_scratch;
  const size_t n = static_cast<size_t>(batch.num_tokens) * static_cast<size_t>(batch.hidden);
  x_scratch.resize(n);
  out_scratch.resize(n);
  DecodeTensorInto(static_cast<const char*>(x), n, v1::TENSOR_DTYPE_BF16, x_scratch.data());
  ExpertBatch b = batch;
  b.x = x_scratch.data();
  if (absl::Status s = Run(b, out_scratch.data()); !s.ok()) return s;
  EncodeTensorTo(out_scratch.data(), n, v1::TENSOR_DTYPE_BF16, static_cast<char*>(out));
  return absl::OkStatus();
}

}  // namespace mxserve
