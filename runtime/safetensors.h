// Reading and writing the Hugging Face safetensors format, the format PhysicsNeMo checkpoints ship in.
//
// Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (plus an optional "__metadata__" object of strings),
// then the data section: raw little-endian, row-major bytes; offsets are relative to its start.
//
// Loading trusts nothing in the file: every header field is checked against the file size before any
// byte of data is touched, and each problem is an IoError naming the file and what is wrong.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

// The tensors and metadata of one loaded file.
class SafetensorsFile {
 public:
  SafetensorsFile(std::string path, std::map<std::string, Tensor> tensors, std::map<std::string, std::string> metadata)
      : path_(std::move(path)), tensors_(std::move(tensors)), metadata_(std::move(metadata)) {}

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws IoError naming the tensor and the file when there is no such tensor.
  const Tensor& get(const std::string& name) const;
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  // The "__metadata__" object; empty when the file has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Maps the file and returns its tensors as contiguous CPU tensors.
//
// Tensors are zero-copy views into a private (copy-on-write) mapping of the file, which stays mapped while
// any of them lives; mapped bytes are not counted by memory_stats. Writing into a loaded tensor is therefore
// harmless: it copies the touched page and never reaches the file. A tensor whose bytes are not aligned to its
// element size (legal in safetensors, never produced by save_safetensors) is copied into fresh aligned memory
// instead, because kernels access elements through typed pointers and an unaligned one is undefined behaviour.
// The file must not be truncated or rewritten in place while its tensors live (replacing it with
// save_safetensors is safe: that writes a new file and renames it over the old one).
// BOOL tensors are checked to hold only bytes 0 and 1, since the runtime reads them as C++ bool.
// Throws IoError naming the file for anything missing, unreadable or malformed.
SafetensorsFile load_safetensors(const std::string& path);

// Writes `tensors` (any strides, any device) and `metadata` to `path`.
//
// The file is written to `path + ".tmp.<pid>"`, fsync'd and renamed over `path`, so a crash or an error at
// any point leaves the previous file intact. The header is padded with spaces to a multiple of 8 bytes, and
// the data is ordered by element size (largest first), then by name, so every tensor starts aligned to its
// element size without gaps between tensors, and loads zero-copy. Two threads of one process must not save to
// the same path at once: they would share the temporary file.
// Throws ValueError for an empty name, a name starting with "__" (reserved by the format), a name or
// metadata string that is not valid UTF-8, or an undefined tensor; IoError when the file cannot be written.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace shardrt
