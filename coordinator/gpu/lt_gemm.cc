#include "coordinator/gpu/lt_gemm.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mxserve::gpu {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

absl::Status LtCheck(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasLtGetStatusString(s)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create() {
  std::unique_ptr<LtGemm> g(new LtGemm());
  RETURN_IF_ERROR(LtCheck(cublasLtCreate(&g->handle_), "cublasLtCreate"));
  RETURN_IF_ERROR(g->workspace_.Reserve(kWorkspaceBytes));
  return g;
}

LtGemm::~LtGemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

// Row-major y[m, n] = x[m, k] w[n, k]^T is column-major y^T[n, m] = op_T(w)[n, k] x^T[k, m]:
// A = w stored k x n (ld k) transposed, B = x stored k x m (ld k), D = y stored n x m (ld n).
absl::StatusOr<const LtGemm::Plan*> LtGemm::GetPlan(bool bf16, int m, int n, int k) {
  const auto key = std::make_tuple(bf16, m, n, k);
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  Plan p;
  RETURN_IF_ERROR(LtCheck(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                          "cublasLtMatmulDescCreate"));
  const cublasOperation_t trans_a = CUBLAS_OP_T;
  RETURN_IF_ERROR(LtCheck(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                         &trans_a, sizeof(trans_a)),
                          "TRANSA"));
  RETURN_IF_ERROR(LtCheck(cublasLtMatrixLayoutCreate(&p.a, in, k, n, k), "layout A"));
  RETURN_IF_ERROR(LtCheck(cublasLtMatrixLayoutCreate(&p.b, in, k, m, k), "layout B"));
  RETURN_IF_ERROR(LtCheck(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, n, m, n), "layout D"));
  cublasLtMatmulPreference_t pref = nullptr;
  RETURN_IF_ERROR(LtCheck(cublasLtMatmulPreferenceCreate(&pref), "preference"));
  const size_t ws = workspace_.bytes();
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.d, p.d,
                                                           pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
    return absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for ", m, "x", n, "x", k,
                                            bf16 ? " bf16" : " fp32"));
  }
  p.algo = result.algo;
  return &plans_.emplace(key, p).first->second;
}

absl::Status LtGemm::Run(bool bf16, const void* x, const void* w, int m, int n, int k, float* y,
                         cudaStream_t stream) {
  if (m == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const Plan* p, GetPlan(bf16, m, n, k));
  const float alpha = 1.0f, beta = 0.0f;
  return LtCheck(cublasLtMatmul(handle_, p->op, &alpha, w, p->a, x, p->b, &beta, y, p->d, y, p->d,
                                &p->algo, workspace_.get(), workspace_.bytes(), stream),
                 "cublasLtMatmul");
}

absl::Status LtGemm::LinearBf16(const uint16_t* x, const uint16_t* w, int m, int n, int k,
                                float* y, cudaStream_t stream) {
  return Run(true, x, w, m, n, k, y, stream);
}

absl::Status LtGemm::LinearF32(const float* x, const float* w, int m, int n, int k, float* y,
                               cudaStream_t stream) {
  return Run(false, x, w, m, n, k, y, stream);
}

}  // namespace mxserve::gpu
