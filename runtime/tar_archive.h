// A read-only tar archive: the legacy PhysicsNeMo .mdlus format (a tar of model.pt, args.json, metadata.json).
//
// Indexes the regular files of a POSIX (ustar/pax) or GNU tar when it opens, verifying every header's checksum
// and that every member's data lies inside the file, then reads one member at a time. pax extended headers
// ('x') and GNU long names ('L') are honoured for the member that follows them; directories, links and other
// special members are skipped. Every problem is an IoError naming the archive and what is wrong.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardrt {

class TarArchive {
 public:
  static TarArchive open_file(const std::string& path);

  const std::string& path() const { return path_; }
  // Regular members in archive order, with a leading "./" removed.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return members_.count(name) != 0; }
  // The whole member; its size must be at most `max_bytes`.
  std::vector<unsigned char> read(const std::string& name, uint64_t max_bytes) const;
  std::string read_text(const std::string& name, uint64_t max_bytes) const;

 private:
  struct Member {
    uint64_t offset;  // of the data, in the file
    uint64_t size;
  };
  explicit TarArchive(std::string path) : path_(std::move(path)) {}

  std::string path_;
  std::vector<std::string> names_;
  std::map<std::string, Member> members_;
};

// True when the first 512 bytes of a file are a ustar/GNU tar header: the "ustar" magic at byte 257 and a
// matching header checksum.
bool has_tar_magic(const unsigned char* bytes, std::size_t n);

}  // namespace shardrt
