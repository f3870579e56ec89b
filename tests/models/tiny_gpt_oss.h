// Test support for the gpt-oss dense path: a seeded random tiny checkpoint in the exact HF
// layout (docs/MODELS.md, gpt-oss), and a slow float64 twin of the whole forward pass written
// straight from that math (full recompute, no KV cache, naive loops) with its own BF16 and MXFP4
// decoding, plus a MoeExecutor that runs experts naively from the same dequantized weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/models/moe_executor.h"
#include "core/model_config.h"
#include "core/safetensors.h"

namespace mxserve::testing {

struct TinySpec {
  int layers = 4;
  int hidden = 64;
  int intermediate = 32;
  int experts = 8;
  int top_k = 3;
  int heads = 6;
  int kv_heads = 2;
  int head_dim = 16;
  int vocab = 97;
  int sliding_window = 5;
  std::vector<std::string> layer_types = {"sliding_attention", "full_attention",
                                          "sliding_attention", "full_attention"};
  double rope_theta = 150000.0;
  double factor = 32.0;
  int64_t original_max_position = 4096;
  int64_t max_position = 131072;  // = factor * original, so HF versions agree on the factor
  bool truncate = false;
};

// config.json text for `spec` in the hub format (with quantization_config mxfp4).
std::string TinyConfigJson(const TinySpec& spec);

// Replaces one tensor's dtype/shape when writing (random bytes of the new size): bad checkpoints.
struct TensorOverride {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Writes DIR/config.json and DIR/model.safetensors. Norms of layer 0 and the final norm are F32,
// every other dense tensor BF16; experts MXFP4 (U8 blocks/scales) with BF16 biases.
absl::Status WriteTinyModel(const std::string& dir, const TinySpec& spec, uint32_t seed,
                            const std::vector<TensorOverride>& overrides = {});

// A fresh empty directory under TEST_TMPDIR or /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The float64 twin. Weights are decoded here, independently of the code under test.
class ReferenceGptOss {
 public:
  static absl::StatusOr<ReferenceGptOss> Load(const ModelConfig& config, const Checkpoint& ckpt);

  // Logits [T][vocab] for every position of `tokens` (positions 0..T-1).
  std::vector<std::vector<double>> Logits(const std::vector<int32_t>& tokens) const;

  // out[H] = expert e of `layer` applied to x[H] (clamped SwiGLU on interleaved gate/up).
  void Expert(int layer, int e, const double* x, double* out) const;

  // YaRN (or plain) inverse frequencies and concentration from the §1.4 formulas in double.
  static void RopeTable(const ModelConfig& c, std::vector<double>& inv_freq, double& m,
                        double& low, double& high);

 private:
  struct Layer {
    std::vector<double> in_norm, post_norm, wq, bq, wk, bk, wv, bv, wo, bo, sinks, wr, br;
    std::vector<double> gate_up, gate_up_b, down, down_b;  // [E][2I][H], [E][2I], [E][H][I], [E][H]
  };
  ModelConfig c_;
  std::vector<double> embed_, norm_, lm_head_, inv_freq_;
  double m_ = 1.0;
  std::vector<Layer> layers_;
};

// MoeExecutor computing each routed expert in float64 from ReferenceGptOss's weights.
class NaiveMoeExecutor : public MoeExecutor {
 public:
  explicit NaiveMoeExecutor(const ReferenceGptOss* ref) : ref_(ref) {}
  absl::Status Run(const ExpertBatch& batch, float* out) override;
  int calls() const { return calls_; }

 private:
  const ReferenceGptOss* ref_;
  int calls_ = 0;
};

// ||a - b|| / ||b||.
double RelL2(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace mxserve::testing
