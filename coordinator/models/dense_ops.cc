#include "coordinator/models/dense_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/bf16.h"
#include "core/status.h"

namespace mxserve {

// Reads a dense tensor as fp32 into dst (numel of `shape` floats). BF16 and F32 are accepted
// (the HF converter keeps norms in their original dtype); anything else is reported against
// BF16, the dtype §1.2 lists, with the tensor's name.
absl::Status ReadDense(const Checkpoint& ckpt, const std::string& name,
                       std::vector<int64_t> shape, ThreadPool* pool, float* dst) {
  ASSIGN_OR_RETURN(TensorView any, ckpt.Get(name));
  const DType want = any.dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
  ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name, want, shape));
  const int64_t n = t.numel();
  if (static_cast<size_t>(n) * DTypeSize(want) != t.nbytes) {
    return absl::DataLossError(absl::StrCat("tensor '", name, "' in ", t.file, ": ", t.nbytes,
                                            " bytes for ", n, " elements"));
  }
  if (want == DType::kF32) {
    std::memcpy(dst, t.data, n * sizeof(float));
    return absl::OkStatus();
  }
  // bytes may be unaligned for uint16 in the mapping: read them bytewise.
  const uint8_t* src = t.data;
  constexpr int64_t kPiece = 1 << 16;
  auto convert = [&](int64_t piece) {
    const int64_t lo = piece * kPiece, hi = std::min(n, lo + kPiece);
    for (int64_t i = lo; i < hi; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = Bf16ToFloat(h);
    }
  };
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  if (pool != nullptr && pieces > 1) {
    pool->ParallelFor(pieces, convert);
  } else {
    for (int64_t p = 0; p < pieces; ++p) convert(p);
  }
  return absl::OkStatus();
}

// The tensor's dtype and shape against the config, before anything is allocated for it: a
// config.json that claims a huge dimension fails here, naming the tensor, rather than in
// std::bad_alloc.
absl::Status CheckShape(const Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(TensorView any, ckpt.Get(name));
  const DType want = any.dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
  return ckpt.Get(name, want, shape).status();
}

absl::Status ReadInto(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> shape,
                      ThreadPool* pool, std::vector<float>& out) {
  RETURN_IF_ERROR(CheckShape(ckpt, name, shape));
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  out.assign(static_cast<size_t>(n), 0.0f);
  return ReadDense(ckpt, name, std::move(shape), pool, out.data());
}

// y = w * (x / sqrt(mean(x^2) + eps)) per row, fp32 (the sum of squares in double so the row
// scale is correctly rounded).
void RmsNorm(const float* x, const float* w, int64_t rows, int h, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    float* yr = y + r * h;
    double ss = 0;
    for (int i = 0; i < h; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float var = static_cast<float>(ss / h);
    const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var + eps)));
    for (int i = 0; i < h; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

// C[m, n] = A[m, k] * W[n, k]^T (+ bias[n] when given).
void Linear(const float* a, const float* w, const float* bias, int64_t m, int n, int k, float* c) {
  if (m == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), n, k, 1.0f, a, k, w,
              k, 0.0f, c, n);
  if (bias != nullptr) {
    for (int64_t r = 0; r < m; ++r) {
      float* cr = c + r * n;
      for (int j = 0; j < n; ++j) cr[j] += bias[j];
    }
  }
}

}  // namespace mxserve
