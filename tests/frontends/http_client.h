// A tiny blocking HTTP/1.1 client for front-door tests (Boost.Beast over 127.0.0.1).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mxserve::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpResult {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string error;  // transport error, if any
  std::string header(const std::string& k) const {
    auto it = headers.find(k);
    return it == headers.end() ? "" : it->second;
  }
};

// One connection; requests may be sent one after another on it (keep-alive).
class HttpClient {
 public:
  explicit HttpClient(int port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  HttpResult Request(const std::string& method, const std::string& target,
                     const std::string& body = "",
                     const std::string& content_type = "application/json") {
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty() || method == "POST") {
      req.set(http::field::content_type, content_type);
      req.body() = body;
      req.prepare_payload();
    }
    beast::error_code ec;
    http::write(socket_, req, ec);
    HttpResult out;
    if (ec) {
      out.error = ec.message();
      return out;
    }
    return Read();
  }
  HttpResult Read() {
    HttpResult out;
    beast::error_code ec;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    http::read(socket_, buffer_, parser, ec);
    if (ec) {
      out.error = ec.message();
      return out;
    }
    auto& res = parser.get();
    out.status = res.result_int();
    for (const auto& f : res) {
      out.headers[absl::AsciiStrToLower(std::string(f.name_string()))] = std::string(f.value());
    }
    out.body = res.body();
    return out;
  }
  // Raw bytes (for malformed requests and oversized bodies).
  void WriteRaw(const std::string& bytes) { asio::write(socket_, asio::buffer(bytes)); }
  // Reads at least one byte of whatever arrives (for mid-stream tests).
  std::string ReadSome() {
    char buf[4096];
    beast::error_code ec;
    size_t n = socket_.read_some(asio::buffer(buf), ec);
    return std::string(buf, ec ? 0 : n);
  }
  void Close() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }
  // Leaves with a reset (SO_LINGER 0, no FIN first): the server sees a disconnect at once. A
  // plain Close() sends a FIN, which the server takes as a half-close and still answers.
  void Reset() {
    beast::error_code ec;
    socket_.set_option(asio::socket_base::linger(true, 0), ec);
    socket_.close(ec);
  }
  tcp::socket& socket() { return socket_; }

 private:
  asio::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

inline HttpResult HttpCall(int port, const std::string& method, const std::string& target,
                           const std::string& body = "") {
  HttpClient c(port);
  return c.Request(method, target, body);
}

// Splits an SSE body into the payloads of its "data: " events; fails (empty) on bad framing.
inline std::vector<std::string> SseEvents(const std::string& body, std::string* framing_error) {
  std::vector<std::string> out;
  if (body.size() < 2 || body.substr(body.size() - 2) != "\n\n") {
    *framing_error = "body does not end with a blank line";
    return {};
  }
  for (absl::string_view ev : absl::StrSplit(body.substr(0, body.size() - 2), "\n\n")) {
    if (!absl::ConsumePrefix(&ev, "data: ")) {
      *framing_error = "event without 'data: ' prefix: " + std::string(ev);
      return {};
    }
    if (ev.find('\n') != absl::string_view::npos) {
      *framing_error = "event spans several lines";
      return {};
    }
    out.emplace_back(ev);
  }
  return out;
}

// Polls pred every 5 ms until it holds or `limit` passes; returns its last value (bounded: tests
// must not hang).
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

}  // namespace mxserve::testing
