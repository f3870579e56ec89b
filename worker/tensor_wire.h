// Activation tensors in RunExperts' `bytes` fields: little-endian F32 or BF16 (proto
// TensorDType). Shared by the worker (ExpertService) and the coordinator (WorkerClient).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mxserve/v1/expert_worker.pb.h"

namespace mxserve {

// Bytes per element of a wire dtype; 0 for UNSPECIFIED or unknown values.
size_t WireDTypeSize(v1::TensorDType dtype);

// Writes n floats into *out (resized) as `dtype` (F32 or BF16, round to nearest even).
void EncodeTensor(const float* x, size_t n, v1::TensorDType dtype, std::string* out);

// Writes n floats as `dtype` to out (n * WireDTypeSize bytes, 2-byte aligned; shared memory).
void EncodeTensorTo(const float* x, size_t n, v1::TensorDType dtype, char* out);

// Views `bytes` (exactly n elements of `dtype`, checked by the caller) as floats: F32 bytes
// that are suitably aligned are used in place; otherwise they are decoded into *scratch.
const float* DecodeTensor(const std::string& bytes, size_t n, v1::TensorDType dtype,
                          std::vector<float>* scratch);
const float* DecodeTensor(const char* p, size_t n, v1::TensorDType dtype, std::vector<float>* scratch);

// Decodes exactly n elements of `dtype` from `bytes` (size checked by the caller) into out.
void DecodeTensorInto(const std::string& bytes, size_t n, v1::TensorDType dtype, float* out);
void DecodeTensorInto(const char* p, size_t n, v1::TensorDType dtype, float* out);

}  // namespace mxserve
