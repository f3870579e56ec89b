// Routing for the smallest batches (at most kTinyPairs token-slots), worked out by each CTA of
// the decode GEMMs that needs it instead of by a routing kernel (MXSERVE_CUDA_MOE_SELF_ROUTE=1):
// at one token the routing kernel is ~6 us of a ~45 us layer, most of it launch and dependent
// loads. Plain C++ so that the CPU tests check it against a sort (tiny_route_test.cc).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define MXSERVE_HD __host__ __device__
#else
#define MXSERVE_HD
#endif

namespace mxserve::kernels::cuda::internal {

constexpr int kTinyPairs = 4;

// What a self-routed decode GEMM reads instead of the routing kernel's output (a separate
// kernel argument: growing GemmArgs changes the code of every GEMM kernel).
struct SelfRoute {
  const int32_t* ids = nullptr;    // [pairs] expert ids
  const int32_t* local = nullptr;  // [experts] expert id -> held index, or -1
  int pairs = 0, experts = 0;
  const float* x = nullptr;        // [T][hidden] fp32 (gate_up gathers its rows from it)
  int hidden = 0, top_k = 1;
};

// What the routing kernel writes for such a batch with 8-row tiles: one tile per held expert
// hit, in ascending held index, its rows in slot order (the routing kernel's order within an
// expert is arbitrary; every row is computed independently, so nothing depends on it).
struct TinyRoute {
  int ntiles = 0;
  int e[kTinyPairs] = {}, row0[kTinyPairs] = {}, rows[kTinyPairs] = {};  // per tile
  int sorted[kTinyPairs] = {};  // row -> slot
};

// ids [pairs] (pairs <= kTinyPairs): global expert ids, -1 or out of range = skipped slot;
// local [num_experts]: held index, or -1 for an expert this worker does not hold.
MXSERVE_HD inline TinyRoute MakeTinyRoute(const int32_t* ids, int pairs, const int32_t* local,
                                          int num_experts) {
  TinyRoute r;
  int h[kTinyPairs];
  for (int i = 0; i < kTinyPairs; ++i) {
    const int e = i < pairs ? ids[i] : -1;
    h[i] = e >= 0 && e < num_experts ? local[e] : -1;
  }
  int row = 0, prev = -1;
  for (int n = 0; n < kTinyPairs; ++n) {  // the next held expert above prev, if any
    int next = -1;
    for (int i = 0; i < kTinyPairs; ++i) {
      if (h[i] > prev && (next < 0 || h[i] < next)) next = h[i];
    }
    if (next < 0) break;
    r.e[r.ntiles] = next;
    r.row0[r.ntiles] = row;
    for (int i = 0; i < kTinyPairs; ++i) {
      if (h[i] == next) r.sorted[row++] = i;
    }
    r.rows[r.ntiles] = row - r.row0[r.ntiles];
    ++r.ntiles;
    prev = next;
  }
  return r;
}

}  // namespace mxserve::kernels::cuda::internal
