// MoeForwardFast: tokens grouped by expert (counting sort); each (expert, row tile) is one
// task that decodes every 32-element block of its rows once, in registers, and applies it to
// a tile of the expert's tokens (up to 4 with AVX-512, 8 with AVX2). Tasks write disjoint
// outputs and the per-token combine runs in slot order, so the result does not depend on the
// number of threads.
//
// Activations are reordered inside each 32-block into the lane order in which a kernel family
// decodes nibbles (KernelSet::perm), so decoded weights line up with plain vector loads and
// no shuffle is spent restoring element order in the inner loop. The vector path is chosen
// at run time (AVX-512F through a target attribute, so a default x86-64-v3 build still uses
// it on CPUs that have it); each path is deterministic, but paths differ in summation order.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/thread_pool.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_fast.h"
#include "kernels/moe/mxfp4_block.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MXS_MOE_HAVE_AVX512 1
#define MXS_TARGET_AVX512 __attribute__((target("avx512f")))
#else
#define MXS_MOE_HAVE_AVX512 0
#endif
#if defined(__AVX2__) && defined(__FMA__)
#define MXS_MOE_HAVE_AVX2 1
#else
#define MXS_MOE_HAVE_AVX2 0
#endif

namespace mxserve::kernels {
namespace internal {
namespace {

constexpr int kMaxTokTile = 8;    // tokens sharing one decoded block
constexpr int kGateUpTile = 64;   // gate_up rows per task (32 SwiGLU outputs)
constexpr int kDownTile = 32;     // down rows per task
constexpr int kTokenChunk = 512;  // tokens per pass (bounds the scratch memory)

// Where element w (0..31) of a 32-block goes in the activation layout a kernel family reads:
// the kernels decode a block's nibbles in their own lane order and read activations in the
// same order, so no shuffle is spent to restore element order.
using BlockPerm = std::array<uint8_t, 32>;

// [even 16 | odd 16]: low nibbles, then high nibbles, in byte order (scalar and AVX2).
BlockPerm EvenOddPerm() {
  BlockPerm p{};
  for (int w = 0; w < 32; ++w) p[w] = static_cast<uint8_t>((w & 1) ? 16 + (w >> 1) : (w >> 1));
  return p;
}

struct ScaleTables {
  alignas(64) float lut[256][16];  // E2M1 values times 2^(s-127): a scaled LUT is one load
  float full[256];  // 2^(s-127), NaN for 0xFF
  float half[256];  // 2^(s-128): for the doubled int8 E2M1 table
  ScaleTables() {
    for (int s = 0; s < 256; ++s) {
      full[s] = E8M0ToFloat(static_cast<uint8_t>(s));
      half[s] = full[s] * 0.5f;
      for (int i = 0; i < 16; ++i) lut[s][i] = mxfp4::kE2M1[i] * full[s];
    }
  }
};
const ScaleTables& Scales() {
  static const ScaleTables t;
  return t;
}

// A micro-kernel: adds to res[r * ldres + n] (r < R, n < N) the dot products over blocks
// [b0, b1) of rows (blocks + r*row_bytes, scales + r*row_blocks) with xs[n] (permuted).
using Kernel = void (*)(const uint8_t* blocks, const uint8_t* scales, int64_t row_bytes,
                        int64_t row_blocks, int b0, int b1, const float* const* xs, float* res,
                        int ldres);

struct KernelSet {
  std::array<Kernel, kMaxTokTile + 1> fn{};  // indexed by token count 1..8
  std::array<int, kMaxTokTile + 1> rows{};   // rows per call (R) for that token count
  int max_tokens = kMaxTokTile;              // token tile size
  BlockPerm perm = EvenOddPerm();            // activation layout inside each 32-block
};

// ---------------------------------------------------------------- scalar
template <int R, int N>
void KernelScalar(const uint8_t* blocks, const uint8_t* scales, int64_t row_bytes,
                  int64_t row_blocks, int b0, int b1, const float* const* xs, float* res,
                  int ldres) {
  for (int r = 0; r < R; ++r) {
    float acc[N] = {};
    for (int b = b0; b < b1; ++b) {
      const float s = Scales().full[scales[r * row_blocks + b]];
      const uint8_t* p = blocks + r * row_bytes + b * 16;
      float w[32];
      for (int j = 0; j < 16; ++j) {
        w[j] = mxfp4::kE2M1[p[j] & 0x0F] * s;
        w[16 + j] = mxfp4::kE2M1[p[j] >> 4] * s;
      }
      for (int n = 0; n < N; ++n) {
        const float* x = xs[n] + b * 32;
        float a = 0.0f;
        for (int j = 0; j < 32; ++j) a += w[j] * x[j];
        acc[n] += a;
      }
    }
    for (int n = 0; n < N; ++n) res[r * ldres + n] += acc[n];
  }
}

template <int... Ns>
KernelSet MakeScalarSet(std::integer_sequence<int, Ns...>) {
  KernelSet k;
  ((k.fn[Ns + 1] = &KernelScalar<1, Ns + 1>, k.rows[Ns + 1] = 1), ...);
  return k;
}

// ---------------------------------------------------------------- AVX2 + FMA
#if MXS_MOE_HAVE_AVX2
inline float HsumAvx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One block -> 4 x 8 floats in [even 0..7, even 8..15, odd 0..7, odd 8..15] order.
inline void DecodeBlockAvx2(const uint8_t* p, float scale_half, __m256 w[4]) {
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(v, mask));
  const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(v, 4), mask));
  const __m256 s = _mm256_set1_ps(scale_half);
  w[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), s);
  w[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo))), s);
  w[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), s);
  w[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi))), s);
}

// A = independent accumulators per (row, token), so that few tokens still fill the FMA pipes.
template <int R, int N, int A>
void KernelAvx2(const uint8_t* blocks, const uint8_t* scales, int64_t row_bytes,
                int64_t row_blocks, int b0, int b1, const float* const* xs, float* res,
                int ldres) {
  const float* half = Scales().half;
  __m256 acc[R][N][A];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n)
      for (int a = 0; a < A; ++a) acc[r][n][a] = _mm256_setzero_ps();
  for (int b = b0; b < b1; ++b) {
    for (int r = 0; r < R; ++r) {
      __m256 w[4];
      DecodeBlockAvx2(blocks + r * row_bytes + b * 16, half[scales[r * row_blocks + b]], w);
      for (int n = 0; n < N; ++n) {
        const float* x = xs[n] + b * 32;
        for (int i = 0; i < 4; ++i) {
          acc[r][n][i % A] = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(x + 8 * i), acc[r][n][i % A]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < N; ++n) {
      __m256 s = acc[r][n][0];
      for (int a = 1; a < A; ++a) s = _mm256_add_ps(s, acc[r][n][a]);
      res[r * ldres + n] += HsumAvx2(s);
    }
  }
}

KernelSet MakeAvx2Set() {
  KernelSet k;
  k.fn = {nullptr,
          &KernelAvx2<2, 1, 2>,
          &KernelAvx2<2, 2, 2>,
          &KernelAvx2<1, 3, 2>,
          &KernelAvx2<1, 4, 2>,
          &KernelAvx2<1, 5, 1>,
          &KernelAvx2<1, 6, 1>,
          &KernelAvx2<1, 7, 1>,
          &KernelAvx2<1, 8, 1>};
  k.rows = {0, 2, 2, 1, 1, 1, 1, 1, 1};
  return k;
}
#endif  // MXS_MOE_HAVE_AVX2

// ---------------------------------------------------------------- AVX-512F
#if MXS_MOE_HAVE_AVX512
// GCC 12's avx512fintrin.h trips -W(maybe-)uninitialized on its own _mm512_undefined_*.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <int R, int N, int A>
MXS_TARGET_AVX512 void KernelAvx512(const uint8_t* blocks, const uint8_t* scales,
                                    int64_t row_bytes, int64_t row_blocks, int b0, int b1,
                                    const float* const* xs, float* res, int ldres) {
  const ScaleTables& tables = Scales();
  const __m512i shift_lo = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24);
  const __m512i shift_hi = _mm512_add_epi32(shift_lo, _mm512_set1_epi32(4));
  __m512 acc[R][N][A];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n)
      for (int a = 0; a < A; ++a) acc[r][n][a] = _mm512_setzero_ps();
  for (int b = b0; b < b1; ++b) {
    for (int r = 0; r < R; ++r) {
      // The LUT times the block scale (precomputed per scale byte: a load, not a multiply),
      // then vpermps picks by the nibble (low 4 bits of the index): two permutes decode 32
      // elements, already scaled (0xFF -> NaN throughout).
      // The 16 bytes are broadcast to the four 128-bit lanes (a load, no shuffle) and a
      // per-lane variable shift brings byte 4*(d%4) + d/4 to lane d, so the only shuffles
      // are the two permutes; Avx512Perm() lays activations out in that lane order.
      const __m512 l = _mm512_load_ps(tables.lut[scales[r * row_blocks + b]]);
      const __m512i v = _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + r * row_bytes + b * 16)));
      const __m512 we = _mm512_permutexvar_ps(_mm512_srlv_epi32(v, shift_lo), l);
      const __m512 wo = _mm512_permutexvar_ps(_mm512_srlv_epi32(v, shift_hi), l);
      for (int n = 0; n < N; ++n) {
        const float* x = xs[n] + b * 32;
        acc[r][n][0] = _mm512_fmadd_ps(we, _mm512_loadu_ps(x), acc[r][n][0]);
        acc[r][n][A - 1] = _mm512_fmadd_ps(wo, _mm512_loadu_ps(x + 16), acc[r][n][A - 1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < N; ++n) {
      __m512 s = acc[r][n][0];
      if constexpr (A == 2) s = _mm512_add_ps(s, acc[r][n][1]);
      res[r * ldres + n] += _mm512_reduce_add_ps(s);
    }
  }
}

// Four rows share each activation load (loads, not FMAs, were the limit with two rows);
// four tokens share each decoded block. 16 accumulators + decode temporaries fit in 32 zmm.
// Lane d holds byte 4*(d%4) + d/4: its low nibble (even element) is at position d, its high
// nibble (odd element) at 16 + d.
BlockPerm Avx512Perm() {
  BlockPerm p{};
  for (int d = 0; d < 16; ++d) {
    const int byte = 4 * (d % 4) + d / 4;
    p[2 * byte] = static_cast<uint8_t>(d);
    p[2 * byte + 1] = static_cast<uint8_t>(16 + d);
  }
  return p;
}

KernelSet MakeAvx512Set() {
  KernelSet k;
  k.perm = Avx512Perm();
  k.fn = {nullptr, &KernelAvx512<4, 1, 2>, &KernelAvx512<4, 2, 2>, &KernelAvx512<4, 3, 1>,
          &KernelAvx512<4, 4, 1>};
  k.rows = {0, 4, 4, 4, 4};
  k.max_tokens = 4;
  return k;
}
#pragma GCC diagnostic pop
#endif  // MXS_MOE_HAVE_AVX512

const KernelSet& Kernels(MoeIsa isa) {
  static const KernelSet scalar = MakeScalarSet(std::make_integer_sequence<int, kMaxTokTile>());
#if MXS_MOE_HAVE_AVX2
  static const KernelSet avx2 = MakeAvx2Set();
  if (isa == MoeIsa::kAvx2) return avx2;
#endif
#if MXS_MOE_HAVE_AVX512
  static const KernelSet avx512 = MakeAvx512Set();
  if (isa == MoeIsa::kAvx512) return avx512;
#endif
  return scalar;
}

// Asks for the next row group while this one computes: one core streaming four rows at a time
// otherwise leaves DRAM bandwidth unused at 1-2 tokens per expert (measured ~1.4x at 1 token).
inline void PrefetchRows(const Mxfp4Matrix& m, int64_t row, int nrows, int64_t row_bytes) {
#if defined(__x86_64__)
  const char* p = reinterpret_cast<const char*>(m.blocks + row * row_bytes);
  for (int64_t off = 0; off < nrows * row_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
  const char* sc = reinterpret_cast<const char*>(m.scales + row * (m.cols / 32));
  for (int64_t off = 0; off < nrows * (m.cols / 32); off += 64) _mm_prefetch(sc + off, _MM_HINT_T0);
#endif
}

// res[r * ntok + n] = row (row0 + r) of m . xs[n], for r < nrows, n < ntok. The tiling (even
// token tiles of at most ks.max_tokens, K chunks sized so a token tile's activations stay in
// L1) depends only on the shapes, so every output is summed in the same order whatever thread
// computes it.
void DotTile(const KernelSet& ks, const Mxfp4Matrix& m, int row0, int nrows,
             const float* const* xs, int ntok, float* res) {
  std::fill(res, res + static_cast<int64_t>(nrows) * ntok, 0.0f);
  const int nblk = m.cols / 32;
  const int64_t row_bytes = static_cast<int64_t>(nblk) * 16;
  // Even token tiles: 9 tokens run as 5 + 4 rather than 8 + 1.
  const int ntiles = (ntok + ks.max_tokens - 1) / ks.max_tokens;
  const int per_tile = (ntok + ntiles - 1) / ntiles;
  for (int n0 = 0; n0 < ntok; n0 += per_tile) {
    const int n = std::min(per_tile, ntok - n0);
    const int target = std::max(8, 32768 / (n * 128));
    const int nchunks = (nblk + target - 1) / target;
    const int kc = (nblk + nchunks - 1) / nchunks;
    const int R = ks.rows[n];
    for (int b0 = 0; b0 < nblk; b0 += kc) {
      const int b1 = std::min(nblk, b0 + kc);
      for (int r = 0; r < nrows; r += R) {
        const int64_t row = row0 + r;
        if (b0 == 0 && n0 == 0 && row + 2 * R <= m.rows) PrefetchRows(m, row + R, R, row_bytes);
        ks.fn[n](m.blocks + row * row_bytes, m.scales + row * nblk, row_bytes, nblk, b0, b1,
                 xs + n0, res + static_cast<int64_t>(r) * ntok + n0, ntok);
      }
    }
  }
}

// Tasks go out in a few contiguous runs per thread rather than one by one: consecutive tasks
// are consecutive rows of one expert, so each thread then streams one region and its
// next-row prefetch lands in its own next task (~12% at 1 token, ~7% at 16 on 2 cores).
void RunTasks(ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& fn) {
  if (pool == nullptr || n <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const int64_t runs = std::min<int64_t>(n, 4 * static_cast<int64_t>(pool->size()));
  pool->ParallelFor(runs, [&](int64_t p) {
    for (int64_t i = n * p / runs; i < n * (p + 1) / runs; ++i) fn(i);
  });
}

}  // namespace

bool MoeIsaAvailable(MoeIsa isa) {
  switch (isa) {
    case MoeIsa::kScalar:
      return true;
    case MoeIsa::kAvx2:
      return MXS_MOE_HAVE_AVX2 != 0;
    case MoeIsa::kAvx512:
#if MXS_MOE_HAVE_AVX512
      return __builtin_cpu_supports("avx512f");
#else
      return false;
#endif
  }
  return false;
}

MoeIsa BestMoeIsa() {
  static const MoeIsa best = [] {
    // MXSERVE_MOE_ISA=scalar|avx2|avx512 pins the path (to reproduce a result from a machine
    // without AVX-512); an unavailable choice falls back to the best available.
    if (const char* want = std::getenv("MXSERVE_MOE_ISA")) {
      for (MoeIsa isa : {MoeIsa::kScalar, MoeIsa::kAvx2, MoeIsa::kAvx512}) {
        if (std::string_view(want) == MoeIsaName(isa) && MoeIsaAvailable(isa)) return isa;
      }
    }
    if (MoeIsaAvailable(MoeIsa::kAvx512)) return MoeIsa::kAvx512;
    if (MoeIsaAvailable(MoeIsa::kAvx2)) return MoeIsa::kAvx2;
    return MoeIsa::kScalar;
  }();
  return best;
}

const char* MoeIsaName(MoeIsa isa) {
  switch (isa) {
    case MoeIsa::kScalar:
      return "scalar";
    case MoeIsa::kAvx2:
      return "avx2";
    case MoeIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

namespace {

// One validated chunk of tokens; out rows [0, T) are overwritten.
void ForwardChunk(const MoeLayer& layer, const MoeBatch& batch, float* out, ThreadPool* pool,
                  const KernelSet& ks) {
  const int T = batch.num_tokens, H = layer.hidden, I = layer.intermediate, k = batch.top_k;
  const int E = static_cast<int>(layer.experts.size());
  std::fill(out, out + static_cast<int64_t>(T) * H, 0.0f);
  if (T == 0) return;

  // Counting sort of (token, slot) assignments by expert, tokens ascending within an expert.
  std::vector<int> start(E + 1, 0);
  for (int64_t i = 0; i < static_cast<int64_t>(T) * k; ++i) {
    if (batch.expert_ids[i] >= 0) ++start[batch.expert_ids[i] + 1];
  }
  for (int e = 0; e < E; ++e) start[e + 1] += start[e];
  const int A = start[E];
  std::vector<int> fill(start.begin(), start.end() - 1);
  std::vector<int> token_of(A);
  std::vector<int> assignment_of(static_cast<int64_t>(T) * k, -1);
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) {
      const int e = batch.expert_ids[static_cast<int64_t>(t) * k + j];
      if (e < 0) continue;
      const int a = fill[e]++;
      token_of[a] = t;
      assignment_of[static_cast<int64_t>(t) * k + j] = a;
    }
  }

  // Scratch kept per calling thread across calls: fresh multi-MB vectors would be new mmap'd
  // pages every call, and their page faults cost more than the small-batch kernel itself.
  // (Plain pointers below: inside the task lambdas, the name of a thread_local would mean the
  // worker thread's own, empty copy.)
  thread_local std::vector<float> xp_buf, act_buf, y_buf;
  xp_buf.resize(static_cast<int64_t>(T) * H);
  act_buf.resize(static_cast<int64_t>(A) * I);
  y_buf.resize(static_cast<int64_t>(A) * H);
  float* const xp = xp_buf.data();
  float* const act = act_buf.data();
  float* const y = y_buf.data();
  for (int64_t t = 0; t < T; ++t) {
    for (int c = 0; c < H; ++c) xp[t * H + (c & ~31) + ks.perm[c & 31]] = batch.x[t * H + c];
  }

  struct Task {
    int expert;
    int row0;
  };
  std::vector<Task> gu_tasks, down_tasks;
  for (int e = 0; e < E; ++e) {
    if (start[e + 1] == start[e]) continue;
    for (int r = 0; r < 2 * I; r += kGateUpTile) gu_tasks.push_back({e, r});
    for (int r = 0; r < H; r += kDownTile) down_tasks.push_back({e, r});
  }

  const float alpha = layer.swiglu_alpha, limit = layer.swiglu_limit;
  const bool plain = layer.activation == MoeActivation::kSwiGlu;
  RunTasks(pool, static_cast<int64_t>(gu_tasks.size()), [&](int64_t i) {
    const Task task = gu_tasks[i];
    const ExpertWeights& w = *layer.experts[task.expert];
    const int a0 = start[task.expert], n = start[task.expert + 1] - a0;
    thread_local std::vector<const float*> xs;
    thread_local std::vector<float> res;
    xs.resize(n);
    res.resize(static_cast<size_t>(kGateUpTile) * n);
    for (int j = 0; j < n; ++j) xs[j] = xp + static_cast<int64_t>(token_of[a0 + j]) * H;
    DotTile(ks, w.gate_up, task.row0, kGateUpTile, xs.data(), n, res.data());
    for (int p = 0; p < kGateUpTile / 2; ++p) {
      const int rg = task.row0 + 2 * p;
      const float bg = w.gate_up_bias ? w.gate_up_bias[rg] : 0.0f;
      const float bu = w.gate_up_bias ? w.gate_up_bias[rg + 1] : 0.0f;
      const int dst = (rg / 2 & ~31) + ks.perm[rg / 2 & 31];
      for (int j = 0; j < n; ++j) {
        const float g = res[(2 * p) * n + j] + bg, u = res[(2 * p + 1) * n + j] + bu;
        act[static_cast<int64_t>(a0 + j) * I + dst] =
            plain ? SiluMul(g, u) : SwiGlu(g, u, alpha, limit);
      }
    }
  });

  RunTasks(pool, static_cast<int64_t>(down_tasks.size()), [&](int64_t i) {
    const Task task = down_tasks[i];
    const ExpertWeights& w = *layer.experts[task.expert];
    const int a0 = start[task.expert], n = start[task.expert + 1] - a0;
    thread_local std::vector<const float*> xs;
    thread_local std::vector<float> res;
    xs.resize(n);
    res.resize(static_cast<size_t>(kDownTile) * n);
    for (int j = 0; j < n; ++j) xs[j] = act + static_cast<int64_t>(a0 + j) * I;
    DotTile(ks, w.down, task.row0, kDownTile, xs.data(), n, res.data());
    for (int r = 0; r < kDownTile; ++r) {
      const float bias = w.down_bias ? w.down_bias[task.row0 + r] : 0.0f;
      for (int j = 0; j < n; ++j) {
        y[static_cast<int64_t>(a0 + j) * H + task.row0 + r] = res[r * n + j] + bias;
      }
    }
  });

  // Weighted combine in slot order, exactly as the reference adds.
  RunTasks(pool, T, [&](int64_t t) {
    float* o = out + t * H;
    for (int j = 0; j < k; ++j) {
      const int a = assignment_of[t * k + j];
      if (a < 0) continue;
      const float wt = batch.weights[t * k + j];
      const float* ya = y + static_cast<int64_t>(a) * H;
      for (int h = 0; h < H; ++h) o[h] += wt * ya[h];
    }
  });
}

}  // namespace

absl::Status MoeForwardFastIsa(const MoeLayer& layer, const MoeBatch& batch, float* out,
                               ThreadPool* pool, MoeIsa isa) {
  if (!MoeIsaAvailable(isa)) {
    return absl::InvalidArgumentError(
        std::string("MoE kernel path not available on this CPU/build: ") + MoeIsaName(isa));
  }
  absl::Status status = ValidateMoeBatch(layer, batch);
  if (!status.ok()) return status;
  const KernelSet& ks = Kernels(isa);
  // Long prefills run in chunks so the scratch (per-slot activations and outputs) stays
  // bounded; 512 tokens already give every expert enough tokens to be compute-bound.
  const int H = layer.hidden, k = batch.top_k;
  for (int t0 = 0; t0 < batch.num_tokens; t0 += kTokenChunk) {
    MoeBatch sub = batch;
    sub.num_tokens = std::min(kTokenChunk, batch.num_tokens - t0);
    sub.x = batch.x + static_cast<int64_t>(t0) * H;
    sub.expert_ids = batch.expert_ids + static_cast<int64_t>(t0) * k;
    sub.weights = batch.weights + static_cast<int64_t>(t0) * k;
    ForwardChunk(layer, sub, out + static_cast<int64_t>(t0) * H, pool, ks);
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status MoeForwardFast(const MoeLayer& layer, const MoeBatch& batch, float* out,
                            ThreadPool* pool) {
  return internal::MoeForwardFastIsa(layer, batch, out, pool, internal::BestMoeIsa());
}

}  // namespace mxserve::kernels
