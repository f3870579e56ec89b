#include "wire/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mxserve {

namespace {
constexpr char kPrefix[] = "/mxserve-shm-";

std::string Errno() { return std::strerror(errno); }
}  // namespace

bool IsSharedMemoryName(const std::string& name) {
  if (!absl::StartsWith(name, kPrefix)) return false;
  const size_t n = name.size() - (sizeof(kPrefix) - 1);
  if (n < 1 || n > 48) return false;
  for (size_t i = sizeof(kPrefix) - 1; i < name.size(); ++i) {
    const char c = name[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(size_t size) {
  static std::atomic<uint64_t> counter{0};
  auto r = std::unique_ptr<SharedRegion>(new SharedRegion());
  r->name_ = absl::StrCat(kPrefix, getpid(), "-", counter++);
  const int fd = shm_open(r->name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("shm_open ", r->name_, ": ", Errno()));
  // posix_fallocate, not ftruncate: the pages are reserved now, so a full /dev/shm (containers
  // often get 64 MB) is this error rather than a SIGBUS on the first write past what is free.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    close(fd);
    shm_unlink(r->name_.c_str());
    return absl::ResourceExhaustedError(
        absl::StrCat("posix_fallocate ", r->name_, " of ", size, " bytes: ", std::strerror(err)));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    const std::string e = Errno();
    shm_unlink(r->name_.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("mmap ", r->name_, ": ", e));
  }
  r->data_ = static_cast<char*>(p);
  r->size_ = size;
  return r;
}

SharedRegion::~SharedRegion() {
  if (data_ != nullptr) munmap(data_, size_);
  if (!name_.empty()) shm_unlink(name_.c_str());
}

int RemoveStaleSharedRegions() {
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return 0;
  int removed = 0;
  const std::string prefix = kPrefix + 1;  // file names lack the leading '/'
  while (dirent* e = readdir(d)) {
    const std::string f = e->d_name;
    if (!absl::StartsWith(f, prefix)) continue;
    const std::vector<std::string> parts = absl::StrSplit(f.substr(prefix.size()), '-');
    int pid = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    if (shm_unlink(("/" + f).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

SharedMappings::Mapping::~Mapping() {
  if (data == nullptr) return;
  if (on_unmap) on_unmap(data);
  munmap(data, size);
}

void SharedMappings::SetHooks(std::function<void(void*, size_t)> on_map, std::function<void(void*)> on_unmap) {
  absl::MutexLock lock(&mu_);
  on_map_ = std::move(on_map);
  on_unmap_ = std::move(on_unmap);
}

absl::StatusOr<std::shared_ptr<const SharedMappings::Mapping>> SharedMappings::Get(const std::string& name) {
  absl::MutexLock lock(&mu_);
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->first == name) {
      lru_.splice(lru_.begin(), lru_, it);
      return lru_.front().second;
    }
  }
  if (!IsSharedMemoryName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("shm_name: '", name.substr(0, 80),
                                                   "' is not /mxserve-shm-[A-Za-z0-9_-]{1,48}"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat("shm_name: ", name, ": ", Errno()));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_size <= 0) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("shm_name: ", name, " is not a non-empty object owned by this worker's user"));
  }
  auto m = std::make_shared<Mapping>();
  void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return absl::InvalidArgumentError(absl::StrCat("shm_name: mmap ", name, ": ", Errno()));
  m->data = static_cast<char*>(p);
  m->size = static_cast<size_t>(st.st_size);
  if (on_map_) on_map_(m->data, m->size);
  m->on_unmap = on_unmap_;
  lru_.emplace_front(name, m);
  while (static_cast<int>(lru_.size()) > capacity_) lru_.pop_back();
  return std::shared_ptr<const Mapping>(std::move(m));
}

}  // namespace mxserve
