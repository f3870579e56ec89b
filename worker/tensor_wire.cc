#include "worker/tensor_wire.h"

#include <cstdint>
#include <cstring>

#include "core/bf16.h"

namespace mxserve {

size_t WireDTypeSize(v1::TensorDType dtype) {
  switch (dtype) {
    case v1::TENSOR_DTYPE_F32: return 4;
    case v1::TENSOR_DTYPE_BF16: return 2;
    default: return 0;
  }
}

void EncodeTensor(const float* x, size_t n, v1::TensorDType dtype, std::string* out) {
  if (dtype == v1::TENSOR_DTYPE_BF16) {
    out->resize(n * 2);
    char* p = out->data();
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = FloatToBf16(x[i]);
      std::memcpy(p + 2 * i, &h, 2);
    }
  } else {
    out->resize(n * 4);
    if (n > 0) std::memcpy(out->data(), x, n * 4);
  }
}

const float* DecodeTensor(const std::string& bytes, size_t n, v1::TensorDType dtype,
                          std::vector<float>* scratch) {
  const char* p = bytes.data();
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
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    (*scratch)[i] = Bf16ToFloat(h);
  }
  return scratch->data();
}

void DecodeTensorInto(const std::string& bytes, size_t n, v1::TensorDType dtype, float* out) {
  const char* p = bytes.data();
  if (dtype == v1::TENSOR_DTYPE_F32) {
    if (n > 0) std::memcpy(out, p, n * 4);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = Bf16ToFloat(h);
  }
}

}  // namespace mxserve
