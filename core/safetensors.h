// Safetensors reading (mmap) and writing. A Checkpoint is a model folder: model.safetensors, or
// shards listed by model.safetensors.index.json. Every header is validated on open (JSON,
// dtype names, shapes, offsets inside the file, no overlaps); errors name the file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

enum class DType { kBool, kU8, kI8, kU16, kI16, kF16, kBF16, kI32, kU32, kF32, kI64, kU64, kF64 };

// "BF16" etc. as safetensors spells them.
std::string_view DTypeName(DType d);
absl::StatusOr<DType> ParseDType(std::string_view name);
size_t DTypeSize(DType d);

// A tensor's bytes inside a mapped file (valid while the owning file/Checkpoint lives). `data` is
// aligned to the element size for files from SafetensorsWriter or HF's writer, not for any file.
struct TensorView {
  std::string name;
  std::string file;  // path of the shard holding it
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
};

// One .safetensors file, memory-mapped read-only.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A model folder's tensors, across shards.
class Checkpoint {
 public:
  // dir holds model.safetensors or model.safetensors.index.json (+ shards), or any *.safetensors.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  bool Has(std::string_view name) const;
  absl::StatusOr<TensorView> Get(std::string_view name) const;
  // Get + checks: error "tensor 'X' in FILE: expected dtype BF16 shape [a,b], found ..." on mismatch.
  absl::StatusOr<TensorView> Get(std::string_view name, DType dtype,
                                 std::span<const int64_t> shape) const;
  std::vector<std::string> Names() const;

 private:
  Checkpoint() = default;
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> index_;
};

// Writes one .safetensors file (tools and tests). Holds every tensor's bytes until Write, so
// writers of large checkpoints write one file per shard (e.g. one per layer). Data is laid out
// largest element size first, so every tensor's data is aligned to its element size.
class SafetensorsWriter {
 public:
  void Add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void SetMetadata(std::string key, std::string value);
  absl::Status Write(const std::string& path) const;

 private:
  struct Entry { std::string name; DType dtype; std::vector<int64_t> shape; std::vector<uint8_t> bytes; };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace mxserve
