// mxserve-worker: serves one slice of a model's experts (every MoE layer) over gRPC.
//   mxserve-worker --model DIR --experts 0-15 --port 0 --port-file /run/w0.port --threads 8
// (flag names take '-' or '_')
// Order: listen (health NOT_SERVING) -> write the port file -> load weights -> SERVING.
// Exit codes: 0 clean shutdown (SIGTERM/SIGINT), 78 (EX_CONFIG) bad flags/config/checkpoint,
// 1 other failures (e.g. the port cannot be bound).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/flags_util.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "core/thread_pool.h"
#include "experts/expert_executor.h"
#include "experts/expert_shard.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "worker/expert_service.h"
#include "worker/worker_notify.h"
#include "worker/worker_server.h"
#ifdef MXSERVE_HAVE_CUDA
#include "experts/gpu_executor.h"
#endif

ABSL_FLAG(std::string, model, "", "model folder (config.json + *.safetensors)");
ABSL_FLAG(std::string, experts, "", "global expert ids to hold, e.g. \"0-15\" or \"0,2,4-7\" (default: all)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address to listen on");
ABSL_FLAG(int, port, 0, "port to listen on (0 = pick a free one; see --port-file)");
ABSL_FLAG(std::string, port_file, "", "write the bound port here once listening (atomically)");
ABSL_FLAG(int, threads, 0, "CPU threads for the expert kernels (0 = all cores)");
ABSL_FLAG(std::string, device, "cpu", "where the expert kernels run: cpu or cuda:N");
ABSL_FLAG(std::string, worker_token, "",
          "accept ExpertWorker calls only with 'authorization: Bearer TOKEN' (env MXSERVE_WORKER_TOKEN)");
ABSL_FLAG(std::string, tls_ca, "", "mutual TLS: CA PEM that client certificates must chain to (env MXSERVE_TLS_CA)");
ABSL_FLAG(std::string, tls_cert, "", "mutual TLS: this worker's certificate PEM (env MXSERVE_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "", "mutual TLS: this worker's private key PEM (env MXSERVE_TLS_KEY)");
ABSL_FLAG(int, health_port, -1,
          "with TLS: plaintext grpc.health.v1-only port for Kubernetes gRPC probes (-1 = none)");
ABSL_FLAG(bool, allow_shared_memory, false,
          "answer expert calls whose tensors are in a /mxserve-shm-* shared-memory object of this "
          "user (same-host coordinators: --expert_shared_memory)");
ABSL_FLAG(bool, grpc_reflection, false,
          "serve gRPC server reflection (it answers without the token or a client certificate, "
          "so it is off by default)");
ABSL_FLAG(bool, pin_shared_memory, true,
          "with --device cuda:N and --allow_shared_memory: page-lock the mapped objects "
          "(cudaHostRegister) so that copies go straight to and from them");

namespace mxserve {
namespace {

constexpr int kExitConfig = 78;  // EX_CONFIG: systemd's RestartPreventExitStatus=78

struct WorkerOptions {
  std::string model_dir;
  std::string experts_spec;
  std::string host;
  int port = 0;
  std::string port_file;
  int threads = 0;
  std::string device;
  WorkerAuthOptions auth;
  int health_port = -1;
  bool allow_shared_memory = false;
  bool pin_shared_memory = true;
  bool grpc_reflection = false;
};

WorkerOptions OptionsFromFlags() {
  WorkerOptions o;
  o.model_dir = absl::GetFlag(FLAGS_model);
  o.experts_spec = absl::GetFlag(FLAGS_experts);
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.device = absl::GetFlag(FLAGS_device);
  o.auth.token = absl::GetFlag(FLAGS_worker_token);
  o.auth.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.auth.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.auth.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.auth.FillFromEnv();
  o.health_port = absl::GetFlag(FLAGS_health_port);
  o.allow_shared_memory = absl::GetFlag(FLAGS_allow_shared_memory);
  o.pin_shared_memory = absl::GetFlag(FLAGS_pin_shared_memory);
  o.grpc_reflection = absl::GetFlag(FLAGS_grpc_reflection);
  return o;
}

void Log(const std::string& msg) {
  std::cerr << absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone())
            << " mxserve-worker[" << getpid() << "] " << msg << std::endl;
}

[[noreturn]] void Fail(int code, const std::string& msg) {
  Log("error: " + msg);
  std::exit(code);
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << port << "\n";
    f.close();
    if (!f) return absl::InternalError(absl::StrCat("port-file: cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("port-file: cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace

// Finds unknown flags and unparsable values before absl::ParseCommandLine would exit(1).
std::string PrecheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;
    a.remove_prefix(a[1] == '-' ? 2 : 1);
    std::string name(a.substr(0, a.find('=')));
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && name.rfind("no", 0) == 0) flag = absl::FindCommandLineFlag(name.substr(2));
    if (flag == nullptr) return absl::StrCat("unknown flag --", name);
    if (flag->IsOfType<bool>()) continue;
    std::string value;
    if (a.find('=') != std::string_view::npos) {
      value = std::string(a.substr(a.find('=') + 1));
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::StrCat("flag --", name, " needs a value");
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) return absl::StrCat("--", name, "=", value, ": ", error);
  }
  return "";
}

namespace {

int Main(const WorkerOptions& opt) {
  if (opt.model_dir.empty()) Fail(kExitConfig, "--model is required");
  if (opt.port < 0 || opt.port > 65535) Fail(kExitConfig, absl::StrCat("--port ", opt.port, " not in [0, 65535]"));
  if (opt.threads < 0) Fail(kExitConfig, absl::StrCat("--threads ", opt.threads, " < 0"));
  int cuda_device = -1;  // -1: CPU kernels
  if (opt.device != "cpu") {
    if (opt.device.rfind("cuda:", 0) != 0 || !absl::SimpleAtoi(opt.device.substr(5), &cuda_device) ||
        cuda_device < 0) {
      Fail(kExitConfig, absl::StrCat("--device ", opt.device, ": expected cpu or cuda:N"));
    }
#ifndef MXSERVE_HAVE_CUDA
    Fail(kExitConfig, absl::StrCat("--device ", opt.device, ": this build has no CUDA support"));
#endif
  }
  absl::StatusOr<ModelConfig> config = ModelConfig::Load(opt.model_dir);
  if (!config.ok()) Fail(kExitConfig, absl::StrCat("--model ", opt.model_dir, ": ", config.status().message()));
  std::vector<int> experts;
  if (opt.experts_spec.empty()) {
    experts.resize(config->num_local_experts);
    std::iota(experts.begin(), experts.end(), 0);
  } else {
    absl::StatusOr<std::vector<int>> ids = ParseIdList(opt.experts_spec, config->num_local_experts);
    if (!ids.ok()) Fail(kExitConfig, absl::StrCat("--experts: ", ids.status().message()));
    experts = *std::move(ids);
    if (experts.empty()) Fail(kExitConfig, "--experts: empty set");
  }

  // Signals go to one thread (sigwait) so that every other thread, gRPC's included, runs
  // with them blocked: block before any thread is started.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  WorkerModelInfo info;
  info.model_type = config->model_type;
  info.num_layers = config->num_hidden_layers;
  info.num_experts = config->num_local_experts;
  info.hidden_size = config->hidden_size;
  info.intermediate_size = config->intermediate_size;
  info.activation = ExpertActivationName(*config);
  info.experts = experts;
  auto service = std::make_shared<ExpertService>(info, opt.allow_shared_memory);
  WorkerServerOptions sopt;
  sopt.host = opt.host;
  sopt.port = opt.port;
  sopt.auth = opt.auth;
  sopt.plaintext_health_port = opt.health_port;
  sopt.reflection = opt.grpc_reflection;
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(sopt, service);
  if (!server.ok()) {
    Fail(server.status().code() == absl::StatusCode::kInvalidArgument ? kExitConfig : 1,
         std::string(server.status().message()));
  }
  Log(absl::StrCat("listening on ", (*server)->address(), " (NOT_SERVING until loaded); experts ",
                   experts.front(), "..", experts.back(), " (", experts.size(), ") of ",
                   config->num_local_experts, ", ", config->num_hidden_layers, " layers"));
  // systemd (Type=notify): loading may outlast TimeoutStartSec; each layer extends it.
  SystemdNotifier::ExtendTimeout(absl::Minutes(2));
  SystemdNotifier::Status("loading experts");
  if (!opt.port_file.empty()) {
    if (absl::Status s = WritePortFile(opt.port_file, (*server)->port()); !s.ok()) {
      Fail(kExitConfig, std::string(s.message()));
    }
  }

  std::atomic<bool> loaded{false};
  std::atomic<bool> stopping{false};
  WorkerServer* srv = server->get();
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    stopping = true;
    Log(absl::StrCat("signal ", sig, ": shutting down"));
    SystemdNotifier::Stopping();
    // A worker holds no state but weights: while still loading, there is nothing to drain.
    if (!loaded) std::_Exit(0);
    srv->Shutdown(absl::Seconds(5));
  });

  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(opt.model_dir);
  if (!ckpt.ok()) Fail(kExitConfig, absl::StrCat("--model ", opt.model_dir, ": ", ckpt.status().message()));
  absl::StatusOr<std::unique_ptr<ExpertShard>> shard = ExpertShard::Load(
      **ckpt, *config, experts, [](int done, int total) {
        Log(absl::StrCat("loaded layer ", done, "/", total));
        SystemdNotifier::ExtendTimeout(absl::Minutes(2));
      });
  if (!shard.ok()) Fail(kExitConfig, absl::StrCat("loading experts: ", shard.status().message()));
  ckpt->reset();  // weights are copied; drop the mapping
  Log(absl::StrCat("weights resident: ", (*shard)->resident_bytes() >> 20, " MiB in ",
                   absl::FormatDuration(absl::Now() - t0)));
  if (cuda_device >= 0) {
#ifdef MXSERVE_HAVE_CUDA
    // The host copy stays: the service validates ids against it (which experts are held).
    auto gpu = GpuExecutor::Create(std::shared_ptr<const ExpertShard>(std::move(*shard)), cuda_device,
                                   opt.pin_shared_memory);
    if (!gpu.ok()) Fail(1, absl::StrCat("--device ", opt.device, ": ", gpu.status().message()));
    Log(absl::StrCat("weights on ", opt.device, ": ", (*gpu)->device_bytes() >> 20, " MiB in ",
                     absl::FormatDuration(absl::Now() - t0)));
    service->SetReady(std::shared_ptr<ExpertExecutor>(*std::move(gpu)));
#endif
  } else {
    auto pool = std::make_shared<ThreadPool>(opt.threads);
    service->SetReady(std::make_shared<ShardExecutor>(std::shared_ptr<const ExpertShard>(std::move(*shard)), pool));
  }
  loaded = true;
  if (!stopping) {
    srv->SetServing(true);
    Log("SERVING");
    SystemdNotifier::Ready(absl::StrCat("SERVING on ", srv->address()));
  }
  // WatchdogSec=: ping only while our own health service answers over the network, so a wedged
  // gRPC server stops the pings (behind mutual TLS: via the plaintext health port, if any).
  SystemdNotifier notifier;
  {
    const std::string host = opt.host == "0.0.0.0" || opt.host == "::" ? "127.0.0.1" : opt.host;
    int probe_port = opt.auth.tls() ? srv->plaintext_health_port() : srv->port();
    std::shared_ptr<grpc::Channel> ch;
    if (probe_port > 0) {
      ch = grpc::CreateChannel(absl::StrCat(host.find(':') != std::string::npos ? "[" + host + "]" : host,
                                            ":", probe_port),
                               grpc::InsecureChannelCredentials());
    }
    notifier.StartWatchdog([ch] {
      if (!ch) return true;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      grpc::health::v1::HealthCheckRequest req;
      grpc::health::v1::HealthCheckResponse resp;
      return grpc::health::v1::Health::NewStub(ch)->Check(&ctx, req, &resp).ok();
    });
  }
  srv->Wait();  // returns once the signal thread has shut the server down
  signal_thread.join();
  server->reset();
  Log("stopped");
  return 0;
}

}  // namespace
}  // namespace mxserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "mxserve-worker --model DIR [--experts 0-15] [--host 127.0.0.1] [--port 0] "
      "[--port-file PATH] [--threads N] [--device cpu|cuda:N]  (flag names take - or _)");
  // --port-file and --port_file both work: absl spells flag names with '_' only.
  std::vector<std::string> normalized = mxserve::NormalizeFlagNames(argc, argv);
  std::vector<char*> args = mxserve::FlagArgv(normalized);
  argv = args.data();
  // absl exits with 1 on an unknown flag or a bad value; a config error must exit 78.
  if (std::string err = mxserve::PrecheckFlags(argc, argv); !err.empty()) {
    std::cerr << "mxserve-worker: " << err << " (see --help)\n";
    return 78;
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::cerr << "mxserve-worker: unexpected argument '" << rest[1] << "'\n";
    return 78;
  }
  return mxserve::Main(mxserve::OptionsFromFlags());
}
