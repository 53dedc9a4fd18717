#include "runtime/tar_archive.h"

#include <array>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>

#include "runtime/errors.h"

namespace shardrt {

namespace {

constexpr uint64_t kBlock = 512;
// pax and GNU long-name headers carry a few names and numbers; anything larger is not an .mdlus member's header.
constexpr uint64_t kMaxExtendedHeaderBytes = 1 << 20;
constexpr uint64_t kNoSize = ~uint64_t{0};  // no pax size pending (a pax size is at most 19 digits, below this)

template <typename... Args>
[[noreturn]] void tar_error(const std::string& path, const Args&... args) {
  throw IoError(detail::concat("tar archive '", path, "': ", args...));
}

using Block = std::array<unsigned char, kBlock>;

std::string_view field(const Block& b, std::size_t begin, std::size_t length) {
  const char* p = reinterpret_cast<const char*>(b.data()) + begin;
  std::size_t n = 0;
  while (n < length && p[n] != '\0') ++n;  // fields end at a NUL or fill their width
  return {p, n};
}

// An octal number field: optional leading spaces, digits, then NUL/space padding. GNU's base-256 form (for sizes
// of 8 GiB and more) is refused: no legacy .mdlus member comes near it.
std::optional<uint64_t> octal_field(const Block& b, std::size_t begin, std::size_t length) {
  if (b[begin] & 0x80) return std::nullopt;
  std::string_view text = field(b, begin, length);
  std::size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  uint64_t value = 0;
  std::size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '7'; ++i, ++digits) value = value * 8 + (text[i] - '0');
  for (; i < text.size(); ++i)
    if (text[i] != ' ') return std::nullopt;
  if (digits == 0) return std::nullopt;
  return value;
}

// The header checksum: the byte sum with the checksum field itself read as eight spaces. Old tars summed signed
// chars, so either sum is accepted.
bool checksum_matches(const Block& b) {
  std::optional<uint64_t> stored = octal_field(b, 148, 8);
  if (!stored) return false;
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= 148 && i < 156;
    unsigned_sum += in_field ? ' ' : b[i];
    signed_sum += in_field ? ' ' : static_cast<signed char>(b[i]);
  }
  return static_cast<int64_t>(*stored) == unsigned_sum || static_cast<int64_t>(*stored) == signed_sum;
}

bool all_zero(const Block& b) {
  for (unsigned char c : b)
    if (c != 0) return false;
  return true;
}

std::string without_dot_slash(std::string name) {
  while (name.starts_with("./")) name.erase(0, 2);
  return name;
}

// pax records are "<length> <key>=<value>\n", the length counting the whole record.
void parse_pax(const std::string& path, std::string_view data, std::optional<std::string>& name, uint64_t& size) {
  while (!data.empty()) {
    std::size_t space = data.find(' ');
    uint64_t length = 0;
    if (space == std::string_view::npos || space == 0 || space > 20) tar_error(path, "malformed pax header record");
    for (std::size_t i = 0; i < space; ++i) {
      if (data[i] < '0' || data[i] > '9') tar_error(path, "malformed pax header record length");
      length = length * 10 + static_cast<uint64_t>(data[i] - '0');
    }
    if (length <= space + 1 || length > data.size() || data[length - 1] != '\n')
      tar_error(path, "pax header record length ", length, " does not fit the header");
    std::string_view record = data.substr(space + 1, length - space - 2);
    std::size_t equals = record.find('=');
    if (equals == std::string_view::npos) tar_error(path, "pax header record without '='");
    std::string_view key = record.substr(0, equals), value = record.substr(equals + 1);
    if (key == "path") name = std::string(value);
    if (key == "size") {
      uint64_t v = 0;
      if (value.empty() || value.size() > 19) tar_error(path, "pax size '", value, "' is not a size");
      for (char c : value) {
        if (c < '0' || c > '9') tar_error(path, "pax size '", value, "' is not a size");
        v = v * 10 + static_cast<uint64_t>(c - '0');
      }
      size = v;
    }
    data.remove_prefix(length);
  }
}

}  // namespace

bool has_tar_magic(const unsigned char* bytes, std::size_t n) {
  if (n < kBlock || std::memcmp(bytes + 257, "ustar", 5) != 0) return false;
  Block first{};
  std::memcpy(first.data(), bytes, kBlock);
  return checksum_matches(first);  // so that other data with "ustar" at byte 257 is not taken for a tar
}

TarArchive TarArchive::open_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) tar_error(path, "cannot open it");
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  if (end < 0) tar_error(path, "cannot find its size");
  const uint64_t file_bytes = static_cast<uint64_t>(end);

  auto read_at = [&](uint64_t offset, void* out, uint64_t n) {
    in.clear();
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    if (!in) tar_error(path, "cannot read ", n, " bytes at offset ", offset);
  };

  TarArchive archive(path);
  std::optional<std::string> next_name;  // from a pax or GNU long-name header, for the member after it
  uint64_t next_size = kNoSize;
  uint64_t offset = 0;
  while (offset < file_bytes) {
    if (file_bytes - offset < kBlock) tar_error(path, "ends inside a header at offset ", offset);
    Block header{};
    read_at(offset, header.data(), kBlock);
    if (all_zero(header)) break;  // the end-of-archive blocks
    if (!checksum_matches(header)) tar_error(path, "header at offset ", offset, " has a wrong checksum");
    std::optional<uint64_t> stated = octal_field(header, 124, 12);
    if (!stated) tar_error(path, "header at offset ", offset, " has an unreadable size field");
    const char type = static_cast<char>(header[156]);
    const bool regular = type == '0' || type == '\0' || type == '7';
    const uint64_t size = regular && next_size != kNoSize ? next_size : *stated;
    const uint64_t data_offset = offset + kBlock;
    if (size > file_bytes - data_offset)
      tar_error(path, "member at offset ", offset, " claims ", size, " bytes, but only ", file_bytes - data_offset,
                " follow");

    if (type == 'x' || type == 'L') {
      if (size > kMaxExtendedHeaderBytes) tar_error(path, "extended header at offset ", offset, " is ", size, " bytes");
      std::string data(size, '\0');
      read_at(data_offset, data.data(), size);
      if (type == 'x') {
        parse_pax(path, data, next_name, next_size);
      } else {
        next_name = data.substr(0, data.find('\0'));
      }
    } else if (regular) {
      std::string name;
      if (next_name) {
        name = *next_name;
      } else {
        std::string_view prefix = field(header, 345, 155), base = field(header, 0, 100);
        name = prefix.empty() ? std::string(base) : std::string(prefix) + "/" + std::string(base);
      }
      name = without_dot_slash(std::move(name));
      if (!archive.members_.emplace(name, Member{data_offset, size}).second)
        tar_error(path, "two members are named '", name, "'");
      archive.names_.push_back(std::move(name));
      next_name.reset();
      next_size = kNoSize;
    } else if (type != 'g') {
      // Directories, links, devices: no .mdlus content. Their extended header applied to them alone.
      next_name.reset();
      next_size = kNoSize;
    }
    offset = data_offset + (size + kBlock - 1) / kBlock * kBlock;
  }
  return archive;
}

std::vector<unsigned char> TarArchive::read(const std::string& name, uint64_t max_bytes) const {
  auto it = members_.find(name);
  if (it == members_.end()) tar_error(path_, "has no member '", name, "'");
  const Member& m = it->second;
  if (m.size > max_bytes)
    tar_error(path_, "member '", name, "' is ", m.size, " bytes, more than the ", max_bytes, " such a member may have");
  std::ifstream in(path_, std::ios::binary);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(m.size));
  in.seekg(static_cast<std::streamoff>(m.offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(m.size));
  if (!in) tar_error(path_, "cannot read member '", name, "' (", m.size, " bytes at offset ", m.offset, ")");
  return bytes;
}

std::string TarArchive::read_text(const std::string& name, uint64_t max_bytes) const {
  std::vector<unsigned char> bytes = read(name, max_bytes);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace shardrt
