// A small asynchronous HTTP/1.1 server on Boost.Beast/Asio: a few I/O threads serve every
// connection (no thread per connection), keep-alive, a body-size limit, read/idle/write
// timeouts, and responses that may be produced later from any thread, including chunked
// streams (SSE) and a callback when the client goes away mid-response. Hostile clients are
// bounded: connections, buffered body bytes, header and trailer sizes; requests are judged on
// their header (framing, Host, HttpHeadCheck) before any body is read; no exception from
// parsing or from a handler ends the process (it drops that one connection).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mxserve::frontends {

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // as sent, e.g. "/v1/models?x=1"
  std::string path;     // target without the query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool keep_alive = true;
  // Case-insensitive header lookup; "" when absent.
  std::string Header(absl::string_view name) const;
};

// The answer to one request. Thread-safe: every method may be called from any thread (the work
// is posted onto the connection's strand). Exactly one of Send or StartStream...End is used.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  // A whole response with Content-Length.
  virtual void Send(int status, std::string content_type, std::string body,
                    std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  // A chunked response; Write() appends chunks (empty writes are skipped); End() ends it.
  virtual void StartStream(int status, std::string content_type,
                           std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  virtual void Write(std::string chunk) = 0;
  virtual void End() = 0;
  // Called once (on an I/O thread) if the client disconnects, or the connection dies, before
  // the response is complete. Set it before starting long work; if the client is already gone,
  // it runs at once.
  virtual void OnDisconnect(std::function<void()> callback) = 0;
  virtual bool disconnected() const = 0;
};

// Called on an I/O thread for each complete request; must not block. May answer now or later.
using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<HttpResponder>)>;

// A whole answer given to a request on its header alone, before its body is read.
struct HttpRefusal {
  int status = 400;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};
// Called on an I/O thread with a request's header (`body` empty) before its body is read or
// `Expect: 100-continue` is answered; must be cheap. A refusal is sent instead of reading the
// body (the connection then closes if a body was announced).
using HttpHeadCheck = std::function<std::optional<HttpRefusal>(const HttpRequest& head)>;

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;                 // 0 = pick a free port (see HttpServer::port())
  int io_threads = 2;
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  // 1 KiB .. 64 KiB (Beast throws on a field of 64 KiB). Also the read buffer's size, which
  // bounds each chunk line (size and extensions) and the trailer: longer ones get 400.
  size_t max_header_bytes = 64u << 10;
  // Connections beyond this are accepted, answered 503 and closed at once.
  int max_connections = 1024;
  // Request bodies held at once, all connections together (a chunked body counts as
  // max_body_bytes): a request that would go past it gets 503 on its header.
  size_t max_buffered_bytes = 256u << 20;
  // After the accept loop fails for want of descriptors (EMFILE, ENFILE) or another error, it
  // waits this long before accepting again.
  std::chrono::milliseconds accept_backoff{50};
  std::chrono::milliseconds read_timeout{30'000};    // to receive a whole request once begun
  std::chrono::milliseconds idle_timeout{60'000};    // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout{60'000};   // a client that stops reading is dropped
  // Body for a request over max_body_bytes, answered 413 (OpenAI-style JSON by default).
  std::string too_large_body;
  // Body for an unparsable request, answered 400.
  std::string bad_request_body;
  // The body (content type application/json) of other errors the server answers itself (bad
  // framing, no Host, too many connections); empty = a JSON object {"error":{"message":..}}.
  std::function<std::string(int status, absl::string_view message)> error_body;
  // Optional; see HttpHeadCheck.
  HttpHeadCheck head_check;
};

// What the server has refused or survived, since Start (for tests, metrics and probes).
struct HttpServerStats {
  int open_connections = 0;
  int64_t shed_connections = 0;    // accepted and closed at once: over max_connections or no fds
  int64_t accept_errors = 0;       // failed accepts (EMFILE, ENFILE, ...)
  int64_t buffered_bytes = 0;      // body bytes reserved now
  int64_t refused_for_buffer = 0;  // requests answered 503 for max_buffered_bytes
  int64_t exceptions = 0;          // exceptions caught from parsing or handlers
};

class HttpServer {
 public:
  // Binds, listens and starts the I/O threads.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           HttpHandler handler);
  ~HttpServer();  // Shutdown()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;  // the bound port
  // Stops accepting, closes every connection (pending responses see a disconnect) and joins
  // the I/O threads. Idempotent.
  void Shutdown();
  // Connections open now (for tests and metrics).
  int open_connections() const;
  HttpServerStats stats() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxserve::frontends
