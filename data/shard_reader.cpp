#include "data/shard_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/errors.h"

namespace shardrt::data {

ShardFile::ShardFile(const std::string& path, std::shared_ptr<ByteCounter> counter)
    : path_(path), counter_(std::move(counter)) {
  if (!counter_) counter_ = std::make_shared<ByteCounter>();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SHARDRT_CHECK(fd >= 0, IoError, "ShardFile: cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError("ShardFile: cannot stat '" + path + "': " + std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw IoError("ShardFile: '" + path + "' has " + std::to_string(size_) +
                  " bytes, fewer than the 8 of a safetensors header length");
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  SHARDRT_CHECK(m != MAP_FAILED, IoError, "ShardFile: cannot map '", path, "': ", std::strerror(errno));
  map_ = static_cast<const unsigned char*>(m);
  // Only the windows asked for are to be read: no read-ahead around them.
  ::madvise(m, size_, MADV_RANDOM);
  try {
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | map_[i];
    SHARDRT_CHECK(header_len <= size_ - 8, IoError, "ShardFile: '", path, "' states a header of ", header_len,
                  " bytes but has only ", size_ - 8, " after the length");
    const auto header = nlohmann::json::parse(map_ + 8, map_ + 8 + header_len);
    const int64_t data_start = static_cast<int64_t>(8 + header_len);
    for (const auto& [name, e] : header.items()) {
      if (name == "__metadata__") continue;
      const std::string dt = e.at("dtype").get<std::string>();
      Entry entry{};
      if (dt == "F32") entry.dtype = DType::f32;
      else if (dt == "F64") entry.dtype = DType::f64;
      else if (dt == "I64") entry.dtype = DType::i64;
      else continue;  // not a field (none of the loader's business)
      entry.shape = e.at("shape").get<Shape>();
      const auto offs = e.at("data_offsets").get<std::vector<int64_t>>();
      SHARDRT_CHECK(offs.size() == 2 && offs[0] >= 0 && offs[1] >= offs[0] &&
                        offs[1] <= static_cast<int64_t>(size_) - data_start,
                    IoError, "ShardFile: '", path, "': tensor '", name, "' has data offsets outside the file");
      int64_t numel = 1;
      for (int64_t d : entry.shape) {
        SHARDRT_CHECK(d >= 0, IoError, "ShardFile: '", path, "': tensor '", name, "' has a negative dim");
        numel *= d;
      }
      SHARDRT_CHECK(offs[1] - offs[0] == numel * static_cast<int64_t>(dtype_size(entry.dtype)), IoError,
                    "ShardFile: '", path, "': tensor '", name, "' has ", offs[1] - offs[0],
                    " bytes, its shape and dtype need ", numel * static_cast<int64_t>(dtype_size(entry.dtype)));
      entry.begin = data_start + offs[0];
      entries_[name] = entry;
    }
  } catch (const nlohmann::json::exception& e) {
    ::munmap(const_cast<unsigned char*>(map_), size_);
    throw IoError("ShardFile: '" + path + "' has a malformed header: " + e.what());
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), size_);
    throw;
  }
}

ShardFile::~ShardFile() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), size_);
}

const ShardFile::Entry& ShardFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  SHARDRT_CHECK(it != entries_.end(), IoError, "ShardFile: '", path_, "' has no f32/f64 tensor '", name, "'");
  return it->second;
}
const Shape& ShardFile::shape(const std::string& name) const { return entry(name).shape; }
DType ShardFile::dtype(const std::string& name) const { return entry(name).dtype; }

template <typename T>
void ShardFile::read_window(const std::string& name, int64_t sample, int64_t row0, int64_t rows, int64_t col0,
                            int64_t cols, T* dst, int64_t dst_row_stride) const {
  const Entry& e = entry(name);
  SHARDRT_CHECK(e.shape.size() == 3 && (e.dtype == DType::f32 || e.dtype == DType::f64), ValueError,
                "ShardFile::read_window: '", path_, "': tensor '", name, "' is ", dtype_name(e.dtype), " of ",
                e.shape.size(), " dims; a field is f32/f64 (S, H, W)");
  const int64_t S = e.shape[0], H = e.shape[1], W = e.shape[2];
  SHARDRT_CHECK(sample >= 0 && sample < S && row0 >= 0 && rows >= 0 && row0 + rows <= H && col0 >= 0 && cols >= 0 &&
                    col0 + cols <= W,
                ValueError, "ShardFile::read_window: '", path_, "': tensor '", name, "' (", S, ", ", H, ", ", W,
                ") has no window sample ", sample, ", rows [", row0, ", ", row0 + rows, "), cols [", col0, ", ",
                col0 + cols, ")");
  const size_t es = dtype_size(e.dtype);
  for (int64_t r = 0; r < rows; ++r) {
    const unsigned char* src = map_ + e.begin + static_cast<int64_t>(es) * ((sample * H + row0 + r) * W + col0);
    T* out = dst + r * dst_row_stride;
    // memcpy per element: a foreign file may place a tensor at an offset its element size does not divide.
    if (e.dtype == DType::f32) {
      for (int64_t c = 0; c < cols; ++c) {
        float v;
        std::memcpy(&v, src + 4 * c, 4);
        out[c] = static_cast<T>(v);
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) {
        double v;
        std::memcpy(&v, src + 8 * c, 8);
        out[c] = static_cast<T>(v);
      }
    }
  }
  counter_->bytes.fetch_add(rows * cols * static_cast<int64_t>(es), std::memory_order_relaxed);
}

template void ShardFile::read_window<float>(const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t, float*,
                                            int64_t) const;
template void ShardFile::read_window<double>(const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t,
                                             double*, int64_t) const;

}  // namespace shardrt::data
