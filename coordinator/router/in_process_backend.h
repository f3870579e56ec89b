// An ExpertBackend that runs experts held in this process (single-process mode,
// --local-workers 0, and tests): the same ExpertShard and fast kernel a worker uses, no RPC.
#pragma once

#include <memory>
#include <string>

#include "coordinator/router/expert_backend.h"
#include "experts/expert_shard.h"

namespace mxserve {

class ThreadPool;

class InProcessExpertBackend final : public ExpertBackend {
 public:
  // pool may be nullptr (single thread); both are shared with whoever else uses them.
  InProcessExpertBackend(std::shared_ptr<const ExpertShard> shard, std::shared_ptr<ThreadPool> pool,
                         std::string name = "in-process")
      : shard_(std::move(shard)), pool_(std::move(pool)), name_(std::move(name)) {}

  // Runs to completion (CPU work cannot be abandoned half way) and ignores the deadline: a
  // late result is still right, and there is no other replica to fail over to.
  absl::Status RunExperts(const ExpertBatch& call, float* out, absl::Time deadline) override;
  std::string name() const override { return name_; }
  const ExpertShard& shard() const { return *shard_; }

 private:
  std::shared_ptr<const ExpertShard> shard_;
  std::shared_ptr<ThreadPool> pool_;
  std::string name_;
};

}  // namespace mxserve
