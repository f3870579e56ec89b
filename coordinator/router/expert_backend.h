// One place that can run experts: a remote worker over gRPC (WorkerClient) or the in-process
// shard (InProcessExpertBackend, single-process mode and tests). The ExpertRouter holds several.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "experts/expert_batch.h"

namespace mxserve {

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;
  // `call` is a slice of one MoE layer's batch: every slot's expert is held by this backend or
  // is -1 (skip), and only tokens with at least one slot here are in it. Writes the partial sum
  // [T, H] into out. Must return by `deadline` (DeadlineExceeded then). UNAVAILABLE /
  // DEADLINE_EXCEEDED mean "try another replica"; others are not retried.
  virtual absl::Status RunExperts(const ExpertBatch& call, float* out, absl::Time deadline) = 0;
  virtual std::string name() const = 0;   // "worker0 (127.0.0.1:4567)" / "in-process"
  // Where it is reached ("host:port"), "" if in-process.
  virtual std::string address() const { return ""; }
  // Points the backend at a new address (a restarted local worker listens on a new port).
  // A backend with no address (in-process experts) has nothing to re-point: that is a caller
  // error, FailedPrecondition, not a missing feature.
  virtual absl::Status Reconnect(const std::string& address) {
    return absl::FailedPreconditionError(name() + " has no network address to change");
  }
  // Payload bytes sent and received so far (0 where nothing crosses a wire).
  virtual uint64_t bytes_sent() const { return 0; }
  virtual uint64_t bytes_received() const { return 0; }
  // gRPC backends: RunExpertsStreams opened (1 in steady state; more after failures or
  // reconnects) and calls that went unary (stream off, unsupported by the worker, or busy).
  virtual uint64_t stream_opens() const { return 0; }
  virtual uint64_t unary_calls() const { return 0; }
  // Stream calls' tensors go through shared memory (wire/shared_memory.h) right now.
  virtual bool shared_memory() const { return false; }
};

}  // namespace mxserve
