// The coordinator process, assembled: model folder → tokenizer, chat template, expert backends
// (in-process, local worker processes or remote workers) behind the ExpertRouter, the dense
// model and its KV cache, the Engine, and the HTTP and gRPC front doors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_options.h"

namespace mxserve {

class Coordinator {
 public:
  // Loads everything and starts serving; returns once both front doors listen.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(CoordinatorOptions options);
  ~Coordinator();  // Shutdown()

  int http_port() const;
  int grpc_port() const;
  // Graceful drain (SIGTERM): readiness goes false and new requests get 503 at once (systemd
  // hears STOPPING=1); requests in flight run to completion for up to `grace`, then end with a
  // clear error; then Shutdown(). Returns true if everything finished within the grace.
  bool Drain(absl::Duration grace);
  // Stops the front doors, then the engine (pending requests end), then the workers.
  void Shutdown();

 private:
  struct Parts;
  Coordinator() = default;
  std::unique_ptr<Parts> parts_;
};

}  // namespace mxserve
