// libFuzzer target: the OpenAI request validation path the HTTP door runs on every body
// (chat completions, completions, tokenize, detokenize), with the tiny model's real tokenizer
// and the harmony chat template. The first byte picks the endpoint; the rest is the body.
// Any accepted request must satisfy the engine's contract (docs/FUZZING.md).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "coordinator/frontends/openai_api.h"
#include "fuzz/serving_env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mxserve::fuzz::CheckGenerate;
  static mxserve::fuzz::Env* env = mxserve::fuzz::MakeEnv();
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
