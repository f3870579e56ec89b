// Every knob of the coordinator process, in one struct (flags are parsed only in main.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "wire/worker_auth.h"

namespace mxserve {

struct CoordinatorOptions {
  // Model.
  std::string model_dir;
  std::string served_model_name;      // default: the model folder's name
  // Output parsers (coordinator/chat/output_parser_registry.h), vLLM's names; "" = from the
  // model type. Without enable_auto_tool_choice, tool_choice "auto" gets 400 (not on harmony).
  std::string tool_call_parser;
  std::string reasoning_parser;
  bool enable_auto_tool_choice = false;
  // Front doors.
  std::string host = "0.0.0.0";
  int http_port = 8000;               // 0 = pick a free port
  int grpc_port = 50051;              // 0 = pick a free port
  std::string port_file;              // if set: {"http_port":P,"grpc_port":Q} written once listening
  int http_threads = 2;
  int64_t max_body_bytes = 8 << 20;
  int max_connections = 1024;         // HTTP connections at once; more get 503 and are closed
  int64_t max_buffered_bytes = int64_t{256} << 20;  // HTTP request bodies held at once, in all
  int http_handler_threads = 2;       // threads that parse, render and tokenize HTTP requests
  int64_t max_prompt_bytes = 0;       // > 0: longer prompts get 400 untokenized (0 = from vocab)
  // Security and limits (coordinator/frontends/auth.h, request_deadline.h).
  bool grpc_reflection = false;       // gRPC server reflection on the front door (no key needed)
  std::string api_key;                // non-empty: Bearer key required on HTTP and gRPC
  int max_prompt_tokens = 0;          // > 0: longer prompts get 400
  absl::Duration request_timeout = absl::ZeroDuration();  // > 0: longer requests end with 504
  WorkerAuthOptions worker_auth;      // mTLS and/or token towards the workers
  // Experts: in-process (local_workers == 0 and no workers), local processes, or remote workers.
  int local_workers = 0;
  std::vector<std::string> workers;   // host:port of workers started elsewhere
  std::string worker_binary;          // default: mxserve-worker next to this binary
  int worker_threads = 1;             // CPU threads per local worker
  // Local worker i runs on worker_devices[i % size] ("cpu", "cuda:N"); empty: every GPU of this
  // host but the coordinator's, else cpu (coordinator/supervision/worker_devices.h).
  std::vector<std::string> worker_devices;
  absl::Duration worker_startup_timeout = absl::Seconds(120);
  absl::Duration expert_call_timeout = absl::Seconds(5);  // per RunExperts attempt
  // Fault tolerance (coordinator/router, coordinator/supervision).
  int expert_replicas = 1;            // local workers holding each expert (1..local_workers)
  absl::Duration worker_down_wait = absl::Seconds(30);  // a step waits this long for a down group
  bool restart_workers = true;        // local mode: restart dead/hung workers
  int max_restarts = 10;              // per worker within restart_window (crash-loop limit)
  absl::Duration restart_window = absl::Seconds(60);
  absl::Duration health_probe_timeout = absl::Seconds(1);  // Check deadline: longer = "hung"
  absl::Duration keepalive_time = absl::Seconds(1);        // gRPC keepalive to workers
  absl::Duration keepalive_timeout = absl::Seconds(1);
  bool expert_call_stream = true;     // RunExpertsStream per worker (false: unary calls)
  // Activations and partial sums on the wire to workers: false F32 (exact), true BF16 (half the
  // bytes; the GPU kernels take bf16 activations anyway).
  bool expert_wire_bf16 = false;
  // Workers on this host: activations and partial sums through shared memory, the call over gRPC.
  bool expert_shared_memory = true;
  // Compute.
  std::string device = "auto";        // dense model: auto (first GPU, else cpu), cpu, cuda:N
  double gpu_memory_utilization = 0.9;  // GPU: share of the card's memory the runner may hold
  bool enforce_eager = false;         // GPU: no CUDA graphs for decode steps
  int threads = 0;                    // dense-path threads (0 = all cores)
  // Engine.
  int max_model_len = 0;              // 0 = min(max_position_embeddings, KV capacity)
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;  // per-step token budget
  int max_waiting = 1024;             // queue bound; beyond it requests get 429
  bool enable_prefix_caching = true;  // share full KV blocks of common prompt prefixes
  int block_size = 16;                // tokens per KV block
  // KV cache: 0 = 1 GiB on the CPU, what --gpu-memory-utilization leaves on a GPU.
  int64_t kv_cache_bytes = 0;
  // Health and lifecycle (coordinator/observability).
  absl::Duration progress_timeout = absl::Seconds(30);  // requests in flight, no step: not ready
  absl::Duration drain_grace = absl::Seconds(30);       // SIGTERM: in-flight requests get this long
};

}  // namespace mxserve
