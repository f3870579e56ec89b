// wgmma.mma_async wrappers (m64nNk16, bf16 in, fp32 accumulators), their inline-asm operand lists
// generated with Boost.Preprocessor: WgmmaRs<BN> takes the A operand from registers (one
// specialization per token-tile width BN: the register-A GEMMs of lab/wgmma_ldg.cu and
// moe_cuda_wgmma_tma.cu); WgmmaSs128 takes both operands from shared memory (lab/wgmma_ss.cu).
// The asm text is the one the hand-written wrappers had, operand for operand. Private to
// kernels/cuda; sm_90a only.
#pragma once

#include <cstdint>

#include <boost/preprocessor/arithmetic/add.hpp>
#include <boost/preprocessor/control/if.hpp>
#include <boost/preprocessor/punctuation/comma_if.hpp>
#include <boost/preprocessor/repetition/repeat.hpp>
#include <boost/preprocessor/stringize.hpp>

// "%0,%1,...,%(M-1)": the M accumulator registers in the asm text.
#define MXSERVE_WGMMA_REG_(z, i, _) BOOST_PP_IF(i, ",", "") "%" BOOST_PP_STRINGIZE(i)
#define MXSERVE_WGMMA_REGS(M) BOOST_PP_REPEAT(M, MXSERVE_WGMMA_REG_, _)
// "+f"(d[0]), ..., "+f"(d[M-1]): the M accumulators as read-write operands.
#define MXSERVE_WGMMA_ACC_(z, i, _) BOOST_PP_COMMA_IF(i) "+f"(d[i])
#define MXSERVE_WGMMA_ACCS(M) BOOST_PP_REPEAT(M, MXSERVE_WGMMA_ACC_, _)
// Operand number M + k, as text.
#define MXSERVE_WGMMA_OP(M, k) "%" BOOST_PP_STRINGIZE(BOOST_PP_ADD(M, k))

// D += A x B for a token tile of N columns (M = N / 2 accumulators per thread), A = a0..a3, B at
// desc; the scale-d predicate is the constant 1 (accumulate).
#define MXSERVE_WGMMA_RS(N, M)                                                                                     \
  template <>                                                                                                      \
  __device__ __forceinline__ void WgmmaRs<N>(float (&d)[M], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,    \
                                             uint64_t desc) {                                                      \
    static_assert(2 * M == N);                                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " MXSERVE_WGMMA_OP(M, 5) ", 0;\n"                               \
                 "wgmma.mma_async.sync.aligned.m64n" BOOST_PP_STRINGIZE(N) "k16.f32.bf16.bf16 "                    \
                 "{" MXSERVE_WGMMA_REGS(M) "}, {" MXSERVE_WGMMA_OP(M, 0) "," MXSERVE_WGMMA_OP(M, 1) ","            \
                 MXSERVE_WGMMA_OP(M, 2) "," MXSERVE_WGMMA_OP(M, 3) "}, " MXSERVE_WGMMA_OP(M, 4) ", p, 1, 1, 0;\n"  \
                 "}\n"                                                                                             \
                 : MXSERVE_WGMMA_ACCS(M)                                                                           \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));                                         \
  }

namespace mxserve::kernels::cuda::internal {
namespace {

template <int BN>
__device__ __forceinline__ void WgmmaRs(float (&d)[BN / 2], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint64_t desc);
MXSERVE_WGMMA_RS(8, 4)
MXSERVE_WGMMA_RS(16, 8)
MXSERVE_WGMMA_RS(24, 12)
MXSERVE_WGMMA_RS(32, 16)
MXSERVE_WGMMA_RS(40, 20)
MXSERVE_WGMMA_RS(48, 24)
MXSERVE_WGMMA_RS(64, 32)
MXSERVE_WGMMA_RS(96, 48)
MXSERVE_WGMMA_RS(128, 64)
MXSERVE_WGMMA_RS(160, 80)  // the persistent 192-row kernel's partial tiles
MXSERVE_WGMMA_RS(192, 96)
MXSERVE_WGMMA_RS(256, 128)

// D += A x B for 128 token columns, A and B from shared memory (descriptors da, db).
__device__ __forceinline__ void WgmmaSs128(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " MXSERVE_WGMMA_OP(64, 2) ", 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
               "{" MXSERVE_WGMMA_REGS(64) "}, " MXSERVE_WGMMA_OP(64, 0) ", " MXSERVE_WGMMA_OP(64, 1)
               ", p, 1, 1, 0, 0;\n"
               "}\n"
               : MXSERVE_WGMMA_ACCS(64)
               : "l"(da), "l"(db), "r"(1));
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
