// mxserve-make-model --preset tiny --out DIR [--seed N] [--shards N] [--num-layers N]
//                    [--threads N]
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <string>

#include "tools/make_model/make_model.h"

namespace {

constexpr char kUsage[] =
    "usage: mxserve-make-model --preset {tiny,gpt-oss-20b,gpt-oss-120b,deepseek-tiny,kimi-k2-tiny}\n"
    "                          --out DIR\n"
    "                          [--seed N] [--shards N] [--num-layers N] [--threads N]\n"
    "  --shards 1: model.safetensors; N>1: ~N shards + model.safetensors.index.json;\n"
    "  0: one shard per layer (default for the real shapes).\n";

bool ParseInt(const std::string& s, long long lo, long long hi, long long& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  mxserve::make_model::MakeModelOptions opts;
  opts.progress = true;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::cerr << "mxserve-make-model: " << arg << " needs a value\n" << kUsage;
      return 2;
    }
    long long n = 0;
    auto need_int = [&](long long lo, long long hi) {
      if (!ParseInt(value, lo, hi, n)) {
        std::cerr << "mxserve-make-model: " << arg << " must be an integer in [" << lo << ", "
                  << hi << "], got '" << value << "'\n";
        return false;
      }
      return true;
    };
    if (arg == "--preset") {
      opts.preset = value;
    } else if (arg == "--out") {
      opts.out_dir = value;
    } else if (arg == "--seed") {
      if (!need_int(0, (1LL << 62))) return 2;
      opts.seed = static_cast<uint64_t>(n);
    } else if (arg == "--shards") {
      if (!need_int(0, 100000)) return 2;
      opts.shards = static_cast<int>(n);
    } else if (arg == "--num-layers") {
      if (!need_int(1, 10000)) return 2;
      opts.num_layers = static_cast<int>(n);
    } else if (arg == "--threads") {
      if (!need_int(0, 4096)) return 2;
      opts.threads = static_cast<int>(n);
    } else {
      std::cerr << "mxserve-make-model: unknown flag " << arg << "\n" << kUsage;
      return 2;
    }
  }
  if (opts.out_dir.empty()) {
    std::cerr << "mxserve-make-model: --out is required\n" << kUsage;
    return 2;
  }
  const absl::Status s = mxserve::make_model::MakeModel(opts);
  if (!s.ok()) {
    std::cerr << "mxserve-make-model: " << s.ToString() << "\n";
    return 1;
  }
  std::cerr << "mxserve-make-model: wrote " << opts.preset << " model to " << opts.out_dir << "\n";
  return 0;
}
