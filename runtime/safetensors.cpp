#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "runtime/errors.h"
#include "runtime/io_errors.h"

namespace shardrt {

// The format is little-endian and loaded tensors view the file's bytes in place.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;

// A corrupt length field must not make us parse an arbitrarily large region; real headers are kilobytes to a
// few megabytes. This is the bound the Hugging Face implementation uses too.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr uint64_t kLengthFieldBytes = 8;

struct SafetensorsDType {
  DType dtype;
  const char* name;
};
constexpr SafetensorsDType kDTypes[] = {
    {DType::f64, "F64"}, {DType::f32, "F32"}, {DType::bf16, "BF16"}, {DType::f16, "F16"},
    {DType::i64, "I64"}, {DType::i32, "I32"}, {DType::u8, "U8"},     {DType::boolean, "BOOL"},
};

const char* safetensors_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  throw DTypeError(detail::concat("save_safetensors: dtype ", dtype_name(t), " has no safetensors name"));
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

std::string errno_text() { return errno_message(errno); }

template <typename... Args>
[[noreturn]] void load_error(const std::string& path, const Args&... args) {
  throw IoError(detail::concat("load_safetensors: '", path, "': ", args...));
}

template <typename... Args>
[[noreturn]] void save_error(const std::string& path, const Args&... args) {
  throw IoError(detail::concat("save_safetensors: '", path, "': ", args...));
}

// Offset of the first byte of `s` that does not start a well-formed UTF-8 sequence, or npos. Well-formed means
// Unicode's definition (Table 3-7): no overlong forms, no surrogates, nothing above U+10FFFF.
std::size_t find_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char second_min = 0x80, second_max = 0xBF;  // the lead byte narrows the second byte's range
    if (lead >= 0xC2 && lead <= 0xDF) length = 2;
    else if (lead == 0xE0) length = 3, second_min = 0xA0;  // excludes overlong 3-byte forms
    else if (lead >= 0xE1 && lead <= 0xEC) length = 3;
    else if (lead == 0xED) length = 3, second_max = 0x9F;  // excludes the surrogates U+D800..U+DFFF
    else if (lead >= 0xEE && lead <= 0xEF) length = 3;
    else if (lead == 0xF0) length = 4, second_min = 0x90;  // excludes overlong 4-byte forms
    else if (lead >= 0xF1 && lead <= 0xF3) length = 4;
    else if (lead == 0xF4) length = 4, second_max = 0x8F;  // excludes code points above U+10FFFF
    else return i;
    if (s.size() - i < length) return i;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < second_min || second > second_max) return i;
    for (std::size_t k = 2; k < length; ++k) {
      const auto continuation = static_cast<unsigned char>(s[i + k]);
      if (continuation < 0x80 || continuation > 0xBF) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

bool is_valid_utf8(std::string_view s) { return find_invalid_utf8(s) == std::string_view::npos; }

// ------------------------------------------------------------------------------------------------ loading

// A whole file mapped privately; the last tensor viewing it unmaps it. Private and writable means a write into
// a loaded tensor copies the page instead of faulting, and never reaches the file.
class FileMapping {
 public:
  FileMapping(const std::string& path, int fd, std::size_t bytes) : bytes_(bytes) {
    void* addr = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) load_error(path, "cannot map ", bytes, " bytes: ", errno_text());
    data_ = static_cast<unsigned char*>(addr);
  }
  ~FileMapping() { ::munmap(data_, bytes_); }
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  unsigned char* data() const { return data_; }
  std::size_t size() const { return bytes_; }

 private:
  unsigned char* data_ = nullptr;
  std::size_t bytes_;
};

// Closes a descriptor on every path out of a function.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::shared_ptr<FileMapping> map_file(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) load_error(path, "cannot open: ", errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) load_error(path, "cannot stat: ", errno_text());
  if (!S_ISREG(st.st_mode)) load_error(path, "not a regular file");
  if (static_cast<uint64_t>(st.st_size) < kLengthFieldBytes)
    load_error(path, "file is ", st.st_size, " bytes, too short for the 8-byte header length");
  return std::make_shared<FileMapping>(path, fd.get(), static_cast<std::size_t>(st.st_size));
}

// Parses the header text. Besides JSON syntax this rejects two things nlohmann would accept silently: a key
// repeated within one object (nlohmann keeps the last, so a repeated tensor name would hide a tensor), and
// nesting deeper than a header can have (header object > entry object > shape array), which is refused as it is
// met so that a hostile header cannot make the parser build large nested structures.
json parse_header(const std::string& path, std::string_view text) {
  std::vector<std::set<std::string>> keys_of_open_objects;
  auto check_event = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > 2) load_error(path, "header nests deeper than a safetensors header can");
        if (event == json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys_of_open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_of_open_objects.back().insert(parsed.get<std::string>()).second)
          load_error(path, "header repeats the key '", parsed.get<std::string>(), "'");
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check_event);
  } catch (const json::exception& e) {
    load_error(path, "header is not valid JSON: ", e.what());
  }
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& value) {
  if (!value.is_object())
    load_error(path, "\"__metadata__\" is ", value.type_name(), ", expected an object of strings");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, entry] : value.items()) {
    if (!entry.is_string())
      load_error(path, "\"__metadata__\" entry '", key, "' is ", entry.type_name(), ", expected a string");
    metadata.emplace(key, entry.get<std::string>());
  }
  return metadata;
}

// The value of a JSON integer that is >= 0, or nullopt for anything else (negative, fractional, not a number).
std::optional<uint64_t> non_negative_integer(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// One header entry, validated on its own: the dtype is known, the shape is sane, and the byte range lies inside
// the data section and has exactly the size the dtype and shape need.
struct TensorEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;  // byte offsets into the data section
  uint64_t end;
};

const json& required_field(const std::string& path, const std::string& name, const json& entry, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end()) load_error(path, "tensor '", name, "': missing \"", key, "\"");
  return *it;
}

TensorEntry parse_entry(const std::string& path, const std::string& name, const json& entry, uint64_t data_bytes) {
  if (!entry.is_object()) load_error(path, "tensor '", name, "': entry is ", entry.type_name(), ", expected an object");
  TensorEntry out{name, DType::f32, {}, 0, 0};

  const json& dtype = required_field(path, name, entry, "dtype");
  if (!dtype.is_string())
    load_error(path, "tensor '", name, "': \"dtype\" is ", dtype.type_name(), ", expected a string");
  std::optional<DType> known = dtype_from_safetensors_name(dtype.get<std::string>());
  if (!known)
    load_error(path, "tensor '", name, "': unsupported dtype ", dtype.dump(),
               " (supported: F64, F32, BF16, F16, I64, I32, U8, BOOL)");
  out.dtype = *known;

  const json& shape = required_field(path, name, entry, "shape");
  if (!shape.is_array())
    load_error(path, "tensor '", name, "': \"shape\" is ", shape.type_name(), ", expected an array");
  // The product of the nonzero sizes must fit in int64 even when another size is 0: code that computes strides
  // or partial products over such a shape would otherwise overflow.
  int64_t nonzero_product = 1;
  bool has_zero = false;
  for (const json& size : shape) {
    std::optional<uint64_t> n = non_negative_integer(size);
    if (!n || *n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      load_error(path, "tensor '", name, "': shape ", shape.dump(), " has an entry that is not a non-negative int64");
    const auto d = static_cast<int64_t>(*n);
    out.shape.push_back(d);
    if (d == 0) has_zero = true;
    else if (__builtin_mul_overflow(nonzero_product, d, &nonzero_product))
      load_error(path, "tensor '", name, "': shape ", shape.dump(), " has more elements than int64 can count");
  }
  const uint64_t numel = has_zero ? 0 : static_cast<uint64_t>(nonzero_product);

  const json& offsets = required_field(path, name, entry, "data_offsets");
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2)
    begin = non_negative_integer(offsets[0]), end = non_negative_integer(offsets[1]);
  if (!begin || !end)
    load_error(path, "tensor '", name, "': \"data_offsets\" is ", offsets.dump(),
               ", expected [begin, end] as two non-negative integers");
  if (*begin > *end) load_error(path, "tensor '", name, "': data_offsets ", offsets.dump(), " has begin after end");
  if (*end > data_bytes)
    load_error(path, "tensor '", name, "': data_offsets ", offsets.dump(), " end past the data section (", data_bytes,
               " bytes)");
  out.begin = *begin;
  out.end = *end;

  // Compared by division so that a huge numel cannot overflow the byte count.
  const uint64_t bytes = out.end - out.begin, element = dtype_size(out.dtype);
  if (bytes % element != 0 || bytes / element != numel)
    load_error(path, "tensor '", name, "': data_offsets ", offsets.dump(), " span ", bytes, " bytes, but ",
               dtype.dump(), " with shape ", shape.dump(), " needs ", numel, " x ", element, " bytes");
  return out;
}

void check_no_overlap(const std::string& path, std::vector<const TensorEntry*> entries) {
  // Zero-size tensors own no bytes, so they overlap nothing wherever their offsets point.
  std::erase_if(entries, [](const TensorEntry* e) { return e->begin == e->end; });
  std::sort(entries.begin(), entries.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < entries.size(); ++i) {
    const TensorEntry& prev = *entries[i - 1];
    const TensorEntry& cur = *entries[i];
    if (cur.begin < prev.end)
      load_error(path, "tensors '", prev.name, "' [", prev.begin, ", ", prev.end, ") and '", cur.name, "' [", cur.begin,
                 ", ", cur.end, ") overlap");
  }
}

Tensor make_tensor(const std::string& path, const TensorEntry& e, unsigned char* data_section,
                   const std::shared_ptr<FileMapping>& mapping) {
  unsigned char* bytes = data_section + e.begin;
  const std::size_t nbytes = e.end - e.begin;
  // The runtime reads BOOL elements as C++ bool, for which any byte other than 0 or 1 is undefined behaviour.
  if (e.dtype == DType::boolean) {
    const unsigned char* bad = std::find_if(bytes, bytes + nbytes, [](unsigned char b) { return b > 1; });
    if (bad != bytes + nbytes)
      load_error(path, "tensor '", e.name, "': BOOL element ", bad - bytes, " is byte ", static_cast<int>(*bad),
                 ", expected 0 or 1");
  }
  if (reinterpret_cast<std::uintptr_t>(bytes) % dtype_size(e.dtype) == 0)
    return Tensor::from_blob(bytes, e.shape, e.dtype, Device::cpu(), mapping);
  // Unaligned: kernels access elements through typed pointers, so give this tensor aligned memory of its own.
  Tensor copy = Tensor::empty(e.shape, e.dtype);
  if (nbytes > 0) std::memcpy(copy.raw_data(), bytes, nbytes);
  return copy;
}

// ------------------------------------------------------------------------------------------------ saving

// The temporary file a save writes into. Until commit() renames it over the destination, destroying it removes
// it, so a save that fails anywhere leaves no stray file and the destination untouched.
class PendingFile {
 public:
  explicit PendingFile(const std::string& destination)
      : destination_(destination), temporary_(destination + ".tmp." + std::to_string(::getpid())) {
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) save_error(destination_, "cannot create '", temporary_, "': ", errno_text());
  }
  ~PendingFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temporary_.c_str());
  }
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;

  void write(const void* data, std::size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t written = ::write(fd_, p, bytes);
      if (written < 0) {
        if (errno == EINTR) continue;
        save_error(destination_, "writing '", temporary_, "' failed: ", errno_text());
      }
      p += written;
      bytes -= static_cast<std::size_t>(written);
    }
  }

  // Flushes the data to disk before the rename, so the destination name never points at a partly written file.
  void commit() {
    if (::fsync(fd_) != 0) save_error(destination_, "fsync of '", temporary_, "' failed: ", errno_text());
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) save_error(destination_, "closing '", temporary_, "' failed: ", errno_text());
    if (::rename(temporary_.c_str(), destination_.c_str()) != 0)
      save_error(destination_, "renaming '", temporary_, "' over it failed: ", errno_text());
    committed_ = true;
    sync_parent_directory();
  }

 private:
  // Makes the rename itself survive a power loss. Best effort: the new file is already complete and in place,
  // and some filesystems refuse fsync on a directory.
  void sync_parent_directory() const {
    const std::size_t slash = destination_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : destination_.substr(0, slash);
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
  }

  std::string destination_;
  std::string temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

void check_savable(const std::string& path, const std::map<std::string, Tensor>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  const std::string where = detail::concat("save_safetensors: '", path, "': ");
  for (const auto& [name, t] : tensors) {
    SHARDRT_CHECK(!name.empty(), ValueError, where, "empty tensor name");
    SHARDRT_CHECK(!name.starts_with("__"), ValueError, where, "tensor name '", name,
                  "' starts with \"__\", which the format reserves");
    SHARDRT_CHECK(is_valid_utf8(name), ValueError, where, "a tensor name is not valid UTF-8");
    SHARDRT_CHECK(t.defined(), ValueError, where, "tensor '", name, "' is undefined");
  }
  for (const auto& [key, value] : metadata)
    SHARDRT_CHECK(is_valid_utf8(key) && is_valid_utf8(value), ValueError, where,
                  "a metadata string is not valid UTF-8");
}

}  // namespace

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  SHARDRT_CHECK(it != tensors_.end(), IoError, "SafetensorsFile::get: '", path_, "' has no tensor named '", name, "'");
  return it->second;
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::shared_ptr<FileMapping> mapping = map_file(path);
  const uint64_t file_bytes = mapping->size();

  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, mapping->data(), kLengthFieldBytes);
  if (header_bytes > kMaxHeaderBytes)
    load_error(path, "header length ", header_bytes, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  if (header_bytes > file_bytes - kLengthFieldBytes)
    load_error(path, "header length ", header_bytes, " runs past the end of the file (", file_bytes, " bytes)");

  const std::string_view header(reinterpret_cast<const char*>(mapping->data()) + kLengthFieldBytes, header_bytes);
  // Checked here rather than left to the JSON parser, which validates only inside strings.
  if (std::size_t bad = find_invalid_utf8(header); bad != std::string_view::npos)
    load_error(path, "header is not valid UTF-8 (byte ", bad, " of the header)");
  // JSON never contains a raw NUL, but nlohmann stops reading at one, which would silently ignore whatever follows.
  if (std::size_t nul = header.find('\0'); nul != std::string_view::npos)
    load_error(path, "header is not valid JSON: NUL byte at byte ", nul, " of the header");
  const json doc = parse_header(path, header);
  if (!doc.is_object()) load_error(path, "header is ", doc.type_name(), ", expected an object");

  unsigned char* data_section = mapping->data() + kLengthFieldBytes + header_bytes;
  const uint64_t data_bytes = file_bytes - kLengthFieldBytes - header_bytes;
  std::map<std::string, std::string> metadata;
  std::vector<TensorEntry> entries;
  for (const auto& [name, value] : doc.items()) {
    if (name == "__metadata__")
      metadata = parse_metadata(path, value);
    else
      entries.push_back(parse_entry(path, name, value, data_bytes));
  }
  std::vector<const TensorEntry*> entry_pointers;
  for (const TensorEntry& e : entries) entry_pointers.push_back(&e);
  check_no_overlap(path, std::move(entry_pointers));

  std::map<std::string, Tensor> tensors;
  for (const TensorEntry& e : entries) tensors.emplace(e.name, make_tensor(path, e, data_section, mapping));
  return SafetensorsFile(path, std::move(tensors), std::move(metadata));
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_savable(path, tensors, metadata);

  // Largest elements first, then by name: with no gaps between tensors, every tensor then starts at a multiple
  // of its element size (the data section itself starts at a multiple of 8), so it loads as an aligned view.
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  for (const auto& [name, t] : tensors) order.emplace_back(&name, &t);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second->dtype()) > dtype_size(b.second->dtype());
  });

  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    json entry = json::object();
    entry["dtype"] = safetensors_name(t->dtype());
    entry["shape"] = t->shape();
    entry["data_offsets"] = json::array({offset, offset + t->nbytes()});
    header[*name] = std::move(entry);
    offset += t->nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string header_text = header.dump();
  header_text.append((kLengthFieldBytes - header_text.size() % kLengthFieldBytes) % kLengthFieldBytes, ' ');

  PendingFile file(path);
  const uint64_t header_bytes = header_text.size();
  file.write(&header_bytes, kLengthFieldBytes);
  file.write(header_text.data(), header_text.size());
  for (const auto& [name, t] : order) {
    // One tensor at a time, so at most one host copy is alive.
    const Tensor host = t->contiguous().to(Device::cpu());
    if (host.nbytes() > 0) file.write(host.raw_data(), host.nbytes());
  }
  file.commit();
}

}  // namespace shardrt
