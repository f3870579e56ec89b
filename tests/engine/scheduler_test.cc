#include "coordinator/engine/scheduler.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace mxserve {
namespace {

std::shared_ptr<Sequence> Seq(int64_t id, int prompt_len, int max_tokens) {
  GenerateRequest r;
  r.request_id = "s" + std::to_string(id);
  r.prompt_tokens.assign(prompt_len, 1);
  r.params.max_tokens = max_tokens;
  r.params.temperature = 0;
  return std::make_shared<Sequence>(id, std::move(r), [](GenerationEvent) {}, nullptr);
}

// Every sampling chunk gets token 2.
std::vector<SampledChunk> Tokens(const ScheduledBatch& b) {
  std::vector<SampledChunk> s(b.seqs.size());
  for (size_t i = 0; i < s.size(); ++i) s[i].token = b.seqs[i].sample ? 2 : -1;
  return s;
}

SchedulerOptions Options(int budget, int seats) {
  SchedulerOptions o;
  o.max_num_batched_tokens = budget;
  o.max_num_seqs = seats;
  o.max_model_len = 64;
  return o;
}

TEST(SchedulerTest, OnlyTheChunkReachingTheEndSamples) {
  Scheduler s(Options(4, 4), 16, 4, {});
  auto a = Seq(1, 10, 3);
  s.Add(a);
  std::vector<int> chunk_sizes;
  std::vector<bool> samples;
  for (int step = 0; step < 10 && s.HasWork(); ++step) {
    ScheduledBatch b = s.Schedule();
    ASSERT_EQ(b.seqs.size(), 1u);
    chunk_sizes.push_back(static_cast<int>(b.forward.chunks[0].tokens.size()));
    samples.push_back(b.seqs[0].sample);
    EXPECT_GE(static_cast<int>(b.forward.chunks[0].block_table.size()) * 4,
              b.forward.chunks[0].start_pos + chunk_sizes.back());
    s.Postprocess(b, Tokens(b));
  }
  EXPECT_EQ(chunk_sizes, (std::vector<int>{4, 4, 2, 1, 1}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, true, true, true}));
  EXPECT_TRUE(a->finished());
  EXPECT_EQ(s.block_manager().num_used_blocks(), 0);
}

TEST(SchedulerTest, DecodeComesFirstThenPrefillWithinBudget) {
  Scheduler s(Options(6, 4), 32, 4, {});
  auto a = Seq(1, 3, 10), b = Seq(2, 20, 2);
  s.Add(a);
  ScheduledBatch first = s.Schedule();
  s.Postprocess(first, Tokens(first));
  s.Add(b);
  ScheduledBatch mixed = s.Schedule();
  ASSERT_EQ(mixed.seqs.size(), 2u);
  EXPECT_EQ(mixed.seqs[0].seq, a);
  EXPECT_EQ(mixed.forward.chunks[0].tokens.size(), 1u);
  EXPECT_EQ(mixed.seqs[1].seq, b);
  EXPECT_EQ(mixed.forward.chunks[1].tokens.size(), 5u);  // the rest of the budget
  EXPECT_EQ(mixed.num_batched_tokens, 6);
  EXPECT_EQ(mixed.num_decode_chunks, 1);
  EXPECT_EQ(mixed.num_prefill_chunks, 1);
}

TEST(SchedulerTest, PreemptsTheNewestAndRequeuesItFirst) {
  // 4 blocks of 4 slots. a and b each take 2 blocks with 8-token prompts; when a needs a
  // third block, b (admitted later) gives its blocks back and goes to the front of waiting.
  SchedulerOptions o = Options(32, 4);
  o.max_model_len = 16;  // what the engine derives from this pool
  // a and b have the same prompt: with prefix caching b would come straight back on a's
  // cached blocks (PrefixCacheTest covers that); here b recomputes from scratch.
  o.enable_prefix_caching = false;
  Scheduler s(o, 4, 4, {});
  auto a = Seq(1, 8, 4), b = Seq(2, 8, 4), c = Seq(3, 2, 2);
  s.Add(a);
  s.Add(b);
  ScheduledBatch prefill = s.Schedule();
  ASSERT_EQ(prefill.seqs.size(), 2u);
  s.Postprocess(prefill, Tokens(prefill));  // both hold 8 computed + 1 new token, 2 blocks
  EXPECT_EQ(s.block_manager().num_free_blocks(), 0);
  s.Add(c);
  ScheduledBatch step = s.Schedule();  // a's token at position 8 needs a third block
  EXPECT_EQ(s.num_preemptions(), 1);
  EXPECT_EQ(b->status(), SequenceStatus::kWaiting);
  EXPECT_EQ(b->num_computed_tokens(), 0);
  EXPECT_TRUE(b->block_table().empty());
  ASSERT_GE(step.seqs.size(), 1u);
  EXPECT_EQ(step.seqs[0].seq, a);
  // b is ahead of c in the queue: c is not admitted before b.
  for (const auto& sc : step.seqs) EXPECT_NE(sc.seq, c);
  s.Postprocess(step, Tokens(step));
  // Run to completion: everything finishes and the pool is whole again.
  for (int i = 0; i < 500 && s.HasWork(); ++i) {
    ScheduledBatch batch = s.Schedule();
    s.Postprocess(batch, Tokens(batch));
  }
  EXPECT_TRUE(a->finished() && b->finished() && c->finished());
  EXPECT_EQ(b->num_output_tokens(), 4);
  EXPECT_EQ(s.block_manager().num_used_blocks(), 0);
}

TEST(SchedulerTest, AbortFreesBlocksAndFailBatchFinishesWithError) {
  Scheduler s(Options(32, 4), 8, 4, {});
  auto a = Seq(1, 5, 5), b = Seq(2, 5, 5);
  s.Add(a);
  s.Add(b);
  ScheduledBatch batch = s.Schedule();
  auto aborted = s.Abort("s1");
  ASSERT_TRUE(aborted.has_value());
  EXPECT_EQ(aborted->event.finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(s.Abort("nope").has_value());
  auto failed = s.FailBatch(batch, absl::InternalError("boom"));
  ASSERT_EQ(failed.size(), 1u);  // a was already finished
  EXPECT_EQ(failed[0].seq, b);
  EXPECT_EQ(failed[0].event.finish_reason, FinishReason::kError);
  EXPECT_EQ(failed[0].event.error.message(), "boom");
  EXPECT_FALSE(s.HasWork());
  EXPECT_EQ(s.block_manager().num_used_blocks(), 0);
}

}  // namespace
}  // namespace mxserve
