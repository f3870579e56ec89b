// libFuzzer target: the OpenAI request validation path the HTTP door runs on every body
// (chat completions, completions, tokenize, detokenize), with the tiny model's real tokenizer
// and the harmony chat template. The first byte picks the endpoint; the rest is the body.
// Any accepted request must satisfy the engine's contract (docs/FUZZING.md).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "coordinator/chat/chat_template.h"
#include "coordinator/frontends/openai_api.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace {

struct Env {
  std::unique_ptr<mxserve::Tokenizer> tok;
  std::unique_ptr<mxserve::ChatTemplate> chat;
  mxserve::ServingContext ctx;
};

Env* MakeEnv() {
  auto files = mxserve::MakeTinyTokenizer(200);
  if (!files.ok()) abort();
  auto env = new Env();
  auto tok = mxserve::Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
  if (!tok.ok()) abort();
  env->tok = *std::move(tok);
  auto chat = mxserve::ChatTemplate::ForModel("gpt_oss", env->tok.get());
  if (!chat.ok()) abort();
  env->chat = *std::move(chat);
  env->ctx.model_id = "tiny";
  env->ctx.max_model_len = 256;
  env->ctx.max_prompt_tokens = 200;
  env->ctx.tokenizer = env->tok.get();
  env->ctx.chat_template = env->chat.get();
  return env;
}

void CheckGenerate(const mxserve::GenerateRequest& g, const mxserve::ServingContext& ctx) {
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
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Env* env = MakeEnv();
  if (size < 1) return 0;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto r = mxserve::frontends::ParseChatCompletionRequest(body, env->ctx);
      if (r.ok()) CheckGenerate(r->generate, env->ctx);
      break;
    }
    case 1: {
      auto r = mxserve::frontends::ParseCompletionRequest(body, env->ctx);
      if (r.ok()) CheckGenerate(r->generate, env->ctx);
      break;
    }
    case 2: {
      auto r = mxserve::frontends::ParseTokenizeRequest(body, env->ctx);
      if (r.ok()) {
        for (int32_t id : *r) {
          if (id < 0 || id >= env->tok->vocab_size()) abort();
        }
      }
      break;
    }
    case 3: {
      auto r = mxserve::frontends::ParseDetokenizeRequest(body, env->ctx);
      if (r.ok()) (void)env->tok->Decode(*r, false);
      break;
    }
  }
  return 0;
}
