#include "coordinator/supervision/local_worker_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/placement.h"
#include "coordinator/router/worker_client.h"
#include "core/status.h"

namespace mxserve {

std::string LocalWorkerPool::DescribeExit(int wstatus) {
  if (WIFEXITED(wstatus)) {
    const int code = WEXITSTATUS(wstatus);
    return absl::StrCat("exited with status ", code,
                        code == 78 ? " (EX_CONFIG: bad flags, config or checkpoint)" : "");
  }
  if (WIFSIGNALED(wstatus)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(wstatus), " (", strsignal(WTERMSIG(wstatus)), ")");
  }
  return absl::StrCat("ended with wait status ", wstatus);
}

namespace {

std::string PortFile(const std::string& dir, int i) { return absl::StrCat(dir, "/worker-", i, ".port"); }

// The worker's environment: ours without any worker credential (a token or TLS path set in
// our environment must not override the options), plus the token when there is one.
std::vector<std::string> ChildEnvironment(const WorkerAuthOptions& auth) {
  static constexpr const char* kDropped[] = {"MXSERVE_WORKER_TOKEN=", "MXSERVE_TLS_CA=",
                                             "MXSERVE_TLS_CERT=", "MXSERVE_TLS_KEY=",
                                             "MXSERVE_TLS_SERVER_NAME="};
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    bool drop = false;
    for (const char* d : kDropped) drop |= std::strncmp(*e, d, std::strlen(d)) == 0;
    if (!drop) env.emplace_back(*e);
  }
  if (!auth.token.empty()) env.push_back(absl::StrCat("MXSERVE_WORKER_TOKEN=", auth.token));
  return env;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalWorkerPool>> LocalWorkerPool::Start(
    LocalWorkerPoolOptions options) {
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("local workers: num_workers ", options.num_workers, " < 1"));
  }
  if (options.num_experts < options.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("local workers: ", options.num_experts,
                                                   " experts cannot be split over ",
                                                   options.num_workers, " workers"));
  }
  if (options.replicas < 1 || options.replicas > options.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("local workers: ", options.replicas,
                                                   " replicas need 1..", options.num_workers,
                                                   " workers"));
  }
  if (options.threads_per_worker < 0) {
    return absl::InvalidArgumentError("local workers: threads_per_worker < 0");
  }
  if (!options.devices.empty() && options.devices.size() != static_cast<size_t>(options.num_workers)) {
    return absl::InvalidArgumentError(absl::StrCat("local workers: ", options.devices.size(),
                                                   " devices for ", options.num_workers,
                                                   " workers"));
  }
  if (options.model_dir.empty()) return absl::InvalidArgumentError("local workers: model_dir is empty");
  if (access(options.worker_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("local workers: worker binary '",
                                                      options.worker_binary,
                                                      "' is not an executable file"));
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/mxserve-workers-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("local workers: mkdtemp ", templ, ": ", std::strerror(errno)));
  }
  auto pool = std::unique_ptr<LocalWorkerPool>(new LocalWorkerPool(std::move(options)));
  pool->temp_dir_ = templ;
  pool->workers_.resize(pool->options_.num_workers);
  for (int i = 0; i < pool->options_.num_workers; ++i) {
    absl::Status s = pool->Spawn(i);
    if (!s.ok()) {
      pool->Stop();
      return s;
    }
  }
  absl::Status s = pool->WaitAllServing();
  if (!s.ok()) {
    pool->Stop();
    return s;
  }
  return pool;
}

std::vector<std::string> LocalWorkerPool::WorkerArgs(const LocalWorkerPoolOptions& options, int i,
                                                     const std::string& experts,
                                                     const std::string& port_file) {
  std::vector<std::string> args = {
      options.worker_binary,
      absl::StrCat("--model=", options.model_dir),
      absl::StrCat("--experts=", experts),
      absl::StrCat("--host=", options.host),
      "--port=0",
      absl::StrCat("--port-file=", port_file),
      absl::StrCat("--threads=", options.threads_per_worker)};
  if (!options.devices.empty()) args.push_back(absl::StrCat("--device=", options.devices[i]));
  const WorkerAuthOptions& auth = options.auth;
  if (!auth.tls_ca.empty()) args.push_back(absl::StrCat("--tls-ca=", auth.tls_ca));
  if (!auth.tls_cert.empty()) args.push_back(absl::StrCat("--tls-cert=", auth.tls_cert));
  if (!auth.tls_key.empty()) args.push_back(absl::StrCat("--tls-key=", auth.tls_key));
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  return args;
}

absl::Status LocalWorkerPool::Spawn(int i) {
  Worker& w = workers_[i];
  std::tie(w.first_expert, w.end_expert) =
      ContiguousRange(options_.num_experts, options_.num_workers, i);
  ASSIGN_OR_RETURN(Placement placement, Placement::Replicated(options_.num_experts,
                                                              options_.num_workers,
                                                              options_.replicas));
  w.experts = IdRanges(placement.ExpertsOf(i));
  // Everything the child needs is built before vfork: after it only raw system calls.
  // vfork, not fork: fork runs pthread_atfork handlers, and OpenBLAS's shuts its thread pool
  // down under a GEMM running on the engine thread, which then spins forever (restarts fork
  // while the coordinator serves). vfork runs none, copies nothing and the child execs at once.
  w.device = options_.devices.empty() ? "" : options_.devices[i];
  std::vector<std::string> args = WorkerArgs(options_, i, w.experts, PortFile(temp_dir_, i));
  const WorkerAuthOptions& auth = options_.auth;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = ChildEnvironment(auth);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = vfork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("local worker ", i, ": vfork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Die with the parent; and undo a signal mask / ignored signals inherited from it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  w.pid = pid;
  return absl::OkStatus();
}

absl::Status LocalWorkerPool::WaitAllServing() {
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  std::vector<std::unique_ptr<WorkerClient>> clients(workers_.size());
  std::vector<bool> ready(workers_.size(), false);
  size_t num_ready = 0;
  while (num_ready < workers_.size()) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (ready[i]) continue;
      Worker& w = workers_[i];
      int wstatus = 0;
      if (waitpid(w.pid, &wstatus, WNOHANG) == w.pid) {
        const pid_t pid = w.pid;
        w.pid = -1;  // reaped
        // A worker's EX_CONFIG (bad model, flags or credentials) is ours too: no restart helps.
        const bool config = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 78;
        return absl::Status(
            config ? absl::StatusCode::kFailedPrecondition : absl::StatusCode::kUnavailable,
            absl::StrCat("local worker ", i, " (pid ", pid, ", experts ", w.first_expert, "-",
                         w.end_expert - 1, w.device.empty() ? "" : ", on ", w.device, ") ",
                         DescribeExit(wstatus),
                         " during startup; its log is on stderr above"));
      }
      if (clients[i] == nullptr && !PollAddress(static_cast<int>(i)).empty()) {
        ASSIGN_OR_RETURN(clients[i], WorkerClient::Create(
                                         w.address, {.name = absl::StrCat("local worker ", i),
                                                     .auth = options_.auth}));
      }
      if (clients[i] != nullptr) {
        absl::StatusOr<bool> serving = clients[i]->IsServing(absl::Now() + absl::Seconds(1));
        if (serving.ok() && *serving) {
          ready[i] = true;
          ++num_ready;
        }
      }
    }
    if (num_ready == workers_.size()) break;
    if (absl::Now() >= deadline) {
      std::string which;
      for (size_t i = 0; i < workers_.size(); ++i) {
        if (!ready[i]) {
          absl::StrAppend(&which, which.empty() ? "" : ", ", i,
                          workers_[i].port == 0 ? " (not listening)" : " (not SERVING)");
        }
      }
      return absl::DeadlineExceededError(
          absl::StrCat("local workers not ready within ",
                       absl::FormatDuration(options_.startup_timeout), ": worker ", which));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

std::vector<std::string> LocalWorkerPool::addresses() const {
  std::vector<std::string> out;
  for (const Worker& w : workers_) out.push_back(w.address);
  return out;
}

void LocalWorkerPool::Stop() {
  for (Worker& w : workers_) {
    if (w.pid > 0) kill(w.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + options_.stop_grace;
  while (true) {
    bool any = false;
    for (Worker& w : workers_) {
      if (w.pid <= 0) continue;
      int wstatus = 0;
      const pid_t r = waitpid(w.pid, &wstatus, WNOHANG);
      if (r == w.pid || (r < 0 && errno == ECHILD)) {
        w.pid = -1;
      } else {
        any = true;
      }
    }
    if (!any) break;
    if (absl::Now() >= deadline) {
      for (Worker& w : workers_) {
        if (w.pid <= 0) continue;
        kill(w.pid, SIGKILL);
        waitpid(w.pid, nullptr, 0);
        w.pid = -1;
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!temp_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
    temp_dir_.clear();
  }
}

LocalWorkerPool::~LocalWorkerPool() { Stop(); }

absl::Status LocalWorkerPool::Respawn(int i) {
  if (i < 0 || i >= static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("local worker ", i, ": no such worker"));
  }
  Worker& w = workers_[i];
  if (w.pid > 0) return absl::FailedPreconditionError(absl::StrCat("local worker ", i, " still runs"));
  std::remove(PortFile(temp_dir_, i).c_str());
  w.port = 0;
  w.address.clear();
  return Spawn(i);
}

std::optional<int> LocalWorkerPool::Reap(int i) {
  Worker& w = workers_[i];
  if (w.pid <= 0) return std::nullopt;
  int wstatus = 0;
  const pid_t r = waitpid(w.pid, &wstatus, WNOHANG);
  if (r == w.pid) {
    w.pid = -1;
    return wstatus;
  }
  if (r < 0 && errno == ECHILD) {  // reaped elsewhere: report it as gone
    w.pid = -1;
    return 0;
  }
  return std::nullopt;
}

std::string LocalWorkerPool::PollAddress(int i) {
  Worker& w = workers_[i];
  if (w.port == 0) {
    std::ifstream f(PortFile(temp_dir_, i));
    std::string line;
    int port = 0;
    if (f && std::getline(f, line) && absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &port) &&
        port > 0) {
      w.port = port;
      w.address = absl::StrCat(options_.host, ":", port);
    }
  }
  return w.address;
}

void LocalWorkerPool::Signal(int i, int sig) {
  if (workers_[i].pid > 0) kill(workers_[i].pid, sig);
}

}  // namespace mxserve
