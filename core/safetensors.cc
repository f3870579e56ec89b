// Safetensors reader/writer. Validation follows the reference implementation
// (huggingface/safetensors): the header is JSON of {name: {dtype, shape, data_offsets}} plus an
// optional "__metadata__" string map; offsets are relative to the data area, and the tensors,
// sorted by offset, must tile the data area exactly (no gaps, no overlaps, nothing after).
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mxserve {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference implementation

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},     {DType::kI8, "I8", 1},
    {DType::kU16, "U16", 2},   {DType::kI16, "I16", 2},   {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI32, "I32", 4},   {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},   {DType::kI64, "I64", 8},   {DType::kU64, "U64", 8},
    {DType::kF64, "F64", 8},
};

// Debian's abseil has its own string_view, so std::string_view goes through std::string.
std::string Str(std::string_view v) { return std::string(v); }
std::string DN(DType d) { return std::string(DTypeName(d)); }

std::string ShapeString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// Parses and validates one tensor entry; `data_size` is the size of the data area.
absl::Status ParseEntry(const std::string& path, const std::string& name, const json& e,
                        uint64_t data_size, TensorView& t, uint64_t& begin, uint64_t& end) {
  auto bad = [&](const std::string& what) {
    return Corrupt(path, absl::StrCat("tensor '", name, "': ", what));
  };
  if (!e.is_object()) return bad("entry is not a JSON object");
  for (const auto& [k, v] : e.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") return bad("unknown key '" + k + "'");
  }
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) return bad("missing or non-string 'dtype'");
  auto parsed = ParseDType(dt->get<std::string>());
  if (!parsed.ok()) return bad(std::string(parsed.status().message()));
  t.dtype = *parsed;

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) return bad("missing or non-array 'shape'");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
      return bad("shape entries must be non-negative integers, got " + d.dump());
    }
    const uint64_t v = d.get<uint64_t>();
    if (v > (uint64_t{1} << 62)) return bad("shape entry too large: " + d.dump());
    t.shape.push_back(static_cast<int64_t>(v));
    if (v != 0 && numel > (uint64_t{1} << 62) / v) overflow = true;
    numel *= v;
  }
  if (overflow) return bad("shape " + ShapeString(t.shape) + " overflows");

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return bad("'data_offsets' must be [begin, end] non-negative integers");
  }
  begin = (*off)[0].get<uint64_t>();
  end = (*off)[1].get<uint64_t>();
  if (end < begin) return bad(absl::StrCat("data_offsets [", begin, ",", end, "] end < begin"));
  if (end > data_size) {
    return bad(absl::StrCat("data_offsets [", begin, ",", end, "] beyond the data area (",
                            data_size, " bytes; file truncated?)"));
  }
  const uint64_t want = numel * DTypeSize(t.dtype);
  if (end - begin != want) {
    return bad(absl::StrCat("data_offsets [", begin, ",", end, "] hold ", end - begin,
                            " bytes but dtype ", DN(t.dtype), " shape ",
                            ShapeString(t.shape), " needs ", want));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view DTypeName(DType d) {
  for (const auto& i : kDTypes) {
    if (i.dtype == d) return i.name;
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (const auto& i : kDTypes) {
    if (i.name == name) return i.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown or unsupported dtype '", Str(name), "'"));
}

size_t DTypeSize(DType d) {
  for (const auto& i : kDTypes) {
    if (i.dtype == d) return i.size;
  }
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat: ", std::strerror(err)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  if (size < 8) {
    ::close(fd);
    return Corrupt(path, absl::StrCat("file is ", size, " bytes, too short for the 8-byte header length"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(map_err)));
  }
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  file->map_ = map;
  file->map_size_ = size;
  const auto* bytes = static_cast<const uint8_t*>(map);

  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes) {
    return Corrupt(path, absl::StrCat("header length ", header_len, " exceeds the limit of ",
                                      kMaxHeaderBytes, " bytes"));
  }
  if (header_len > size - 8) {
    return Corrupt(path, absl::StrCat("header length ", header_len, " runs past the end of the ",
                                      size, "-byte file (truncated?)"));
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_len);
  if (header.empty() || header.front() != '{') {
    return Corrupt(path, "header does not start with '{'");
  }
  json h = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) return Corrupt(path, "header is not valid JSON");
  if (!h.is_object()) return Corrupt(path, "header is not a JSON object");

  const uint64_t data_size = size - 8 - header_len;
  const uint8_t* data = bytes + 8 + header_len;
  struct Span { uint64_t begin, end; const std::string* name; };
  std::vector<Span> spans;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) return Corrupt(path, "'__metadata__' is not a JSON object");
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) {
          return Corrupt(path, absl::StrCat("'__metadata__' value for '", k, "' is not a string"));
        }
        file->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    TensorView t;
    t.name = name;
    t.file = path;
    uint64_t begin = 0, end = 0;
    RETURN_IF_ERROR(ParseEntry(path, name, e, data_size, t, begin, end));
    t.data = data + begin;
    t.nbytes = end - begin;
    auto [it, inserted] = file->tensors_.emplace(name, std::move(t));
    spans.push_back({begin, end, &it->first});
  }
  // Tile check: sorted by offset, each tensor starts where the previous ended.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const std::string* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin < pos) {
      return Corrupt(path, absl::StrCat("tensor '", *s.name, "' data_offsets [", s.begin, ",",
                                        s.end, "] overlap tensor '", *prev, "' (ends at ", pos, ")"));
    }
    if (s.begin > pos) {
      return Corrupt(path, absl::StrCat("tensor '", *s.name, "' data_offsets [", s.begin, ",",
                                        s.end, "] leave a gap after byte ", pos));
    }
    pos = s.end;
    prev = s.name;
  }
  if (pos != data_size) {
    return Corrupt(path, absl::StrCat("tensors cover ", pos, " bytes of a ", data_size,
                                      "-byte data area (trailing bytes)"));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  auto ckpt = std::unique_ptr<Checkpoint>(new Checkpoint());
  ckpt->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shard_names;

  if (fs::exists(index_path, ec)) {
    const std::string ip = index_path.string();
    std::ifstream in(ip, std::ios::binary);
    if (!in) return absl::PermissionDeniedError(absl::StrCat(ip, ": cannot read"));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json idx = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (idx.is_discarded() || !idx.is_object()) return Corrupt(ip, "not a JSON object");
    auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object()) {
      return Corrupt(ip, "field 'weight_map' missing or not an object");
    }
    std::map<std::string, std::string> first_tensor;  // shard -> a tensor it should hold
    for (const auto& [name, f] : wm->items()) {
      if (!f.is_string()) {
        return Corrupt(ip, absl::StrCat("weight_map entry for tensor '", name, "' is not a string"));
      }
      const std::string file = f.get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        return Corrupt(ip, absl::StrCat("weight_map entry for tensor '", name,
                                        "' names an invalid shard '", file, "'"));
      }
      weight_map[name] = file;
      if (first_tensor.emplace(file, name).second) shard_names.push_back(file);
    }
    if (shard_names.empty()) return Corrupt(ip, "'weight_map' is empty");
    for (const std::string& s : shard_names) {
      if (!fs::exists(root / s, ec)) {
        return absl::NotFoundError(absl::StrCat(ip, ": shard '", s, "' (holding tensor '",
                                                first_tensor[s], "') does not exist in ", dir));
      }
    }
  } else if (fs::exists(root / "model.safetensors", ec)) {
    shard_names.push_back("model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.path().extension() == ".safetensors") {
        shard_names.push_back(entry.path().filename().string());
      }
    }
    std::sort(shard_names.begin(), shard_names.end());
    if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", ec.message()));
    if (shard_names.empty()) {
      return absl::NotFoundError(absl::StrCat(
          dir, ": no model.safetensors.index.json, model.safetensors or *.safetensors files"));
    }
  }

  for (const std::string& s : shard_names) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open((root / s).string()));
    for (const auto& [name, view] : file->tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(name);
        if (it != weight_map.end() && it->second != s) continue;  // the index says: not this one
      }
      auto [pos, inserted] = ckpt->index_.emplace(name, &view);
      if (!inserted) {
        return absl::DataLossError(absl::StrCat("tensor '", name, "' appears in both ",
                                                pos->second->file, " and ", view.file));
      }
    }
    ckpt->files_.push_back(std::move(file));
  }
  for (const auto& [name, file] : weight_map) {
    if (!ckpt->index_.contains(name)) {
      return absl::DataLossError(absl::StrCat((root / "model.safetensors.index.json").string(),
                                              ": tensor '", name, "' is mapped to shard '", file,
                                              "', which does not contain it"));
    }
  }
  return ckpt;
}

bool Checkpoint::Has(std::string_view name) const { return index_.find(name) != index_.end(); }

absl::StatusOr<TensorView> Checkpoint::Get(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", Str(name), "' not found in checkpoint ", dir_));
  }
  return *it->second;
}

absl::StatusOr<TensorView> Checkpoint::Get(std::string_view name, DType dtype,
                                           std::span<const int64_t> shape) const {
  ASSIGN_OR_RETURN(TensorView t, Get(name));
  if (t.dtype != dtype || !std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", Str(name), "' in ", t.file, ": expected dtype ", DN(dtype),
                     " shape ", ShapeString(shape), ", found dtype ", DN(t.dtype),
                     " shape ", ShapeString(t.shape)));
  }
  return t;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, view] : index_) names.push_back(name);
  return names;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsWriter

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  entries_.push_back({std::move(name), dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  json h = json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  // Data laid out by element size (largest first), then name, as the reference writer does:
  // with the 8-byte aligned header every tensor's data is then aligned to its element size.
  std::vector<const Entry*> order;
  for (const Entry& e : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    const size_t sa = DTypeSize(a->dtype), sb = DTypeSize(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  uint64_t offset = 0;
  for (const Entry* ep : order) {
    const Entry& e = *ep;
    if (h.contains(e.name)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", e.name, "' added twice"));
    }
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", e.name, "': negative shape"));
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * DTypeSize(e.dtype) != e.bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", e.name, "': ", e.bytes.size(), " bytes for dtype ",
          DN(e.dtype), " shape ", ShapeString(e.shape)));
    }
    h[e.name] = {{"dtype", std::string(DTypeName(e.dtype))},
                 {"shape", e.shape},
                 {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string header = h.dump();
  // Pad with spaces so the data area starts 8-byte aligned (as the reference writer does).
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot create"));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(header.size() >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const Entry* e : order) {
      out.write(reinterpret_cast<const char*>(e->bytes.data()),
                static_cast<std::streamsize>(e->bytes.size()));
    }
    out.flush();
    if (!out) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": rename: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace mxserve
