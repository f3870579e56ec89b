// What the request-parsing fuzz targets share (fuzz_openai_api.cc, fuzz_grpc_generate.cc): the
// tiny model's real tokenizer and the harmony chat template behind a ServingContext, and the
// engine's contract that every accepted request must satisfy (coordinator/engine/request.h);
// a breach aborts, which libFuzzer reports as a finding.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/request.h"
#include "coordinator/frontends/serving_context.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace mxserve::fuzz {

struct Env {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatTemplate> chat;
  ServingContext ctx;
};

inline Env* MakeEnv() {
  auto files = MakeTinyTokenizer(200);
  if (!files.ok()) abort();
  auto env = new Env();
  auto tok = Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
  if (!tok.ok()) abort();
  env->tok = *std::move(tok);
  auto chat = ChatTemplate::ForModel("gpt_oss", env->tok.get());
  if (!chat.ok()) abort();
  env->chat = *std::move(chat);
  env->ctx.model_id = "tiny";
  env->ctx.max_model_len = 256;
  env->ctx.max_prompt_tokens = 200;
  env->ctx.tokenizer = env->tok.get();
  env->ctx.chat_template = env->chat.get();
  return env;
}

inline void CheckGenerate(const GenerateRequest& g, const ServingContext& ctx) {
  const auto& p = g.params;
  // What the engine relies on (coordinator/engine/request.h).
  if (g.prompt_tokens.empty() || g.request_id.empty()) abort();
  if (static_cast<int>(g.prompt_tokens.size()) > ctx.max_prompt_tokens) abort();
  for (int32_t id : g.prompt_tokens) {
    if (id < 0 || id >= ctx.tokenizer->vocab_size()) abort();
  }
  if (p.max_tokens < 1 ||
      static_cast<int64_t>(g.prompt_tokens.size()) + p.max_tokens > ctx.max_model_len) {
    abort();
  }
  if (!(p.temperature >= 0 && p.temperature <= 2) || !(p.top_p > 0 && p.top_p <= 1) ||
      p.top_k < 0 || p.logprobs < -1 || p.logprobs > 20) {
    abort();
  }
  // The logits-processing fields, in the ranges Engine::Submit accepts.
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2) ||
      !(p.frequency_penalty >= -2 && p.frequency_penalty <= 2) ||
      !(p.repetition_penalty > 0 && p.repetition_penalty <= 2) ||
      !(p.min_p >= 0 && p.min_p <= 1) || p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    abort();
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= ctx.tokenizer->vocab_size() || !(bias >= -100 && bias <= 100)) abort();
  }
}

}  // namespace mxserve::fuzz
