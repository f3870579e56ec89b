#include "worker/expert_service.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/status_map.h"
#include "wire/tensor_wire.h"

namespace mxserve {

namespace {
std::string DescribeHeld(const std::vector<int>& experts) {
  if (experts.empty()) return "none";
  // Contiguous sets (the usual placement) print as a range.
  if (experts.back() - experts.front() + 1 == static_cast<int>(experts.size())) {
    return absl::StrCat(experts.front(), "-", experts.back());
  }
  return absl::StrCat(experts.size(), " experts from ", experts.front(), " to ", experts.back());
}
}  // namespace

ExpertService::ExpertService(WorkerModelInfo info, bool allow_shared_memory)
    : info_(std::move(info)), allow_shared_memory_(allow_shared_memory) {
  held_.assign(std::max(info_.num_experts, 0), false);
  for (int e : info_.experts) {
    if (e >= 0 && e < info_.num_experts) held_[e] = true;
  }
}

void ExpertService::SetReady(std::shared_ptr<ExpertExecutor> executor) {
  // Objects mapped from now on are offered to the executor to page-lock (a GPU executor then
  // copies straight from and to them). The hooks keep the executor alive until the last
  // mapping is gone.
  if (allow_shared_memory_ && executor != nullptr) {
    shm_.SetHooks([executor](void* p, size_t n) { executor->PinHostMemory(p, n); },
                  [executor](void* p) { executor->UnpinHostMemory(p); });
  }
  absl::MutexLock lock(&mu_);
  executor_ = std::move(executor);
}

bool ExpertService::ready() const {
  absl::MutexLock lock(&mu_);
  return executor_ != nullptr;
}

absl::Status ExpertService::Validate(const v1::RunExpertsRequest& req) const {
  if (req.layer() < 0 || req.layer() >= info_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer: ", req.layer(), " out of range [0, ",
                                                   info_.num_layers, ")"));
  }
  if (req.hidden_size() != info_.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden_size: ", req.hidden_size(), " does not match the model's ", info_.hidden_size));
  }
  if (req.num_tokens() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_tokens: ", req.num_tokens(), " < 0"));
  }
  if (req.top_k() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("top_k: ", req.top_k(), " < 1"));
  }
  const size_t esize = WireDTypeSize(req.dtype());
  if (esize == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype: ", v1::TensorDType_Name(req.dtype()).empty() ? std::to_string(req.dtype())
                                                              : v1::TensorDType_Name(req.dtype()),
        " is not TENSOR_DTYPE_F32 or TENSOR_DTYPE_BF16"));
  }
  const int64_t T = req.num_tokens(), H = req.hidden_size(), k = req.top_k();
  const int64_t want_hidden = T * H * static_cast<int64_t>(esize);
  if (!req.shm_name().empty()) {
    if (!allow_shared_memory_) {
      return absl::FailedPreconditionError(
          "shm_name: shared memory is off on this worker (start it with --allow_shared_memory)");
    }
    if (!req.hidden().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("hidden: ", req.hidden().size(),
                                                     " bytes, expected none when shm_name is set"));
    }
    if (req.shm_in_offset() % 64 != 0 || req.shm_out_offset() % 64 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("shm_in_offset ", req.shm_in_offset(), ", shm_out_offset ",
                                                     req.shm_out_offset(), ": must be multiples of 64"));
    }
  } else if (static_cast<int64_t>(req.hidden().size()) != want_hidden) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden: ", req.hidden().size(), " bytes, expected num_tokens*hidden_size*",
        esize, " = ", want_hidden));
  }
  if (static_cast<int64_t>(req.expert_ids_size()) != T * k) {
    return absl::InvalidArgumentError(absl::StrCat("expert_ids: ", req.expert_ids_size(),
                                                   " entries, expected num_tokens*top_k = ", T * k));
  }
  if (static_cast<int64_t>(req.weights_size()) != T * k) {
    return absl::InvalidArgumentError(absl::StrCat("weights: ", req.weights_size(),
                                                   " entries, expected num_tokens*top_k = ", T * k));
  }
  for (int i = 0; i < req.expert_ids_size(); ++i) {
    const int e = req.expert_ids(i);
    if (e == -1) continue;
    if (e < 0 || e >= info_.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat("expert_ids[", i, "]: ", e,
                                                     " out of range [0, ", info_.num_experts,
                                                     ") (or -1 to skip)"));
    }
    if (!held_[e]) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert_ids[", i, "]: expert ", e, " is not held by this worker (holds ",
                       DescribeHeld(info_.experts), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ExpertService::Handle(const v1::RunExpertsRequest& req,
                                   v1::RunExpertsResponse* resp) {
  std::shared_ptr<ExpertExecutor> executor;
  {
    absl::MutexLock lock(&mu_);
    executor = executor_;
  }
  if (executor == nullptr) {
    return absl::UnavailableError("expert worker: weights are still loading (not ready)");
  }
  RETURN_IF_ERROR(Validate(req));
  const size_t T = req.num_tokens(), H = req.hidden_size();
  resp->set_num_tokens(req.num_tokens());
  resp->set_dtype(req.dtype());
  if (T == 0) {
    resp->mutable_output()->clear();
    return absl::OkStatus();
  }
  // Where the activations are and where the output goes: the messages' bytes, or the caller's
  // shared-memory object (kept mapped for the call by `mapping`).
  const size_t bytes = T * H * WireDTypeSize(req.dtype());
  std::shared_ptr<const SharedMappings::Mapping> mapping;
  const char* in = req.hidden().data();
  char* out = nullptr;
  if (req.shm_name().empty()) {
    resp->mutable_output()->resize(bytes);
    out = resp->mutable_output()->data();
  } else {
    ASSIGN_OR_RETURN(mapping, MapShared(req, bytes));
    in = mapping->data + req.shm_in_offset();
    out = mapping->data + req.shm_out_offset();
    resp->clear_output();
    resp->set_output_in_shm(true);
  }
  ExpertBatch batch;
  batch.layer = req.layer();
  batch.hidden = req.hidden_size();
  batch.num_tokens = req.num_tokens();
  batch.top_k = req.top_k();
  batch.expert_ids = req.expert_ids().data();
  batch.weights = req.weights().data();
  if (req.dtype() == v1::TENSOR_DTYPE_BF16) {
    return executor->RunBf16(batch, in, out);
  }
  // F32 in place when it is float-aligned (heap strings and the 64-byte shared-memory offsets
  // are); otherwise through per-thread scratch that keeps its capacity (fresh multi-MB buffers on
  // every call cost more in page faults than the copy itself).
  thread_local std::vector<float> x_scratch, out_scratch;
  batch.x = DecodeTensor(in, T * H, req.dtype(), &x_scratch);
  if (reinterpret_cast<uintptr_t>(out) % alignof(float) == 0) {
    return executor->Run(batch, reinterpret_cast<float*>(out));
  }
  out_scratch.resize(T * H);
  RETURN_IF_ERROR(executor->Run(batch, out_scratch.data()));
  EncodeTensorTo(out_scratch.data(), T * H, req.dtype(), out);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const SharedMappings::Mapping>> ExpertService::MapShared(
    const v1::RunExpertsRequest& req, size_t bytes) {
  ASSIGN_OR_RETURN(std::shared_ptr<const SharedMappings::Mapping> m, shm_.Get(req.shm_name()));
  const uint64_t in = req.shm_in_offset(), out = req.shm_out_offset();
  if (in > m->size || bytes > m->size - in || out > m->size || bytes > m->size - out) {
    return absl::InvalidArgumentError(absl::StrCat("shm_in_offset ", in, ", shm_out_offset ", out, ": ", bytes,
                                                   " bytes each do not fit the ", m->size, "-byte object ",
                                                   req.shm_name()));
  }
  if (in < out + bytes && out < in + bytes) {
    return absl::InvalidArgumentError(absl::StrCat("shm_in_offset ", in, ", shm_out_offset ", out,
                                                   ": the input and output ranges overlap"));
  }
  return m;
}

grpc::Status ExpertService::RunExperts(grpc::ServerContext* ctx, const v1::RunExpertsRequest* req,
                                       v1::RunExpertsResponse* resp) {
  ++in_flight_;
  grpc::Status s = ToGrpcStatus(Handle(*req, resp));
  --in_flight_;
  return s;
}

grpc::Status ExpertService::RunExpertsStream(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::ExpertStreamResponse, v1::ExpertStreamRequest>* stream) {
  v1::ExpertStreamRequest req;
  v1::ExpertStreamResponse resp;
  while (stream->Read(&req)) {
    resp.Clear();
    resp.set_id(req.id());
    ++in_flight_;
    const grpc::Status s = ToGrpcStatus(Handle(req.request(), resp.mutable_response()));
    --in_flight_;
    if (!s.ok()) {
      resp.clear_response();
      resp.set_code(s.error_code());
      resp.set_message(s.error_message());
    }
    if (!stream->Write(resp)) break;  // the client went away
  }
  return grpc::Status::OK;
}

grpc::Status ExpertService::Describe(grpc::ServerContext* ctx, const v1::DescribeRequest* req,
                                     v1::DescribeResponse* resp) {
  resp->set_model_type(info_.model_type);
  resp->set_num_layers(info_.num_layers);
  resp->set_num_experts(info_.num_experts);
  resp->set_hidden_size(info_.hidden_size);
  resp->set_intermediate_size(info_.intermediate_size);
  resp->set_activation(info_.activation);
  for (int e : info_.experts) resp->add_experts(e);
  resp->set_device(info_.device);
  resp->set_ready(ready());
  return grpc::Status::OK;
}

}  // namespace mxserve
