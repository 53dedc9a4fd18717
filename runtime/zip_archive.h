// A read-only zip archive, the container of torch checkpoints (torch >= 1.6) and of PhysicsNeMo .mdlus files.
//
// A thin owner of a libzip handle: opened from a file or from bytes in memory (an .mdlus holds model.pt, itself a
// zip, as one of its entries), it lists the entries and reads one entry at a time, whole, after checking its
// stated size against what the caller expects and against what the archive's bytes can hold (stored entries are
// their bytes; deflated ones expand at most 1032:1; other methods are refused). libzip checks the archive's structure when it opens
// (ZIP_CHECKCONS: local headers against the central directory) and each entry's CRC when it is read to the end.
// Every problem is an IoError naming the archive, the entry and what is wrong.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct zip;

namespace shardrt {

class ZipArchive {
 public:
  // Opens the file at `path` for reading.
  static ZipArchive open_file(const std::string& path);
  // Opens an archive held in memory; `label` names it in messages ("x.mdlus: model.pt"), and the archive keeps
  // `bytes` alive for as long as it is open.
  static ZipArchive open_memory(std::string label, std::shared_ptr<const std::vector<unsigned char>> bytes);

  ZipArchive(ZipArchive&&) noexcept = default;
  ZipArchive& operator=(ZipArchive&&) noexcept = default;
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  const std::string& label() const { return label_; }
  // Entry names in the order the central directory lists them.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // The entry's uncompressed size; IoError when there is no such entry.
  uint64_t size_of(const std::string& name) const;

  // The whole entry. Its stated size must be at most `max_bytes` (a bound the caller knows is sane, so that a
  // corrupt or hostile size field cannot make us allocate without limit).
  std::vector<unsigned char> read(const std::string& name, uint64_t max_bytes) const;
  std::string read_text(const std::string& name, uint64_t max_bytes) const;
  // Reads the entry into `destination`, which has room for exactly `bytes` bytes; the entry must be that size.
  void read_into(const std::string& name, void* destination, uint64_t bytes) const;

 private:
  ZipArchive(std::string label, struct zip* handle, uint64_t archive_bytes,
             std::shared_ptr<const std::vector<unsigned char>> bytes);
  uint64_t index_of(const std::string& name) const;

  // Read-only, so closing discards: there is nothing to write back.
  struct Discard {
    void operator()(struct zip* handle) const;
  };

  std::string label_;
  std::unique_ptr<struct zip, Discard> handle_;
  std::shared_ptr<const std::vector<unsigned char>> bytes_;  // the in-memory archive, when there is one
  std::vector<std::string> names_;
  std::map<std::string, uint64_t> index_;  // name -> libzip entry index
  std::map<std::string, uint64_t> sizes_;  // name -> uncompressed bytes
};

// True when the first bytes of a file are a zip local-file header or an empty archive's end record.
bool has_zip_magic(const unsigned char* bytes, std::size_t n);

}  // namespace shardrt
