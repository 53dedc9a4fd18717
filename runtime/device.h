// Where a tensor's storage lives: the host, or one CUDA device.
#pragma once
#include <string>
#include <string_view>

namespace shardrt {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // CUDA ordinal; always 0 for cpu

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceKind::cuda, i}; }
  // Parses "cpu", "cuda", "cuda:N"; throws ValueError otherwise.
  static Device parse(std::string_view s);

  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  std::string str() const;  // "cpu" or "cuda:N"
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

}  // namespace shardrt
