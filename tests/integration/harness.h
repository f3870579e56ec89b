// Test harness for multi-process tests: temp dirs, child processes, a tiny HTTP client and an
// SSE reader. Everything binds 127.0.0.1 with ports chosen at run time; waits are bounded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace mxserve::testing {

// Directory holding the test binary: build/bin, where every mxserve binary lands too.
std::string BinDir();

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A child process; killed (SIGKILL after SIGTERM + grace) and reaped on destruction.
class Process {
 public:
  Process(const std::string& binary, const std::vector<std::string>& args,
          const std::string& log_path);
  ~Process();
  pid_t pid() const { return pid_; }
  bool Alive();
  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status from waitpid.
  int Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// Runs a command to completion; returns its exit code.
int RunCommand(const std::string& binary, const std::vector<std::string>& args,
               const std::string& log_path);

// A coordinator started with --http-port 0 --grpc-port 0 --port-file; ports read back.
struct Coordinator {
  std::unique_ptr<Process> process;
  int http_port = 0;
  int grpc_port = 0;
  std::string log_path;
};
// Starts mxserve-coordinator on `model_dir` with extra flags; waits (bounded) until /health/ready
// or /health answers 200. Returns nullopt (and prints the log) on failure.
std::optional<Coordinator> StartCoordinator(const std::string& model_dir,
                                            const std::vector<std::string>& extra_flags,
                                            const std::string& log_dir);

// Path of a tiny model made once per test binary (mxserve-make-model --preset tiny).
std::string TinyModelDir();

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};
HttpResponse HttpCall(int port, const std::string& method, const std::string& target,
                      const std::string& body = "",
                      const std::string& content_type = "application/json");

// Splits an SSE body into the JSON payloads of its `data:` lines; stops at [DONE].
// done is set when [DONE] was seen.
std::vector<nlohmann::json> ParseSse(const std::string& body, bool* done);

}  // namespace mxserve::testing
