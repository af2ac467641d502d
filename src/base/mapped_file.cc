#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dsv41 {

struct MappedFile::Impl {
  std::string path;
  void* addr = nullptr;
  size_t size = 0;
  ~Impl() {
    if (addr != nullptr) munmap(addr, size);
  }
};

MappedFile::MappedFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MappedFile::MappedFile(MappedFile&&) noexcept = default;
MappedFile& MappedFile::operator=(MappedFile&&) noexcept = default;
MappedFile::~MappedFile() = default;

Result<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError("%s: no such file", path.c_str());
    return IoError("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError("%s: cannot stat: %s", path.c_str(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("%s: not a regular file", path.c_str());
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->size = static_cast<size_t>(st.st_size);
  if (impl->size > 0) {
    void* addr = ::mmap(nullptr, impl->size, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return IoError("%s: cannot map %zu bytes: %s", path.c_str(), impl->size, std::strerror(err));
    }
    impl->addr = addr;
  }
  ::close(fd);
  return MappedFile(std::move(impl));
}

std::span<const std::byte> MappedFile::bytes() const {
  if (!impl_ || impl_->addr == nullptr) return {};
  return {static_cast<const std::byte*>(impl_->addr), impl_->size};
}

const std::string& MappedFile::path() const { return impl_->path; }

uint64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

uint64_t PrefaultPages(std::span<const std::byte> bytes) {
  if (bytes.empty()) return 0;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t aligned = begin / page * page;
  ::madvise(reinterpret_cast<void*>(aligned), begin + bytes.size() - aligned, MADV_WILLNEED);
  uint64_t sum = 0;
  for (uintptr_t p = aligned < begin ? aligned + page : aligned; p < begin + bytes.size();
       p += page) {
    sum += static_cast<uint8_t>(*reinterpret_cast<const volatile std::byte*>(p));
  }
  return sum + static_cast<uint8_t>(bytes[0]);
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("%s: cannot open for reading", path.c_str());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError("%s: read failed", path.c_str());
  return ss.str();
}

Status WriteStringToFile(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return IoError("%s: cannot open for writing", tmp.c_str());
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) return IoError("%s: write failed", tmp.c_str());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("%s: cannot rename into place: %s", path.c_str(), std::strerror(errno));
  }
  return OkStatus();
}

}  // namespace dsv41
