#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

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

void AdviseRandomAccess(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t aligned = begin / page * page;
  ::madvise(reinterpret_cast<void*>(aligned), begin + bytes.size() - aligned, MADV_RANDOM);
}

void ReleaseMappedPages(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t aligned = begin / page * page;
  ::madvise(reinterpret_cast<void*>(aligned), begin + bytes.size() - aligned, MADV_DONTNEED);
}

Status DropFileFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  const int err = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (err != 0) {
    return IoError("%s: posix_fadvise(DONTNEED): %s", path.c_str(), std::strerror(err));
  }
  return OkStatus();
}

namespace {

size_t PageBytes() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

size_t RoundUp(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

constexpr size_t kHugePageBytes = size_t{2} << 20;

}  // namespace

Result<AnonymousMemory> AnonymousMemory::Reserve(size_t capacity, const std::string& what) {
  AnonymousMemory memory;
  memory.what_ = what;
  if (capacity == 0) return memory;
  const size_t page = PageBytes();
  // Whole pages, then one guard page that stays inaccessible.
  const size_t length = RoundUp(capacity, page) + page;
  // From 2 MiB on, the start is put on a 2 MiB boundary: a reservation that much longer, trimmed.
  const size_t slack = capacity >= kHugePageBytes ? kHugePageBytes : 0;
  void* addr = ::mmap(nullptr, length + slack, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED) {
    return IoError("%s: cannot reserve %zu bytes: %s", what.c_str(), capacity,
                   std::strerror(errno));
  }
  auto* base = static_cast<std::byte*>(addr);
  std::byte* start = base;
  if (slack > 0) {
    start =
        reinterpret_cast<std::byte*>(RoundUp(reinterpret_cast<uintptr_t>(base), kHugePageBytes));
    if (start > base) ::munmap(base, static_cast<size_t>(start - base));
    const size_t tail = slack - static_cast<size_t>(start - base);
    if (tail > 0) ::munmap(start + length, tail);
  }
  memory.data_ = start;
  memory.capacity_ = capacity;
  memory.mapped_ = length;
#ifdef MADV_HUGEPAGE
  // Kept by every part Grow makes usable later.
  memory.huge_pages_advised_ = ::madvise(start, length - page, MADV_HUGEPAGE) == 0;
#endif
  return memory;
}

Result<AnonymousMemory> AnonymousMemory::Allocate(size_t size, const std::string& what) {
  Result<AnonymousMemory> memory = Reserve(size, what);
  if (!memory.ok()) return memory.status();
  if (Status grown = memory->Grow(size); !grown.ok()) {
    return IoError("%s: cannot allocate %zu bytes: %s", what.c_str(), size,
                   grown.ToString().c_str());
  }
  return memory;
}

Status AnonymousMemory::Grow(size_t size) {
  if (size <= size_) return OkStatus();
  if (size > capacity_) {
    return IoError("%s: %zu bytes asked for, %zu reserved", what_.c_str(), size, capacity_);
  }
  const size_t page = PageBytes();
  const size_t usable = RoundUp(size_, page);
  const size_t wanted = RoundUp(size, page);
  if (wanted > usable && ::mprotect(data_ + usable, wanted - usable, PROT_READ | PROT_WRITE) != 0) {
    return IoError("%s: cannot make %zu more bytes usable: %s", what_.c_str(), wanted - usable,
                   std::strerror(errno));
  }
  size_ = size;
  return OkStatus();
}

AnonymousMemory::AnonymousMemory(AnonymousMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      mapped_(std::exchange(other.mapped_, 0)),
      huge_pages_advised_(other.huge_pages_advised_),
      what_(std::move(other.what_)) {}

AnonymousMemory& AnonymousMemory::operator=(AnonymousMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    huge_pages_advised_ = other.huge_pages_advised_;
    what_ = std::move(other.what_);
  }
  return *this;
}

AnonymousMemory::~AnonymousMemory() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
}

Result<size_t> CopyToAnonymousPages(std::span<const std::byte> bytes) {
  const uintptr_t page = PageBytes();
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes.size()) / page * page;
  if (bytes.empty() || first >= last) return size_t{0};
  const size_t length = last - first;
  // The copy starts at the range's offset within a huge page, so its huge pages move over whole.
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const size_t reserved = length + kHugePage;
  void* reservation =
      ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (reservation == MAP_FAILED) {
    return IoError("cannot allocate %zu bytes for a copy of mapped pages: %s", length,
                   std::strerror(errno));
  }
  const auto base = reinterpret_cast<uintptr_t>(reservation);
  const uintptr_t copy = base + ((first % kHugePage) - (base % kHugePage) + kHugePage) % kHugePage;
  if (copy > base) ::munmap(reservation, copy - base);
  if (base + reserved > copy + length) {
    ::munmap(reinterpret_cast<void*>(copy + length), base + reserved - (copy + length));
  }
  void* const copy_at = reinterpret_cast<void*>(copy);
#ifdef MADV_HUGEPAGE
  ::madvise(copy_at, length, MADV_HUGEPAGE);  // best effort: 4 KiB pages otherwise
#endif
  std::memcpy(copy_at, reinterpret_cast<const void*>(first), length);
  if (::mprotect(copy_at, length, PROT_READ) != 0 ||
      ::mremap(copy_at, length, length, MREMAP_MAYMOVE | MREMAP_FIXED,
               reinterpret_cast<void*>(first)) == MAP_FAILED) {
    const int err = errno;
    ::munmap(copy_at, length);
    return IoError("cannot move a copy of %zu mapped bytes at %p into place: %s", length,
                   reinterpret_cast<const void*>(first), std::strerror(err));
  }
  return length;
}

bool KernelTakesHugePageAdvice() {
  Result<AnonymousMemory> probe = AnonymousMemory::Allocate(1, "huge page probe");
  return probe.ok() && probe->huge_pages_advised();
}

bool HugePageModeServesAdvice(std::string_view enabled_line) {
  return enabled_line.find("[never]") == std::string_view::npos;
}

bool AdvisedMemoryGetsHugePages() {
  static const bool gets = [] {
    if (!KernelTakesHugePageAdvice()) return false;
    Result<std::string> mode = ReadFileToString("/sys/kernel/mm/transparent_hugepage/enabled");
    return HugePageModeServesAdvice(mode.ok() ? *mode : "");
  }();
  return gets;
}

Result<std::string> MappingVmFlags(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    // A mapping's header line: "begin-end perms offset dev inode [path]", in hex.
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &begin, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(line.find_first_not_of(' ', 8));
    }
  }
  return NotFoundError("no mapping with flags holds address %p in /proc/self/smaps", address);
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
