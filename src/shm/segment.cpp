#include "shm/segment.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace commux::shm {
namespace {

std::runtime_error systemError(const std::string& what, const std::string& name) {
  return std::runtime_error("commux: " + what + " shared-memory segment " + name + ": " +
                            std::strerror(errno));
}

// The two shapes of a segment's name (wellFormedName checks them): "/commux-<pid>-<n>-<hex>"
// in /dev/shm, or a nameless one's "/proc/<pid>/fd/<fd>".
constexpr std::string_view kNamedPrefix = "/commux-";
constexpr std::string_view kProcPrefix = "/proc/";
constexpr std::string_view kFdPart = "/fd/";

// pid, a per-process counter and 64 random bits: unique on the host even across containers
// that share /dev/shm (O_EXCL turns a clash into a retry, never into sharing), and not
// guessable by another process before the name is published.
std::string freshName() {
  static std::atomic<unsigned> counter{0};
  std::uint64_t secret = 0;
  if (::getrandom(&secret, sizeof(secret), 0) != sizeof(secret)) {
    secret =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(secret));
  return std::string(kNamedPrefix) + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
         "-" + hex;
}

// Maps `fd`; closes it unless `keep`.
void* mapShared(int fd, std::size_t bytes, const std::string& name, bool keep = false) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const auto error = systemError("cannot map", name);
    ::close(fd);
    throw error;
  }
  if (!keep) ::close(fd);
  return data;
}

// posix_fallocate reserves the pages now: on a full /dev/shm, ftruncate alone would succeed
// and the first touch of a page would kill the process with SIGBUS. 0 or an errno.
int reserve(int fd, std::size_t bytes) {
  return ::ftruncate(fd, static_cast<off_t>(bytes)) != 0
             ? errno
             : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
}

}  // namespace

Segment::Segment(std::string name, void* data, std::size_t size, bool owner, int fd)
    : name_(std::move(name)), data_(data), size_(size), linked_(owner), fd_(fd) {}

Segment::~Segment() {
  unlink();
  ::munmap(data_, size_);
}

void Segment::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  } else {
    ::shm_unlink(name_.c_str());
  }
}

std::unique_ptr<Segment> Segment::create(std::size_t bytes, bool nameless) {
  if (nameless) {
    const int fd = ::memfd_create("commux-channel", MFD_CLOEXEC);
    if (fd < 0) throw systemError("cannot create", "(memfd)");
    const std::string path = std::string(kProcPrefix) + std::to_string(::getpid()) +
                             std::string(kFdPart) + std::to_string(fd);
    // memfd files start 0777; the others check for what a named segment has.
    const int rc = ::fchmod(fd, 0600) != 0 ? errno : reserve(fd, bytes);
    if (rc != 0) {
      errno = rc;
      const auto error = systemError("cannot size (" + std::to_string(bytes) + " bytes)", path);
      ::close(fd);
      throw error;
    }
    void* data = mapShared(fd, bytes, path, true);
    return std::unique_ptr<Segment>(new Segment(path, data, bytes, true, fd));
  }
  for (int attempt = 0;; ++attempt) {
    const std::string name = freshName();
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      if (errno == EEXIST && attempt < 8) continue;
      throw systemError("cannot create", name);
    }
    const int rc = reserve(fd, bytes);
    if (rc != 0) {
      errno = rc;
      const auto error = systemError("cannot size (" + std::to_string(bytes) + " bytes)", name);
      ::close(fd);
      ::shm_unlink(name.c_str());
      throw error;
    }
    try {
      return std::unique_ptr<Segment>(new Segment(name, mapShared(fd, bytes, name), bytes, true));
    } catch (...) {
      ::shm_unlink(name.c_str());
      throw;
    }
  }
}

bool Segment::wellFormedName(const std::string& name, std::int32_t pid) {
  if (name.size() >= 128) return false;
  const auto allOf = [&](std::size_t from, const char* allowed) {
    return name.size() > from && name.find_first_not_of(allowed, from) == std::string::npos;
  };
  const std::size_t from = kProcPrefix.size();
  if (name.compare(0, from, kProcPrefix) == 0) {
    const std::size_t fdAt = name.find(kFdPart, from);
    if (fdAt == std::string::npos || fdAt == from ||
        name.find_first_not_of("0123456789", from) != fdAt ||
        !allOf(fdAt + kFdPart.size(), "0123456789")) {
      return false;
    }
    return pid <= 0 || name.compare(from, fdAt - from, std::to_string(pid)) == 0;
  }
  return pid <= 0 && name.compare(0, kNamedPrefix.size(), kNamedPrefix) == 0 &&
         allOf(kNamedPrefix.size(), "0123456789abcdef-");
}

std::unique_ptr<Segment> Segment::open(const std::string& name, std::size_t bytes) {
  const bool viaProc = name.compare(0, kProcPrefix.size(), kProcPrefix) == 0;
  const int fd =
      viaProc ? ::open(name.c_str(), O_RDWR | O_CLOEXEC) : ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throw systemError("cannot open", name);
  // The name came through the store: map only a segment this user made as commux makes
  // them (mode 0600, exactly the announced size), never another file under /dev/shm.
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0) {
    problem = std::string("cannot be examined: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "is not a regular file";
  } else if (struct statfs fs{}; ::fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    problem = "is not in shared memory";
  } else if (st.st_uid != ::geteuid()) {
    problem = "belongs to another user (uid " + std::to_string(st.st_uid) + ")";
  } else if ((st.st_mode & 07777) != 0600) {
    problem = "has mode 0" +
              std::to_string((st.st_mode >> 6 & 7) * 100 + (st.st_mode >> 3 & 7) * 10 +
                             (st.st_mode & 7)) +
              ", not 0600";
  } else if (static_cast<std::size_t>(st.st_size) != bytes) {
    problem = "holds " + std::to_string(st.st_size) + " bytes, not the " + std::to_string(bytes) +
              " its creator announced";
  }
  if (!problem.empty()) {
    ::close(fd);
    throw std::runtime_error("commux: shared-memory segment " + name + " " + problem);
  }
  return std::unique_ptr<Segment>(new Segment(name, mapShared(fd, bytes, name), bytes, false));
}

}  // namespace commux::shm
