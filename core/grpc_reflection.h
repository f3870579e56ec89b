// gRPC server reflection for one server, on or off. Linking grpc++_reflection registers its
// plugin for every server the process builds (a static initializer), keyless; this takes it
// out of one ServerBuilder's plugins unless that server asks for reflection.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <grpcpp/server_builder.h>

namespace mxserve {

inline void ConfigureReflection(grpc::ServerBuilder& builder, bool on) {
  if (on) {
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    return;
  }
  class DropReflection final : public grpc::ServerBuilderOption {
   public:
    void UpdateArguments(grpc::ChannelArguments*) override {}
    void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
      plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                    [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                      return p->name() == "proto_server_reflection";
                                    }),
                     plugins->end());
    }
  };
  builder.SetOption(std::make_unique<DropReflection>());
}

}  // namespace mxserve
