// The filesystem steps of an atomic checkpoint save (optim/checkpoint.h): durable writes, directory fsyncs, the
// atomic directory exchange, and the CRC-32 that lets a load tell a corrupted piece from a good one. Every failure
// is an IoError naming the path and the system's reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardrt::checkpoint_files {

// "<dir>" without trailing slashes ("a/b/" -> "a/b"); "/" stays "/".
std::string normalized(const std::string& dir);
// The directory holding `path` ("." for a bare name).
std::string parent_of(const std::string& path);
// The last component of `path`.
std::string base_name(const std::string& path);

bool exists(const std::string& path);
bool is_directory(const std::string& path);
// Bytes of a regular file (IoError when it is missing or not a regular file).
uint64_t file_size(const std::string& path);
std::string read_text(const std::string& path, uint64_t max_bytes);

void make_directory(const std::string& path);  // the parent must exist; the directory must not
// fsync of a directory, so that the renames and creations inside it survive a power loss. A filesystem that refuses
// fsync on directories (EINVAL) is accepted: there is nothing more one can do there.
void sync_directory(const std::string& path);
// Writes `bytes` to `path` through a temporary file in the same directory: write, fsync, rename, directory fsync.
void write_file_durably(const std::string& path, const std::string& bytes);

// Puts the complete directory `fresh` at `target` in one step. When `target` exists, renameat2(RENAME_EXCHANGE)
// swaps the two names, so the previous checkpoint is under `fresh`'s name afterwards; where the filesystem cannot
// exchange, `target` is renamed to `fallback_old` first and then `fresh` to `target`. Returns where the previous
// checkpoint now is ("" when there was none); the caller removes it. The parent is fsynced.
std::string exchange_into_place(const std::string& fresh, const std::string& target, const std::string& fallback_old);

// Removes a directory tree; best effort (a leftover is harmless: readers never look at it).
void remove_tree(const std::string& path) noexcept;
// Names in directory `parent` that start with `prefix`.
std::vector<std::string> entries_with_prefix(const std::string& parent, const std::string& prefix);

// CRC-32 (IEEE 802.3, the zip/zlib polynomial), continuing from `crc` (0 to start).
uint32_t crc32(const void* data, std::size_t bytes, uint32_t crc = 0);

}  // namespace shardrt::checkpoint_files
