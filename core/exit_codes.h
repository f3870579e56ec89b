// Process exit codes shared by mxserve-coordinator and mxserve-worker, and which start-up
// failures are configuration errors (restarting cannot fix them) rather than transient ones.
#pragma once

#include "absl/status/status.h"

namespace mxserve {

// EX_CONFIG (sysexits.h): the systemd units say RestartPreventExitStatus=78, so a bad flag,
// config.json, tokenizer or checkpoint stops the unit instead of restarting it for ever.
inline constexpr int kExitConfig = 78;

// A failed start-up's exit code: kExitConfig unless the failure may pass by itself (a port
// still held, a worker not up yet, a deadline, an I/O error the kernel reported), then 1.
inline int ExitCodeForStartError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
      return 1;
    default:  // invalid, missing, unreadable or corrupt input; refused credentials; too big
      return kExitConfig;
  }
}

}  // namespace mxserve
