#include "coordinator/grammar/grammar_matcher.h"

namespace mxserve::grammar {

bool GrammarMatcher::Accept(std::string_view bytes) {
  const int32_t next = grammar_->Advance(state_, bytes);
  if (next == PushdownAutomaton::kDead) return false;
  state_ = next;
  return true;
}

}  // namespace mxserve::grammar
