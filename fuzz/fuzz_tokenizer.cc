// libFuzzer target: the tokenizer (byte-level BPE, the tiny model's tokenizer.json) on
// arbitrary bytes. Properties: Encode never fails and yields in-vocabulary ids;
// DecodeBytes(Encode(text, allow_special=false)) == text byte for byte; Decode of arbitrary
// ids (some out of range) returns an error or valid text, never crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/tokenizer/tokenizer.h"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mxserve::Tokenizer* tok = [] {
    auto files = mxserve::MakeTinyTokenizer(200);
    if (!files.ok()) abort();
    auto t = mxserve::Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
    if (!t.ok()) abort();
    return t->release();
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const int vocab = tok->vocab_size();
  for (bool special : {false, true}) {
    std::vector<int32_t> ids = tok->Encode(text, special);
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab) abort();
    }
    auto bytes = tok->DecodeBytes(ids, /*skip_special=*/false);
    if (!bytes.ok()) abort();
    if (!special && *bytes != text) abort();  // byte-level BPE is lossless
    (void)tok->Decode(ids, /*skip_special=*/true);
  }
  // The same bytes as little-endian ids, some outside the vocabulary.
  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  for (int32_t& id : raw) {
    if (id >= 0) id %= vocab + 8;
  }
  (void)tok->DecodeBytes(raw, false);
  (void)tok->Decode(raw, true);
  for (int32_t id : raw) (void)tok->TokenString(id);
  return 0;
}
