// The HTTP server alone: timeouts, pipelining, chunked request bodies, 100-continue, and
// responses produced later from another thread.
#include "coordinator/frontends/http_server.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "tests/frontends/http_client.h"

namespace mxserve::frontends {
namespace {

using ::mxserve::testing::HttpClient;
using ::mxserve::testing::HttpResult;

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions opts) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    opts.too_large_body = "too large";
    opts.bad_request_body = "bad";
    auto s = HttpServer::Start(opts, [](HttpRequest req, std::shared_ptr<HttpResponder> r) {
      if (req.path == "/later") {
        // Answer from another thread, in pieces.
        std::thread([r] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          r->StartStream(200, "text/plain");
          for (int i = 0; i < 3; ++i) r->Write(std::to_string(i));
          r->End();
        }).detach();
        return;
      }
      r->Send(200, "text/plain", req.method + " " + req.target + " " + req.body);
    });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, IdleAndHalfSentRequestsAreClosedAfterTheTimeout) {
  HttpServerOptions o;
  o.idle_timeout = std::chrono::milliseconds(200);
  o.read_timeout = std::chrono::milliseconds(200);
  Start(o);
  HttpClient idle(server_->port());
  HttpClient partial(server_->port());
  partial.WriteRaw("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(idle.ReadSome(), "");     // EOF once the server gives up
  EXPECT_EQ(partial.ReadSome(), "");
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(waited, std::chrono::seconds(5));
  for (int i = 0; i < 200 && server_->open_connections() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->open_connections(), 0);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  Start({});
  HttpClient c(server_->port());
  c.WriteRaw("GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET /later HTTP/1.1\r\nHost: x\r\n\r\n");
  HttpResult a = c.Read(), b = c.Read(), later = c.Read();
  EXPECT_EQ(a.body, "GET /a ");
  EXPECT_EQ(b.body, "POST /b hi");
  EXPECT_EQ(later.body, "012");
  EXPECT_EQ(later.header("transfer-encoding"), "chunked");
}

TEST_F(HttpServerTest, ChunkedBodiesAndExpectContinue) {
  HttpServerOptions o;
  o.max_body_bytes = 16;
  Start(o);
  {
    HttpClient c(server_->port());
    c.WriteRaw("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
    EXPECT_EQ(c.Read().body, "POST /c abcde");
  }
  {
    HttpClient c(server_->port());
    c.WriteRaw("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n5\r\nXXXXX\r\n0\r\n\r\n");
    HttpResult r = c.Read();
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(r.body, "too large");
    EXPECT_EQ(r.header("connection"), "close");
  }
  {
    HttpClient c(server_->port());
    c.WriteRaw("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
    HttpResult interim = c.Read();
    EXPECT_EQ(interim.status, 100);
    c.WriteRaw("xyz");
    EXPECT_EQ(c.Read().body, "POST /e xyz");
  }
}

TEST_F(HttpServerTest, ConnectionCloseIsHonoured) {
  Start({});
  HttpClient c(server_->port());
  c.WriteRaw("GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  HttpResult r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_EQ(c.ReadSome(), "");
}

TEST_F(HttpServerTest, Http10StreamIsSentRawAndClosed) {
  Start({});
  HttpClient c(server_->port());
  c.WriteRaw("GET /later HTTP/1.0\r\n\r\n");
  std::string all;
  for (std::string s = c.ReadSome(); !s.empty(); s = c.ReadSome()) all += s;
  EXPECT_EQ(all.find("Transfer-Encoding"), std::string::npos) << all;
  EXPECT_NE(all.find("Connection: close"), std::string::npos) << all;
  EXPECT_EQ(all.substr(all.size() - 7), "\r\n\r\n012") << all;
}

TEST(HttpServerStart, RejectsBadOptions) {
  HttpServerOptions o;
  o.host = "not-an-address";
  o.port = 0;
  EXPECT_FALSE(HttpServer::Start(o, nullptr).ok());
  o.host = "127.0.0.1";
  o.io_threads = 0;
  EXPECT_FALSE(HttpServer::Start(o, nullptr).ok());
}

}  // namespace
}  // namespace mxserve::frontends
