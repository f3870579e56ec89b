// Internals of the fast CPU MoE path that tests and the benchmark reach into: which vector
// code path runs (chosen at run time from the CPU, or forced to compare paths).
#pragma once

#include "kernels/moe/moe.h"

namespace mxserve::kernels::internal {

enum class MoeIsa {
  kScalar,  // portable C++; also what non-x86 builds get
  kAvx2,    // AVX2 + FMA: pshufb nibble LUT -> int8 -> float (needs -march with AVX2)
  kAvx512,  // AVX-512F: vpermps over a 16-entry float LUT pre-multiplied by the block scale
};

// The best path this binary can run on this CPU (or the one MXSERVE_MOE_ISA names, if available).
MoeIsa BestMoeIsa();
bool MoeIsaAvailable(MoeIsa isa);
const char* MoeIsaName(MoeIsa isa);

// MoeForwardFast with the path forced (InvalidArgument if unavailable on this CPU/build).
absl::Status MoeForwardFastIsa(const MoeLayer& layer, const MoeBatch& batch, float* out,
                               ThreadPool* pool, MoeIsa isa);

}  // namespace mxserve::kernels::internal
