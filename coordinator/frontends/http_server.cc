#include "coordinator/frontends/http_server.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mxserve::frontends {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Headers = std::vector<std::pair<std::string, std::string>>;

// After a 413 we read and drop what the client is still sending, so that it gets to read our
// answer instead of a connection reset; bounded in bytes and time.
constexpr size_t kMaxDrainBytes = 64u << 20;
constexpr std::chrono::seconds kDrainTime{5};

std::string ReasonPhrase(int status) {
  auto r = http::obsolete_reason(static_cast<http::status>(status));
  return r.empty() ? "Unknown" : std::string(r.data(), r.size());
}

}  // namespace

std::string HttpRequest::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

class Session;

// Shared by the server and every session/exchange, so that a late engine callback holding an
// exchange never touches a destroyed io_context.
struct Core {
  HttpServerOptions options;
  HttpHandler handler;
  asio::io_context ioc;
  std::atomic<int> open_connections{0};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;  // guarded by mu

  Core(HttpServerOptions o, HttpHandler h, int threads)
      : options(std::move(o)), handler(std::move(h)), ioc(threads) {}
};

class Exchange;

// One TCP connection. All members are touched only on the socket's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Core> core, tcp::socket socket)
      : core_(std::move(core)), socket_(std::move(socket)), timer_(socket_.get_executor()) {}

  ~Session() {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->sessions.erase(this);
  }

  void Start() {
    core_->open_connections.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      core_->sessions[this] = weak_from_this();
    }
    DoReadHeader();
  }

  asio::any_io_executor executor() { return socket_.get_executor(); }

  // --- Called (on the strand) by Exchange. `seq` identifies the request being answered. ---
  void Send(uint64_t seq, int status, std::string content_type, std::string body,
            Headers headers) {
    if (!Current(seq) || started_) return;
    started_ = true;
    std::string head = StatusAndHeaders(status, content_type, headers);
    absl::StrAppend(&head, "Content-Length: ", body.size(), "\r\n\r\n");
    pending_ += head;
    pending_ += body;
    after_flush_ = keep_alive_ ? After::kNextRequest : After::kClose;
    Flush();
  }

  void StartStream(uint64_t seq, int status, std::string content_type, Headers headers) {
    if (!Current(seq) || started_) return;
    started_ = true;
    streaming_ = true;
    // HTTP/1.0 has no chunked encoding: send the raw stream and mark its end by closing.
    if (http10_) keep_alive_ = false;
    std::string head = StatusAndHeaders(status, content_type, headers);
    head += "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
    head += http10_ ? "\r\n" : "Transfer-Encoding: chunked\r\n\r\n";
    pending_ += head;
    Flush();
  }

  void Write(uint64_t seq, std::string chunk) {
    if (!Current(seq) || !streaming_ || chunk.empty() || after_flush_ != After::kNone) return;
    if (http10_) {
      pending_ += chunk;
    } else {
      absl::StrAppend(&pending_, absl::Hex(chunk.size()), "\r\n", chunk, "\r\n");
    }
    Flush();
  }

  void End(uint64_t seq) {
    if (!Current(seq) || !streaming_ || after_flush_ != After::kNone) return;
    if (!http10_) pending_ += "0\r\n\r\n";
    after_flush_ = keep_alive_ ? After::kNextRequest : After::kClose;
    Flush();
  }

  void SetOnDisconnect(uint64_t seq, std::function<void()> cb, Exchange* ex);

 private:
  enum class After { kNone, kNextRequest, kClose, kDrainClose };

  bool Current(uint64_t seq) const { return !closed_ && responding_ && seq == seq_; }

  std::string StatusAndHeaders(int status, const std::string& content_type,
                               const Headers& headers) const {
    std::string head = absl::StrCat("HTTP/1.1 ", status, " ", ReasonPhrase(status), "\r\n");
    if (!content_type.empty()) absl::StrAppend(&head, "Content-Type: ", content_type, "\r\n");
    absl::StrAppend(&head, "Connection: ", keep_alive_ ? "keep-alive" : "close", "\r\n");
    absl::StrAppend(&head, "Server: mxserve\r\n");
    for (const auto& [k, v] : headers) absl::StrAppend(&head, k, ": ", v, "\r\n");
    return head;
  }

  void ArmTimer(std::chrono::milliseconds d) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->timer_gen_) return;
      self->Close();  // aborts whatever read or write was pending
    });
  }
  void DisarmTimer() {
    ++timer_gen_;
    timer_.cancel();
  }

  void DoReadHeader() {
    if (closed_ || core_->stopping.load()) return Close();
    parser_.emplace();
    parser_->body_limit(core_->options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(core_->options.max_header_bytes));
    ArmTimer(core_->options.idle_timeout);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->OnHeader(ec);
                            });
  }

  void OnHeader(beast::error_code ec) {
    if (closed_) return;
    if (ec) return OnReadError(ec);
    if (parser_->get()[http::field::expect] == "100-continue") {
      // curl waits a second for this before sending a large body.
      interim_ = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(interim_),
                        [self = shared_from_this()](beast::error_code ec, size_t) {
                          if (ec) return self->Close();
                          self->DoReadBody();
                        });
      return;
    }
    DoReadBody();
  }

  void DoReadBody() {
    ArmTimer(core_->options.read_timeout);
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->OnBody(ec);
                     });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      RespondTransportError(413, core_->options.too_large_body, After::kDrainClose);
    } else if (ec == http::error::end_of_stream || ec == asio::error::eof ||
               ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
               ec == beast::error::timeout) {
      Close();
    } else if (ec == http::error::partial_message) {
      Close();  // the client went away mid-request
    } else if (ec.category() == http::make_error_code(http::error::end_of_stream).category()) {
      RespondTransportError(400, core_->options.bad_request_body, After::kClose);
    } else {
      Close();
    }
  }

  // Answers a request we could not read (too large, malformed) and then closes.
  void RespondTransportError(int status, const std::string& body, After after) {
    keep_alive_ = false;
    ++seq_;
    responding_ = true;
    started_ = true;
    streaming_ = false;
    std::string head = StatusAndHeaders(status, "application/json", {});
    absl::StrAppend(&head, "Content-Length: ", body.size(), "\r\n\r\n");
    pending_ += head;
    pending_ += body;
    after_flush_ = after;
    Flush();
  }

  void OnBody(beast::error_code ec);

  // While a response is pending we keep one read posted: EOF or an error there means the client
  // went away (so the engine can stop generating); bytes there are a pipelined next request.
  void StartMonitor() {
    if (monitor_pending_ || closed_ || buffer_.size() > 0) return;
    monitor_pending_ = true;
    socket_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->OnMonitor(ec, n);
                            });
  }

  void OnMonitor(beast::error_code ec, size_t n) {
    monitor_pending_ = false;
    if (closed_) return;
    if (ec) return Close();
    buffer_.commit(n);
    if (!responding_) return DoReadHeader();  // response finished meanwhile: next request
    // A pipelined request (or a client that sent the next request the moment our last bytes
    // reached it, before our write completion ran): keep the bytes and read no more, so that
    // AfterFlush parses them at once. A later disconnect then shows up as a failed write.
  }

  void Flush() {
    if (writing_ || closed_) return;
    if (pending_.empty()) return AfterFlush();
    inflight_ = std::move(pending_);
    pending_.clear();
    writing_ = true;
    ArmTimer(core_->options.write_timeout);
    asio::async_write(socket_, asio::buffer(inflight_),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        if (ec) return self->Close();
                        self->DisarmTimer();
                        self->Flush();
                      });
  }

  void AfterFlush() {
    const After after = after_flush_;
    if (after == After::kNone) return;
    after_flush_ = After::kNone;
    responding_ = false;
    started_ = false;
    streaming_ = false;
    on_disconnect_ = nullptr;
    exchange_.reset();
    switch (after) {
      case After::kNextRequest:
        if (monitor_pending_) {
          ArmTimer(core_->options.idle_timeout);  // OnMonitor continues with the next request
        } else {
          DoReadHeader();
        }
        break;
      case After::kClose: {
        beast::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
        Close();
        break;
      }
      case After::kDrainClose:
        Drain();
        break;
      case After::kNone:
        break;
    }
  }

  void Drain() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    if (!monitor_pending_) ArmTimer(std::chrono::duration_cast<std::chrono::milliseconds>(kDrainTime));
    DrainMore();
  }
  void DrainMore() {
    if (closed_) return;
    if (monitor_pending_) return;  // let the outstanding read finish first
    drain_buf_.resize(64u << 10);
    socket_.async_read_some(asio::buffer(drain_buf_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > kMaxDrainBytes) return self->Close();
                              self->DrainMore();
                            });
  }

  void FireDisconnect();

 public:
  void Close() {
    if (closed_) return;
    closed_ = true;
    if (responding_) FireDisconnect();
    DisarmTimer();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    core_->open_connections.fetch_sub(1);
  }

 private:
  std::shared_ptr<Core> core_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string interim_;
  std::string drain_buf_;
  size_t drained_ = 0;

  uint64_t seq_ = 0;
  bool responding_ = false;  // a request was dispatched and its response is not yet flushed
  bool started_ = false;     // Send or StartStream was called for it
  bool streaming_ = false;
  bool keep_alive_ = true;
  bool http10_ = false;
  bool closed_ = false;
  bool monitor_pending_ = false;
  bool writing_ = false;
  After after_flush_ = After::kNone;
  std::string pending_, inflight_;
  std::function<void()> on_disconnect_;
  std::weak_ptr<Exchange> exchange_;  // the current request's responder, for its disconnected flag
};

// The HttpResponder for one request: posts everything onto its session's strand.
class Exchange : public HttpResponder, public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<Session> session, uint64_t seq)
      : session_(std::move(session)), seq_(seq), executor_(session_->executor()) {}

  void Send(int status, std::string content_type, std::string body, Headers headers) override {
    Post([status, s = session_, seq = seq_, ct = std::move(content_type), b = std::move(body),
          h = std::move(headers)]() mutable {
      s->Send(seq, status, std::move(ct), std::move(b), std::move(h));
    });
  }
  void StartStream(int status, std::string content_type, Headers headers) override {
    Post([status, s = session_, seq = seq_, ct = std::move(content_type),
          h = std::move(headers)]() mutable {
      s->StartStream(seq, status, std::move(ct), std::move(h));
    });
  }
  void Write(std::string chunk) override {
    if (chunk.empty()) return;
    Post([s = session_, seq = seq_, c = std::move(chunk)]() mutable { s->Write(seq, std::move(c)); });
  }
  void End() override {
    Post([s = session_, seq = seq_] { s->End(seq); });
  }
  void OnDisconnect(std::function<void()> callback) override {
    Post([s = session_, seq = seq_, cb = std::move(callback),
          self = shared_from_this()]() mutable {
      s->SetOnDisconnect(seq, std::move(cb), self.get());
    });
  }
  bool disconnected() const override { return disconnected_.load(); }

  std::atomic<bool> disconnected_{false};

 private:
  template <typename F>
  void Post(F&& f) {
    asio::post(executor_, std::forward<F>(f));
  }
  std::shared_ptr<Session> session_;
  uint64_t seq_;
  asio::any_io_executor executor_;
};

void Session::OnBody(beast::error_code ec) {
  if (closed_) return;
  if (ec) return OnReadError(ec);
  DisarmTimer();
  http::request<http::string_body> msg = parser_->release();
  parser_.reset();
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req.body = std::move(msg.body());
  req.keep_alive = msg.keep_alive();
  http10_ = msg.version() < 11;
  keep_alive_ = req.keep_alive && !core_->stopping.load();

  ++seq_;
  responding_ = true;
  started_ = false;
  streaming_ = false;
  after_flush_ = After::kNone;
  auto ex = std::make_shared<Exchange>(shared_from_this(), seq_);
  exchange_ = ex;
  core_->handler(std::move(req), ex);
  StartMonitor();
}

void Session::SetOnDisconnect(uint64_t seq, std::function<void()> cb, Exchange* ex) {
  if (seq != seq_) return;  // that response is already complete: it never disconnects
  if (closed_) {
    if (responding_ || ex->disconnected_.load()) {  // closed before the response completed
      ex->disconnected_.store(true);
      cb();
    }
    return;
  }
  if (!responding_) return;
  on_disconnect_ = std::move(cb);
}

void Session::FireDisconnect() {
  if (auto ex = exchange_.lock()) ex->disconnected_.store(true);
  auto cb = std::move(on_disconnect_);
  on_disconnect_ = nullptr;
  if (cb) cb();
}

// -----------------------------------------------------------------------------------------------

struct HttpServer::Impl {
  std::shared_ptr<Core> core;
  tcp::acceptor acceptor;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::vector<std::thread> threads;
  int port = 0;
  bool shut = false;

  explicit Impl(std::shared_ptr<Core> c) : core(std::move(c)), acceptor(core->ioc) {}

  void Accept() {
    acceptor.async_accept(asio::make_strand(core->ioc),
                          [this](beast::error_code ec, tcp::socket socket) {
                            if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
                            if (!ec) {
                              beast::error_code ignored;
                              socket.set_option(tcp::no_delay(true), ignored);
                              std::make_shared<Session>(core, std::move(socket))->Start();
                            }
                            Accept();
                          });
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              HttpHandler handler) {
  if (options.io_threads < 1) return absl::InvalidArgumentError("io_threads must be >= 1");
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad HTTP port ", options.port));
  }
  const int threads = options.io_threads;
  auto core = std::make_shared<Core>(std::move(options), std::move(handler), threads);
  auto impl = std::make_unique<Impl>(core);
  beast::error_code ec;
  auto addr = asio::ip::make_address(core->options.host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad HTTP host '", core->options.host, "': ", ec.message()));
  tcp::endpoint ep(addr, static_cast<unsigned short>(core->options.port));
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", core->options.host, ":",
                                               core->options.port, ": ", ec.message()));
  }
  impl->port = impl->acceptor.local_endpoint().port();
  impl->guard.emplace(core->ioc.get_executor());
  impl->Accept();
  for (int i = 0; i < threads; ++i) {
    impl->threads.emplace_back([c = core.get()] { c->ioc.run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }
int HttpServer::open_connections() const { return impl_->core->open_connections.load(); }

void HttpServer::Shutdown() {
  if (!impl_ || impl_->shut) return;
  impl_->shut = true;
  Core& core = *impl_->core;
  core.stopping.store(true);
  asio::post(core.ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
  std::vector<std::shared_ptr<Session>> sessions;
  {
    std::lock_guard<std::mutex> lock(core.mu);
    for (auto& [p, w] : core.sessions) {
      if (auto s = w.lock()) sessions.push_back(std::move(s));
    }
  }
  for (auto& s : sessions) asio::post(s->executor(), [s] { s->Close(); });
  sessions.clear();
  impl_->guard.reset();
  // Everything is closed, so run() returns once the aborted operations have completed; bound
  // the wait in case a handler keeps re-arming.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (core.open_connections.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  core.ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // Run what is still queued (all no-ops on closed sessions) so sessions are released.
  core.ioc.restart();
  core.ioc.poll();
}

}  // namespace mxserve::frontends
