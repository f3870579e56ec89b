// libFuzzer target: raw bytes from a client into the real HTTP front door (HttpServer's
// Beast-based sessions, keep-alive and pipelining, body limit, routing, the OpenAI parsers and
// the response builders, SSE included) over a loopback socket. The engine behind it answers
// every accepted request with two tokens at once. Properties: the server never crashes,
// answers or closes within the libFuzzer timeout, and still serves /health afterwards. An
// input that starts with 0xFF is a program that expands to a long, structured request
// (fuzz_http_request_expand.h): headers, chunk extensions and trailers far past -max_len.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "coordinator/chat/chat_template.h"
#include "coordinator/frontends/http_frontend.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "fuzz/fuzz_http_request_expand.h"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace {

// Finishes every request at once with two tokens (synchronously, from Submit).
class InstantEngine final : public mxserve::GenerationService {
 public:
  absl::Status Submit(mxserve::GenerateRequest req, mxserve::EventCallback cb) override {
    mxserve::GenerationEvent a;
    a.token_ids = {72, 105};
    a.text = "Hi";
    if (req.params.logprobs >= 0) {
      for (int32_t id : a.token_ids) a.logprobs.push_back({id, -0.5f, {}});
    }
    cb(std::move(a));
    mxserve::GenerationEvent end;
    end.finished = true;
    end.finish_reason = mxserve::FinishReason::kLength;
    end.prompt_tokens = static_cast<int>(req.prompt_tokens.size());
    end.completion_tokens = 2;
    cb(std::move(end));
    return absl::OkStatus();
  }
  void Cancel(const std::string&) override {}
};

struct Env {
  std::unique_ptr<mxserve::Tokenizer> tok;
  std::unique_ptr<mxserve::ChatTemplate> chat;
  InstantEngine engine;
  std::unique_ptr<mxserve::frontends::HttpFrontend> http;
};

Env* MakeEnv() {
  auto* env = new Env();
  auto files = mxserve::MakeTinyTokenizer(200);
  if (!files.ok()) abort();
  auto tok = mxserve::Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
  if (!tok.ok()) abort();
  env->tok = *std::move(tok);
  auto chat = mxserve::ChatTemplate::ForModel("gpt_oss", env->tok.get());
  if (!chat.ok()) abort();
  env->chat = *std::move(chat);
  mxserve::ServingContext ctx;
  ctx.model_id = "tiny";
  ctx.max_model_len = 256;
  ctx.tokenizer = env->tok.get();
  ctx.chat_template = env->chat.get();
  ctx.engine = &env->engine;
  ctx.metrics = [] { return std::string("up 1\n"); };
  mxserve::frontends::HttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.io_threads = 1;
  o.max_body_bytes = 64 << 10;
  o.read_timeout = std::chrono::milliseconds(2000);
  o.idle_timeout = std::chrono::milliseconds(2000);
  auto http = mxserve::frontends::HttpFrontend::Start(ctx, o);
  if (!http.ok()) abort();
  env->http = *std::move(http);
  return env;
}

// Sends `bytes`, half-closes, reads until the server closes. False if the connection failed.
bool Exchange(int port, const uint8_t* data, size_t size, std::string* reply) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  // A fresh loopback source address per connection (all of 127/8 is local): the server closes
  // first, so each exchange leaves a TIME_WAIT pair behind, and thousands a second from one
  // address would soon collide with them.
  static uint32_t next = 0;
  ++next;
  sockaddr_in src{};
  src.sin_family = AF_INET;
  src.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | (next % 65000 + 1));
  bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // libFuzzer's once-a-second SIGALRM interrupts blocking calls: EINTR means "go on".
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  if (rc != 0 && errno == EINTR) {
    pollfd p{fd, POLLOUT, 0};
    while (poll(&p, 1, 5000) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
    errno = err;
  }
  if (rc != 0) {
    fprintf(stderr, "fuzz_http_request: connect: %s\n", strerror(errno));
    close(fd);
    return false;
  }
  size_t off = 0;
  while (off < size) {
    ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server may close early (413, 400): fine
    off += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  char buf[4096];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (reply->size() < (1u << 20)) reply->append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Env* env = MakeEnv();
  const int port = env->http->port();
  std::string reply;
  std::string expanded;
  if (size > 0 && data[0] == mxserve::fuzz::kStructuredMark) {
    expanded = mxserve::fuzz::ExpandHttpProgram(data + 1, size - 1);
    data = reinterpret_cast<const uint8_t*>(expanded.data());
    size = expanded.size();
  }
  if (!Exchange(port, data, size, &reply)) abort();
  if (!reply.empty() && reply.rfind("HTTP/1.1 ", 0) != 0) abort();  // only HTTP comes back
  static const char kHealth[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::string health;
  if (!Exchange(port, reinterpret_cast<const uint8_t*>(kHealth), sizeof kHealth - 1, &health) ||
      health.rfind("HTTP/1.1 200", 0) != 0) {
    fprintf(stderr, "fuzz_http_request: /health after the input: '%s'\n", health.c_str());
    abort();  // the server stopped serving
  }
  return 0;
}
