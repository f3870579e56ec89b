// Point-in-time snapshots of the expert router's and the worker supervisor's counters, for
// /metrics and the /v1/workers admin view. Plain values: copy them out, format them anywhere.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mxserve {

// Whether the router sends calls to a backend. kUp: its health stream last said SERVING and no
// call has failed since. kDown: crashed, hung, NOT_SERVING, unreachable or a call failed.
enum class BackendState { kUp, kDown };
inline const char* BackendStateName(BackendState s) { return s == BackendState::kUp ? "up" : "down"; }

// Expert-call latency histogram, Prometheus style: counts[i] = calls with latency <=
// kLatencyBucketsS[i] (not cumulative; the last slot counts the rest, i.e. +Inf).
inline constexpr std::array<double, 14> kLatencyBucketsS = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
struct LatencyHistogram {
  std::array<uint64_t, kLatencyBucketsS.size() + 1> counts{};
  double sum_s = 0;
  uint64_t count = 0;
};

struct BackendStats {
  int index = 0;
  std::string name;             // "worker1"
  std::string address;          // "127.0.0.1:4567" ("" for in-process)
  BackendState state = BackendState::kUp;
  std::string reason;           // why it is in that state ("SERVING", "crashed: ...")
  double seconds_in_state = 0;
  std::vector<int> experts;     // sorted global ids it holds
  uint64_t calls = 0;           // RunExperts attempts sent to it (retries included)
  uint64_t call_failures = 0;   // attempts that failed (any code)
  uint64_t state_changes = 0;   // up->down and down->up transitions
  uint64_t bytes_sent = 0;      // request payload bytes (activations, ids, weights)
  uint64_t bytes_received = 0;  // response payload bytes
  uint64_t stream_opens = 0;    // RunExpertsStreams opened to it
  uint64_t unary_calls = 0;     // calls that went unary instead of on the stream
  bool shared_memory = false;   // stream calls' tensors through /dev/shm
  LatencyHistogram latency;     // successful calls only
};

struct RouterStats {
  std::vector<BackendStats> backends;
  int replicas_min = 0;         // fewest hosts of any expert (the placement's R)
  int experts_without_host = 0; // experts none of whose hosts is up right now
  uint64_t retries = 0;         // calls re-issued for any reason (failover or after waiting)
  uint64_t failovers = 0;       // calls re-issued on a different replica
  uint64_t waits = 0;           // times a call waited for a down group to come back (R=1)
  uint64_t failed_calls = 0;    // groups given up on (UNAVAILABLE to the engine)
};

// One local worker process (--local-workers) as the supervisor sees it.
struct SupervisedWorkerStats {
  int index = 0;
  pid_t pid = -1;               // -1 while not running
  std::string state;            // "starting", "running", "backoff", "killing", "failed", "stopped"
  uint64_t restarts = 0;        // processes started after the first
  uint64_t crashes = 0;         // exits not asked for (any status or signal)
  uint64_t hang_kills = 0;      // SIGKILLs for not answering
  std::string last_exit;        // "killed by signal 9 (Killed)", "exited with status 1"
};

struct SupervisorStats {
  std::vector<SupervisedWorkerStats> workers;
  bool restarts_enabled = true;
};

}  // namespace mxserve
