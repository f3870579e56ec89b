// Activation tensors in RunExperts' `bytes` fields: little-endian F32 or BF16 (proto
// TensorDType). Shared by the worker (ExpertService) and the coordinator (WorkerClient).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mxserve/v1/expert_worker.pb.h"

namespace mxserve {

class ThreadPool;

// Bytes per element of a wire dtype; 0 for UNSPECIFIED or unknown values.
size_t WireDTypeSize(v1::TensorDType dtype);

// Writes n floats into *out (resized) as `dtype` (F32 or BF16, round to nearest even).
void EncodeTensor(const float* x, size_t n, v1::TensorDType dtype, std::string* out);

// Views `bytes` (exactly n elements of `dtype`, checked by the caller) as floats: F32 bytes
// that are suitably aligned are used in place; otherwise they are decoded into *scratch.
const float* DecodeTensor(const std::string& bytes, size_t n, v1::TensorDType dtype,
                          std::vector<float>* scratch);
const float* DecodeTensor(const char* p, size_t n, v1::TensorDType dtype, std::vector<float>* scratch);

// EncodeTensorTo writes n floats as `dtype` to out (n * WireDTypeSize bytes, 2-byte aligned;
// shared memory). DecodeTensorInto decodes exactly n elements of `dtype` from p or `bytes` (size
// checked by the caller) into out. Both split the work over `pool`'s threads (the calling thread
// among them) for tensors of kParallelWireBytes (as floats) and up, in parts of at least
// kWirePartBytes; the results are the same bytes. For the coordinator's shared-memory calls,
// which copy each layer's activations in and its partial sums out (11.8 MB each way at 1024
// tokens of gpt-oss-120b): bench/rpc.sh's `shm` columns time it with one thread and with a pool.
// nullptr or a one-thread pool: the calling thread alone. The parts are small so that such a
// tensor keeps all of a 16-thread pool busy (2 MB parts would leave 11 threads idle).
inline constexpr size_t kParallelWireBytes = size_t(1) << 20;
inline constexpr size_t kWirePartBytes = size_t(256) << 10;
void EncodeTensorTo(const float* x, size_t n, v1::TensorDType dtype, char* out, ThreadPool* pool = nullptr);
void DecodeTensorInto(const std::string& bytes, size_t n, v1::TensorDType dtype, float* out);
void DecodeTensorInto(const char* p, size_t n, v1::TensorDType dtype, float* out, ThreadPool* pool = nullptr);

}  // namespace mxserve
