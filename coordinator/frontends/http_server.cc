#include "coordinator/frontends/http_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/frontends/http_framing.h"

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
// Beast keeps a field in 16 bits and throws std::length_error past 65,533 bytes; the read
// buffer (which must hold a whole header, chunk line or trailer) stays below that.
constexpr size_t kMaxHeaderLimit = 64u << 10;
constexpr size_t kMinHeaderLimit = 1u << 10;
// The read buffer must also take the 4 KiB read that watches a connection while it is answered.
constexpr size_t kMinReadBuffer = 8u << 10;
// Pending connections accepted and closed in one go when no descriptor is left.
constexpr int kMaxShedPerTurn = 256;

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
  std::atomic<int64_t> buffered_bytes{0};
  std::atomic<int64_t> shed_connections{0};
  std::atomic<int64_t> accept_errors{0};
  std::atomic<int64_t> refused_for_buffer{0};
  std::atomic<int64_t> exceptions{0};
  absl::Mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions ABSL_GUARDED_BY(mu);

  Core(HttpServerOptions o, HttpHandler h, int threads)
      : options(std::move(o)), handler(std::move(h)), ioc(threads) {}

  std::string ErrorBody(int status, absl::string_view message) const {
    if (options.error_body) return options.error_body(status, message);
    // Our own messages only: no character that needs escaping in JSON.
    return absl::StrCat("{\"error\":{\"message\":\"", message, "\",\"code\":", status, "}}");
  }

  // Takes `n` bytes of the max_buffered_bytes budget; false when it would go past it.
  bool Reserve(int64_t n) {
    int64_t cur = buffered_bytes.load();
    const auto cap = static_cast<int64_t>(options.max_buffered_bytes);
    do {
      if (cur + n > cap) return false;
    } while (!buffered_bytes.compare_exchange_weak(cur, cur + n));
    return true;
  }

  // Counts an exception that unwound out of parsing or a handler; logs the first few and then
  // every 1024th, so that a client cannot flood the log.
  void NoteException(const char* where, const char* what) {
    const int64_t n = exceptions.fetch_add(1) + 1;
    if (n <= 16 || n % 1024 == 0) {
      fprintf(stderr, "mxserve http: exception %s (dropping that connection; %lld so far): %s\n",
              where, static_cast<long long>(n), what);
    }
  }
};

namespace {

HttpRequest RequestHead(const http::request<http::string_body>& msg) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req.keep_alive = msg.keep_alive();
  return req;
}

}  // namespace

class Exchange;

// One TCP connection. All members are touched only on the socket's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Core> core, tcp::socket socket)
      : core_(std::move(core)),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(std::max(core_->options.max_header_bytes, kMinReadBuffer)) {}

  ~Session() {
    // An exception that unwound out of one of our operations may leave a session that was
    // never closed: it still counts as open until here.
    if (!closed_) core_->open_connections.fetch_sub(1);
    ReleaseBuffered();
    absl::MutexLock lock(&core_->mu);
    core_->sessions.erase(this);
  }

  void Start() {
    core_->open_connections.fetch_add(1);
    {
      absl::MutexLock lock(&core_->mu);
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
    const auto& h = parser_->get();
    http10_ = h.version() < 11;
    const HttpRequest head = RequestHead(h);
    if (auto bad = FramingError(head.headers, http10_)) {
      return RespondTransportError(bad->first, core_->ErrorBody(bad->first, bad->second),
                                   After::kClose);
    }
    const bool has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
    if (core_->options.head_check) {
      std::optional<HttpRefusal> refusal;
      try {
        refusal = core_->options.head_check(head);
      } catch (const std::exception& e) {
        core_->NoteException("in the header check", e.what());
        refusal = HttpRefusal{500, "application/json",
                              core_->ErrorBody(500, "internal error while reading the header"), {}};
      }
      if (refusal) return Refuse(std::move(*refusal), has_body, h.keep_alive());
    }
    const size_t want = parser_->chunked() ? core_->options.max_body_bytes
                                           : static_cast<size_t>(parser_->content_length().value_or(0));
    if (want > 0) {
      if (!core_->Reserve(static_cast<int64_t>(want))) {
        core_->refused_for_buffer.fetch_add(1);
        return Refuse(HttpRefusal{503, "application/json",
                                  core_->ErrorBody(503, "the server holds too many request bodies "
                                                        "now; retry later"),
                                  {{"Retry-After", "1"}}},
                      has_body, false);
      }
      reserved_ = want;
    }
    if (beast::iequals(h[http::field::expect], "100-continue")) {
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
    RespondNow(status, "application/json", body, {}, after);
  }

  // Answers a request on its header alone. An announced body is never read: the connection
  // then drains what the client still sends and closes; without one it may go on.
  void Refuse(HttpRefusal r, bool has_body, bool keep_alive) {
    parser_.reset();
    keep_alive_ = keep_alive && !has_body && !core_->stopping.load();
    const After after = has_body ? After::kDrainClose
                                 : (keep_alive_ ? After::kNextRequest : After::kClose);
    RespondNow(r.status, r.content_type, r.body, r.headers, after);
  }

  void RespondNow(int status, const std::string& content_type, const std::string& body,
                  const Headers& headers, After after) {
    ++seq_;
    responding_ = true;
    started_ = true;
    streaming_ = false;
    std::string head = StatusAndHeaders(status, content_type, headers);
    absl::StrAppend(&head, "Content-Length: ", body.size(), "\r\n\r\n");
    pending_ += head;
    pending_ += body;
    after_flush_ = after;
    Flush();
  }

  void ReleaseBuffered() {
    if (reserved_ == 0) return;
    core_->buffered_bytes.fetch_sub(static_cast<int64_t>(reserved_));
    reserved_ = 0;
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
    if (ec == asio::error::eof && responding_) {
      // The client half-closed after its request, or left: the two look alike until a write
      // fails. Answer it and close; a reset or a failed write (a stream's next chunk) is the
      // disconnect. No more reads: at EOF each would complete at once.
      keep_alive_ = false;
      return;
    }
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
    After after = after_flush_;
    if (after == After::kNone) return;
    // keep_alive_ turns false after the answer was begun when the client half-closes: there is
    // no next request to read (and a read at EOF would not complete again).
    if (after == After::kNextRequest && !keep_alive_) after = After::kClose;
    after_flush_ = After::kNone;
    responding_ = false;
    started_ = false;
    streaming_ = false;
    on_disconnect_ = nullptr;
    exchange_.reset();
    ReleaseBuffered();
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
    DisarmTimer();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    core_->open_connections.fetch_sub(1);
    ReleaseBuffered();
    // Last: the callback is the handler's code, and whatever it throws must find this
    // connection already closed and accounted for.
    if (responding_) FireDisconnect();
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
  size_t reserved_ = 0;  // this request's share of Core::buffered_bytes

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
  HttpRequest req = RequestHead(msg);
  req.body = std::move(msg.body());
  http10_ = msg.version() < 11;
  keep_alive_ = req.keep_alive && !core_->stopping.load();

  ++seq_;
  responding_ = true;
  started_ = false;
  streaming_ = false;
  after_flush_ = After::kNone;
  auto ex = std::make_shared<Exchange>(shared_from_this(), seq_);
  exchange_ = ex;
  try {
    core_->handler(std::move(req), ex);
  } catch (const std::exception& e) {
    core_->NoteException("in a request handler", e.what());
    // Whatever the handler posted for this request is ignored from here on (a new seq).
    return RespondTransportError(500, core_->ErrorBody(500, "internal error"), After::kClose);
  }
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

// The answer a connection over max_connections (or one accepted only to be closed, when no
// descriptor is left) gets before it is closed.
std::string OverloadAnswer(const Core& core) {
  const std::string body = core.ErrorBody(503, "too many connections; retry later");
  return absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                      "Connection: close\r\nRetry-After: 1\r\nServer: mxserve\r\n"
                      "Content-Length: ", body.size(), "\r\n\r\n", body);
}

struct HttpServer::Impl {
  std::shared_ptr<Core> core;
  tcp::acceptor acceptor;
  asio::steady_timer backoff;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::vector<std::thread> threads;
  std::string overload_answer;
  // Held open so that, when the process runs out of descriptors, closing it lets the accept
  // loop take a pending connection and close it (instead of leaving it queued forever).
  int reserve_fd = -1;
  int port = 0;
  bool shut = false;

  explicit Impl(std::shared_ptr<Core> c)
      : core(std::move(c)), acceptor(core->ioc), backoff(core->ioc) {
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  ~Impl() {
    if (reserve_fd >= 0) ::close(reserve_fd);
  }

  void Accept() {
    acceptor.async_accept(asio::make_strand(core->ioc),
                          [this](beast::error_code ec, tcp::socket socket) {
                            if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
                            if (ec) return OnAcceptError(ec);
                            OnAccepted(std::move(socket));
                            Accept();
                          });
  }

  void OnAccepted(tcp::socket socket) {
    beast::error_code ignored;
    if (core->open_connections.load() >= core->options.max_connections ||
        core->stopping.load()) {
      core->shed_connections.fetch_add(1);
      socket.non_blocking(true, ignored);
      socket.write_some(asio::buffer(overload_answer), ignored);  // best effort, never blocks
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
      return;
    }
    socket.set_option(tcp::no_delay(true), ignored);
    std::make_shared<Session>(core, std::move(socket))->Start();
  }

  // Out of descriptors (or another failure): never re-arm at once, which would spin on the
  // same error. Without descriptors, first use the reserve one to accept and close what is
  // pending, so those clients learn at once instead of waiting in the backlog.
  void OnAcceptError(const beast::error_code& ec) {
    core->accept_errors.fetch_add(1);
    if (ec == asio::error::no_descriptors || ec.value() == ENFILE) ShedPending();
    backoff.expires_after(core->options.accept_backoff);
    backoff.async_wait([this](beast::error_code wec) {
      if (wec || !acceptor.is_open()) return;
      Accept();
    });
  }

  void ShedPending() {
    if (reserve_fd >= 0) {
      ::close(reserve_fd);
      reserve_fd = -1;
    }
    for (int i = 0; i < kMaxShedPerTurn; ++i) {
      const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      (void)!::send(fd, overload_answer.data(), overload_answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      core->shed_connections.fetch_add(1);
    }
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              HttpHandler handler) {
  if (options.io_threads < 1) return absl::InvalidArgumentError("io_threads must be >= 1");
  if (options.max_header_bytes < kMinHeaderLimit || options.max_header_bytes > kMaxHeaderLimit) {
    return absl::InvalidArgumentError(absl::StrCat("max_header_bytes must be in [",
                                                   kMinHeaderLimit, ", ", kMaxHeaderLimit,
                                                   "], got ", options.max_header_bytes));
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections must be >= 1, got ", options.max_connections));
  }
  if (options.max_buffered_bytes < options.max_body_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_buffered_bytes (", options.max_buffered_bytes,
                     ") must be at least max_body_bytes (", options.max_body_bytes, ")"));
  }
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
  impl->acceptor.non_blocking(true, ec);  // ShedPending's accept4 must not block
  impl->port = impl->acceptor.local_endpoint().port();
  impl->overload_answer = OverloadAnswer(*core);
  impl->guard.emplace(core->ioc.get_executor());
  impl->Accept();
  for (int i = 0; i < threads; ++i) {
    impl->threads.emplace_back([c = core.get()] {
      // An exception out of a completion handler (Beast's parser, a handler of ours) unwinds
      // out of run(); the operation that threw is gone with its connection's share of it, and
      // the loop goes on serving everyone else.
      while (true) {
        try {
          c->ioc.run();
          return;
        } catch (const std::exception& e) {
          c->NoteException("in the I/O loop", e.what());
        } catch (...) {
          c->NoteException("in the I/O loop", "unknown exception");
        }
      }
    });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }
int HttpServer::open_connections() const { return impl_->core->open_connections.load(); }

HttpServerStats HttpServer::stats() const {
  const Core& c = *impl_->core;
  HttpServerStats s;
  s.open_connections = c.open_connections.load();
  s.shed_connections = c.shed_connections.load();
  s.accept_errors = c.accept_errors.load();
  s.buffered_bytes = c.buffered_bytes.load();
  s.refused_for_buffer = c.refused_for_buffer.load();
  s.exceptions = c.exceptions.load();
  return s;
}

void HttpServer::Shutdown() {
  if (!impl_ || impl_->shut) return;
  impl_->shut = true;
  Core& core = *impl_->core;
  core.stopping.store(true);
  asio::post(core.ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->backoff.cancel();
  });
  std::vector<std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&core.mu);
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
