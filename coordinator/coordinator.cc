#include "coordinator/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/engine.h"
#include "coordinator/frontends/grpc_frontend.h"
#include "coordinator/frontends/http_frontend.h"
#include "coordinator/frontends/request_deadline.h"
#include "coordinator/models/cpu_model_runner.h"
#include "coordinator/models/model.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/in_process_backend.h"
#include "coordinator/router/placement.h"
#include "coordinator/router/worker_client.h"
#include "coordinator/router/router_factory.h"
#include "coordinator/supervision/local_worker_pool.h"
#include "coordinator/supervision/supervisor.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "worker/expert_shard.h"

namespace mxserve {
namespace fs = std::filesystem;

// Declaration order is teardown order reversed: front doors go first, workers last.
struct Coordinator::Parts {
  CoordinatorOptions options;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;
  std::shared_ptr<ThreadPool> pool;
  std::unique_ptr<LocalWorkerPool> local_workers;
  std::unique_ptr<ExpertRouter> router;
  std::unique_ptr<Supervisor> supervisor;  // local mode; stopped before the router goes
  std::unique_ptr<CpuModelRunner> runner;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<frontends::DeadlineGenerationService> deadline;  // --request-timeout-s
  std::unique_ptr<frontends::HttpFrontend> http;
  std::unique_ptr<frontends::GrpcFrontend> grpc;
  bool shut_down = false;
};

namespace {

void Log(const std::string& msg) { fprintf(stderr, "mxserve-coordinator: %s\n", msg.c_str()); }

std::string DefaultWorkerBinary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "mxserve-worker").string();
}

absl::Status WritePortFile(const std::string& path, int http_port, int grpc_port) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << "{\"http_port\": " << http_port << ", \"grpc_port\": " << grpc_port << "}\n";
    if (!f) return absl::InternalError("cannot write port file " + tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0)
    return absl::InternalError("cannot rename port file to " + path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(CoordinatorOptions options) {
  std::unique_ptr<Coordinator> self(new Coordinator());
  self->parts_ = std::make_unique<Parts>();
  Parts& p = *self->parts_;
  if (options.served_model_name.empty())
    options.served_model_name = fs::path(options.model_dir).lexically_normal().filename().string();
  if (options.served_model_name.empty()) options.served_model_name = "model";
  p.options = options;

  ASSIGN_OR_RETURN(p.config, ModelConfig::Load(options.model_dir));
  ASSIGN_OR_RETURN(p.tokenizer, Tokenizer::FromDir(options.model_dir));
  ASSIGN_OR_RETURN(p.chat, ChatTemplate::ForModel(p.config.model_type, p.tokenizer.get()));
  p.pool = std::make_shared<ThreadPool>(options.threads);
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(options.model_dir));

  // Experts.
  if (options.local_workers > 0 && !options.workers.empty())
    return absl::InvalidArgumentError("--local-workers and --workers are exclusive");
  // Remote and local workers alike: watched (health streams, keepalive), replicas failed
  // over, a group with no healthy host waited for up to worker_down_wait.
  RemoteWorkersOptions ro;
  ro.client.keepalive_time = options.keepalive_time;
  ro.client.keepalive_timeout = options.keepalive_timeout;
  ro.client.auth = options.worker_auth;
  ro.router.call_timeout = options.expert_call_timeout;
  ro.router.down_wait = options.worker_down_wait;
  ro.ready_timeout = options.worker_startup_timeout;
  ro.watcher.probe_timeout = options.health_probe_timeout;
  if (options.expert_replicas > 1 && options.local_workers == 0)
    return absl::InvalidArgumentError("--expert-replicas needs --local-workers (remote workers "
                                      "declare their experts with --experts)");
  if (options.local_workers > 0) {
    if (options.expert_replicas > options.local_workers)
      return absl::InvalidArgumentError(absl::StrCat("--expert-replicas ", options.expert_replicas,
                                                     " exceeds --local-workers ",
                                                     options.local_workers));
    LocalWorkerPoolOptions lo;
    lo.worker_binary =
        options.worker_binary.empty() ? DefaultWorkerBinary() : options.worker_binary;
    lo.model_dir = options.model_dir;
    lo.num_workers = options.local_workers;
    lo.num_experts = p.config.num_local_experts;
    lo.replicas = options.expert_replicas;
    lo.threads_per_worker = options.worker_threads;
    lo.startup_timeout = options.worker_startup_timeout;
    Log(absl::StrCat("starting ", lo.num_workers, " local workers (", lo.worker_binary, "), ",
                     lo.replicas, " replica(s) of each expert"));
    ASSIGN_OR_RETURN(p.local_workers, LocalWorkerPool::Start(lo));
    ASSIGN_OR_RETURN(ro.placement, Placement::Replicated(lo.num_experts, lo.num_workers, lo.replicas));
    ASSIGN_OR_RETURN(p.router, ConnectToWorkers(p.local_workers->addresses(), p.config, ro));
    for (const LocalWorkerPool::Worker& w : p.local_workers->workers())
      Log(absl::StrCat("local worker pid ", w.pid, " at ", w.address, " holds experts ", w.experts));
    SupervisorOptions so;
    so.restart = options.restart_workers;
    so.max_restarts = options.max_restarts;
    so.restart_window = options.restart_window;
    so.startup_timeout = options.worker_startup_timeout;
    so.hang_grace = options.health_probe_timeout;
    p.supervisor = std::make_unique<Supervisor>(p.local_workers.get(), p.router.get(), so);
  } else if (!options.workers.empty()) {
    ASSIGN_OR_RETURN(p.router, ConnectToWorkers(options.workers, p.config, ro));
  } else {
    std::vector<int> all(p.config.num_local_experts);
    for (int e = 0; e < p.config.num_local_experts; ++e) all[e] = e;
    Log("single-process mode: loading all experts in-process");
    ASSIGN_OR_RETURN(std::unique_ptr<ExpertShard> shard,
                     ExpertShard::Load(*checkpoint, p.config, all));
    std::vector<std::unique_ptr<ExpertBackend>> backends;
    backends.push_back(std::make_unique<InProcessExpertBackend>(
        std::shared_ptr<const ExpertShard>(std::move(shard)), p.pool));
    ASSIGN_OR_RETURN(Placement placement, Placement::Contiguous(p.config.num_local_experts, 1));
    RouterOptions in_process;
    in_process.call_timeout = options.expert_call_timeout;
    ASSIGN_OR_RETURN(p.router,
                     ExpertRouter::Create(std::move(backends), std::move(placement), in_process));
  }
  Log("placement: " + p.router->placement().DebugString());

  // Dense model and KV cache.
  ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> model,
                   CreateCausalLM(p.config, *checkpoint, p.router.get(), p.pool.get()));
  checkpoint.reset();  // the dense weights are copied; unmap the files
  const int64_t bytes_per_block = int64_t{2} * model->num_layers() * options.block_size *
                                  model->num_kv_heads() * model->head_dim() * sizeof(float);
  int num_blocks = static_cast<int>(std::max<int64_t>(1, options.kv_cache_bytes / bytes_per_block));
  int64_t model_max = model->max_position_embeddings();
  int max_model_len = options.max_model_len > 0 ? options.max_model_len : static_cast<int>(
      std::min<int64_t>(model_max, int64_t{num_blocks} * options.block_size));
  if (max_model_len > model_max)
    return absl::InvalidArgumentError(absl::StrCat("--max-model-len ", max_model_len,
                                                   " exceeds the model's ", model_max));
  if (int64_t{num_blocks} * options.block_size < max_model_len)
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-bytes holds ", int64_t{num_blocks} * options.block_size,
        " tokens, fewer than --max-model-len ", max_model_len));
  Log(absl::StrCat("KV cache: ", num_blocks, " blocks of ", options.block_size,
                   " tokens; max_model_len ", max_model_len));
  ASSIGN_OR_RETURN(p.runner, CpuModelRunner::Create(std::move(model), num_blocks,
                                                    options.block_size, max_model_len));

  // Engine.
  EngineOptions eo;
  eo.scheduler.max_num_seqs = options.max_num_seqs;
  eo.scheduler.max_num_batched_tokens = options.max_num_batched_tokens;
  eo.scheduler.max_model_len = max_model_len;
  eo.scheduler.max_waiting = options.max_waiting;
  std::vector<int32_t> eos(p.config.eos_token_ids.begin(), p.config.eos_token_ids.end());
  for (int32_t id : p.chat->StopTokenIds())
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  ASSIGN_OR_RETURN(p.engine, Engine::Create(eo, p.runner.get(), p.tokenizer.get(), eos));

  // Front doors.
  ServingContext ctx;
  ctx.model_id = options.served_model_name;
  ctx.max_model_len = max_model_len;
  ctx.tokenizer = p.tokenizer.get();
  ctx.chat_template = p.chat.get();
  p.deadline = std::make_unique<frontends::DeadlineGenerationService>(p.engine.get(),
                                                                      options.request_timeout);
  ctx.engine = p.deadline.get();
  ctx.api_key = options.api_key;
  ctx.max_prompt_tokens = options.max_prompt_tokens;
  frontends::HttpServerOptions ho;
  ho.host = options.host;
  ho.port = options.http_port;
  ho.io_threads = options.http_threads;
  ho.max_body_bytes = static_cast<size_t>(options.max_body_bytes);
  ASSIGN_OR_RETURN(p.http, frontends::HttpFrontend::Start(ctx, ho));
  frontends::GrpcServerOptions go;
  go.host = options.host;
  go.port = options.grpc_port;
  ASSIGN_OR_RETURN(p.grpc, frontends::GrpcFrontend::Start(ctx, go));
  Log(absl::StrCat("serving '", options.served_model_name, "': HTTP on ", options.host, ":",
                   p.http->port(), ", gRPC on ", options.host, ":", p.grpc->port()));
  if (!options.port_file.empty())
    RETURN_IF_ERROR(WritePortFile(options.port_file, p.http->port(), p.grpc->port()));
  return self;
}

Coordinator::~Coordinator() { Shutdown(); }

int Coordinator::http_port() const { return parts_->http->port(); }
int Coordinator::grpc_port() const { return parts_->grpc->port(); }

void Coordinator::Shutdown() {
  if (!parts_ || parts_->shut_down) return;
  parts_->shut_down = true;
  if (parts_->http) parts_->http->Shutdown();
  if (parts_->grpc) parts_->grpc->Shutdown();
  parts_->http.reset();
  parts_->grpc.reset();
  parts_->deadline.reset();
  parts_->engine.reset();
  parts_->runner.reset();
  parts_->supervisor.reset();  // before the router it reports to
  parts_->router.reset();
  if (parts_->local_workers) parts_->local_workers->Stop();
}

}  // namespace mxserve
