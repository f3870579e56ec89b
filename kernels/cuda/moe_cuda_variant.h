// The experiment settings of the CUDA path: what kernels/cuda/lab sets from a benchmark's
// MXSERVE_PLAN option so that one configuration can be timed against another. Production never
// sets them and reads no environment: every default below is what kAuto runs. Plain C++.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/moe_cuda_tiny_route.h"  // FusedPinned, FusedPlan, SelfRoute

namespace mxserve::kernels::cuda::internal {

struct CombineArgs;
struct GemmArgs;

// A GEMM of a path that only the lab builds (LaunchGemm's contract; kernels/cuda/lab).
using LabGemmFn = int (*)(const GemmArgs& a, bool gate_up, int path, bool one_mul, int max_tiles,
                          void* stream);
// What a lab launcher returns for settings that end on a production configuration: the caller
// launches its own.
inline constexpr int kLabDeclines = -2;
// The K-streamed decode kernel's configurations only the lab builds (LaunchDecodeKst's contract;
// kst_cfg, pinned slices at 16 rows and more, 32-row tiles), or kLabDeclines.
using LabKstFn = int (*)(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int tile_rows,
                         int max_tiles, void* stream);
// The paired decode launch in the forms only the lab builds (LaunchDecodeKstPair's contract):
// queue false, the fixed item order; stamps, the phase stamps (PairStampsReport).
using LabPairFn = int (*)(const GemmArgs& g, const GemmArgs& d, bool one_mul, int max_tiles, const CombineArgs& c,
                          int32_t* done, bool queue, bool stamps, void* stream);
// The fused layer in the configurations only the lab builds (FusedBuilt's other than kAuto's
// kFusedWarps x kFusedParts): a cudaError_t. Its stamps' table (FusedStampsReport), given the
// launch's warps, parts, slots and shared memory.
using LabFusedFn = int (*)(const GemmArgs& g, const GemmArgs& d, const SelfRoute& sr, const FusedPlan& pl,
                           bool one_mul, void* stream);
using LabFusedStampsFn = std::string (*)(const int (&plan)[4]);
// The TMA-fed wgmma GEMM in the forms only the lab builds (LaunchWgmmaTmaGemm's contract: tile
// height bn, persistent or one CTA per item).
using LabWgmmaFn = int (*)(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, bool persist,
                           void* stream);

struct Variant {
  int forced_spec = -1;          // kAuto pinned to this path spec (moe_cuda_plan.h); -1: none
  bool mix = true;               // kAuto may cut a call's tiles in two heights
  bool mix_serial = false;       // the second height on the call's stream, not the side stream
  bool decode_wgmma = true;      // 16/24 rows alone run the TMA-fed wgmma kernel (alone_path)
  int paired_cost = 0;           // 0: by the card (PairedCostHolds), 1: always weighed, 2: never
  bool early_weights = true;     // kst GEMMs ask for their first weights before the wait
  bool fused_host_route = true;  // the fused kernel's route made on the host when ids are there
  bool fused_held_table = false; // the fused kernel reads the held-index table for a range too
  int decode_pin = 0;            // 0 default, 2 bulk, 3 ring, 5 kst (2-chunk), 6 kst4 (4-chunk)
  bool smem_a = true;            // the register ring's activations through shared memory
  int kst_cfg = 0;               // 0 default, 1 w16, 2 x2, 3 x2w8, 4 x1, 5 w12, 6 w14
  int kst_grid_pm = 1000;        // the kst grid cut to this per-mille
  int l2_promotion = 0;          // kst tensor maps: 0 64 B, 1 256 B, 2 none, 3 128 B
  int kst_pair = 2;              // 0 two launches, 1 paired in a fixed order, 2 paired from a queue
  bool pair_combine = true;      // the combine folded into the paired launch
  bool pair_stamps = false;      // the paired launch records its phase ends
  bool gather_rows = false;      // large batches place and gather per slot row, not per token
  bool pdl = true;               // programmatic dependent launch between a call's kernels
  bool evict_first = true;       // the fused kernel's weight copies under L2 evict_first
  FusedPinned fused;             // the fused kernel's configuration, or off
  int fused_probe = 0;           // FusedArgs::probe (0: none; 7: stamps)
  int fused_defer = 0;           // 0 default (warp), 1 off, 2 warp
  int fused_down_pct = -1;       // the down units' weight in the grid's split, percent; -1: 0
  bool fused_stride = false;     // the gate_up units strided over the grid
  bool fused_stamps_ctas = false;  // FusedStampsReport adds each CTA's SM and phase ends
  int wgmma_cfg = 0;             // 0 default, 1 tma, 2 persist; 3.. the lab's ldg configurations
  bool var_width = true;         // the persistent wgmma form's wgmma width per item
  LabGemmFn lab_gemm = nullptr;  // the lab's GEMMs (wgmma ss paths, ldg configurations)
  LabKstFn lab_kst = nullptr;    // the lab's kst configurations
  LabPairFn lab_pair = nullptr;  // the lab's paired launches
  LabWgmmaFn lab_wgmma = nullptr;  // the lab's wgmma forms
  LabFusedFn lab_fused = nullptr;              // the lab's fused configurations
  LabFusedStampsFn lab_fused_stamps = nullptr;  // and their stamps
};

// The settings in force: the defaults unless the lab set others (SetVariant, before the first
// call and never while one runs).
const Variant& CurrentVariant();
void SetVariant(const Variant& v);

}  // namespace mxserve::kernels::cuda::internal
