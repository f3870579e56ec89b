// The tiny test tokenizer (600 ids, built in memory) and the gpt-oss harmony chat template over
// it, shared by the chat-template tests of this folder.
#pragma once

#include <memory>

#include "coordinator/chat/chat_template.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace mxserve::testing {

inline const Tokenizer& TinyTok() {
  static const Tokenizer* t = [] {
    auto f = MakeTinyTokenizer(600);
    EXPECT_TRUE(f.ok());
    auto r = Tokenizer::FromJson(f->tokenizer_json, f->tokenizer_config_json);
    EXPECT_TRUE(r.ok()) << r.status();
    return r->release();
  }();
  return *t;
}

inline std::unique_ptr<ChatTemplate> TinyHarmony() {
  auto t = ChatTemplate::ForModel("gpt_oss", &TinyTok());
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

}  // namespace mxserve::testing
