#include "tests/integration/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace mxserve::testing {
namespace fs = std::filesystem;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

std::string BinDir() {
  return fs::canonical("/proc/self/exe").parent_path().string();
}

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "mxserve-test-XXXXXX").string();
  char* p = mkdtemp(tmpl.data());
  if (p == nullptr) {
    perror("mkdtemp");
    abort();
  }
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (getenv("MXSERVE_KEEP_TEST_DIRS") == nullptr) fs::remove_all(path_, ec);
}

static pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
                   const std::string& log_path) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(binary.c_str(), argv.data());
    perror("execv");
    _exit(127);
  }
  return pid;
}

Process::Process(const std::string& binary, const std::vector<std::string>& args,
                 const std::string& log_path) {
  pid_ = Spawn(binary, args, log_path);
}

Process::~Process() {
  if (!reaped_) Stop(std::chrono::milliseconds(3000));
}

bool Process::Alive() {
  if (reaped_) return false;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = st;
    return false;
  }
  return true;
}

int Process::Stop(std::chrono::milliseconds grace) {
  if (reaped_) return status_;
  kill(pid_, SIGTERM);
  auto until = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < until) {
    if (!Alive()) return status_;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status_, 0);
  reaped_ = true;
  return status_;
}

int RunCommand(const std::string& binary, const std::vector<std::string>& args,
               const std::string& log_path) {
  pid_t pid = Spawn(binary, args, log_path);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::optional<Coordinator> StartCoordinator(const std::string& model_dir,
                                            const std::vector<std::string>& extra_flags,
                                            const std::string& log_dir) {
  static int counter = 0;
  int n = ++counter;
  std::string port_file = log_dir + "/ports-" + std::to_string(n) + ".json";
  Coordinator c;
  c.log_path = log_dir + "/coordinator-" + std::to_string(n) + ".log";
  std::vector<std::string> args = {"--model", model_dir, "--host", "127.0.0.1",
                                   "--http-port", "0", "--grpc-port", "0",
                                   "--port-file", port_file};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  c.process = std::make_unique<Process>(BinDir() + "/mxserve-coordinator", args, c.log_path);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!c.process->Alive()) break;
    if (fs::exists(port_file)) {
      try {
        auto j = nlohmann::json::parse(ReadFile(port_file));
        c.http_port = j.at("http_port").get<int>();
        c.grpc_port = j.at("grpc_port").get<int>();
      } catch (...) {
      }
      if (c.http_port > 0) {
        auto r = HttpCall(c.http_port, "GET", "/health");
        if (r.status == 200) return c;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cerr << "coordinator failed to start; log " << c.log_path << ":\n"
            << ReadFile(c.log_path) << std::endl;
  return std::nullopt;
}

std::string TinyModelDir() {
  static std::once_flag once;
  static TempDir* dir = nullptr;
  std::call_once(once, [] {
    dir = new TempDir();  // lives for the process; removed by the OS temp cleaner otherwise
    std::string out = dir->path() + "/tiny";
    int rc = RunCommand(BinDir() + "/mxserve-make-model",
                        {"--preset", "tiny", "--out", out, "--seed", "7"},
                        dir->path() + "/make-model.log");
    if (rc != 0) {
      std::cerr << "mxserve-make-model failed: " << ReadFile(dir->path() + "/make-model.log");
      abort();
    }
    std::atexit([] { delete dir; });
  });
  return dir->path() + "/tiny";
}

HttpResponse HttpCall(int port, const std::string& method, const std::string& target,
                      const std::string& body, const std::string& content_type) {
  HttpResponse out;
  try {
    boost::asio::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(120));
    stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty() || method == "POST") {
      req.set(http::field::content_type, content_type);
      req.body() = body;
      req.prepare_payload();
    }
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 * 1024 * 1024);
    http::read(stream, buffer, parser);
    auto& res = parser.get();
    out.status = res.result_int();
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (auto& ch : name) ch = static_cast<char>(tolower(ch));
      out.headers[name] = std::string(f.value());
    }
    out.body = res.body();
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  } catch (const std::exception& e) {
    out.status = -1;
    out.body = e.what();
  }
  return out;
}

std::vector<nlohmann::json> ParseSse(const std::string& body, bool* done) {
  std::vector<nlohmann::json> events;
  *done = false;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data:", 0) != 0) continue;
    std::string payload = line.substr(5);
    if (!payload.empty() && payload[0] == ' ') payload.erase(0, 1);
    if (payload == "[DONE]") {
      *done = true;
      break;
    }
    events.push_back(nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false));
  }
  return events;
}

}  // namespace mxserve::testing
