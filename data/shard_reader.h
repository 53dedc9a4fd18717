// Reads windows of (S, H, W) fields out of a safetensors file without reading the rest of it.
//
// The file is mapped read-only (mmap, MADV_RANDOM so the kernel does not read ahead); the header is parsed and
// checked against the file size when the file is opened, and a read copies only the bytes of the window asked
// for — rows [row0, row0 + rows) and columns [col0, col0 + cols) of one sample — into the caller's buffer,
// converting f32/f64 to the destination type. Every copied byte is counted, so a test can assert that a rank of a
// domain-parallel loader touched only its own share of the data set (and a trainer can report its I/O).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace shardrt::data {

// Bytes copied out of mapped files by the readers sharing this counter.
struct ByteCounter {
  std::atomic<int64_t> bytes{0};
};

class ShardFile {
 public:
  // IoError naming the file for a missing, short or malformed file (header length, JSON, a dtype other than
  // F32/F64 for a field, data offsets outside the data section or not matching the shape).
  ShardFile(const std::string& path, std::shared_ptr<ByteCounter> counter);
  ~ShardFile();
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // IoError naming the tensor and the file when absent.
  const Shape& shape(const std::string& name) const;
  DType dtype(const std::string& name) const;

  // Copies the window of sample `sample` of the 3-D tensor `name` into `dst` (row-major, row stride
  // `dst_row_stride` elements), as T (float or double). ValueError naming the file, the tensor, its shape and the
  // window when the window does not fit.
  template <typename T>
  void read_window(const std::string& name, int64_t sample, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                   T* dst, int64_t dst_row_stride) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    int64_t begin;  // byte offset in the file
  };
  const Entry& entry(const std::string& name) const;

  std::string path_;
  std::shared_ptr<ByteCounter> counter_;
  const unsigned char* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, Entry> entries_;
};

}  // namespace shardrt::data
