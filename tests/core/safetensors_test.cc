#include "core/safetensors.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/bf16.h"
#include "tests/core/temp_dir.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// Builds a safetensors file from a raw header string and a data area.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(Safetensors, WriterRoundTrip) {
  TempDir dir;
  SafetensorsWriter w;
  auto a = RandomBytes(4 * 3 * 2, 1);
  auto b = RandomBytes(7, 2);
  w.Add("a.weight", DType::kBF16, {4, 3}, a);
  w.Add("b.blocks", DType::kU8, {7}, b);
  w.Add("empty", DType::kF32, {0, 5}, {});
  w.Add("scalar", DType::kF32, {}, {0, 0, 128, 63});
  w.SetMetadata("format", "pt");
  ASSERT_TRUE(w.Write(dir.Join("model.safetensors")).ok());

  // Header padded so the data area starts 8-byte aligned.
  const std::string raw = dir.ReadFile("model.safetensors");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  EXPECT_EQ((8 + hlen) % 8, 0u);

  auto f = SafetensorsFile::Open(dir.Join("model.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 4u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  const TensorView& ta = (*f)->tensors().at("a.weight");
  EXPECT_EQ(ta.dtype, DType::kBF16);
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(ta.numel(), 12);
  ASSERT_EQ(ta.nbytes, a.size());
  EXPECT_EQ(std::memcmp(ta.data, a.data(), a.size()), 0);
  const TensorView& tb = (*f)->tensors().at("b.blocks");
  EXPECT_EQ(std::memcmp(tb.data, b.data(), b.size()), 0);
  float one;
  std::memcpy(&one, (*f)->tensors().at("scalar").data, 4);
  EXPECT_EQ(one, 1.0f);
  EXPECT_EQ((*f)->tensors().at("empty").nbytes, 0u);

  auto ck = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_TRUE((*ck)->Has("a.weight"));
  EXPECT_FALSE((*ck)->Has("nope"));
  EXPECT_EQ((*ck)->Names().size(), 4u);
  const int64_t shape[] = {4, 3};
  auto got = (*ck)->Get("a.weight", DType::kBF16, shape);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->file, dir.Join("model.safetensors"));
}

TEST(Safetensors, WriterAlignsEachTensorToItsElementSize) {
  TempDir dir;
  SafetensorsWriter w;
  w.Add("a.u8", DType::kU8, {3}, RandomBytes(3, 1));
  w.Add("b.bf16", DType::kBF16, {3}, RandomBytes(6, 2));
  w.Add("c.f32", DType::kF32, {1}, RandomBytes(4, 3));
  w.Add("d.f64", DType::kF64, {1}, RandomBytes(8, 4));
  w.Add("e.u8", DType::kU8, {1}, RandomBytes(1, 5));
  ASSERT_TRUE(w.Write(dir.Join("x.safetensors")).ok());
  auto f = SafetensorsFile::Open(dir.Join("x.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  for (const auto& [name, t] : (*f)->tensors()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % DTypeSize(t.dtype), 0u) << name;
  }
  const auto want = RandomBytes(6, 2);
  EXPECT_EQ(std::memcmp((*f)->tensors().at("b.bf16").data, want.data(), 6), 0);
}

TEST(Safetensors, WriterRejectsWrongByteCount) {
  TempDir dir;
  SafetensorsWriter w;
  w.Add("x", DType::kF32, {2}, std::vector<uint8_t>(7));
  auto s = w.Write(dir.Join("model.safetensors"));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(Message(s), HasSubstr("'x'"));
}

TEST(Safetensors, GetWrongDtypeOrShapeNamesTensorAndFile) {
  TempDir dir;
  SafetensorsWriter w;
  w.Add("model.norm.weight", DType::kBF16, {8}, std::vector<uint8_t>(16));
  ASSERT_TRUE(w.Write(dir.Join("model.safetensors")).ok());
  auto ck = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok());
  const int64_t right[] = {8}, wrong[] = {4, 2};
  auto bad_dtype = (*ck)->Get("model.norm.weight", DType::kF32, right);
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_THAT(Message(bad_dtype.status()), HasSubstr("tensor 'model.norm.weight'"));
  EXPECT_THAT(Message(bad_dtype.status()), HasSubstr("model.safetensors"));
  EXPECT_THAT(Message(bad_dtype.status()), HasSubstr("expected dtype F32 shape [8], found dtype BF16 shape [8]"));
  auto bad_shape = (*ck)->Get("model.norm.weight", DType::kBF16, wrong);
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_THAT(Message(bad_shape.status()), HasSubstr("expected dtype BF16 shape [4,2], found dtype BF16 shape [8]"));
  auto missing = (*ck)->Get("lm_head.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(missing.status()), HasSubstr("'lm_head.weight'"));
}

struct BadCase {
  const char* name;
  std::string bytes;
  const char* want;  // substring of the error
};

TEST(Safetensors, CorruptFilesAreErrorsNamingFileAndTensor) {
  const std::string good_header =
      R"({"t":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}})";
  const std::vector<BadCase> cases = {
      {"empty file", "", "too short"},
      {"short length", std::string(5, '\0'), "too short"},
      {"length past end", RawFile(good_header, "abcd").substr(0, 20), "runs past the end"},
      {"huge length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "exceeds the limit"},
      {"not json", RawFile("{not json at all", ""), "not valid JSON"},
      {"not object", RawFile("[1,2]     ", ""), "does not start with '{'"},
      {"truncated data", RawFile(good_header, "ab"), "tensor 't'"},
      {"unknown dtype", RawFile(R"({"t":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", "ab"),
       "unknown or unsupported dtype 'Q4'"},
      {"shape/nbytes mismatch",
       RawFile(R"({"t":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", "abcd"), "needs 6"},
      {"offsets out of range",
       RawFile(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", "abcd"), "beyond the data area"},
      {"end before begin",
       RawFile(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", "abcd"), "end < begin"},
      {"overlap",
       RawFile(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"u":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
               "abcd"),
       "overlap"},
      {"gap",
       RawFile(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"u":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}})",
               "abcd"),
       "gap"},
      {"trailing bytes", RawFile(good_header, "abcdef"), "trailing"},
      {"negative shape", RawFile(R"({"t":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", "abcd"),
       "non-negative"},
      {"missing offsets", RawFile(R"({"t":{"dtype":"U8","shape":[4]}})", "abcd"), "data_offsets"},
      {"bad metadata", RawFile(R"({"__metadata__":{"a":1}})", ""), "__metadata__"},
      {"entry not object", RawFile(R"({"t":5})", ""), "tensor 't'"},
  };
  for (const BadCase& c : cases) {
    TempDir dir;
    dir.WriteFile("model.safetensors", c.bytes);
    auto f = SafetensorsFile::Open(dir.Join("model.safetensors"));
    ASSERT_FALSE(f.ok()) << c.name;
    EXPECT_THAT(Message(f.status()), HasSubstr(c.want)) << c.name;
    EXPECT_THAT(Message(f.status()), HasSubstr(dir.Join("model.safetensors"))) << c.name;
    auto ck = Checkpoint::Open(dir.path());
    EXPECT_FALSE(ck.ok()) << c.name;
  }
}

TEST(Safetensors, TruncatingAGoodFileAnywhereIsAnError) {
  TempDir dir;
  SafetensorsWriter w;
  w.Add("x", DType::kF32, {5}, RandomBytes(20, 3));
  w.Add("y", DType::kU8, {3}, RandomBytes(3, 4));
  ASSERT_TRUE(w.Write(dir.Join("full.safetensors")).ok());
  const std::string raw = dir.ReadFile("full.safetensors");
  for (size_t len = 0; len < raw.size(); ++len) {
    dir.WriteFile("cut.safetensors", raw.substr(0, len));
    EXPECT_FALSE(SafetensorsFile::Open(dir.Join("cut.safetensors")).ok()) << len;
  }
  EXPECT_TRUE(SafetensorsFile::Open(dir.Join("full.safetensors")).ok());
}

void WriteShard(const TempDir& dir, const std::string& file,
                const std::vector<std::pair<std::string, uint32_t>>& tensors) {
  SafetensorsWriter w;
  for (const auto& [name, seed] : tensors) w.Add(name, DType::kBF16, {2, 4}, RandomBytes(16, seed));
  ASSERT_TRUE(w.Write(dir.Join(file)).ok());
}

TEST(Safetensors, ShardedCheckpointThroughIndex) {
  TempDir dir;
  WriteShard(dir, "model-00001-of-00002.safetensors", {{"a", 1}, {"b", 2}});
  WriteShard(dir, "model-00002-of-00002.safetensors", {{"c", 3}});
  dir.WriteFile("model.safetensors.index.json", R"({"metadata":{"total_size":48},"weight_map":{
      "a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
      "c":"model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ((*ck)->Names(), (std::vector<std::string>{"a", "b", "c"}));
  auto c = (*ck)->Get("c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->file, dir.Join("model-00002-of-00002.safetensors"));
  const auto want = RandomBytes(16, 3);
  EXPECT_EQ(std::memcmp(c->data, want.data(), 16), 0);
}

TEST(Safetensors, IndexNamingMissingShard) {
  TempDir dir;
  WriteShard(dir, "model-00001-of-00002.safetensors", {{"a", 1}});
  dir.WriteFile("model.safetensors.index.json", R"({"weight_map":{
      "a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::Open(dir.path());
  ASSERT_FALSE(ck.ok());
  EXPECT_THAT(Message(ck.status()), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(Message(ck.status()), HasSubstr("'b'"));
}

TEST(Safetensors, IndexNamingTensorAbsentFromShard) {
  TempDir dir;
  WriteShard(dir, "s1.safetensors", {{"a", 1}});
  dir.WriteFile("model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","zz":"s1.safetensors"}})");
  auto ck = Checkpoint::Open(dir.path());
  ASSERT_FALSE(ck.ok());
  EXPECT_THAT(Message(ck.status()), HasSubstr("'zz'"));
}

TEST(Safetensors, BadIndexJson) {
  TempDir dir;
  WriteShard(dir, "s1.safetensors", {{"a", 1}});
  dir.WriteFile("model.safetensors.index.json", "{\"weight_map\": [");
  EXPECT_FALSE(Checkpoint::Open(dir.path()).ok());
  dir.WriteFile("model.safetensors.index.json", R"({"weight_map":{"a":"../s1.safetensors"}})");
  EXPECT_FALSE(Checkpoint::Open(dir.path()).ok());
  dir.WriteFile("model.safetensors.index.json", R"({"weight_map":{}})");
  EXPECT_FALSE(Checkpoint::Open(dir.path()).ok());
  dir.WriteFile("model.safetensors.index.json", R"({"weight_map":{"a":7}})");
  auto bad = Checkpoint::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Message(bad.status()), HasSubstr("'a'"));
}

TEST(Safetensors, AnySafetensorsFilesWithoutIndex) {
  TempDir dir;
  WriteShard(dir, "x.safetensors", {{"a", 1}});
  WriteShard(dir, "y.safetensors", {{"b", 2}});
  auto ck = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ((*ck)->Names().size(), 2u);
  // The same tensor in two files is ambiguous.
  WriteShard(dir, "z.safetensors", {{"a", 5}});
  auto dup = Checkpoint::Open(dir.path());
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(Message(dup.status()), HasSubstr("'a'"));
}

TEST(Safetensors, EmptyOrMissingDirectory) {
  TempDir dir;
  EXPECT_EQ(Checkpoint::Open(dir.path()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Checkpoint::Open(dir.Join("nope")).status().code(), absl::StatusCode::kNotFound);
}

TEST(Safetensors, DTypeNames) {
  for (auto d : {DType::kBool, DType::kU8, DType::kI8, DType::kU16, DType::kI16, DType::kF16,
                 DType::kBF16, DType::kI32, DType::kU32, DType::kF32, DType::kI64, DType::kU64,
                 DType::kF64}) {
    auto back = ParseDType(DTypeName(d));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_FALSE(ParseDType("bf16").ok());
}

}  // namespace
}  // namespace mxserve
