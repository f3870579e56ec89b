#include "coordinator/router/router_factory.h"

#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "coordinator/router/in_process_backend.h"
#include "coordinator/router/placement.h"
#include "core/status.h"
#include "experts/expert_shard.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<ExpertRouter>> MakeInProcessRouter(const Checkpoint& ckpt,
                                                                  const ModelConfig& config,
                                                                  std::shared_ptr<ThreadPool> pool,
                                                                  RouterOptions options) {
  std::vector<int> all(config.num_local_experts);
  std::iota(all.begin(), all.end(), 0);
  ASSIGN_OR_RETURN(std::unique_ptr<ExpertShard> shard, ExpertShard::Load(ckpt, config, all));
  std::vector<std::unique_ptr<ExpertBackend>> backends;
  backends.push_back(std::make_unique<InProcessExpertBackend>(
      std::shared_ptr<const ExpertShard>(std::move(shard)), std::move(pool)));
  ASSIGN_OR_RETURN(Placement placement, Placement::Contiguous(config.num_local_experts, 1));
  return ExpertRouter::Create(std::move(backends), std::move(placement), options);
}

absl::StatusOr<std::unique_ptr<ExpertRouter>> ConnectToWorkers(
    const std::vector<std::string>& addresses, const ModelConfig& config,
    const RemoteWorkersOptions& options) {
  if (addresses.empty()) return absl::InvalidArgumentError("workers: no addresses");
  const absl::Time deadline = absl::Now() + options.ready_timeout;
  std::vector<std::unique_ptr<WorkerClient>> clients;
  for (size_t i = 0; i < addresses.size(); ++i) {
    WorkerClientOptions copt = options.client;
    copt.name = absl::StrCat("worker ", i);
    ASSIGN_OR_RETURN(auto c, WorkerClient::Create(addresses[i], copt));
    clients.push_back(std::move(c));
  }
  std::vector<std::vector<int>> hosts(config.num_local_experts);
  for (size_t i = 0; i < clients.size(); ++i) {
    RETURN_IF_ERROR(clients[i]->WaitReady(deadline));
    ASSIGN_OR_RETURN(v1::DescribeResponse d,
                     clients[i]->Describe(std::max(deadline, absl::Now() + absl::Seconds(10))));
    const std::string& who = clients[i]->name();
    auto mismatch = [&](const char* what, int64_t theirs, int64_t ours) {
      return absl::FailedPreconditionError(absl::StrCat(who, " serves a different model: ", what,
                                                        " ", theirs, ", this model has ", ours));
    };
    if (d.num_layers() != config.num_hidden_layers) return mismatch("num_layers", d.num_layers(), config.num_hidden_layers);
    if (d.num_experts() != config.num_local_experts) return mismatch("num_experts", d.num_experts(), config.num_local_experts);
    if (d.hidden_size() != config.hidden_size) return mismatch("hidden_size", d.hidden_size(), config.hidden_size);
    if (d.intermediate_size() != config.intermediate_size) return mismatch("intermediate_size", d.intermediate_size(), config.intermediate_size);
    const std::string activation = d.activation().empty() ? "swiglu_clamped" : d.activation();
    if (activation != ExpertActivationName(config)) {
      return absl::FailedPreconditionError(absl::StrCat(who, " runs expert activation '", activation,
                                                        "', this model needs '",
                                                        ExpertActivationName(config), "'"));
    }
    if (d.model_type() != config.model_type) {
      return absl::FailedPreconditionError(absl::StrCat(who, " serves model_type '", d.model_type(),
                                                        "', this model is '", config.model_type, "'"));
    }
    if (options.placement.has_value()) {
      const std::vector<int> want = options.placement->ExpertsOf(static_cast<int>(i));
      const std::vector<int> have(d.experts().begin(), d.experts().end());
      if (want != have) {
        return absl::FailedPreconditionError(absl::StrCat(who, " holds experts ", IdRanges(have),
                                                          ", expected ", IdRanges(want)));
      }
    }
    for (int e : d.experts()) {
      if (e < 0 || e >= config.num_local_experts) {
        return absl::FailedPreconditionError(absl::StrCat(who, " reports expert ", e, " out of range"));
      }
      hosts[e].push_back(static_cast<int>(i));
    }
  }
  for (int e = 0; e < config.num_local_experts; ++e) {
    if (hosts[e].empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("expert ", e, " is held by none of the ", addresses.size(), " workers"));
    }
  }
  ASSIGN_OR_RETURN(Placement placement, Placement::FromLists(static_cast<int>(clients.size()), std::move(hosts)));
  if (options.placement.has_value()) {
    if (options.placement->num_backends() != static_cast<int>(clients.size())) {
      return absl::InvalidArgumentError("workers: placement size differs from the worker count");
    }
    placement = *options.placement;
  }
  std::vector<std::unique_ptr<ExpertBackend>> backends;
  std::vector<WorkerClient*> watched;
  for (auto& c : clients) {
    watched.push_back(c.get());
    backends.push_back(std::move(c));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ExpertRouter> router,
                   ExpertRouter::Create(std::move(backends), std::move(placement), options.router));
  if (options.watch) {
    router->AttachWatcher(std::make_unique<WorkerWatcher>(std::move(watched), router.get(), options.watcher));
  }
  return router;
}

absl::StatusOr<std::vector<std::string>> ParseWorkerAddresses(std::string_view spec) {
  std::vector<std::string> out;
  const absl::string_view all(spec.data(), spec.size());
  for (absl::string_view part : absl::StrSplit(all, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t colon = part.rfind(':');
    int port = 0;
    if (part.empty() || colon == std::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(part.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("workers: '", part, "' in '", all,
                                                     "' is not host:port"));
    }
    out.emplace_back(part);
  }
  return out;
}

}  // namespace mxserve
