// libFuzzer target: the worker's RunExperts request handling (worker/expert_service.cc): a
// serialized RunExpertsRequest from the fuzzer is parsed, validated, decoded and run on an
// executor that reads every input it is given and writes every output, so ASan catches any
// size the validation let through that does not match the buffers. The same-host transport too:
// the service allows shared memory, and a request whose shm_name does not start with '/' is sent
// to a shared-memory object the harness made (so the fuzzer drives the offsets and sizes; names
// that do start with '/' go as they are); an accepted one must have its input and output ranges
// inside that object and apart.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "experts/expert_executor.h"
#include "wire/shared_memory.h"
#include "wire/tensor_wire.h"
#include "worker/expert_service.h"

namespace {

class TouchEverything final : public mxserve::ExpertExecutor {
 public:
  explicit TouchEverything(int hidden) : hidden_(hidden) {}
  absl::Status Run(const mxserve::ExpertBatch& b, float* out) override {
    float acc = 0;
    const size_t T = static_cast<size_t>(b.num_tokens), H = static_cast<size_t>(hidden_),
                 k = static_cast<size_t>(b.top_k);
    for (size_t i = 0; i < T * H; ++i) acc += b.x[i];
    for (size_t i = 0; i < T * k; ++i) acc += static_cast<float>(b.expert_ids[i]) * b.weights[i];
    for (size_t i = 0; i < T * H; ++i) out[i] = acc * 0.0f;
    return absl::OkStatus();
  }

 private:
  int hidden_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mxserve::ExpertService* service = [] {
    mxserve::WorkerModelInfo info;
    info.model_type = "gpt_oss";
    info.num_layers = 2;
    info.num_experts = 8;
    info.hidden_size = 16;
    info.intermediate_size = 16;
    info.experts = {0, 1, 2, 5};
    auto* s = new mxserve::ExpertService(info, /*allow_shared_memory=*/true);
    s->SetReady(std::make_shared<TouchEverything>(info.hidden_size));
    return s;
  }();
  static mxserve::SharedRegion* region = [] {
    auto r = mxserve::SharedRegion::Create(8192);
    if (!r.ok()) abort();
    std::atexit([] { delete region; });  // unlinks the object when libFuzzer's run ends
    return r->release();
  }();
  mxserve::v1::RunExpertsRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  const bool ours = !req.shm_name().empty() && req.shm_name()[0] != '/';
  if (ours) req.set_shm_name(region->name());
  mxserve::v1::RunExpertsResponse resp;
  absl::Status s = service->Handle(req, &resp);
  if (!s.ok()) return 0;
  if (resp.num_tokens() != req.num_tokens()) abort();
  if (ours && req.num_tokens() > 0) {
    const uint64_t bytes = uint64_t(req.num_tokens()) * req.hidden_size() * mxserve::WireDTypeSize(req.dtype());
    const uint64_t in = req.shm_in_offset(), out = req.shm_out_offset();
    if (!resp.output_in_shm() || in + bytes > region->size() || out + bytes > region->size() ||
        (in < out + bytes && out < in + bytes)) {
      abort();
    }
  }
  return 0;
}
