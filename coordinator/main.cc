// mxserve-coordinator: flags → CoordinatorOptions → Coordinator::Start; serves until SIGTERM/SIGINT.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "coordinator/coordinator.h"
#include "coordinator/frontends/auth.h"
#include "coordinator/supervision/worker_devices.h"
#include "core/exit_codes.h"
#include "core/flags_util.h"

ABSL_FLAG(std::string, model, "", "Model folder (config.json, *.safetensors, tokenizer.json)");
ABSL_FLAG(std::string, served_model_name, "", "Model id clients send (default: folder name)");
ABSL_FLAG(std::string, tool_call_parser, "",
          "Tool-call parser, as vLLM names it: openai (harmony), kimi_k2, kimi_k3, deepseek_v3 "
          "(default: from the model type)");
ABSL_FLAG(std::string, reasoning_parser, "",
          "Reasoning parser, as vLLM names it: openai_gptoss (harmony), kimi_k2, kimi_k3, "
          "deepseek_r1, deepseek_v3, none (default: from the model type)");
ABSL_FLAG(bool, enable_auto_tool_choice, false,
          "Accept tool_choice \"auto\" (vLLM's flag; without it such requests get 400, except "
          "on harmony models)");
ABSL_FLAG(std::string, host, "0.0.0.0", "Address the HTTP and gRPC front doors bind");
ABSL_FLAG(int, http_port, 8000, "OpenAI-compatible HTTP port (0 = pick)");
ABSL_FLAG(int, grpc_port, 50051, "mxserve.v1.Inference gRPC port (0 = pick)");
ABSL_FLAG(std::string, port_file, "", "Write {\"http_port\",\"grpc_port\"} here once listening");
ABSL_FLAG(int, http_threads, 2, "HTTP I/O threads");
ABSL_FLAG(int, http_handler_threads, 2,
          "Threads that parse, render and tokenize HTTP requests (off the I/O threads)");
ABSL_FLAG(int, max_connections, 1024,
          "HTTP connections at once; more are answered 503 and closed");
ABSL_FLAG(int64_t, max_buffered_bytes, int64_t{256} << 20,
          "HTTP request body bytes held at once over all connections (a chunked body counts as "
          "8 MiB); a request past it gets 503 on its header");
ABSL_FLAG(int64_t, max_prompt_bytes, 0,
          "Prompts longer than this many bytes get 400 before tokenizing (0 = the longest "
          "token's bytes times the most prompt tokens: refuses only what cannot fit)");
ABSL_FLAG(int, local_workers, 0,
          "Start this many mxserve-worker processes (0 = run every expert in-process)");
ABSL_FLAG(std::string, workers, "", "Comma-separated host:port of workers started elsewhere");
ABSL_FLAG(std::string, worker_binary, "", "mxserve-worker path (default: next to this binary)");
ABSL_FLAG(int, worker_threads, 1, "CPU threads per local worker");
ABSL_FLAG(std::string, worker_devices, "",
          "Devices of the local workers, comma-separated cuda:N or cpu; worker i runs on entry "
          "i mod the list's length, restarts too (default: one worker per GPU of this host other "
          "than the coordinator's, the coordinator's when it is the only one; cpu without a GPU "
          "or in a build without CUDA)");
ABSL_FLAG(int, worker_startup_timeout_s, 120, "Bound on waiting for workers to be SERVING");
ABSL_FLAG(int, expert_call_timeout_ms, 5000,
          "Deadline of each RunExperts attempt; a late call is retried on another replica");
ABSL_FLAG(int, expert_replicas, 1, "Local workers holding each expert (1..--local-workers)");
ABSL_FLAG(int, worker_down_wait_ms, 30000,
          "How long a step waits for experts with no healthy worker before failing its requests");
ABSL_FLAG(bool, no_restart, false, "Never restart dead or hung local workers (= --max-restarts 0)");
ABSL_FLAG(int, max_restarts, 10, "Restarts per worker within --restart-window-s (0 = never restart)");
ABSL_FLAG(int, restart_window_s, 60, "Window of the crash-loop limit --max-restarts");
ABSL_FLAG(int, health_probe_timeout_ms, 1000, "A worker not answering a health check this fast is hung");
ABSL_FLAG(int, worker_keepalive_ms, 1000,
          "gRPC keepalive interval and timeout to workers (a hung worker shows within ~2x this)");
ABSL_FLAG(bool, expert_call_stream, true,
          "Expert calls over one long-lived RunExpertsStream per worker (false: one unary call each)");
ABSL_FLAG(std::string, expert_wire_dtype, "f32",
          "Activations and expert partial sums on the wire to workers: f32 (exact) or bf16 (half "
          "the bytes)");
ABSL_FLAG(bool, expert_shared_memory, true,
          "Workers on this host (--local-workers, or --workers at 127.0.0.1 started with "
          "--allow_shared_memory as the same user): activations and expert partial sums through "
          "/dev/shm (the calls stay on gRPC); a worker that refuses gets bytes in the gRPC "
          "messages. --expert_shared_memory=false: always the messages");
ABSL_FLAG(int, threads, 0, "Dense-path compute threads (0 = all cores)");
ABSL_FLAG(int, max_model_len, 0, "Context length (0 = the model's, bounded by the KV cache)");
ABSL_FLAG(int, max_num_seqs, 64, "Running sequences at once");
ABSL_FLAG(int, max_num_batched_tokens, 2048, "Token budget per step");
ABSL_FLAG(int, max_waiting, 1024, "Queued requests before 429");
ABSL_FLAG(int, block_size, 16, "Tokens per KV block");
ABSL_FLAG(bool, enable_prefix_caching, true,
          "Automatic prefix caching: full KV blocks of a prompt's leading tokens are kept and "
          "shared with later requests that start the same way (as vLLM's)");
ABSL_FLAG(bool, no_enable_prefix_caching, false,
          "Turns automatic prefix caching off (vLLM's spelling of --enable-prefix-caching=false)");
ABSL_FLAG(std::string, api_key, "",
          "Require 'Authorization: Bearer KEY' on HTTP and gRPC (probes and /metrics stay open); "
          "prefer the MXSERVE_API_KEY environment variable, which `ps` does not show");
ABSL_FLAG(bool, grpc_reflection, false,
          "Serve gRPC server reflection on the gRPC port (for grpcurl without the .proto files); "
          "it answers without the API key, so it is off by default");
ABSL_FLAG(int, max_prompt_tokens, 0, "Reject longer prompts with 400 (0 = only the context bounds them)");
ABSL_FLAG(double, request_timeout_s, 0,
          "End a request running longer than this with an error (HTTP 504); 0 = no limit");
ABSL_FLAG(std::string, worker_token, "",
          "Shared token sent to workers (env MXSERVE_WORKER_TOKEN); must match theirs");
ABSL_FLAG(std::string, tls_ca, "", "Mutual TLS to workers: CA PEM (env MXSERVE_TLS_CA)");
ABSL_FLAG(std::string, tls_cert, "", "Mutual TLS to workers: our certificate PEM (env MXSERVE_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS to workers: our private key PEM (env MXSERVE_TLS_KEY)");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name the workers' certificates carry, if not their address's host (env MXSERVE_TLS_SERVER_NAME)");
ABSL_FLAG(int64_t, kv_cache_bytes, 0,
          "KV cache size in bytes (0 = 1 GiB on the CPU; on a GPU, what "
          "--gpu-memory-utilization leaves after weights and activations)");
ABSL_FLAG(std::string, device, "auto",
          "Where the dense model runs: auto (the first GPU if there is one, else cpu), cpu or "
          "cuda:N. On a GPU the experts run there too unless --local-workers or --workers");
ABSL_FLAG(double, gpu_memory_utilization, 0.9,
          "With a GPU --device: the share of the card's memory the coordinator may use (weights, "
          "activations and the KV cache, which gets the rest), as vLLM's flag");
ABSL_FLAG(bool, enforce_eager, false,
          "With a GPU --device: run every step eagerly (no CUDA graphs for decode steps), as "
          "vLLM's flag");
ABSL_FLAG(double, progress_timeout_s, 30,
          "With requests in flight and no engine step completed for this long, /health/ready "
          "fails and the log names what is stuck");
ABSL_FLAG(double, drain_grace_s, 30,
          "SIGTERM/SIGINT: requests in flight get this long to finish (then end with an error); "
          "a second signal exits at once");

namespace {
using mxserve::kExitConfig;

int g_signal_pipe[2] = {-1, -1};

extern "C" void OnStopSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  ssize_t n = write(g_signal_pipe[1], &b, 1);  // async-signal-safe
  (void)n;
  errno = saved;
}

// The next stop signal from the pipe, waiting up to timeout_ms (-1: for ever); 0 if none.
int NextSignal(int timeout_ms) {
  pollfd p{g_signal_pipe[0], POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return 0;
  unsigned char b = 0;
  return read(g_signal_pipe[0], &b, 1) == 1 ? b : 0;
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("mxserve coordinator: --model DIR [--local-workers N | --workers host:port,...]");
  std::vector<std::string> normalized = mxserve::NormalizeFlagNames(argc, argv);
  std::vector<char*> args = mxserve::FlagArgv(normalized);
  std::vector<char*> rest = absl::ParseCommandLine(argc, args.data());
  if (rest.size() > 1) {
    fprintf(stderr, "mxserve-coordinator: unexpected argument '%s'\n", rest[1]);
    return kExitConfig;
  }
  mxserve::CoordinatorOptions o;
  o.model_dir = absl::GetFlag(FLAGS_model);
  if (o.model_dir.empty()) {
    fprintf(stderr, "mxserve-coordinator: --model is required\n");
    return kExitConfig;
  }
  o.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  o.tool_call_parser = absl::GetFlag(FLAGS_tool_call_parser);
  o.reasoning_parser = absl::GetFlag(FLAGS_reasoning_parser);
  o.enable_auto_tool_choice = absl::GetFlag(FLAGS_enable_auto_tool_choice);
  o.host = absl::GetFlag(FLAGS_host);
  o.http_port = absl::GetFlag(FLAGS_http_port);
  o.grpc_port = absl::GetFlag(FLAGS_grpc_port);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.http_threads = absl::GetFlag(FLAGS_http_threads);
  o.http_handler_threads = absl::GetFlag(FLAGS_http_handler_threads);
  o.max_connections = absl::GetFlag(FLAGS_max_connections);
  o.max_buffered_bytes = absl::GetFlag(FLAGS_max_buffered_bytes);
  o.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  o.local_workers = absl::GetFlag(FLAGS_local_workers);
  for (auto part : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipEmpty()))
    o.workers.emplace_back(part);
  o.worker_binary = absl::GetFlag(FLAGS_worker_binary);
  o.worker_threads = absl::GetFlag(FLAGS_worker_threads);
  if (const std::string d = absl::GetFlag(FLAGS_worker_devices); !d.empty()) {
    absl::StatusOr<std::vector<std::string>> devices = mxserve::ParseWorkerDevices(d);
    if (!devices.ok()) {
      fprintf(stderr, "mxserve-coordinator: %s\n", std::string(devices.status().message()).c_str());
      return kExitConfig;
    }
    o.worker_devices = *std::move(devices);
  }
  o.worker_startup_timeout = absl::Seconds(absl::GetFlag(FLAGS_worker_startup_timeout_s));
  o.expert_call_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_expert_call_timeout_ms));
  o.expert_replicas = absl::GetFlag(FLAGS_expert_replicas);
  o.worker_down_wait = absl::Milliseconds(absl::GetFlag(FLAGS_worker_down_wait_ms));
  o.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  o.restart_workers = !absl::GetFlag(FLAGS_no_restart) && o.max_restarts > 0;
  o.restart_window = absl::Seconds(absl::GetFlag(FLAGS_restart_window_s));
  o.health_probe_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_health_probe_timeout_ms));
  o.keepalive_time = o.keepalive_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_worker_keepalive_ms));
  o.expert_call_stream = absl::GetFlag(FLAGS_expert_call_stream);
  o.expert_shared_memory = absl::GetFlag(FLAGS_expert_shared_memory);
  if (const std::string w = absl::GetFlag(FLAGS_expert_wire_dtype); w == "bf16" || w == "f32") {
    o.expert_wire_bf16 = w == "bf16";
  } else {
    fprintf(stderr, "mxserve-coordinator: --expert_wire_dtype must be f32 or bf16, not '%s'\n", w.c_str());
    return kExitConfig;
  }
  if (o.expert_replicas < 1 || o.max_restarts < 0 || o.restart_window <= absl::ZeroDuration() ||
      o.worker_down_wait < absl::ZeroDuration() || o.expert_call_timeout <= absl::ZeroDuration() ||
      o.health_probe_timeout <= absl::ZeroDuration() || o.keepalive_time <= absl::ZeroDuration()) {
    fprintf(stderr, "mxserve-coordinator: bad fault-tolerance flag (replicas >= 1, timeouts > 0)\n");
    return kExitConfig;
  }
  o.threads = absl::GetFlag(FLAGS_threads);
  o.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  o.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  o.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  o.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  o.block_size = absl::GetFlag(FLAGS_block_size);
  o.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching) &&
                            !absl::GetFlag(FLAGS_no_enable_prefix_caching);
  o.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes);
  o.device = absl::GetFlag(FLAGS_device);
  o.gpu_memory_utilization = absl::GetFlag(FLAGS_gpu_memory_utilization);
  o.enforce_eager = absl::GetFlag(FLAGS_enforce_eager);
  o.api_key = mxserve::frontends::ApiKeyFromFlagOrEnv(absl::GetFlag(FLAGS_api_key));
  o.grpc_reflection = absl::GetFlag(FLAGS_grpc_reflection);
  o.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  const double timeout_s = absl::GetFlag(FLAGS_request_timeout_s);
  o.request_timeout = absl::Seconds(timeout_s);
  o.worker_auth.token = absl::GetFlag(FLAGS_worker_token);
  o.worker_auth.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.worker_auth.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.worker_auth.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.worker_auth.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  o.worker_auth.FillFromEnv();
  if (o.max_prompt_tokens < 0 || !(timeout_s >= 0)) {
    fprintf(stderr, "mxserve-coordinator: --max-prompt-tokens and --request-timeout-s must be >= 0\n");
    return kExitConfig;
  }
  const double progress_s = absl::GetFlag(FLAGS_progress_timeout_s);
  const double grace_s = absl::GetFlag(FLAGS_drain_grace_s);
  if (!(progress_s > 0) || !(grace_s >= 0)) {
    fprintf(stderr, "mxserve-coordinator: --progress-timeout-s must be > 0, --drain-grace-s >= 0\n");
    return kExitConfig;
  }
  o.progress_timeout = absl::Seconds(progress_s);
  o.drain_grace = absl::Seconds(grace_s);
  if (o.local_workers < 0 || o.http_port < 0 || o.grpc_port < 0 || o.block_size <= 0 ||
      o.max_num_seqs <= 0 || o.max_num_batched_tokens <= 0 || o.kv_cache_bytes < 0 ||
      !(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1) ||
      o.http_handler_threads <= 0 || o.max_connections <= 0 ||
      o.max_buffered_bytes < o.max_body_bytes || o.max_prompt_bytes < 0) {
    fprintf(stderr, "mxserve-coordinator: a flag out of range (one that needs > 0 is not, or "
            "--max_buffered_bytes is below the 8 MiB body limit)\n");
    return kExitConfig;
  }

  // SIGTERM/SIGINT go through a handler onto a pipe. Not sigwait with the signals blocked:
  // threads that libraries start before main (OpenBLAS's pool) keep them unblocked, and a
  // signal landing there while no thread waits would kill the process on the spot.
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    perror("mxserve-coordinator: pipe2");
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  // A stop signal while loading: nothing is in flight, exit now (local workers die with us).
  // One that lands once start-up is over is left on the pipe for the drain below.
  std::atomic<bool> started{false};
  std::thread early_stop([&started] {
    while (!started.load()) {
      pollfd p{g_signal_pipe[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0 || started.load()) continue;
      int sig = NextSignal(0);
      if (sig > 0) {
        fprintf(stderr, "mxserve-coordinator: signal %d while starting, exiting\n", sig);
        _exit(128 + sig);
      }
    }
  });
  absl::StatusOr<std::unique_ptr<mxserve::Coordinator>> coordinator =
      absl::UnknownError("not started");
  try {
    coordinator = mxserve::Coordinator::Start(o);
  } catch (const std::bad_alloc&) {  // sizes are bounded and checked; this is the last guard
    coordinator = absl::ResourceExhaustedError(
        "out of memory while loading (config.json's sizes, --kv-cache-bytes, --threads?)");
  }
  started.store(true);
  early_stop.join();
  if (!coordinator.ok()) {
    fprintf(stderr, "mxserve-coordinator: %s\n", coordinator.status().ToString().c_str());
    // A corrupt checkpoint (DataLoss), an unreadable file, a worker that refused our token:
    // 78, so that systemd does not restart into the same failure for ever.
    return mxserve::ExitCodeForStartError(coordinator.status());
  }
  int sig = 0;
  while (sig <= 0) sig = NextSignal(-1);
  fprintf(stderr, "mxserve-coordinator: signal %d, draining (a second signal exits at once)\n", sig);
  // Drain on a helper thread; this one keeps listening: a second signal ends the process now,
  // and so does a drain that overruns its grace by far (a stuck step that never returns).
  std::atomic<bool> done{false};
  std::thread drainer([&] {
    (*coordinator)->Drain(o.drain_grace);
    done.store(true);
  });
  const auto hard_deadline = std::chrono::steady_clock::now() +
                             std::chrono::milliseconds(absl::ToInt64Milliseconds(o.drain_grace)) +
                             std::chrono::seconds(30);
  while (!done.load()) {
    int again = NextSignal(50);
    if (again > 0) {
      fprintf(stderr, "mxserve-coordinator: second signal %d, exiting now\n", again);
      _exit(128 + again);
    }
    if (std::chrono::steady_clock::now() > hard_deadline) {
      fprintf(stderr, "mxserve-coordinator: shutdown overran the drain grace by 30 s, exiting now\n");
      _exit(1);
    }
  }
  drainer.join();
  fprintf(stderr, "mxserve-coordinator: stopped\n");
  return 0;
}
