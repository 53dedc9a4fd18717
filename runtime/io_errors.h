// The text of a failed system call's errno for an IoError, with what to do where the cause is the usual one of a
// long run: the disk (or a quota, or a file-size limit) is full. Shared by the file writers (safetensors, the
// checkpoint's files) so that a full disk reads the same wherever it is met.
#pragma once
#include <cerrno>
#include <string>
#include <system_error>

namespace shardrt {

inline std::string errno_message(int err) {
  std::string text = std::system_category().message(err);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG)
    text += " (disk full: the filesystem, a quota or the process's file-size limit has no room for this file; "
            "free space or write somewhere else; the previous file is untouched)";
  return text;
}

}  // namespace shardrt
