#include "kernels/cuda/lab/plan_option.h"

#include <functional>
#include <initializer_list>
#include <vector>

#include "kernels/cuda/moe_cuda_plan.h"
#include "kernels/cuda/moe_cuda_tiny_route.h"

namespace mxserve::kernels::cuda::lab {
namespace {

using internal::Variant;

// A key whose value is one of a list: set(v, index in the list).
struct Key {
  const char* name;
  std::vector<std::string_view> values;  // values[0] is "default"
  std::function<void(Variant&, int)> set;
  const char* what;
};

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = {
      {"mix", {"default", "off", "serial"},
       [](Variant& v, int i) { v.mix = i != 1; v.mix_serial = i == 2; },
       "off: one tile height; serial: the second height after the first on one stream"},
      {"decode_wgmma", {"default", "off"}, [](Variant& v, int i) { v.decode_wgmma = i == 0; },
       "off: 16 and 24 rows alone run the kst decode kernel, not wgmma16/wgmma24"},
      {"paired_cost", {"default", "on", "off"}, [](Variant& v, int i) { v.paired_cost = i; },
       "weigh the paired launch's cost on any card (on) or on none (off)"},
      {"early_weights", {"default", "off"}, [](Variant& v, int i) { v.early_weights = i == 0; },
       "off: the kst GEMMs wait for the kernel before them before asking for weights"},
      {"fused_host_route", {"default", "off"}, [](Variant& v, int i) { v.fused_host_route = i == 0; },
       "off: the fused kernel routes even when the ids are on the host"},
      {"fused_held", {"default", "table"}, [](Variant& v, int i) { v.fused_held_table = i == 1; },
       "table: the fused kernel reads the held-index table for a range of experts too"},
      {"decode", {"default", "bulk", "ring", "kst", "kst4"},
       [](Variant& v, int i) { constexpr int kPin[] = {0, 2, 3, 5, 6}; v.decode_pin = kPin[i]; },
       "the decode kernel: bulk, register ring, kst with 2-chunk or (kst4) 4-chunk slices"},
      {"smem_a", {"default", "0", "1"}, [](Variant& v, int i) { v.smem_a = i != 1; },
       "0: the register ring's activations through L1"},
      {"kst_cfg", {"default", "w16", "x2", "x2w8", "x1", "w12", "w14"},
       [](Variant& v, int i) { v.kst_cfg = i; },
       "kst occupancy: 16 warps, two CTAs of 12 or 8, one of 12 at 8 rows, 12 at 16 rows, 14 at 24"},
      {"kst_grid", {"default", "950", "900", "850", "800", "700"},
       [](Variant& v, int i) { constexpr int kPm[] = {1000, 950, 900, 850, 800, 700}; v.kst_grid_pm = kPm[i]; },
       "the kst grid cut to this per-mille"},
      {"l2_promotion", {"default", "256", "none", "128"}, [](Variant& v, int i) { v.l2_promotion = i; },
       "the kst tensor maps' L2 promotion (default 64 B)"},
      {"kst_pair", {"default", "queue", "fixed", "off"},
       [](Variant& v, int i) { constexpr int kMode[] = {2, 2, 1, 0}; v.kst_pair = kMode[i]; },
       "the paired decode launch: items from a queue, in a fixed order, or two launches"},
      {"pair_combine", {"default", "off"}, [](Variant& v, int i) { v.pair_combine = i == 0; },
       "off: the combine in a launch of its own after the paired launch"},
      {"pair_probe", {"default", "stamps"}, [](Variant& v, int i) { v.pair_stamps = i == 1; },
       "stamps: the paired launch records its phase ends (PairStampsReport)"},
      {"gather", {"default", "rows"}, [](Variant& v, int i) { v.gather_rows = i == 1; },
       "rows: large batches place and gather per slot row"},
      {"pdl", {"default", "0", "1"}, [](Variant& v, int i) { v.pdl = i != 1; },
       "0: no programmatic dependent launch"},
      {"evict_first", {"default", "off"}, [](Variant& v, int i) { v.evict_first = i == 0; },
       "off: the fused kernel's weight copies under the default L2 policy"},
      {"fused_probe",
       {"default", "loads", "math", "neither", "nobarrier", "route", "empty", "stamps", "nosum", "freerun"},
       [](Variant& v, int i) { v.fused_probe = i; },
       "skip parts of the fused kernel, or (stamps) time its phases (FusedStampsReport)"},
      {"fused_defer", {"default", "off", "warp"}, [](Variant& v, int i) { v.fused_defer = i; },
       "when a warp asks for its first down pieces"},
      {"fused_down", {"default", "0", "25", "50", "75", "100"},
       [](Variant& v, int i) { constexpr int kPct[] = {-1, 0, 25, 50, 75, 100}; v.fused_down_pct = kPct[i]; },
       "the down units' weight in the fused grid's split, percent"},
      {"fused_stride", {"default", "off", "on"}, [](Variant& v, int i) { v.fused_stride = i == 2; },
       "on: the fused kernel's gate_up units strided over the grid"},
      {"fused_stamps", {"default", "ctas"}, [](Variant& v, int i) { v.fused_stamps_ctas = i == 1; },
       "ctas: FusedStampsReport adds each CTA's SM and phase ends"},
      {"wgmma_cfg", {"default", "tma", "persist", "ldg", "epi", "nc2", "nc3", "nc4", "n5", "n6", "x2"},
       [](Variant& v, int i) { v.wgmma_cfg = i; },
       "the wgmma GEMM's form (tma, persist) or the lab's ldg configurations"},
      {"var_width", {"default", "off"}, [](Variant& v, int i) { v.var_width = i == 0; },
       "off: the persistent wgmma kernel's wgmma at the tile height for every item"},
  };
  return keys;
}

std::string Join(const std::vector<std::string_view>& values, const char* sep) {
  std::string r;
  for (std::string_view v : values) r.append(r.empty() ? "" : sep).append(v);
  return r;
}

absl::Status Bad(std::string_view a, std::string_view b = {}, std::string_view c = {}) {
  return absl::InvalidArgumentError(std::string("MXSERVE_PLAN: ").append(a).append(b).append(c));
}

}  // namespace

std::string PlanOptionHelp() {
  std::string r =
      "MXSERVE_PLAN=key=value[,key=value...]\n"
      "  path=<spec>: kAuto pinned to a path (decode, decode16, decode24, mid, prefill, wgmma8 ... wgmma256,\n"
      "    wgmmass, wgmmass192, wgmmass64) or two of kAuto's of one family joined by '+', the taller first\n"
      "  fused=off|<parts>x<slots per warp>[w<warps>]: the fused one-launch layer's configuration\n";
  for (const Key& k : Keys()) {
    r.append("  ").append(k.name).append("=").append(Join(k.values, "|")).append(": ").append(k.what).append("\n");
  }
  return r;
}

absl::StatusOr<Variant> ParsePlanOption(std::string_view spec) {
  Variant v;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return Bad("'", item, "' is not key=value");
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "path") {
      if (value == "default") continue;
      const int s = internal::SpecNamed(value);
      if (s < 0) return Bad("path=", value, " names no kernel configuration");
      v.forced_spec = s;
      continue;
    }
    if (key == "fused") {
      const internal::FusedPinned p = internal::ParseFusedPin(std::string(value));
      if (!p.valid) return Bad("fused=", value, " is not a built configuration");
      v.fused = p;
      continue;
    }
    const Key* found = nullptr;
    for (const Key& k : Keys()) {
      if (key == k.name) found = &k;
    }
    if (found == nullptr) return Bad("unknown key '", key, "'");
    int index = -1;
    for (size_t i = 0; i < found->values.size(); ++i) {
      if (found->values[i] == value) index = static_cast<int>(i);
    }
    if (index < 0) return Bad(std::string(key).append("=").append(value), " is not one of ", Join(found->values, ", "));
    found->set(v, index);
  }
  return v;
}

}  // namespace mxserve::kernels::cuda::lab
