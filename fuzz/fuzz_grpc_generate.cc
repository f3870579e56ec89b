// libFuzzer target: the gRPC door's request parsing (coordinator/frontends/grpc_generate.cc)
// that mxserve.v1.Inference/Generate runs on every call: the input is a serialized
// GenerateRequest, parsed and checked against the tiny model's real tokenizer and the harmony
// chat template. Any accepted request must satisfy the engine's contract (docs/FUZZING.md).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "coordinator/frontends/grpc_generate.h"
#include "coordinator/frontends/openai_api.h"
#include "fuzz/serving_env.h"
#include "mxserve/v1/inference.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mxserve::fuzz::Env* env = mxserve::fuzz::MakeEnv();
  mxserve::v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto r = mxserve::frontends::ParseGenerate(req, env->ctx);
  if (!r.ok()) return 0;
  mxserve::fuzz::CheckGenerate(r->generate, env->ctx);
  // n choices: at least one, at most kMaxChoices; a chat request's template stop ids are kept.
  if (r->n < 1 || r->n > mxserve::frontends::kMaxChoices) abort();
  if (r->chat && r->generate.params.stop_token_ids.empty()) abort();
  return 0;
}
