#include "optim/checkpoint_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "runtime/errors.h"
#include "runtime/io_errors.h"

namespace shardrt::checkpoint_files {

namespace {

std::string errno_text() { return errno_message(errno); }

template <typename... Args>
[[noreturn]] void fail(const std::string& path, const Args&... args) {
  throw IoError(detail::concat("checkpoint: '", path, "': ", args...));
}

class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

}  // namespace

std::string normalized(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

std::string parent_of(const std::string& path) {
  const std::string p = normalized(path);
  const std::size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const std::string p = normalized(path);
  const std::size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, "cannot stat: ", errno_text());
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

std::string read_text(const std::string& path, uint64_t max_bytes) {
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open: ", errno_text());
  const uint64_t bytes = file_size(path);
  if (bytes > max_bytes) fail(path, "is ", bytes, " bytes, more than the limit of ", max_bytes);
  std::string text(bytes, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "read failed: ", errno_text());
    if (n == 0) fail(path, "shrank while being read (", done, " of ", bytes, " bytes)");
    done += static_cast<std::size_t>(n);
  }
  return text;
}

void make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) fail(path, "cannot create the directory: ", errno_text());
}

void sync_directory(const std::string& path) {
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open the directory to fsync it: ", errno_text());
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail(path, "fsync of the directory failed: ", errno_text());
}

void write_file_durably(const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  Descriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail(temporary, "cannot create: ", errno_text());
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::unlink(temporary.c_str());
      fail(temporary, "write failed: ", errno_text());
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) {
    ::unlink(temporary.c_str());
    fail(temporary, "fsync failed: ", errno_text());
  }
  if (::close(fd.release()) != 0) {
    ::unlink(temporary.c_str());
    fail(temporary, "close failed: ", errno_text());
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    fail(path, "renaming '", temporary, "' onto it failed: ", errno_text());
  }
  sync_directory(parent_of(path));
}

std::string exchange_into_place(const std::string& fresh, const std::string& target, const std::string& fallback_old) {
  const std::string parent = parent_of(target);
  std::string previous;
  if (!exists(target)) {
    if (::rename(fresh.c_str(), target.c_str()) != 0) fail(target, "renaming '", fresh, "' to it failed: ", errno_text());
  } else if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    previous = fresh;
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    // No atomic exchange here: two renames, with the previous checkpoint complete under fallback_old in between.
    if (::rename(target.c_str(), fallback_old.c_str()) != 0)
      fail(target, "moving the previous checkpoint to '", fallback_old, "' failed: ", errno_text());
    if (::rename(fresh.c_str(), target.c_str()) != 0)
      fail(target, "renaming '", fresh, "' to it failed (the previous checkpoint is at '", fallback_old,
           "'): ", errno_text());
    previous = fallback_old;
  } else {
    fail(target, "exchanging it with '", fresh, "' failed: ", errno_text());
  }
  sync_directory(parent);
  return previous;
}

void remove_tree(const std::string& path) noexcept {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::vector<std::string> entries_with_prefix(const std::string& parent, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.starts_with(prefix)) out.push_back(name);
  }
  ::closedir(d);
  return out;
}

uint32_t crc32(const void* data, std::size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (std::size_t i = 0; i < bytes; ++i) c = kCrcTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

}  // namespace shardrt::checkpoint_files
