#include "coordinator/models/model.h"

#include "absl/strings/str_cat.h"
#include "coordinator/models/deepseek_v3.h"
#include "coordinator/models/gpt_oss.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<CausalLM>> CreateCausalLM(const ModelConfig& config,
                                                         const Checkpoint& checkpoint,
                                                         MoeExecutor* moe, ThreadPool* pool) {
  if (config.architecture == "GptOssForCausalLM") {
    auto model = GptOssModel::Create(config, checkpoint, moe, pool);
    if (!model.ok()) return model.status();
    return std::unique_ptr<CausalLM>(std::move(model).value());
  }
  if (config.architecture == "DeepseekV3ForCausalLM") {
    auto model = DeepseekV3Model::Create(config, checkpoint, moe, pool);
    if (!model.ok()) return model.status();
    return std::unique_ptr<CausalLM>(std::move(model).value());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "architecture '", config.architecture,
      "' is not supported (supported: GptOssForCausalLM, DeepseekV3ForCausalLM)"));
}

}  // namespace mxserve
