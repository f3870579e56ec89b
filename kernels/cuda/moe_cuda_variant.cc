#include "kernels/cuda/moe_cuda_variant.h"

namespace mxserve::kernels::cuda::internal {
namespace {
Variant g_variant;  // written only by SetVariant (the lab), before any call runs
}  // namespace

const Variant& CurrentVariant() { return g_variant; }
void SetVariant(const Variant& v) { g_variant = v; }

}  // namespace mxserve::kernels::cuda::internal
