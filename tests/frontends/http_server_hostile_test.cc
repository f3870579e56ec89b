// The HTTP server against hostile clients: oversized trailers and chunk lines, bad framing,
// missing Host, half-closed clients, exceptions from handlers, and the caps on connections,
// buffered bodies and descriptors. Every read is bounded (raw_client.h).
#include <sys/resource.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "coordinator/frontends/http_server.h"
#include "fuzz/fuzz_http_request_expand.h"
#include "tests/frontends/http_client.h"
#include "tests/frontends/raw_client.h"

namespace mxserve::frontends {
namespace {

using ::mxserve::testing::RawConn;
using ::mxserve::testing::RawResponse;
using ::mxserve::testing::WaitFor;

class HostileTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions opts = {}) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    opts.read_timeout = std::chrono::milliseconds(20000);
    auto s = HttpServer::Start(opts, [this](HttpRequest req, std::shared_ptr<HttpResponder> r) {
      handled_.fetch_add(1);
      if (req.path == "/throw") throw std::runtime_error("handler bug");
      if (req.path == "/throw-on-disconnect") {
        r->OnDisconnect([] { throw std::runtime_error("callback bug"); });
        return;  // never answered: the client leaves
      }
      if (req.path == "/stream") {  // chunks every 2 ms until the client is gone
        r->OnDisconnect([this] { stream_gone_.store(true); });
        r->StartStream(200, "text/plain");
        std::thread([r] {
          for (int i = 0; i < 5000 && !r->disconnected(); ++i) {
            r->Write("tick\n");
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          r->End();
        }).detach();
        return;
      }
      if (req.path == "/later") {
        std::thread([r] {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          r->Send(200, "text/plain", "later");
        }).detach();
        return;
      }
      r->Send(200, "text/plain", absl::StrCat(req.method, " ", req.path, " ", req.body.size()));
    });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  int port() const { return server_->port(); }
  // A fresh connection still gets a normal answer.
  void ExpectServing() {
    RawConn c(port());
    ASSERT_TRUE(c.connected());
    c.Send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 200) << c.received();
    EXPECT_EQ(r.body, "GET /ok 0");
  }
  static std::string ChunkedHead(const std::string& path = "/health") {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> handled_{0};
  std::atomic<bool> stream_gone_{false};
};

// The reproduction and its neighbours: a trailer field of 64 KiB made Beast throw
// std::length_error out of the I/O loop and abort the process.
TEST_F(HostileTest, LongTrailerFieldsGet400AndTheServerLives) {
  Start();
  for (size_t n : {65534u, 65535u, 65536u, 70000u, 1u << 20}) {
    for (const char* path : {"/health", "/v1/chat/completions", "/nowhere"}) {
      SCOPED_TRACE(absl::StrCat(n, " bytes on ", path));
      RawConn c(port());
      c.Send(ChunkedHead(path) + "0\r\nX: " + std::string(n, 'a') + "\r\n\r\n");
      RawResponse r = c.Read();
      EXPECT_EQ(r.status, 400) << c.received().substr(0, 200);
      EXPECT_TRUE(r.Has("connection: close"));
    }
  }
  // A trailer field as long as a header may be, too, and many short ones.
  {
    RawConn c(port());
    std::string trailers;
    for (int i = 0; i < 1000; ++i) absl::StrAppend(&trailers, "X-", i, ": v\r\n");
    c.Send(ChunkedHead("/t") + "3\r\nabc\r\n0\r\n" + trailers + "\r\n");
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "POST /t 3");
  }
  EXPECT_EQ(server_->stats().exceptions, 0);
  ExpectServing();
}

// fuzz_http_request's structured inputs reach the sizes that raw inputs of -max_len bytes
// never did: its seed program for the trailer expands to the request above.
TEST_F(HostileTest, FuzzProgramsExpandToLongRequests) {
  Start();
  // POST /health, Host, Transfer-Encoding: chunked, end of header, last chunk, a 64 KiB
  // trailer field, end.
  const uint8_t program[] = {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 3, 0, 0, 0, 0,
                             6, 0, 0, 0, 0, 7, 64, 0, 'a', 0, 3, 0, 0, 0, 0};
  const std::string req = fuzz::ExpandHttpProgram(program, sizeof program);
  EXPECT_TRUE(absl::StartsWith(req, "POST /health HTTP/1.1\r\nHost: chunked\r\n"
                                    "Transfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: aaaa"))
      << req.substr(0, 120);
  EXPECT_EQ(req.size(), 86u + 65536u);
  RawConn c(port());
  c.Send(req);
  EXPECT_EQ(c.Read().status, 400);
  // Every program stays within the bound, however long.
  std::vector<uint8_t> many(4000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<uint8_t>(i % 5 == 0 ? 5 : 255);
  EXPECT_LE(fuzz::ExpandHttpProgram(many.data(), many.size()).size(), fuzz::kMaxExpandedBytes);
  ExpectServing();
}

TEST_F(HostileTest, LongChunkLinesGet400AndManyChunksAreFine) {
  Start();
  for (size_t n : {1000u, 65536u, 1u << 20}) {
    SCOPED_TRACE(n);
    RawConn c(port());
    c.Send(ChunkedHead() + "3;ext=" + std::string(n, 'e') + "\r\nabc\r\n0\r\n\r\n");
    RawResponse r = c.Read();
    if (n < 60000) {
      EXPECT_EQ(r.status, 200) << c.received().substr(0, 200);
    } else {
      EXPECT_EQ(r.status, 400) << c.received().substr(0, 200);
    }
  }
  {
    RawConn c(port());
    std::string body = ChunkedHead("/many");
    for (int i = 0; i < 20000; ++i) body += "1\r\nz\r\n";
    c.Send(body + "0\r\n\r\n");
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "POST /many 20000");
  }
  ExpectServing();
}

TEST_F(HostileTest, LongHeadersAndOptionsOutOfRange) {
  Start();
  for (size_t n : {65534u, 70000u, 1u << 20}) {
    RawConn c(port());
    c.Send("GET /h HTTP/1.1\r\nHost: x\r\nX-Long: " + std::string(n, 'h') + "\r\n\r\n");
    RawResponse r = c.Read();
    EXPECT_TRUE(r.status == 431 || r.status == 400) << r.status;
  }
  ExpectServing();
  HttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.max_header_bytes = 1u << 20;  // a field that long would make Beast throw
  EXPECT_FALSE(HttpServer::Start(o, nullptr).ok());
  o.max_header_bytes = 16u << 10;
  o.max_connections = 0;
  EXPECT_FALSE(HttpServer::Start(o, nullptr).ok());
  o.max_connections = 10;
  o.max_buffered_bytes = o.max_body_bytes - 1;
  EXPECT_FALSE(HttpServer::Start(o, nullptr).ok());
}

TEST_F(HostileTest, TransferEncodingOtherThanChunkedIsRefused) {
  Start();
  struct Case {
    std::string headers;
    int status;
  };
  const std::vector<Case> cases = {
      {"Transfer-Encoding: xchunked\r\nContent-Length: 3\r\n", 400},
      {"Transfer-Encoding: xchunked\r\n", 400},
      {"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", 400},
      {"Transfer-Encoding: gzip\r\n", 400},
      {"Transfer-Encoding: gzip, chunked\r\n", 501},
      {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 501},
      {"Transfer-Encoding: chunked, chunked\r\n", 400},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", 400},
      {"Transfer-Encoding: chunked\r\nX-Other: 1\r\nTransfer-Encoding: gzip\r\n", 400},
      {"Transfer-Encoding: gzip\r\nX-Other: 1\r\nTransfer-Encoding: chunked\r\n", 501},
      {"transfer-encoding: xchunked\r\ncontent-length: 3\r\n", 400},
      {"Transfer-Encoding: \r\n", 400},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.headers);
    RawConn c(port());
    c.Send("POST /te HTTP/1.1\r\nHost: x\r\n" + k.headers + "\r\n3\r\nabc\r\n0\r\n\r\n");
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, k.status) << c.received();
    EXPECT_TRUE(r.Has("connection: close"));
    EXPECT_TRUE(c.ClosedWithin()) << "the connection must close after a framing error";
  }
  EXPECT_EQ(handled_.load(), 0);
  {
    RawConn c(port());
    c.Send("POST /te HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    EXPECT_EQ(c.Read().status, 400);
  }
  {  // chunked, any case, is fine
    RawConn c(port());
    c.Send("POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    EXPECT_EQ(c.Read().body, "POST /te 3");
  }
  ExpectServing();
}

TEST_F(HostileTest, Http11WithoutHostOrWithTwoIsRefused) {
  Start();
  for (const std::string& req :
       {std::string("GET /h HTTP/1.1\r\n\r\n"),
        std::string("GET /h HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        std::string("POST /h HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"),
        std::string("GET /h HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n")}) {
    SCOPED_TRACE(req);
    RawConn c(port());
    c.Send(req);
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 400);
    EXPECT_TRUE(absl::StrContains(r.body, "Host")) << r.body;
  }
  EXPECT_EQ(handled_.load(), 0);
  RawConn c(port());
  c.Send("GET /h HTTP/1.0\r\n\r\n");  // HTTP/1.0 needs no Host
  EXPECT_EQ(c.Read().status, 200);
}

TEST_F(HostileTest, HalfClosedClientStillGetsItsAnswer) {
  Start();
  for (const char* path : {"/now", "/later"}) {
    SCOPED_TRACE(path);
    RawConn c(port());
    c.Send(absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"));
    c.ShutdownWrite();
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 200) << c.received();
    EXPECT_EQ(r.body, absl::StrCat(path == std::string("/now") ? "POST /now 2" : "later"));
    EXPECT_TRUE(c.ClosedWithin());  // "Connection: close" only if the EOF came first
  }
  {  // pipelined requests, then the half-close: the first is answered, then the close
    RawConn c(port());
    c.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    c.ShutdownWrite();
    EXPECT_EQ(c.Read().body, "GET /a 0");
  }
  EXPECT_TRUE(WaitFor([&] { return server_->open_connections() == 0; }));
}

// A FIN mid-stream may be a half-close, so the stream goes on; if the client has really gone,
// the next chunks fail to write, and that is the disconnect the handler hears of.
TEST_F(HostileTest, ClientGoneMidStreamIsHeardAtTheNextWrite) {
  Start();
  {
    RawConn c(port());
    c.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(c.ReadMore(std::chrono::milliseconds(10000)));
    EXPECT_TRUE(absl::StartsWith(c.received(), "HTTP/1.1 200")) << c.received();
  }  // close(): a FIN (or a reset if unread chunks were waiting)
  EXPECT_TRUE(WaitFor([&] { return stream_gone_.load(); }));
  EXPECT_TRUE(WaitFor([&] { return server_->open_connections() == 0; }));
}

TEST_F(HostileTest, ExceptionsFromHandlersDropOnlyThatRequest) {
  Start();
  {
    RawConn c(port());
    c.Send("GET /throw HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(c.Read().status, 500);
  }
  {  // a disconnect callback that throws runs on an I/O thread, out of any handler
    RawConn c(port());
    c.Send("GET /throw-on-disconnect HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(WaitFor([&] { return handled_.load() == 2; }));
    c.Reset();
  }
  EXPECT_TRUE(WaitFor([&] { return server_->stats().exceptions == 2; }))
      << server_->stats().exceptions;
  for (int i = 0; i < 4; ++i) ExpectServing();  // every I/O thread still runs
  EXPECT_TRUE(WaitFor([&] { return server_->open_connections() == 0; }));
}

TEST_F(HostileTest, HeadCheckAnswersBeforeTheBodyAndBefore100Continue) {
  HttpServerOptions o;
  o.head_check = [](const HttpRequest& head) -> std::optional<HttpRefusal> {
    if (head.Header("authorization") == "Bearer k") return std::nullopt;
    return HttpRefusal{401, "application/json", "{\"error\":\"key\"}", {{"WWW-Authenticate", "Bearer"}}};
  };
  Start(o);
  {  // 100-continue: the refusal comes instead of the interim answer
    RawConn c(port());
    c.Send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\nExpect: 100-continue\r\n\r\n");
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 401) << c.received();
    EXPECT_TRUE(r.Has("www-authenticate: bearer"));
  }
  for (const char* framing : {"Content-Length: 8000000\r\n", "Transfer-Encoding: chunked\r\n"}) {
    SCOPED_TRACE(framing);  // the body never comes, the answer does
    RawConn c(port());
    c.Send(absl::StrCat("POST /x HTTP/1.1\r\nHost: x\r\n", framing, "\r\n", "abc"));
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 401) << c.received();
    EXPECT_TRUE(r.Has("connection: close"));
  }
  {  // no body: the connection goes on
    RawConn c(port());
    c.Send("GET /x HTTP/1.1\r\nHost: x\r\n\r\nGET /y HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n");
    EXPECT_EQ(c.Read().status, 401);
    EXPECT_EQ(c.Read().body, "GET /y 0");
  }
  EXPECT_EQ(handled_.load(), 1);
}

TEST_F(HostileTest, ConnectionsBeyondTheCapGet503) {
  HttpServerOptions o;
  o.max_connections = 3;
  Start(o);
  std::vector<std::unique_ptr<RawConn>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawConn>(port()));
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 3; }));
  for (int i = 0; i < 5; ++i) {
    RawConn extra(port());
    RawResponse r = extra.Read();
    EXPECT_EQ(r.status, 503) << extra.received();
    EXPECT_TRUE(r.Has("retry-after: 1"));
    EXPECT_TRUE(extra.ClosedWithin());
  }
  EXPECT_EQ(server_->stats().shed_connections, 5);
  held.pop_back();
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 2; }));
  ExpectServing();
}

TEST_F(HostileTest, BufferedBodiesAreCapped) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  o.max_buffered_bytes = 2500;
  Start(o);
  RawConn a(port()), b(port());
  a.Send("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\npart");
  b.Send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\npart");
  ASSERT_TRUE(WaitFor([&] { return server_->stats().buffered_bytes == 2000; }));
  for (const char* framing : {"Content-Length: 600\r\n", "Transfer-Encoding: chunked\r\n"}) {
    SCOPED_TRACE(framing);  // 2000 + 600 > 2500; chunked counts as the 1000 maximum
    RawConn c(port());
    c.Send(absl::StrCat("POST /c HTTP/1.1\r\nHost: x\r\n", framing, "\r\n"));
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 503) << c.received();
    EXPECT_TRUE(r.Has("retry-after: 1"));
  }
  {
    RawConn c(port());  // 2000 + 500 fits
    c.Send("POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n" + std::string(500, 'c'));
    EXPECT_EQ(c.Read().body, "POST /c 500");
  }
  a.Send(std::string(996, 'a'));
  EXPECT_EQ(a.Read().body, "POST /a 1000");
  ASSERT_TRUE(WaitFor([&] { return server_->stats().buffered_bytes == 1000; }));
  {
    RawConn c(port());
    c.Send("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n");
    EXPECT_EQ(c.Read().body, "POST /c 2");
  }
  EXPECT_EQ(server_->stats().refused_for_buffer, 2);
  b.ShutdownWrite();  // leaves mid-body: its share comes back
  EXPECT_TRUE(WaitFor([&] { return server_->stats().buffered_bytes == 0; }));
}

// With no descriptor left, accept fails with EMFILE at once, again and again: the loop must
// not spin on it, pending clients must be told (closed) instead of waiting, and serving must
// resume once descriptors are free.
TEST_F(HostileTest, OutOfDescriptorsTheAcceptLoopBacksOffAndRecovers) {
  HttpServerOptions o;
  o.accept_backoff = std::chrono::milliseconds(50);
  Start(o);
  constexpr int kClients = 4;
  std::vector<std::unique_ptr<RawConn>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(std::make_unique<RawConn>());
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int lowest_free = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  // Fill every slot below the new limit, so the server's accept has none.
  std::vector<int> fillers;
  while (true) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    if (fd >= lowest_free + 64) {
      ::close(fd);
      break;
    }
    fillers.push_back(fd);
  }
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free + 64);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  for (auto& c : clients) ASSERT_TRUE(c->Connect(port()));  // connect needs no new descriptor
  for (auto& c : clients) {
    EXPECT_TRUE(c->ClosedWithin()) << "a pending client was left waiting";
    EXPECT_TRUE(absl::StartsWith(c->received(), "HTTP/1.1 503")) << c->received();
  }
  const int64_t errors_before = server_->stats().accept_errors;
  EXPECT_GE(errors_before, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A spinning loop fails thousands of times in 300 ms; one that waits 50 ms between tries,
  // a handful (a loaded machine only makes it fewer).
  EXPECT_LT(server_->stats().accept_errors - errors_before, 50);
  for (int fd : fillers) ::close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ExpectServing();
  EXPECT_GE(server_->stats().shed_connections, kClients);
}

}  // namespace
}  // namespace mxserve::frontends
