// Random paged-KV layouts for the dense-kernel GPU check (dense_cuda_check.cc): sequences with a
// cached prefix and a chunk of new tokens each, their KV blocks scattered over a shuffled pool,
// host arrays and device copies of the same layout.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

namespace mxserve::gpu_test {

inline void CudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "FAIL cuda %s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

template <typename T>
T* ToDevice(const std::vector<T>& v) {
  T* p = nullptr;
  CudaOk(cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)), "malloc");
  if (!v.empty()) CudaOk(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "h2d");
  return p;
}

template <typename T>
std::vector<T> ToHost(const T* p, size_t n) {
  std::vector<T> v(n);
  if (n > 0) CudaOk(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "d2h");
  return v;
}

struct SeqSpec {
  int start = 0;  // positions already cached
  int len = 1;    // new tokens this step
};

// The step's tokens in sequence order; sequence s's chunk holds positions [start, start + len).
struct Layout {
  int block_size = 16, max_blocks = 0, num_blocks = 0;
  std::vector<int32_t> positions, token_seq, block_tables;
  int32_t *d_positions = nullptr, *d_token_seq = nullptr, *d_block_tables = nullptr;

  int tokens() const { return static_cast<int>(positions.size()); }
  void Free() {
    cudaFree(d_positions);
    cudaFree(d_token_seq);
    cudaFree(d_block_tables);
  }
};

// Blocks from a pool of (needed + extra) shuffled ids; block table rows padded with -1 to
// max_blocks = the longest sequence's blocks + table_slack.
inline Layout MakeLayout(const std::vector<SeqSpec>& seqs, int block_size, std::mt19937& rng,
                         int table_slack = 3) {
  Layout L;
  L.block_size = block_size;
  int needed = 0, longest = 0;
  for (const SeqSpec& s : seqs) {
    const int b = (s.start + s.len + block_size - 1) / block_size;
    needed += b;
    longest = std::max(longest, b);
  }
  L.max_blocks = longest + table_slack;
  L.num_blocks = needed + needed / 8 + 2;
  std::vector<int32_t> pool(L.num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  L.block_tables.assign(seqs.size() * L.max_blocks, -1);
  int next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int b = (seqs[s].start + seqs[s].len + block_size - 1) / block_size;
    for (int i = 0; i < b; ++i) L.block_tables[s * L.max_blocks + i] = pool[next++];
    for (int j = 0; j < seqs[s].len; ++j) {
      L.positions.push_back(seqs[s].start + j);
      L.token_seq.push_back(static_cast<int32_t>(s));
    }
  }
  L.d_positions = ToDevice(L.positions);
  L.d_token_seq = ToDevice(L.token_seq);
  L.d_block_tables = ToDevice(L.block_tables);
  return L;
}

}  // namespace mxserve::gpu_test
