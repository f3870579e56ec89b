// The HTTP front door started for a test on 127.0.0.1 (port 0) with the fake tokenizer, chat
// template and engine of fakes.h: the fixture http_frontend_test.cc and openai_n_test.cc share.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "coordinator/frontends/http_frontend.h"
#include "nlohmann/json.hpp"
#include "tests/frontends/fakes.h"
#include "tests/frontends/http_client.h"

namespace mxserve::testing {

class HttpFrontendFixture : public ::testing::Test {
 protected:
  static constexpr char kModel[] = "tiny-model";
  static constexpr int kMaxLen = 128;

  void SetUp() override {
    ServingContext ctx;
    ctx.model_id = kModel;
    ctx.max_model_len = kMaxLen;
    ctx.tokenizer = &tok_;
    ctx.chat_template = &tmpl_;
    ctx.engine = &engine_;
    ctx.ready = [this] { return ready_.load(); };
    ctx.metrics = [] { return std::string("mxserve_up 1\n"); };
    frontends::HttpServerOptions opts;
    opts.host = "127.0.0.1";
    opts.port = 0;
    opts.io_threads = 2;
    auto fe = frontends::HttpFrontend::Start(ctx, opts);
    ASSERT_TRUE(fe.ok()) << fe.status();
    fe_ = *std::move(fe);
    port_ = fe_->port();
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (fe_) fe_->Shutdown();
  }

  HttpResult Post(const std::string& path, const nlohmann::json& body) {
    return HttpCall(port_, "POST", path, body.dump());
  }
  // A chat request for one user turn, with `extra` fields added.
  static nlohmann::json Chat(nlohmann::json extra = nlohmann::json::object()) {
    nlohmann::json j{{"model", kModel},
                     {"messages", nlohmann::json::array({{{"role", "user"}, {"content", "Hi"}}})}};
    for (auto& [k, v] : extra.items()) j[k] = v;
    return j;
  }

  FakeTokenizer tok_;
  FakeChatTemplate tmpl_;
  FakeGenerationService engine_;
  std::atomic<bool> ready_{true};
  std::unique_ptr<frontends::HttpFrontend> fe_;
  int port_ = 0;
};

}  // namespace mxserve::testing
