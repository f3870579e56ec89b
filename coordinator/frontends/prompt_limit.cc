#include "coordinator/frontends/prompt_limit.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/frontends/api_error.h"

namespace mxserve::frontends {

int64_t PromptByteLimit(const ServingContext& ctx) {
  if (!ctx.tokenizer) return 0;
  int64_t tokens = ctx.max_model_len;
  if (ctx.max_prompt_tokens > 0) tokens = std::min<int64_t>(tokens, ctx.max_prompt_tokens);
  if (tokens <= 0) return 0;
  size_t longest = 1;
  const int vocab = ctx.tokenizer->vocab_size();
  for (int32_t id = 0; id < vocab; ++id) {
    const int32_t one[1] = {id};
    absl::StatusOr<std::string> bytes = ctx.tokenizer->DecodeBytes(one, /*skip_special=*/false);
    if (bytes.ok()) longest = std::max(longest, bytes->size());
  }
  return tokens * static_cast<int64_t>(longest);
}

absl::Status CheckPromptBytes(size_t bytes, const ServingContext& ctx, absl::string_view param) {
  if (ctx.max_prompt_bytes <= 0 || bytes <= static_cast<size_t>(ctx.max_prompt_bytes)) {
    return absl::OkStatus();
  }
  return InvalidParam(param,
                      absl::StrCat("'", param, "' is ", bytes, " bytes, more than this server's "
                                   "limit of ", ctx.max_prompt_bytes, " bytes (more tokens than "
                                   "the model takes)"),
                      "prompt_too_long");
}

}  // namespace mxserve::frontends
