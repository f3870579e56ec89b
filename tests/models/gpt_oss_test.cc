// gpt-oss dense path: our fp32 model vs a float64 twin, KV-cache paths vs full recompute,
// batching, sliding window, and bad checkpoints/batches.
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

#include "coordinator/models/cpu_model_runner.h"
#include "coordinator/models/model.h"
#include "core/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/models/tiny_gpt_oss.h"

namespace mxserve::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kBlockSize = 4;
constexpr int kNumBlocks = 96;
constexpr int kMaxModelLen = 128;
// Two fp32 runs of the same math whose only difference is summation order (sgemm blocking for
// another row count): a few fp32 ulps of the logits. Real bugs (a wrong window, a stale cache
// slot) move logits by 1e-2 and more.
constexpr double kSameMath = 5e-6;

// A tiny model on disk plus everything needed to run it.
struct Harness {
  TempDir tmp;
  std::string dir;
  ModelConfig config;
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<ReferenceGptOss> ref;
  std::unique_ptr<NaiveMoeExecutor> moe;
  std::unique_ptr<ThreadPool> pool;

  static std::unique_ptr<Harness> Make(const TinySpec& spec, uint32_t seed) {
    auto h = std::make_unique<Harness>();
    h->dir = h->tmp.path();
    EXPECT_FALSE(h->dir.empty());
    absl::Status st = WriteTinyModel(h->dir, spec, seed);
    EXPECT_TRUE(st.ok()) << st;
    auto cfg = ModelConfig::Load(h->dir);
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    if (!cfg.ok()) return nullptr;
    h->config = *cfg;
    auto ck = Checkpoint::Open(h->dir);
    EXPECT_TRUE(ck.ok()) << ck.status();
    if (!ck.ok()) return nullptr;
    h->ckpt = std::move(*ck);
    auto ref = ReferenceGptOss::Load(h->config, *h->ckpt);
    EXPECT_TRUE(ref.ok()) << ref.status();
    if (!ref.ok()) return nullptr;
    h->ref = std::make_unique<ReferenceGptOss>(std::move(*ref));
    h->moe = std::make_unique<NaiveMoeExecutor>(h->ref.get());
    h->pool = std::make_unique<ThreadPool>(2);
    return h;
  }

  std::unique_ptr<CpuModelRunner> Runner() {
    auto m = CreateCausalLM(config, *ckpt, moe.get(), pool.get());
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return nullptr;
    auto r = CpuModelRunner::Create(std::move(*m), kNumBlocks, kBlockSize, kMaxModelLen);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
};

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Hands out shuffled block ids so that tables are not contiguous.
class Blocks {
 public:
  explicit Blocks(uint32_t seed) : ids_(kNumBlocks) {
    std::iota(ids_.begin(), ids_.end(), 0);
    std::shuffle(ids_.begin(), ids_.end(), std::mt19937(seed));
  }
  std::vector<int32_t> Take(int positions) {
    std::vector<int32_t> t;
    for (int i = 0; i < (positions + kBlockSize - 1) / kBlockSize; ++i) t.push_back(ids_[next_++]);
    return t;
  }

 private:
  std::vector<int32_t> ids_;
  int next_ = 0;
};

SequenceChunk Chunk(int64_t seq, const std::vector<int32_t>& all, int start, int n,
                    const std::vector<int32_t>& table, bool all_logits) {
  SequenceChunk c;
  c.seq_id = seq;
  c.tokens.assign(all.begin() + start, all.begin() + start + n);
  c.start_pos = start;
  c.block_table = table;
  c.all_logits = all_logits;
  return c;
}

std::vector<double> Row(const ForwardOutput& out, int row) {
  return std::vector<double>(out.logits.begin() + static_cast<size_t>(row) * out.vocab_size,
                             out.logits.begin() + static_cast<size_t>(row + 1) * out.vocab_size);
}

int Argmax(const std::vector<double>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Runs one prompt in one shot (all logits) on a fresh runner.
std::vector<std::vector<double>> OneShot(Harness& h, const std::vector<int32_t>& tokens) {
  auto runner = h.Runner();
  Blocks blocks(7);
  ForwardBatch b;
  b.chunks.push_back(Chunk(1, tokens, 0, static_cast<int>(tokens.size()),
                           blocks.Take(static_cast<int>(tokens.size())), true));
  auto out = runner->Run(b);
  EXPECT_TRUE(out.ok()) << out.status();
  std::vector<std::vector<double>> rows;
  if (!out.ok()) return rows;
  for (size_t t = 0; t < tokens.size(); ++t) rows.push_back(Row(*out, static_cast<int>(t)));
  return rows;
}

std::vector<double> Flatten(const std::vector<std::vector<double>>& rows) {
  std::vector<double> f;
  for (const auto& r : rows) f.insert(f.end(), r.begin(), r.end());
  return f;
}

TinySpec SpecWithTopK(int experts, int top_k) {
  TinySpec s;
  s.experts = experts;
  s.top_k = top_k;
  return s;
}

// (a) logits of the fp32 model against the float64 twin, for top-k 2, 3 and 4, with a prompt
// longer than the sliding window (5).
class GptOssVsReference : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(GptOssVsReference, LogitsMatchFloat64) {
  const auto [experts, top_k] = GetParam();
  auto h = Harness::Make(SpecWithTopK(experts, top_k), 1000 + top_k);
  ASSERT_NE(h, nullptr);
  const auto tokens = RandomTokens(19, h->config.vocab_size, 11 + top_k);
  const auto ours = OneShot(*h, tokens);
  const auto want = h->ref->Logits(tokens);
  ASSERT_EQ(ours.size(), want.size());
  const double err = RelL2(Flatten(ours), Flatten(want));
  EXPECT_LE(err, 1e-5);
  RecordProperty("rel_l2_vs_float64", std::to_string(err));
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_LE(RelL2(ours[t], want[t]), 1e-5) << "position " << t;
    EXPECT_EQ(Argmax(ours[t]), Argmax(want[t])) << "position " << t;
  }
  EXPECT_GT(h->moe->calls(), 0);
}

INSTANTIATE_TEST_SUITE_P(TopK, GptOssVsReference,
                         ::testing::Values(std::make_pair(4, 2), std::make_pair(8, 3),
                                           std::make_pair(6, 4)));

// Without GQA (kv heads = heads), with truncate=true YaRN and all-full layers: still the twin.
TEST(GptOssModel, OtherShapesMatchFloat64) {
  TinySpec s;
  s.heads = 4;
  s.kv_heads = 4;
  s.layers = 2;
  s.layer_types = {"full_attention", "sliding_attention"};
  s.truncate = true;
  s.sliding_window = 3;
  auto h = Harness::Make(s, 77);
  ASSERT_NE(h, nullptr);
  const auto tokens = RandomTokens(9, h->config.vocab_size, 5);
  EXPECT_LE(RelL2(Flatten(OneShot(*h, tokens)), Flatten(h->ref->Logits(tokens))), 1e-5);
}

// (b) prefill then one token at a time through the KV cache == full recompute.
TEST(GptOssModel, IncrementalDecodeMatchesFullRecompute) {
  auto h = Harness::Make(TinySpec{}, 21);
  ASSERT_NE(h, nullptr);
  const auto tokens = RandomTokens(18, h->config.vocab_size, 3);
  const auto full = OneShot(*h, tokens);
  const auto want = h->ref->Logits(tokens);
  auto runner = h->Runner();
  Blocks blocks(99);
  const auto table = blocks.Take(static_cast<int>(tokens.size()));
  const int prefill = 6;
  ForwardBatch b;
  b.chunks.push_back(Chunk(5, tokens, 0, prefill, table, false));
  auto out = runner->Run(b);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->row_offset, std::vector<int>({0}));
  ASSERT_EQ(out->logits.size(), static_cast<size_t>(h->config.vocab_size));
  EXPECT_LE(RelL2(Row(*out, 0), full[prefill - 1]), kSameMath);
  for (int p = prefill; p < static_cast<int>(tokens.size()); ++p) {
    ForwardBatch d;
    d.chunks.push_back(Chunk(5, tokens, p, 1, table, false));
    auto o = runner->Run(d);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_LE(RelL2(Row(*o, 0), full[p]), kSameMath) << "position " << p;
    EXPECT_LE(RelL2(Row(*o, 0), want[p]), 1e-5) << "position " << p;
    EXPECT_EQ(Argmax(Row(*o, 0)), Argmax(want[p])) << "position " << p;
  }
}

// (c) a prompt split into 3 chunks over 3 steps == one shot.
TEST(GptOssModel, ChunkedPrefillMatchesOneShot) {
  auto h = Harness::Make(TinySpec{}, 31);
  ASSERT_NE(h, nullptr);
  const auto tokens = RandomTokens(17, h->config.vocab_size, 8);
  const auto full = OneShot(*h, tokens);
  auto runner = h->Runner();
  Blocks blocks(5);
  const auto table = blocks.Take(17);
  std::vector<std::vector<double>> rows;
  int start = 0;
  for (int n : {5, 7, 5}) {
    ForwardBatch b;
    // Each step's table covers only what it needs so far, as the scheduler would hand out.
    std::vector<int32_t> t(table.begin(), table.begin() + (start + n + kBlockSize - 1) / kBlockSize);
    b.chunks.push_back(Chunk(9, tokens, start, n, t, true));
    auto out = runner->Run(b);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->logits.size(), static_cast<size_t>(n) * h->config.vocab_size);
    for (int r = 0; r < n; ++r) rows.push_back(Row(*out, r));
    start += n;
  }
  ASSERT_EQ(rows.size(), full.size());
  for (size_t p = 0; p < rows.size(); ++p) EXPECT_LE(RelL2(rows[p], full[p]), kSameMath) << p;
}

// (d) several sequences of different lengths and positions in one Forward == each alone.
TEST(GptOssModel, BatchMatchesEachSequenceAlone) {
  auto h = Harness::Make(TinySpec{}, 41);
  ASSERT_NE(h, nullptr);
  const int V = h->config.vocab_size;
  const auto a = RandomTokens(12, V, 100);  // prefilled earlier, decodes its 12th token
  const auto b = RandomTokens(9, V, 101);   // fresh prompt, all logits
  const auto c = RandomTokens(15, V, 102);  // second prefill chunk [6, 15)
  const auto d = RandomTokens(1, V, 103);   // a one-token prompt
  auto runner = h->Runner();
  Blocks blocks(3);
  const auto ta = blocks.Take(12), tb = blocks.Take(9), tc = blocks.Take(15), td = blocks.Take(1);
  {
    ForwardBatch pre;
    pre.chunks.push_back(Chunk(1, a, 0, 11, ta, false));
    pre.chunks.push_back(Chunk(3, c, 0, 6, tc, false));
    ASSERT_TRUE(runner->Run(pre).ok());
  }
  ForwardBatch step;
  step.chunks.push_back(Chunk(1, a, 11, 1, ta, false));
  step.chunks.push_back(Chunk(2, b, 0, 9, tb, true));
  step.chunks.push_back(Chunk(3, c, 6, 9, tc, false));
  step.chunks.push_back(Chunk(4, d, 0, 1, td, true));
  auto out = runner->Run(step);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->row_offset, std::vector<int>({0, 1, 10, 11}));
  ASSERT_EQ(out->logits.size(), static_cast<size_t>(12) * V);
  const auto fa = OneShot(*h, a), fb = OneShot(*h, b), fc = OneShot(*h, c), fd = OneShot(*h, d);
  EXPECT_LE(RelL2(Row(*out, 0), fa[11]), kSameMath);
  for (int r = 0; r < 9; ++r) EXPECT_LE(RelL2(Row(*out, 1 + r), fb[r]), kSameMath) << r;
  EXPECT_LE(RelL2(Row(*out, 10), fc[14]), kSameMath);
  EXPECT_LE(RelL2(Row(*out, 11), fd[0]), kSameMath);
  EXPECT_EQ(Argmax(Row(*out, 10)), Argmax(h->ref->Logits(c)[14]));
}

// (e) a prompt several windows long, then decoding past it: the window really cuts (a model
// without the window would differ) and we still equal the twin.
TEST(GptOssModel, PromptLongerThanSlidingWindow) {
  TinySpec s;
  s.sliding_window = 4;
  auto h = Harness::Make(s, 51);
  ASSERT_NE(h, nullptr);
  const auto tokens = RandomTokens(40, h->config.vocab_size, 52);
  auto runner = h->Runner();
  Blocks blocks(11);
  const auto table = blocks.Take(40);
  ForwardBatch b;
  b.chunks.push_back(Chunk(1, tokens, 0, 30, table, true));
  auto out = runner->Run(b);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<std::vector<double>> rows;
  for (int r = 0; r < 30; ++r) rows.push_back(Row(*out, r));
  for (int p = 30; p < 40; ++p) {
    ForwardBatch d;
    d.chunks.push_back(Chunk(1, tokens, p, 1, table, false));
    auto o = runner->Run(d);
    ASSERT_TRUE(o.ok()) << o.status();
    rows.push_back(Row(*o, 0));
  }
  const auto want = h->ref->Logits(tokens);
  EXPECT_LE(RelL2(Flatten(rows), Flatten(want)), 1e-5);
  for (int p = 0; p < 40; ++p) EXPECT_EQ(Argmax(rows[p]), Argmax(want[p])) << p;

  // Same checkpoint read as if every layer were full: different logits beyond the window.
  ModelConfig full = h->config;
  full.layer_types.assign(full.num_hidden_layers, "full_attention");
  auto m = CreateCausalLM(full, *h->ckpt, h->moe.get(), nullptr);
  ASSERT_TRUE(m.ok()) << m.status();
  auto r2 = CpuModelRunner::Create(std::move(*m), kNumBlocks, kBlockSize, kMaxModelLen);
  ASSERT_TRUE(r2.ok());
  ForwardBatch fb;
  fb.chunks.push_back(Chunk(1, tokens, 0, 40, table, true));
  auto o2 = (*r2)->Run(fb);
  ASSERT_TRUE(o2.ok());
  EXPECT_LE(RelL2(Row(*o2, 2), want[2]), 1e-5);   // inside the window: same
  EXPECT_GT(RelL2(Row(*o2, 39), want[39]), 1e-3);  // beyond it: not
}

// (g) bad checkpoints name the tensor; unknown architectures are named.
struct BadTensorCase {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

void PrintTo(const BadTensorCase& c, std::ostream* os) {
  *os << c.name << " as " << DTypeName(c.dtype).data();
}

class BadCheckpoint : public ::testing::TestWithParam<BadTensorCase> {};

TEST_P(BadCheckpoint, ErrorNamesTensor) {
  const BadTensorCase& bc = GetParam();
  TinySpec s;
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_TRUE(WriteTinyModel(dir, s, 61, {{bc.name, bc.dtype, bc.shape}}).ok());
  auto cfg = ModelConfig::Load(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status();
  NaiveMoeExecutor moe(nullptr);
  auto m = CreateCausalLM(*cfg, **ck, &moe, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(bc.name));
}

INSTANTIATE_TEST_SUITE_P(
    Tensors, BadCheckpoint,
    ::testing::Values(
        BadTensorCase{"model.layers.1.self_attn.q_proj.weight", DType::kBF16, {96, 63}},
        BadTensorCase{"model.layers.2.self_attn.k_proj.bias", DType::kBF16, {33}},
        BadTensorCase{"model.layers.0.self_attn.sinks", DType::kF16, {6}},
        BadTensorCase{"model.layers.3.mlp.router.weight", DType::kU8, {8, 64}},
        BadTensorCase{"model.layers.0.input_layernorm.weight", DType::kI32, {64}},
        BadTensorCase{"lm_head.weight", DType::kBF16, {96, 64}},
        BadTensorCase{"model.embed_tokens.weight", DType::kBF16, {97, 65}}));

TEST(GptOssModel, MissingTensorIsNamed) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  TinySpec s;
  ASSERT_TRUE(WriteTinyModel(dir, s, 62).ok());
  auto cfg = ModelConfig::Load(dir);
  ASSERT_TRUE(cfg.ok());
  cfg->num_hidden_layers = 5;  // layer 4 is not in the checkpoint
  cfg->layer_types.push_back("full_attention");
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok());
  NaiveMoeExecutor moe(nullptr);
  auto m = CreateCausalLM(*cfg, **ck, &moe, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.layers.4."));
}

TEST(GptOssModel, UnknownArchitectureIsNamed) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_TRUE(WriteTinyModel(dir, TinySpec{}, 63).ok());
  auto cfg = ModelConfig::Load(dir);
  ASSERT_TRUE(cfg.ok());
  cfg->architecture = "MysteryForCausalLM";
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok());
  NaiveMoeExecutor moe(nullptr);
  auto m = CreateCausalLM(*cfg, **ck, &moe, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("MysteryForCausalLM"));
}

// (g) bad batches are InvalidArgument naming the chunk, and leave the runner usable.
TEST(CpuModelRunner, RejectsBadBatches) {
  auto h = Harness::Make(TinySpec{}, 71);
  ASSERT_NE(h, nullptr);
  auto runner = h->Runner();
  const int V = h->config.vocab_size;
  const auto tokens = RandomTokens(10, V, 1);
  Blocks blocks(1);
  const auto table = blocks.Take(10);
  auto expect_bad = [&](ForwardBatch b, const std::string& what) {
    auto out = runner->Run(b);
    ASSERT_FALSE(out.ok()) << what;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("chunk 1")) << what;
  };
  const SequenceChunk good = Chunk(1, tokens, 0, 10, table, false);
  {
    SequenceChunk c = Chunk(2, tokens, 0, 10, table, false);
    c.tokens[3] = V;
    expect_bad(ForwardBatch{{good, c}}, "token == vocab");
  }
  {
    SequenceChunk c = Chunk(2, tokens, 0, 10, table, false);
    c.tokens[0] = -1;
    expect_bad(ForwardBatch{{good, c}}, "negative token");
  }
  {
    SequenceChunk c = Chunk(2, tokens, 0, 10, table, false);
    c.block_table.resize(2);  // 10 positions need 3 blocks of 4
    expect_bad(ForwardBatch{{good, c}}, "short block table");
  }
  {
    SequenceChunk c = Chunk(2, tokens, 0, 10, table, false);
    c.block_table[1] = kNumBlocks;
    expect_bad(ForwardBatch{{good, c}}, "block id out of range");
  }
  {
    SequenceChunk c = Chunk(2, tokens, 0, 1, table, false);
    c.start_pos = kMaxModelLen;
    c.block_table = blocks.Take(kMaxModelLen + 1);
    expect_bad(ForwardBatch{{good, c}}, "position == max_model_len");
  }
  {
    SequenceChunk c = Chunk(2, tokens, 0, 10, table, false);
    c.tokens.clear();
    expect_bad(ForwardBatch{{good, c}}, "no tokens");
  }
  expect_bad(ForwardBatch{{good, good}}, "same seq twice");
  {
    SequenceChunk c = Chunk(2, tokens, 0, 10, blocks.Take(10), false);
    c.block_table[2] = table[1];  // positions 8..9 would land on seq 1's positions 4..5
    expect_bad(ForwardBatch{{good, c}}, "shared KV slot");
  }
  {
    ForwardBatch empty;
    auto out = runner->Run(empty);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(out->logits.empty());
    EXPECT_TRUE(out->row_offset.empty());
  }
  auto out = runner->Run(ForwardBatch{{good}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->vocab_size, V);
}

TEST(CpuModelRunner, CreateChecksArguments) {
  auto h = Harness::Make(TinySpec{}, 81);
  ASSERT_NE(h, nullptr);
  auto make = [&](int blocks, int bs, int len) {
    auto m = CreateCausalLM(h->config, *h->ckpt, h->moe.get(), nullptr);
    EXPECT_TRUE(m.ok());
    return CpuModelRunner::Create(std::move(*m), blocks, bs, len).status();
  };
  EXPECT_FALSE(make(0, 4, 64).ok());
  EXPECT_FALSE(make(8, 0, 64).ok());
  EXPECT_FALSE(make(8, 4, 0).ok());
  EXPECT_FALSE(make(8, 4, static_cast<int>(h->config.max_position_embeddings) + 1).ok());
  EXPECT_TRUE(make(8, 4, 64).ok());
}

}  // namespace
}  // namespace mxserve::testing
