// The same-host data plane of expert calls: activations and partial sums in a POSIX shared-memory
// object instead of the gRPC message (RunExpertsRequest.shm_*). The coordinator's WorkerClient
// owns one SharedRegion per worker (created 0600, unlinked when the client goes); a worker
// started with --allow_shared_memory maps the objects it is named (SharedMappings), only under
// the "/mxserve-shm-" prefix and only when its own user owns them. The gRPC call still carries
// the call itself, its deadline and its errors, so failover and restarts work as for bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace mxserve {

// "/mxserve-shm-" followed by 1..48 of [A-Za-z0-9_-].
bool IsSharedMemoryName(const std::string& name);

// A shared-memory object this process created: mapped read-write, unlinked and unmapped on
// destruction.
class SharedRegion {
 public:
  // Creates "/mxserve-shm-<pid>-<n>" (n counts up per process) of `size` bytes.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(size_t size);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  const std::string& name() const { return name_; }
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  SharedRegion() = default;
  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
};

// Removes /dev/shm/mxserve-shm-<pid>-* objects whose creating process is gone (a coordinator
// killed before its destructors ran). Returns how many it removed.
int RemoveStaleSharedRegions();

// The worker's mappings of named objects: a few kept (least recently used evicted), each
// unmapped when evicted and no call still uses it.
class SharedMappings {
 public:
  struct Mapping {
    ~Mapping();
    char* data = nullptr;
    size_t size = 0;
    std::function<void(void*)> on_unmap;  // called before munmap (set from the hooks)
  };
  explicit SharedMappings(int capacity = 8) : capacity_(capacity) {}

  // Called with each mapping made from now on, and before it is unmapped (the executor's
  // PinHostMemory / UnpinHostMemory).
  void SetHooks(std::function<void(void*, size_t)> on_map, std::function<void(void*)> on_unmap)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The mapping of `name`: INVALID_ARGUMENT if the name is not one of ours, the object does not
  // exist, is not a regular object owned by this user, or cannot be mapped.
  absl::StatusOr<std::shared_ptr<const Mapping>> Get(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int capacity_;
  absl::Mutex mu_;
  std::function<void(void*, size_t)> on_map_ ABSL_GUARDED_BY(mu_);
  std::function<void(void*)> on_unmap_ ABSL_GUARDED_BY(mu_);
  std::list<std::pair<std::string, std::shared_ptr<const Mapping>>> lru_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mxserve
