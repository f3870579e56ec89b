// The output parsers by their vLLM names (--tool-call-parser, --reasoning-parser), their
// defaults from the model type, and the per-request parser they make. This is the one place that
// maps a model type to its output format family.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

// Makes the parser for one chat turn rendered with the given options; empty = the chat
// template's own parser (harmony).
using OutputParserFactory =
    std::function<std::unique_ptr<ChatOutputParser>(const ChatRenderOptions&)>;

struct OutputParserChoice {
  std::string tool_call_parser;  // "" = from the model type
  std::string reasoning_parser;  // "" = from the model type; "none" = no reasoning parser
};

// InvalidArgument naming the flag and the accepted values for an unknown name, a name that does
// not fit the model (harmony for a Kimi model), or a tokenizer without the parser's tokens.
// `resolved`, when given, receives the names in effect.
absl::StatusOr<OutputParserFactory> MakeOutputParserFactory(const OutputParserChoice& choice,
                                                            const std::string& model_type,
                                                            const Tokenizer* tokenizer,
                                                            OutputParserChoice* resolved = nullptr);

}  // namespace mxserve
