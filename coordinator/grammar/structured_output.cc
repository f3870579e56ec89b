#include "coordinator/grammar/structured_output.h"

#include <utility>

#include "core/status.h"
#include "coordinator/grammar/json_schema_compiler.h"
#include "coordinator/grammar/regex_compiler.h"

namespace mxserve::grammar {

absl::StatusOr<std::shared_ptr<CompiledGrammar>> CompileStructuredOutput(
    const StructuredOutputSpec& spec) {
  auto g = std::make_unique<Grammar>();
  std::string description;
  switch (spec.kind) {
    case StructuredOutputSpec::Kind::kJsonObject:
      g->set_root(CompileAnyJsonObjectRule(g.get()));
      description = "json_object";
      break;
    case StructuredOutputSpec::Kind::kJsonSchema: {
      ASSIGN_OR_RETURN(int32_t root, CompileJsonSchemaRule(spec.schema, g.get()));
      g->set_root(root);
      description = "json_schema";
      break;
    }
    case StructuredOutputSpec::Kind::kRegex: {
      ASSIGN_OR_RETURN(int32_t root, CompileRegexRule(spec.regex, "regex", g.get()));
      g->set_root(root);
      description = "regex";
      break;
    }
    case StructuredOutputSpec::Kind::kChoice: {
      if (spec.choices.empty()) return absl::InvalidArgumentError("choice: must not be empty");
      std::vector<Frag> options;
      for (const std::string& c : spec.choices) options.push_back(g->Literal(c));
      const int32_t root = g->NewRule("choice");
      g->SetBody(root, g->Alt(std::move(options)));
      g->set_root(root);
      description = "choice";
      break;
    }
  }
  return std::make_shared<CompiledGrammar>(std::move(g), std::move(description));
}

}  // namespace mxserve::grammar
