// Owned device and page-locked host arrays for the GPU runner: freed with their owner, grown
// only outside a step (never while a graph is captured).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "kernels/cuda/moe_cuda.h"

namespace mxserve::gpu {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { Free(); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }

  // At least n elements (contents not kept when it grows).
  absl::Status Reserve(size_t n) {
    if (n <= n_) return absl::OkStatus();
    Free();
    void* p = nullptr;
    if (auto s = kernels::cuda::CudaCheck(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc"); !s.ok()) {
      return s;
    }
    p_ = static_cast<T*>(p);
    n_ = n;
    return absl::OkStatus();
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  void Free() {
    if (p_ != nullptr) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  ~PinnedArray() { Free(); }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;

  absl::Status Reserve(size_t n) {
    if (n <= n_) return absl::OkStatus();
    Free();
    void* p = nullptr;
    if (auto s = kernels::cuda::CudaCheck(cudaMallocHost(&p, n * sizeof(T)), "cudaMallocHost");
        !s.ok()) {
      return s;
    }
    p_ = static_cast<T*>(p);
    n_ = n;
    return absl::OkStatus();
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void Free() {
    if (p_ != nullptr) cudaFreeHost(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace mxserve::gpu
