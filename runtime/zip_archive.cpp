#include "runtime/zip_archive.h"

#include <sys/stat.h>
#include <zip.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/errors.h"

namespace shardrt {

namespace {

template <typename... Args>
[[noreturn]] void zip_error(const std::string& label, const Args&... args) {
  throw IoError(detail::concat("zip archive '", label, "': ", args...));
}

std::string libzip_message(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

// Closes an entry on every path out of a read; zip_fclose's own result is checked on the normal path.
struct OpenEntry {
  zip_file_t* file;
  ~OpenEntry() {
    if (file) zip_fclose(file);
  }
};

}  // namespace

bool has_zip_magic(const unsigned char* bytes, std::size_t n) {
  return n >= 4 && bytes[0] == 'P' && bytes[1] == 'K' &&
         ((bytes[2] == 3 && bytes[3] == 4) || (bytes[2] == 5 && bytes[3] == 6));
}

ZipArchive::ZipArchive(std::string label, struct zip* handle, uint64_t archive_bytes,
                       std::shared_ptr<const std::vector<unsigned char>> bytes)
    : label_(std::move(label)), handle_(handle), bytes_(std::move(bytes)) {
  // handle_ owns the handle from here on, so an error below releases it.
  const zip_int64_t count = zip_get_num_entries(handle, 0);
  if (count < 0) zip_error(label_, "cannot count the entries: ", zip_strerror(handle));
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(handle, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW, &st) != 0)
      zip_error(label_, "cannot read entry ", i, ": ", zip_strerror(handle));
    const zip_uint64_t needed = ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
    if ((st.valid & needed) != needed) zip_error(label_, "entry ", i, " lacks a name, a size or a method");
    std::string name = st.name;
    // The stated size decides how much memory a read allocates, so it is bounded by what the archive's bytes can
    // expand to: a stored entry is exactly its bytes, and deflate expands at most 1032:1. Other methods (bzip2,
    // xz, zstd) can expand without a useful bound, and torch and PhysicsNeMo never use them.
    if (st.comp_size > archive_bytes)
      zip_error(label_, "entry '", name, "' claims ", st.comp_size, " compressed bytes, more than the archive's ",
                archive_bytes);
    if (st.comp_method == ZIP_CM_STORE) {
      if (st.size != st.comp_size)
        zip_error(label_, "stored entry '", name, "' states ", st.size, " bytes but occupies ", st.comp_size);
    } else if (st.comp_method == ZIP_CM_DEFLATE) {
      constexpr uint64_t kMaxDeflateRatio = 1032;
      if (st.size / kMaxDeflateRatio > st.comp_size + 1)
        zip_error(label_, "deflated entry '", name, "' states ", st.size, " bytes from ", st.comp_size,
                  " compressed, more than deflate can expand to");
    } else {
      zip_error(label_, "entry '", name, "' uses compression method ", st.comp_method,
                "; only stored and deflated entries are read (torch writes them stored)");
    }
    // libzip returns the first of two entries with one name; a second one would be silently shadowed.
    if (!index_.emplace(name, static_cast<uint64_t>(i)).second)
      zip_error(label_, "two entries are named '", name, "'");
    sizes_.emplace(name, st.size);
    names_.push_back(std::move(name));
  }
}

ZipArchive ZipArchive::open_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) zip_error(path, "cannot open it: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) zip_error(path, "not a regular file");
  int code = 0;
  struct zip* handle = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!handle) zip_error(path, "cannot open it as a zip archive: ", libzip_message(code));
  return ZipArchive(path, handle, static_cast<uint64_t>(st.st_size), nullptr);
}

ZipArchive ZipArchive::open_memory(std::string label, std::shared_ptr<const std::vector<unsigned char>> bytes) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes->data(), bytes->size(), 0, &error);
  if (!source) {
    std::string text = zip_error_strerror(&error);
    zip_error_fini(&error);
    zip_error(label, "cannot read it from memory: ", text);
  }
  struct zip* handle = zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (!handle) {
    zip_source_free(source);  // on failure the source still belongs to us
    std::string text = zip_error_strerror(&error);
    zip_error_fini(&error);
    zip_error(label, "cannot open it as a zip archive: ", text);
  }
  zip_error_fini(&error);
  const uint64_t archive_bytes = bytes->size();
  return ZipArchive(std::move(label), handle, archive_bytes, std::move(bytes));
}

void ZipArchive::Discard::operator()(struct zip* handle) const { zip_discard(handle); }

uint64_t ZipArchive::index_of(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) zip_error(label_, "has no entry '", name, "'");
  return it->second;
}

uint64_t ZipArchive::size_of(const std::string& name) const {
  index_of(name);
  return sizes_.at(name);
}

void ZipArchive::read_into(const std::string& name, void* destination, uint64_t bytes) const {
  const uint64_t index = index_of(name);
  const uint64_t stated = sizes_.at(name);
  if (stated != bytes) zip_error(label_, "entry '", name, "' holds ", stated, " bytes, expected ", bytes);
  OpenEntry entry{zip_fopen_index(handle_.get(), index, 0)};
  if (!entry.file) zip_error(label_, "cannot open entry '", name, "': ", zip_strerror(handle_.get()));
  auto* out = static_cast<unsigned char*>(destination);
  uint64_t done = 0;
  // Reading one byte past the stated size makes libzip reach the end of the entry, where it checks the CRC.
  while (true) {
    unsigned char spare = 0;
    unsigned char* target = done < bytes ? out + done : &spare;
    const uint64_t want = done < bytes ? bytes - done : 1;
    const zip_int64_t got = zip_fread(entry.file, target, want);
    if (got < 0) zip_error(label_, "reading entry '", name, "' failed: ", zip_file_strerror(entry.file));
    if (got == 0) break;
    done += static_cast<uint64_t>(got);
    if (done > bytes) zip_error(label_, "entry '", name, "' holds more than its stated ", bytes, " bytes");
  }
  if (done != bytes) zip_error(label_, "entry '", name, "' ends after ", done, " of its stated ", bytes, " bytes");
  const int closed = zip_fclose(std::exchange(entry.file, nullptr));
  if (closed != 0) zip_error(label_, "entry '", name, "' is corrupt: ", libzip_message(closed));
}

std::vector<unsigned char> ZipArchive::read(const std::string& name, uint64_t max_bytes) const {
  const uint64_t stated = size_of(name);
  if (stated > max_bytes)
    zip_error(label_, "entry '", name, "' states ", stated, " bytes, more than the ", max_bytes,
              " such an entry may have");
  std::vector<unsigned char> bytes(static_cast<std::size_t>(stated));
  read_into(name, bytes.data(), stated);
  return bytes;
}

std::string ZipArchive::read_text(const std::string& name, uint64_t max_bytes) const {
  std::vector<unsigned char> bytes = read(name, max_bytes);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace shardrt
