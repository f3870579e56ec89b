#include "coordinator/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include <thread>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/chat/output_parser_registry.h"
#include "coordinator/engine/engine.h"
#include "coordinator/frontends/grpc_frontend.h"
#include "coordinator/frontends/http_frontend.h"
#include "coordinator/frontends/prompt_limit.h"
#include "coordinator/frontends/request_deadline.h"
#include "coordinator/device_choice.h"
#include "coordinator/models/cpu_model_runner.h"
#include "coordinator/models/model.h"
#include "coordinator/observability/health_monitor.h"
#include "coordinator/observability/moe_call_probe.h"
#include "coordinator/observability/sd_notifier.h"
#include "coordinator/observability/serving_metrics.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/in_process_backend.h"
#include "coordinator/router/placement.h"
#include "coordinator/router/router_factory.h"
#include "coordinator/router/worker_client.h"
#include "coordinator/supervision/local_worker_pool.h"
#include "coordinator/supervision/supervisor.h"
#include "coordinator/supervision/worker_devices.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "experts/expert_shard.h"
#include "wire/shared_memory.h"

#ifdef MXSERVE_HAVE_GPU_RUNNER
#include "coordinator/gpu/gpu_model_runner.h"
#endif

namespace mxserve {
namespace fs = std::filesystem;

// Declaration order is teardown order reversed: front doors go first, workers last.
struct Coordinator::Parts {
  // Observability outlives everything it watches (the front doors call into it).
  SdNotifier notifier;
  std::unique_ptr<ServingMetrics> metrics;
  std::unique_ptr<HealthMonitor> health;
  std::thread health_thread;  // re-checks health (logs changes, systemd STATUS=); stopped first
  absl::Mutex health_mu;
  bool health_stop ABSL_GUARDED_BY(health_mu) = false;
  CoordinatorOptions options;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;
  OutputParserFactory output_parser;  // empty: the chat template's own (harmony)
  std::shared_ptr<ThreadPool> pool;
  std::unique_ptr<LocalWorkerPool> local_workers;
  std::unique_ptr<ExpertRouter> router;
  std::unique_ptr<Supervisor> supervisor;  // local mode; stopped before the router goes
  std::unique_ptr<MoeCallProbe> moe_probe;  // the model's MoeExecutor, in front of the router
  std::unique_ptr<ModelRunner> runner;
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

// Experts none of whose hosts is up, and why: "experts 16-31: no healthy worker (worker 1 at
// 127.0.0.1:4567 down for 3.1 s: crashed ...)".
std::string DescribeUnservedExperts(const ExpertRouter& router) {
  const RouterStats st = router.Stats();
  const Placement& pl = router.placement();
  std::vector<std::string> parts;
  for (int g = 0; g < pl.num_groups(); ++g) {
    bool any = false;
    for (int b : pl.GroupHosts(g)) any = any || st.backends[b].state == BackendState::kUp;
    if (any) continue;
    std::vector<std::string> hosts;
    for (int b : pl.GroupHosts(g)) {
      const BackendStats& bs = st.backends[b];
      hosts.push_back(absl::StrCat("worker ", b, bs.address.empty() ? "" : " at ", bs.address,
                                   " down for ", absl::StrFormat("%.1f s", bs.seconds_in_state),
                                   ": ", bs.reason));
    }
    auto [begin, end] = pl.GroupRange(g);
    parts.push_back(absl::StrCat("experts ", begin, "-", end - 1, ": no healthy worker (",
                                 absl::StrJoin(hosts, "; "), ")"));
  }
  return absl::StrJoin(parts, "; ");
}

// What the MoE call in flight waits on: "in layer 3 expert call (2 tokens, for 4.0 s) to
// worker 1 at 127.0.0.1:4567 (up)".
std::string DescribeMoeActivity(const MoeCallProbe& probe, const ExpertRouter& router) {
  std::optional<MoeCallActivity> a = probe.Current();
  if (!a) return "in the dense model (no expert call in flight)";
  const RouterStats st = router.Stats();
  const std::vector<int> waiting = probe.Waiting(*a);
  std::vector<std::string> names, answered;
  for (int b : a->hosts) {
    const BackendStats& bs = st.backends[b];
    if (std::find(waiting.begin(), waiting.end(), b) == waiting.end()) {
      answered.push_back(absl::StrCat("worker ", b));
      continue;
    }
    if (bs.address.empty()) {  // single-process mode: the experts run here
      names.push_back("the in-process experts");
      continue;
    }
    names.push_back(absl::StrCat("worker ", b, " at ", bs.address, " (", BackendStateName(bs.state),
                                 bs.state == BackendState::kUp ? "" : ": " + bs.reason, ")"));
  }
  return absl::StrCat("in layer ", a->layer, " expert call (", a->num_tokens, " token",
                      a->num_tokens == 1 ? "" : "s", ", for ",
                      absl::StrFormat("%.1f s", absl::ToDoubleSeconds(absl::Now() - a->started)),
                      ") waiting on ", names.empty() ? "no worker (summing)" : absl::StrJoin(names, ", "),
                      answered.empty() ? "" : absl::StrCat("; answered: ", absl::StrJoin(answered, ", ")));
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

// The dense model in fp32 on this host's CPU, experts behind the router.
absl::StatusOr<std::unique_ptr<ModelRunner>> StartCpuRunner(const ModelConfig& config,
                                                            const CoordinatorOptions& options,
                                                            const Checkpoint& checkpoint,
                                                            MoeExecutor* moe, ThreadPool* pool) {
  ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> model,
                   CreateCausalLM(config, checkpoint, moe, pool));
  const int64_t kv_bytes = options.kv_cache_bytes > 0 ? options.kv_cache_bytes : int64_t{1} << 30;
  const int64_t bytes_per_block = int64_t{model->kv_planes()} * model->num_layers() * options.block_size *
                                  model->num_kv_heads() * model->head_dim() * sizeof(float);
  const int num_blocks = static_cast<int>(std::max<int64_t>(1, kv_bytes / bytes_per_block));
  const int64_t model_max = model->max_position_embeddings();
  const int max_model_len = options.max_model_len > 0 ? options.max_model_len : static_cast<int>(
      std::min<int64_t>(model_max, int64_t{num_blocks} * options.block_size));
  if (max_model_len > model_max)
    return absl::InvalidArgumentError(absl::StrCat("--max-model-len ", max_model_len,
                                                   " exceeds the model's ", model_max));
  if (int64_t{num_blocks} * options.block_size < max_model_len)
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-bytes holds ", int64_t{num_blocks} * options.block_size,
        " tokens, fewer than --max-model-len ", max_model_len));
  Log(absl::StrCat("dense model on the CPU; KV cache: ", num_blocks, " blocks of ",
                   options.block_size, " tokens; max_model_len ", max_model_len));
  ASSIGN_OR_RETURN(std::unique_ptr<CpuModelRunner> runner,
                   CpuModelRunner::Create(std::move(model), num_blocks, options.block_size,
                                          max_model_len));
  return runner;
}

// The dense model on cuda:N; the experts too when there is no router (no workers).
absl::StatusOr<std::unique_ptr<ModelRunner>> StartGpuRunner(const ModelConfig& config,
                                                            const CoordinatorOptions& options,
                                                            const Checkpoint& checkpoint,
                                                            MoeExecutor* moe, int device,
                                                            int workers_on_device) {
#ifdef MXSERVE_HAVE_GPU_RUNNER
  gpu::GpuRunnerOptions go;
  go.device = device;
  go.gpu_memory_utilization = options.gpu_memory_utilization;
  go.kv_cache_bytes = options.kv_cache_bytes;
  go.block_size = options.block_size;
  go.max_model_len = options.max_model_len;
  go.max_num_batched_tokens = std::max(options.max_num_batched_tokens, options.max_num_seqs);
  go.max_graph_batch = options.enforce_eager ? 0 : std::min(options.max_num_seqs, 512);
  // A local worker on this GPU grows its scratch with the batch after the KV cache is sized:
  // per token and expert slot a bf16 operand and activation and an fp32 output row, per token
  // its fp32 input and output rows, and 256 MiB for its context and kernels.
  const int64_t T = go.max_num_batched_tokens, H = config.hidden_size;
  const int64_t per_worker = T * config.num_experts_per_tok * H * (2 + 2 + 4) + T * H * 8 +
                             (int64_t{256} << 20);
  go.leave_free_bytes = workers_on_device * per_worker;
  ASSIGN_OR_RETURN(std::unique_ptr<gpu::GpuModelRunner> runner,
                   gpu::GpuModelRunner::Create(config, checkpoint, moe, go));
  Log("dense model on " + runner->description());
  return runner;
#else
  (void)config, (void)options, (void)checkpoint, (void)moe, (void)device,
      (void)workers_on_device;
  return absl::InvalidArgumentError("this build has no CUDA");
#endif
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

  // Start-up: each stage asks systemd for more time (EXTEND_TIMEOUT_USEC), from this thread,
  // so a stage that hangs is not covered for ever.
  const absl::Duration stage_budget =
      std::max(absl::Seconds(90), options.worker_startup_timeout + absl::Seconds(60));
  auto stage = [&p, stage_budget](const std::string& what) {
    p.notifier.ExtendTimeout(stage_budget, "loading: " + what);
  };
  stage("model config and tokenizer");
  p.metrics = std::make_unique<ServingMetrics>(options.served_model_name);
  HealthMonitorOptions hmo;
  hmo.progress_timeout = options.progress_timeout;
  hmo.loop_timeout = std::max(options.progress_timeout, absl::Seconds(10));
  Parts* pp = &p;
  p.health = std::make_unique<HealthMonitor>(
      hmo,
      [pp] {
        HealthInputs in;
        if (pp->engine) {
          const EngineStats e = pp->engine->stats();
          in.running = e.num_running;
          in.waiting = e.num_waiting;
          in.in_step = e.in_step;
          in.step_started = e.step_started;
          in.last_progress = e.last_progress;
          in.loop_heartbeat = e.loop_heartbeat;
        }
        if (pp->router && !pp->router->AllExpertsServed()) {
          in.experts_served = false;
          in.experts_reason = DescribeUnservedExperts(*pp->router);
        }
        return in;
      },
      [pp]() -> std::string {
        if (!pp->moe_probe || !pp->router) return "";
        return DescribeMoeActivity(*pp->moe_probe, *pp->router);
      });

  ASSIGN_OR_RETURN(p.config, ModelConfig::Load(options.model_dir));
  ASSIGN_OR_RETURN(p.tokenizer, Tokenizer::FromDir(options.model_dir));
  // Every id the tokenizer can produce needs a row in the embedding and the LM head.
  if (p.tokenizer->vocab_size() > p.config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer: token id ", p.tokenizer->vocab_size() - 1, " is outside config.json's "
        "vocab_size (", p.config.vocab_size, "): the model has no embedding row for it"));
  }
  ASSIGN_OR_RETURN(p.chat, ChatTemplate::ForModel(p.config.model_type, p.tokenizer.get()));
  ASSIGN_OR_RETURN(p.output_parser,
                   MakeOutputParserFactory({options.tool_call_parser, options.reasoning_parser},
                                           p.config.model_type, p.tokenizer.get()));
  p.pool = std::make_shared<ThreadPool>(options.threads);
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(options.model_dir));
#ifdef MXSERVE_HAVE_GPU_RUNNER
  constexpr bool kCudaBuilt = true;
#else
  constexpr bool kCudaBuilt = false;
#endif
  ASSIGN_OR_RETURN(const DeviceChoice device,
                   ChooseDevice(options.device, VisibleGpuCount(), kCudaBuilt));

  stage("experts");
  // Experts.
  if (options.local_workers > 0 && !options.workers.empty())
    return absl::InvalidArgumentError("--local-workers and --workers are exclusive");
  // Remote and local workers alike: watched (health streams, keepalive), replicas failed
  // over, a group with no healthy host waited for up to worker_down_wait.
  RemoteWorkersOptions ro;
  ro.client.keepalive_time = options.keepalive_time;
  ro.client.keepalive_timeout = options.keepalive_timeout;
  ro.client.auth = options.worker_auth;
  ro.client.stream = options.expert_call_stream;
  ro.client.wire_dtype = options.expert_wire_bf16 ? v1::TENSOR_DTYPE_BF16 : v1::TENSOR_DTYPE_F32;
  // Workers on this host (local ones, or --workers at a loopback address started with
  // --allow_shared_memory): tensors through /dev/shm. Others keep bytes (WorkerClient decides).
  ro.client.shared_memory = options.expert_shared_memory;
  ro.client.copy_pool = p.pool;  // idle while the experts run: it copies their tensors
  if (options.expert_shared_memory) {
    if (const int n = RemoveStaleSharedRegions(); n > 0) {
      Log(absl::StrCat("removed ", n, " shared-memory objects left by coordinators that died"));
    }
  }
  ro.router.call_timeout = options.expert_call_timeout;
  ro.router.down_wait = options.worker_down_wait;
  ro.ready_timeout = options.worker_startup_timeout;
  ro.watcher.probe_timeout = options.health_probe_timeout;
  if (!options.worker_devices.empty() && options.local_workers == 0)
    return absl::InvalidArgumentError("--worker-devices needs --local-workers (workers started "
                                      "elsewhere take their own --device)");
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
    lo.auth = options.worker_auth;  // flag or environment: the workers must require it too
    if (options.expert_shared_memory) lo.extra_args.push_back("--allow_shared_memory");
    // By default the workers take every GPU but the dense model's.
    const HostGpus gpus =
        HostGpus::ForThisProcess(VisibleGpuCount(), device.gpu ? device.ordinal : -1);
    ASSIGN_OR_RETURN(lo.devices, AssignWorkerDevices(options.worker_devices, lo.num_workers, gpus));
    Log(absl::StrCat("starting ", lo.num_workers, " local workers (", lo.worker_binary, "), ",
                     lo.replicas, " replica(s) of each expert, on ", absl::StrJoin(lo.devices, ","),
                     options.worker_devices.empty() ? " (default: " : " (--worker-devices; ",
                     gpus.ToString(), ")"));
    ASSIGN_OR_RETURN(p.local_workers, LocalWorkerPool::Start(lo));
    ASSIGN_OR_RETURN(ro.placement, Placement::Replicated(lo.num_experts, lo.num_workers, lo.replicas));
    ASSIGN_OR_RETURN(p.router, ConnectToWorkers(p.local_workers->addresses(), p.config, ro));
    for (const LocalWorkerPool::Worker& w : p.local_workers->workers())
      Log(absl::StrCat("local worker pid ", w.pid, " at ", w.address, " holds experts ", w.experts,
                       " on ", w.device));
    SupervisorOptions so;
    so.restart = options.restart_workers;
    so.max_restarts = options.max_restarts;
    so.restart_window = options.restart_window;
    so.startup_timeout = options.worker_startup_timeout;
    so.hang_grace = options.health_probe_timeout;
    p.supervisor = std::make_unique<Supervisor>(p.local_workers.get(), p.router.get(), so);
  } else if (!options.workers.empty()) {
    ASSIGN_OR_RETURN(p.router, ConnectToWorkers(options.workers, p.config, ro));
  } else if (device.gpu) {
    Log("single-process mode: the experts run in-process on " + device.ToString());
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
  if (p.router) Log("placement: " + p.router->placement().DebugString());

  // Dense model and KV cache.
  stage("dense model");
  if (p.router) {
    p.moe_probe = std::make_unique<MoeCallProbe>(
        p.router.get(), &p.router->placement(),
        [r = p.router.get()](int b) { return r->backend(b).bytes_received(); });
  }
  int workers_on_device = 0;
  if (p.local_workers) {
    for (const LocalWorkerPool::Worker& w : p.local_workers->workers())
      workers_on_device += device.gpu && w.device == device.ToString();
  }
  ASSIGN_OR_RETURN(p.runner,
                   device.gpu ? StartGpuRunner(p.config, options, *checkpoint, p.moe_probe.get(),
                                               device.ordinal, workers_on_device)
                              : StartCpuRunner(p.config, options, *checkpoint, p.moe_probe.get(),
                                               p.pool.get()));
  checkpoint.reset();  // the weights are copied; unmap the files
  const int max_model_len = p.runner->max_model_len();

  // Engine.
  EngineOptions eo;
  eo.scheduler.max_num_seqs = options.max_num_seqs;
  eo.scheduler.max_num_batched_tokens = options.max_num_batched_tokens;
  eo.scheduler.max_model_len = max_model_len;
  eo.scheduler.max_waiting = options.max_waiting;
  eo.scheduler.enable_prefix_caching = options.enable_prefix_caching;
  eo.observer = p.metrics.get();
  // WATCHDOG=1 comes from the engine loop itself: a loop stuck in a step stops the pings. Idle,
  // the loop still wakes every tick (well inside WatchdogSec/2) to ping and to show it lives.
  eo.on_loop_tick = [n = &p.notifier] { n->WatchdogPing(); };
  eo.tick_interval = absl::Seconds(1);
  if (p.notifier.watchdog_interval() > absl::ZeroDuration())
    eo.tick_interval = std::min(eo.tick_interval, p.notifier.watchdog_interval() / 4);
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
  ctx.output_parser = p.output_parser;
  ctx.refuse_auto_tool_choice = p.output_parser && !options.enable_auto_tool_choice;
  p.deadline = std::make_unique<frontends::DeadlineGenerationService>(p.engine.get(),
                                                                      options.request_timeout);
  ctx.engine = p.deadline.get();
  ctx.api_key = options.api_key;
  // Admission follows the lifecycle (serving, not draining); the probes also follow worker
  // health and progress, so a load balancer routes around a degraded coordinator while the
  // requests that still reach it wait for the router's bounded failover.
  ctx.ready = [pp] { return pp->health->phase() == ServingPhase::kServing; };
  // Asked once per request refused at the door, so it also counts them.
  ctx.not_ready_message = [pp]() -> std::string {
    if (pp->health->phase() == ServingPhase::kDraining || pp->health->phase() == ServingPhase::kStopped) {
      pp->metrics->CountRejected("draining");
      return "the server is shutting down (draining); retry on another replica";
    }
    pp->metrics->CountRejected("not_ready");
    return "the model is not ready yet";
  };
  ctx.readiness = [pp](std::string* json) {
    HealthReport r = pp->health->Check();
    if (json) *json = r.Json();
    return r.ready;
  };
  ctx.metrics = [pp] { return pp->metrics->Exposition(); };
  ctx.workers = [pp] {
    if (!pp->router) return std::string("{\"workers\": [], \"groups\": []}");
    if (pp->supervisor) {
      SupervisorStats s = pp->supervisor->Stats();
      return pp->router->PlacementJson(&s);
    }
    return pp->router->PlacementJson();
  };
  {
    MetricsSources ms;
    ms.engine = [pp] { return pp->engine->stats(); };
    if (p.router)
      ms.router = [pp]() -> std::optional<RouterStats> { return pp->router->Stats(); };
    if (p.supervisor)
      ms.supervisor = [pp]() -> std::optional<SupervisorStats> { return pp->supervisor->Stats(); };
    ms.ready = [pp] { return pp->health->Check().ready; };
    p.metrics->SetSources(std::move(ms));
  }
  p.health->SetPhase(ServingPhase::kServing);
  ctx.max_prompt_tokens = options.max_prompt_tokens;
  ctx.max_prompt_bytes = options.max_prompt_bytes > 0 ? options.max_prompt_bytes
                                                      : frontends::PromptByteLimit(ctx);
  frontends::HttpServerOptions ho;
  ho.host = options.host;
  ho.port = options.http_port;
  ho.io_threads = options.http_threads;
  ho.max_body_bytes = static_cast<size_t>(options.max_body_bytes);
  ho.max_connections = options.max_connections;
  ho.max_buffered_bytes = static_cast<size_t>(options.max_buffered_bytes);
  ASSIGN_OR_RETURN(p.http, frontends::HttpFrontend::Start(ctx, ho, options.http_handler_threads));
  frontends::GrpcServerOptions go;
  go.host = options.host;
  go.port = options.grpc_port;
  go.reflection = options.grpc_reflection;
  ASSIGN_OR_RETURN(p.grpc, frontends::GrpcFrontend::Start(ctx, go));
  Log(absl::StrCat("serving '", options.served_model_name, "': HTTP on ", options.host, ":",
                   p.http->port(), ", gRPC on ", options.host, ":", p.grpc->port()));
  if (!options.port_file.empty())
    RETURN_IF_ERROR(WritePortFile(options.port_file, p.http->port(), p.grpc->port()));
  p.notifier.Ready(absl::StrCat("serving '", options.served_model_name, "' on HTTP ",
                                p.http->port(), ", gRPC ", p.grpc->port()));
  // A step may legitimately wait for a down worker (worker_down_wait) plus a call deadline; a
  // watchdog shorter than that would kill the coordinator for a worker's fault.
  const absl::Duration longest_wait = options.worker_down_wait + 2 * options.expert_call_timeout;
  if (p.notifier.watchdog_interval() > absl::ZeroDuration() &&
      p.notifier.watchdog_interval() <= longest_wait)
    Log(absl::StrCat("WARNING: WatchdogSec (", absl::FormatDuration(p.notifier.watchdog_interval()),
                     ") is not above --worker-down-wait-ms + 2 x --expert-call-timeout-ms (",
                     absl::FormatDuration(longest_wait),
                     "): systemd may kill the coordinator while a step waits for a worker"));
  if (p.notifier.enabled())
    Log(absl::StrCat("systemd: READY=1 sent", p.notifier.watchdog_interval() > absl::ZeroDuration()
                                                  ? absl::StrCat("; watchdog every ",
                                                                 absl::FormatDuration(p.notifier.watchdog_interval()))
                                                  : ""));
  // Re-check health a few times a second: logs every change (naming what is stuck) even when
  // nobody probes, and keeps systemd's STATUS= line current.
  p.health_thread = std::thread([pp] {
    int last = -1;
    while (true) {
      {
        absl::MutexLock lock(&pp->health_mu);
        pp->health_mu.AwaitWithTimeout(absl::Condition(&pp->health_stop), absl::Milliseconds(250));
        if (pp->health_stop) break;
      }
      HealthReport r = pp->health->Check();
      if (static_cast<int>(r.ready) != last) {
        last = r.ready;
        pp->notifier.Status(r.ready ? "serving: ready"
                                    : "NOT READY: " + absl::StrJoin(r.reasons, "; "));
      }
    }
  });
  return self;
}

Coordinator::~Coordinator() { Shutdown(); }

int Coordinator::http_port() const { return parts_->http->port(); }
int Coordinator::grpc_port() const { return parts_->grpc->port(); }

bool Coordinator::Drain(absl::Duration grace) {
  if (!parts_ || parts_->shut_down) return true;
  Parts& p = *parts_;
  const ServingPhase was = p.health->phase();
  if (was == ServingPhase::kDraining || was == ServingPhase::kStopped) return true;
  p.health->SetPhase(ServingPhase::kDraining);
  p.engine->StopAccepting("the server is shutting down (draining); retry on another replica");
  if (p.grpc) p.grpc->RefreshHealth();
  const EngineStats e = p.engine->stats();
  const std::string what = absl::StrCat("draining: ", e.num_running, " running, ", e.num_waiting,
                                        " waiting; grace ", absl::FormatDuration(grace));
  Log(what);
  p.notifier.Stopping(what);
  p.notifier.ExtendTimeout(grace + absl::Seconds(30));
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + grace;
  while (p.engine->HasPendingRequests() && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(20));
  bool clean = !p.engine->HasPendingRequests();
  if (!clean) {
    const EngineStats left = p.engine->stats();
    Log(absl::StrCat("drain grace of ", absl::FormatDuration(grace), " expired: ending ",
                     left.num_running + left.num_waiting, " request(s) with an error"));
    p.engine->FailAll(absl::UnavailableError(absl::StrCat(
        "the server shut down before this request finished (drain grace period of ",
        absl::FormatDuration(grace), " expired)")));
    const absl::Time until = absl::Now() + absl::Seconds(5);
    while (p.engine->HasPendingRequests() && absl::Now() < until)
      absl::SleepFor(absl::Milliseconds(20));
  } else {
    Log(absl::StrCat("drained in ", absl::FormatDuration(absl::Trunc(absl::Now() - start,
                                                                        absl::Milliseconds(1)))));
  }
  // The last responses are queued on the connections' strands: let them leave before the
  // connections are closed (bounded; idle keep-alive connections just wait it out).
  const absl::Time flush_until = absl::Now() + absl::Seconds(1);
  while (p.http && p.http->open_connections() > 0 && absl::Now() < flush_until)
    absl::SleepFor(absl::Milliseconds(10));
  Shutdown();
  return clean;
}

void Coordinator::Shutdown() {
  if (!parts_ || parts_->shut_down) return;
  parts_->shut_down = true;
  if (parts_->health) parts_->health->SetPhase(ServingPhase::kStopped);
  {
    absl::MutexLock lock(&parts_->health_mu);
    parts_->health_stop = true;  // wakes the health thread's Await
  }
  if (parts_->health_thread.joinable()) parts_->health_thread.join();
  if (parts_->http) parts_->http->Shutdown();
  if (parts_->grpc) parts_->grpc->Shutdown();
  parts_->http.reset();
  parts_->grpc.reset();
  if (parts_->router) parts_->router->Shutdown();  // a step waiting for a down worker ends now
  parts_->deadline.reset();
  parts_->engine.reset();
  parts_->runner.reset();
  parts_->moe_probe.reset();
  parts_->supervisor.reset();  // before the router it reports to
  parts_->router.reset();
  if (parts_->local_workers) parts_->local_workers->Stop();
}

}  // namespace mxserve
