// DeepSeek-V3 / Kimi K2 on CPU against the float64 twin (tests/models/tiny_deepseek.h): the whole
// forward with the real expert path (bf16 experts quantized to MXFP4 at load, the fast kernel
// with plain SwiGLU, through the in-process router), both MLA forms, decode through the latent
// cache, the engine's greedy ids, and the config/checkpoint errors.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/engine/engine.h"
#include "coordinator/models/cpu_model_runner.h"
#include "coordinator/models/deepseek_v3.h"
#include "coordinator/models/model.h"
#include "coordinator/router/router_factory.h"
#include "coordinator/supervision/local_worker_pool.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/models/tiny_deepseek.h"
#include "tests/models/tiny_gpt_oss.h"
#include "tools/make_model/make_model.h"

namespace mxserve::testing {
namespace {

constexpr double kMaxRelL2 = 1e-4;  // the gpt-oss gate, fp32 against float64

// DeepSeek-V3-like: q_lora set, 4 groups (2 kept), dense first layer, a shared expert, YaRN.
TinyDsSpec SpecA() { return TinyDsSpec{}; }

// Kimi-K2-like: model_type kimi_k2, plain q_proj, one group, K2's YaRN betas and theta, two
// dense layers, mscale != mscale_all_dim (cos/sin carry their ratio), two shared experts.
TinyDsSpec SpecB() {
  TinyDsSpec s;
  s.model_type = "kimi_k2";
  s.layers = 4;
  s.first_dense = 2;
  s.q_lora = 0;
  s.n_group = 1;
  s.topk_group = 1;
  s.n_shared = 2;
  s.top_k = 2;
  s.rope_theta = 50000.0;
  s.beta_fast = 1.0;
  s.beta_slow = 1.0;
  s.mscale = 0.707;
  s.routed_scaling = 2.827;
  return s;
}

std::vector<int32_t> Tokens(int n, int vocab, uint32_t seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 2654435761u + 40503u * i * i + 7 * i) % vocab);
  return t;
}

struct Harness {
  TempDir dir;
  ModelConfig config;
  std::unique_ptr<Checkpoint> ckpt;
  std::shared_ptr<ThreadPool> pool = std::make_shared<ThreadPool>(2);
  std::unique_ptr<LocalWorkerPool> workers;  // set: experts in 2 mxserve-worker processes
  std::unique_ptr<ExpertRouter> router;
  DeepseekV3Model* model = nullptr;  // owned by runner
  std::unique_ptr<CpuModelRunner> runner;
  std::unique_ptr<ReferenceDeepseek> ref;
};

void Build(const TinyDsSpec& spec, uint32_t seed, Harness& h, bool two_workers = false) {
  ASSERT_TRUE(WriteTinyDeepseek(h.dir.path(), spec, seed).ok());
  auto cfg = ModelConfig::Load(h.dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  h.config = *cfg;
  auto ck = Checkpoint::Open(h.dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status();
  h.ckpt = std::move(*ck);
  if (two_workers) {
    LocalWorkerPoolOptions wo;
    wo.worker_binary =
        (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "mxserve-worker").string();
    wo.model_dir = h.dir.path();
    wo.num_workers = 2;
    wo.num_experts = spec.experts;
    wo.startup_timeout = absl::Seconds(60);
    auto pool = LocalWorkerPool::Start(wo);
    ASSERT_TRUE(pool.ok()) << pool.status();
    h.workers = std::move(*pool);
    RemoteWorkersOptions ro;
    ro.ready_timeout = absl::Seconds(60);
    auto router = ConnectToWorkers(h.workers->addresses(), h.config, ro);
    ASSERT_TRUE(router.ok()) << router.status();
    h.router = std::move(*router);
  } else {
    auto router = MakeInProcessRouter(*h.ckpt, h.config, h.pool);
    ASSERT_TRUE(router.ok()) << router.status();
    h.router = std::move(*router);
  }
  auto m = DeepseekV3Model::Create(h.config, *h.ckpt, h.router.get(), h.pool.get());
  ASSERT_TRUE(m.ok()) << m.status();
  h.model = m->get();
  auto r = CpuModelRunner::Create(std::move(*m), /*num_blocks=*/48, /*block_size=*/4,
                                  /*max_model_len=*/64);
  ASSERT_TRUE(r.ok()) << r.status();
  h.runner = std::move(*r);
  auto ref = ReferenceDeepseek::Load(spec, *h.ckpt);
  ASSERT_TRUE(ref.ok()) << ref.status();
  h.ref = std::make_unique<ReferenceDeepseek>(*std::move(ref));
}

// Block tables are scattered on purpose; each sequence gets its own blocks.
std::vector<int32_t> Blocks(int first, int n) {
  std::vector<int32_t> b;
  for (int i = 0; i < n; ++i) b.push_back((first + 7 * i) % 48);
  return b;
}

std::vector<double> Row(const ForwardOutput& o, int r) {
  return std::vector<double>(o.logits.begin() + static_cast<size_t>(r) * o.vocab_size,
                             o.logits.begin() + static_cast<size_t>(r + 1) * o.vocab_size);
}

int Argmax(const std::vector<double>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

class DeepseekVsReference : public ::testing::TestWithParam<int> {
 protected:
  TinyDsSpec spec() const { return GetParam() == 0 ? SpecA() : SpecB(); }
};

// One pass over 40 tokens (past the YaRN original length 16), every row, in each MLA form.
TEST_P(DeepseekVsReference, PrefillLogitsMatchFloat64InBothForms) {
  Harness h;
  ASSERT_NO_FATAL_FAILURE(Build(spec(), 11 + GetParam(), h));
  const std::vector<int32_t> toks = Tokens(40, spec().vocab, 3);
  const auto want = h.ref->Logits(toks);
  std::vector<std::vector<double>> got[2];
  int f = 0;
  for (auto form : {DeepseekV3Model::MlaForm::kExpanded, DeepseekV3Model::MlaForm::kAbsorbed}) {
    SCOPED_TRACE(f == 0 ? "expanded" : "absorbed");
    h.model->set_mla_form(form);
    SequenceChunk ch;
    ch.seq_id = 1;
    ch.tokens = toks;
    ch.block_table = Blocks(f, 10);
    ch.all_logits = true;
    auto out = h.runner->Run(ForwardBatch{{ch}});
    ASSERT_TRUE(out.ok()) << out.status();
    for (int t = 0; t < 40; ++t) {
      got[f].push_back(Row(*out, t));
      EXPECT_LE(RelL2D(got[f][t], want[t]), kMaxRelL2) << "row " << t;
      EXPECT_EQ(Argmax(got[f][t]), Argmax(want[t])) << "row " << t;
    }
    ++f;
  }
  for (int t = 0; t < 40; ++t) EXPECT_LE(RelL2D(got[1][t], got[0][t]), 1e-5) << "row " << t;
}

// Prefill 18 tokens (expanded), then 22 single-token steps (absorbed) through the latent cache.
TEST_P(DeepseekVsReference, DecodeThroughLatentCacheMatchesFloat64) {
  Harness h;
  ASSERT_NO_FATAL_FAILURE(Build(spec(), 21 + GetParam(), h));
  const std::vector<int32_t> toks = Tokens(40, spec().vocab, 5);
  const auto want = h.ref->Logits(toks);
  SequenceChunk pre;
  pre.seq_id = 1;
  pre.tokens.assign(toks.begin(), toks.begin() + 18);
  pre.block_table = Blocks(3, 10);
  auto out = h.runner->Run(ForwardBatch{{pre}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_LE(RelL2D(Row(*out, 0), want[17]), kMaxRelL2);
  for (int t = 18; t < 40; ++t) {
    SequenceChunk d = pre;
    d.tokens = {toks[t]};
    d.start_pos = t;
    auto o = h.runner->Run(ForwardBatch{{d}});
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_LE(RelL2D(Row(*o, 0), want[t]), kMaxRelL2) << "position " << t;
    EXPECT_EQ(Argmax(Row(*o, 0)), Argmax(want[t])) << "position " << t;
  }
}

// The engine (chunked prefill of 8 tokens, two sequences batched, greedy) generates exactly the
// twin's greedy ids: experts in this process, or in two mxserve-worker processes over gRPC.
void EngineGreedy(const TinyDsSpec& spec, uint32_t seed, bool two_workers) {
  Harness h;
  ASSERT_NO_FATAL_FAILURE(Build(spec, seed, h, two_workers));
  EngineOptions o;
  o.start_loop = false;
  o.scheduler.max_num_batched_tokens = 8;
  o.scheduler.max_num_seqs = 2;
  auto engine = Engine::Create(o, h.runner.get(), nullptr, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<std::vector<int32_t>> prompts = {Tokens(13, spec.vocab, 7),
                                                     Tokens(21, spec.vocab, 9)};
  constexpr int kNew = 14;  // the longer one ends at 35: past the YaRN original length
  std::vector<std::vector<int32_t>> got(prompts.size());
  std::vector<bool> done(prompts.size(), false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.request_id = std::to_string(i);
    r.prompt_tokens = prompts[i];
    r.params.temperature = 0.0f;
    r.params.max_tokens = kNew;
    r.params.ignore_eos = true;
    ASSERT_TRUE((*engine)->Submit(r, [&, i](GenerationEvent ev) {
      got[i].insert(got[i].end(), ev.token_ids.begin(), ev.token_ids.end());
      if (ev.finished) {
        EXPECT_EQ(ev.finish_reason, FinishReason::kLength) << ev.error;
        done[i] = true;
      }
    }).ok());
  }
  for (int step = 0; step < 200 && !(done[0] && done[1]); ++step) (*engine)->Step();
  ASSERT_TRUE(done[0] && done[1]);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i], h.ref->Greedy(prompts[i], kNew)) << "request " << i;
  }
}

TEST_P(DeepseekVsReference, EngineGreedyIdsEqualTheTwins) {
  EngineGreedy(spec(), 31 + GetParam(), /*two_workers=*/false);
}

TEST_P(DeepseekVsReference, EngineGreedyThroughTwoWorkersEqualsTheTwins) {
  EngineGreedy(spec(), 41 + GetParam(), /*two_workers=*/true);
}

INSTANTIATE_TEST_SUITE_P(Configs, DeepseekVsReference, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param == 0 ? "DeepseekV3" : "KimiK2"; });

// mxserve-make-model's presets write the hub layout the twin reads, with experts exact in MXFP4:
// the model (experts quantized at load) matches the twin built from the preset's numbers.
TEST(DeepseekV3Model, MakeModelPresetsMatchTheTwin) {
  for (const std::string preset : {"deepseek-tiny", "kimi-k2-tiny"}) {
    SCOPED_TRACE(preset);
    TempDir dir;
    make_model::MakeModelOptions mo;
    mo.preset = preset;
    mo.out_dir = dir.path();
    mo.seed = 5;
    mo.threads = 1;
    ASSERT_TRUE(make_model::MakeModel(mo).ok());
    auto cfg = ModelConfig::Load(dir.path());
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    TinyDsSpec s;  // the preset's numbers (tools/make_model/model_presets.cc), for the twin
    s.model_type = cfg->model_type;
    s.layers = 3;
    s.first_dense = 1;
    s.hidden = 64;
    s.dense_inter = 96;
    s.moe_inter = 32;
    s.experts = 8;
    s.top_k = 3;
    s.n_shared = 1;
    s.heads = 4;
    s.kv_lora = 32;
    s.nope = 16;
    s.rope = 8;
    s.v = 16;
    s.vocab = cfg->vocab_size;
    s.rms_norm_eps = 1e-6;
    s.original_max_position = 128;
    if (preset == "deepseek-tiny") {
      s.q_lora = 32;
      s.n_group = 4;
      s.topk_group = 2;
      s.rope_theta = 10000.0;
      s.factor = 4.0;
      s.routed_scaling = 2.5;
    } else {
      EXPECT_EQ(cfg->model_type, "kimi_k2");
      s.q_lora = 0;
      s.n_group = 1;
      s.topk_group = 1;
      s.rope_theta = 50000.0;
      s.factor = 32.0;
      s.beta_fast = s.beta_slow = 1.0;
      s.routed_scaling = 2.827;
    }
    auto ck = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ck.ok()) << ck.status();
    auto pool = std::make_shared<ThreadPool>(2);
    auto router = MakeInProcessRouter(**ck, *cfg, pool);
    ASSERT_TRUE(router.ok()) << router.status();
    auto m = CreateCausalLM(*cfg, **ck, router->get(), pool.get());
    ASSERT_TRUE(m.ok()) << m.status();
    auto r = CpuModelRunner::Create(std::move(*m), 48, 4, 64);
    ASSERT_TRUE(r.ok()) << r.status();
    auto ref = ReferenceDeepseek::Load(s, **ck);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const std::vector<int32_t> toks = Tokens(24, 900, 13);
    const auto want = ref->Logits(toks);
    SequenceChunk ch;
    ch.seq_id = 1;
    ch.tokens = toks;
    ch.block_table = Blocks(0, 6);
    ch.all_logits = true;
    auto out = (*r)->Run(ForwardBatch{{ch}});
    ASSERT_TRUE(out.ok()) << out.status();
    for (int t = 0; t < 24; ++t) EXPECT_LE(RelL2D(Row(*out, t), want[t]), kMaxRelL2) << "row " << t;
  }
}

TEST(DeepseekV3Config, ReadsTheFamilysFields) {
  auto a = ModelConfig::FromJsonText(TinyDsConfigJson(SpecA()));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(a->q_lora_rank, 24);
  EXPECT_EQ(a->intermediate_size, 32);        // per routed expert
  EXPECT_EQ(a->dense_intermediate_size, 48);
  EXPECT_EQ(a->head_dim, 8);                  // qk_rope_head_dim
  EXPECT_EQ(a->n_group, 4);
  EXPECT_EQ(a->rope_scaling.mscale_all_dim, 1.0);
  EXPECT_STREQ(ExpertActivationName(*a), "swiglu");
  auto b = ModelConfig::FromJsonText(TinyDsConfigJson(SpecB()));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->model_type, "kimi_k2");
  EXPECT_EQ(b->q_lora_rank, 0);
  EXPECT_TRUE(b->IsMoeLayer(2));
  EXPECT_FALSE(b->IsMoeLayer(1));
}

TEST(DeepseekV3Config, ErrorsNameTheField) {
  auto with = [](const char* key, nlohmann::json value) {
    nlohmann::json j = nlohmann::json::parse(TinyDsConfigJson(SpecA()));
    if (value.is_discarded()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
    return ModelConfig::FromJsonText(j.dump()).status();
  };
  const nlohmann::json drop = nlohmann::json::value_t::discarded;
  const std::vector<std::pair<absl::Status, std::string>> cases = {
      {with("scoring_func", "softmax"), "scoring_func"},
      {with("topk_method", "greedy"), "topk_method"},
      {with("q_lora_rank", drop), "q_lora_rank"},
      {with("kv_lora_rank", drop), "kv_lora_rank"},
      {with("n_group", 3), "n_group"},
      {with("topk_group", 5), "topk_group"},
      {with("num_experts_per_tok", 5), "num_experts_per_tok"},  // 2 groups of 2 kept
      {with("qk_rope_head_dim", 7), "qk_rope_head_dim"},
      {with("moe_intermediate_size", 40), "moe_intermediate_size"},
      {with("attention_bias", true), "attention_bias"},
      {with("moe_layer_freq", 2), "moe_layer_freq"},
      {with("quantization_config", nlohmann::json::object({{"quant_method", "fp8"}})), "quantization_config"},
      {with("architectures", nlohmann::json::array({"GptOssForCausalLM"})), "architectures"},
  };
  for (const auto& [st, field] : cases) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field << ": " << st;
    EXPECT_NE(st.message().find("'" + field + "'"), std::string::npos) << st;
  }
}

TEST(DeepseekV3Model, MissingTensorIsNamed) {
  TempDir dir;
  TinyDsSpec spec = SpecA();
  ASSERT_TRUE(WriteTinyDeepseek(dir.path(), spec, 1).ok());
  spec.q_lora = 0;  // config says plain q_proj; the checkpoint has q_a/q_b
  std::ofstream(dir.path() + "/config.json") << TinyDsConfigJson(spec);
  auto cfg = ModelConfig::Load(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto ck = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok());
  auto pool = std::make_shared<ThreadPool>(1);
  auto router = MakeInProcessRouter(**ck, *cfg, pool);
  ASSERT_TRUE(router.ok()) << router.status();
  auto m = CreateCausalLM(*cfg, **ck, router->get(), pool.get());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.layers.0.self_attn.q_proj.weight"), std::string::npos)
      << m.status();
}

TEST(DeepseekV3Model, ExpertTensorErrorsAreNamed) {
  TempDir dir;
  TinyDsSpec spec = SpecA();
  spec.moe_inter = 64;  // config and checkpoint disagree on the routed experts' width
  ASSERT_TRUE(WriteTinyDeepseek(dir.path(), SpecA(), 1).ok());
  std::ofstream(dir.path() + "/config.json") << TinyDsConfigJson(spec);
  auto cfg = ModelConfig::Load(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto ck = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok());
  auto router = MakeInProcessRouter(**ck, *cfg, std::make_shared<ThreadPool>(1));
  ASSERT_FALSE(router.ok());
  EXPECT_NE(router.status().message().find("model.layers.1.mlp.experts.0.gate_proj.weight"),
            std::string::npos)
      << router.status();
}

}  // namespace
}  // namespace mxserve::testing
