#include "wire/tensor_wire.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/thread_pool.h"

namespace mxserve {

size_t WireDTypeSize(v1::TensorDType dtype) {
  switch (dtype) {
    case v1::TENSOR_DTYPE_F32: return 4;
    case v1::TENSOR_DTYPE_BF16: return 2;
    default: return 0;
  }
}

namespace {

// Branch-free twins of core/bf16.h's FloatToBf16 / Bf16ToFloat (same results, NaN included),
// written so that the compiler vectorises them: this file is built with -O3 -march=x86-64-v3.
void FloatsToBf16(const float* __restrict x, size_t n, uint16_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

void Bf16ToFloats(const uint16_t* __restrict h, size_t n, float* __restrict out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(h[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}

// Bytes from protobuf are heap strings (16-byte aligned); copy only if one ever is not.
const uint16_t* AsBf16(const char* p, size_t n, std::vector<uint16_t>* tmp) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(uint16_t) == 0) {
    return reinterpret_cast<const uint16_t*>(p);
  }
  tmp->resize(n);
  if (n > 0) std::memcpy(tmp->data(), p, n * 2);
  return tmp->data();
}

// f(begin, end) over element ranges that cover [0, n): one range on the calling thread for a
// small tensor or no pool, else up to pool->size() ranges of 64-element multiples (whole cache
// lines on both sides) of at least kWirePartBytes floats' bytes each.
template <typename F>
void ForRanges(size_t n, ThreadPool* pool, const F& f) {
  const size_t bytes = n * 4;
  if (pool == nullptr || pool->size() <= 1 || bytes < kParallelWireBytes) {
    if (n > 0) f(size_t(0), n);
    return;
  }
  const size_t parts = std::min<size_t>(size_t(pool->size()), bytes / kWirePartBytes);
  const size_t step = (n / parts + 63) / 64 * 64;
  const int64_t count = static_cast<int64_t>((n + step - 1) / step);
  pool->ParallelFor(count, [&](int64_t i) {
    const size_t b = size_t(i) * step;
    f(b, std::min(n, b + step));
  });
}

}  // namespace

void EncodeTensor(const float* x, size_t n, v1::TensorDType dtype, std::string* out) {
  out->resize(n * WireDTypeSize(dtype));
  EncodeTensorTo(x, n, dtype, out->data());
}

void EncodeTensorTo(const float* x, size_t n, v1::TensorDType dtype, char* out, ThreadPool* pool) {
  if (dtype == v1::TENSOR_DTYPE_BF16) {
    uint16_t* h = reinterpret_cast<uint16_t*>(out);
    ForRanges(n, pool, [&](size_t b, size_t e) { FloatsToBf16(x + b, e - b, h + b); });
  } else {
    ForRanges(n, pool, [&](size_t b, size_t e) { std::memcpy(out + 4 * b, x + b, (e - b) * 4); });
  }
}

const float* DecodeTensor(const std::string& bytes, size_t n, v1::TensorDType dtype,
                          std::vector<float>* scratch) {
  return DecodeTensor(bytes.data(), n, dtype, scratch);
}

const float* DecodeTensor(const char* p, size_t n, v1::TensorDType dtype, std::vector<float>* scratch) {
  if (dtype == v1::TENSOR_DTYPE_F32) {
    // x86-64 and aarch64 hosts are little-endian; proto `bytes` are little-endian by contract.
    if (reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) {
      return reinterpret_cast<const float*>(p);
    }
    scratch->resize(n);
    if (n > 0) std::memcpy(scratch->data(), p, n * 4);
    return scratch->data();
  }
  scratch->resize(n);
  std::vector<uint16_t> tmp;
  Bf16ToFloats(AsBf16(p, n, &tmp), n, scratch->data());
  return scratch->data();
}

void DecodeTensorInto(const std::string& bytes, size_t n, v1::TensorDType dtype, float* out) {
  DecodeTensorInto(bytes.data(), n, dtype, out);
}

void DecodeTensorInto(const char* p, size_t n, v1::TensorDType dtype, float* out, ThreadPool* pool) {
  if (dtype == v1::TENSOR_DTYPE_F32) {
    ForRanges(n, pool, [&](size_t b, size_t e) { std::memcpy(out + b, p + 4 * b, (e - b) * 4); });
    return;
  }
  std::vector<uint16_t> tmp;
  const uint16_t* h = AsBf16(p, n, &tmp);
  ForRanges(n, pool, [&](size_t b, size_t e) { Bf16ToFloats(h + b, e - b, out + b); });
}

}  // namespace mxserve
