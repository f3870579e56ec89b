// A raw TCP client for hostile-client tests: plain POSIX sockets so that every read is bounded
// (poll with a limit: a server that never answers fails the test instead of hanging it).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace mxserve::testing {

struct RawResponse {
  int status = 0;  // 0: none came (EOF, reset or the limit passed first)
  std::string head;  // status line and headers, lower-cased
  std::string body;
  bool Has(const std::string& lower_header_line) const {
    return absl::StrContains(head, lower_header_line);
  }
};

class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  // An unconnected socket made now, connected later by Connect (descriptor-exhaustion tests).
  RawConn() { fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); }
  bool Connect(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    return connected_;
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool connected() const { return connected_; }
  // False if the server closed before taking it all (fine for refused requests).
  bool Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a reset (SO_LINGER 0): unlike a FIN, this cannot be a half-close.
  void Reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd_);
    fd_ = -1;
  }

  // Appends what arrives within `limit` to `got_`; false at EOF, error or the limit.
  bool ReadMore(std::chrono::milliseconds limit) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    got_.append(buf, static_cast<size_t>(n));
    return true;
  }

  // The next whole response (Content-Length framing; 1xx has none), or status 0.
  RawResponse Read(std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    RawResponse r;
    while (true) {
      const size_t end = got_.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = absl::AsciiStrToLower(got_.substr(0, end));
        size_t len = 0;
        for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
          if (absl::ConsumePrefix(&line, "content-length:")) {
            (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &len);
          }
        }
        if (got_.size() >= end + 4 + len) {
          r.head = head;
          (void)absl::SimpleAtoi(head.substr(9, 3), &r.status);
          r.body = got_.substr(end + 4, len);
          got_.erase(0, end + 4 + len);
          return r;
        }
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !ReadMore(left)) return r;
    }
  }
  // True once the server has closed (EOF or reset) within `limit`; bytes before it are kept.
  bool ClosedWithin(std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!eof_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      if (!ReadMore(left) && !eof_) return false;
    }
    return true;
  }
  const std::string& received() const { return got_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string got_;
};

}  // namespace mxserve::testing
