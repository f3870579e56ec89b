// The byte length past which a prompt cannot fit the model, checked before it is tokenized (a
// multi-megabyte prompt takes seconds to tokenize only to be refused for its token count).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/frontends/serving_context.h"

namespace mxserve::frontends {

// The longest token's byte length times the most prompt tokens the server takes
// (max_prompt_tokens if set, else max_model_len): no prompt longer than this in bytes can
// tokenize to few enough tokens, so refusing it refuses nothing that could run. 0 without a
// tokenizer. Decodes every id once (milliseconds for a 200k vocabulary).
int64_t PromptByteLimit(const ServingContext& ctx);

// InvalidArgument naming `param` (HTTP 400, code "prompt_too_long") when `bytes` is past
// ctx.max_prompt_bytes (> 0); OK otherwise.
absl::Status CheckPromptBytes(size_t bytes, const ServingContext& ctx, absl::string_view param);

}  // namespace mxserve::frontends
