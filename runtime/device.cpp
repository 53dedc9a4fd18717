#include "runtime/device.h"

#include <charconv>

#include "runtime/errors.h"

namespace shardrt {

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.substr(0, 5) == "cuda:") {
    int idx = -1;
    auto rest = s.substr(5);
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), idx);
    if (ec == std::errc() && p == rest.data() + rest.size() && idx >= 0) return cuda(idx);
  }
  throw ValueError(detail::concat("Device::parse: expected 'cpu', 'cuda' or 'cuda:N', got '", s, "'"));
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace shardrt
