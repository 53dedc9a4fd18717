// The CUDA side of the runtime: streams, the caching allocator's accounting, host <-> device copies with dtype
// conversion through strided views, fill_, and Philox draws that match the host. Every case is skipped, with a
// warning, when no CUDA device is present.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_allocator.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/tensor.h"
#include "tests/support/cuda_skip.h"

using namespace shardrt;
using shardrt::test::skip_without_cuda;

namespace {

const Device kCuda0 = Device::cuda(0);
const DType kAllDTypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16,
                            DType::i64, DType::i32, DType::u8,   DType::boolean};

// Values every dtype can hold without overflow (u8 takes no negatives), with fractions that integer casts
// truncate and ties that bf16 and f16 round to even (1 + 2^-8 and 1 + 3 * 2^-8 for bf16, 1 + 2^-11 for f16).
std::vector<double> sample_values(int64_t n) {
  const double specials[] = {0.0, 1.0, 0.5, 1.00390625, 1.01171875, 1.00048828125, 100.37, 255.0, 2.75, 17.0};
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i < 10 ? specials[i] : std::fmod(static_cast<double>(i) * 3.37, 200.0);
  return v;
}

}  // namespace

TEST_CASE("cuda runtime: one stream per device, created once and shared by threads", "[cuda][runtime]") {
  if (skip_without_cuda()) return;
  cudaStream_t s = current_stream(0);
  CHECK(s != nullptr);
  CHECK(current_stream(0) == s);
  cudaStream_t from_thread = nullptr;
  std::thread([&] { from_thread = current_stream(0); }).join();
  CHECK(from_thread == s);
  int active = -1;
  REQUIRE(cudaGetDevice(&active) == cudaSuccess);
  CHECK(active == 0);
  cuda_synchronize(0);
  CHECK_THROWS_AS(current_stream(cuda_device_count()), DeviceError);
  CHECK_THROWS_AS(cuda_caching_allocator(-1), DeviceError);
}

TEST_CASE("cuda allocator: Tensor::empty on cuda:0 is counted and returned when freed", "[cuda][runtime]") {
  if (skip_without_cuda()) return;
  const MemoryStats before = memory_stats(kCuda0);
  {
    Tensor t = Tensor::empty({1000, 3}, DType::f32, kCuda0);
    CHECK(t.device() == kCuda0);
    const MemoryStats during = memory_stats(kCuda0);
    CHECK(during.current_bytes == before.current_bytes + 12000);
    CHECK(during.allocations == before.allocations + 1);
    CHECK(during.peak_bytes >= during.current_bytes);
    // Zero bytes allocate nothing and count nothing.
    Tensor empty = Tensor::empty({0, 7}, DType::f64, kCuda0);
    CHECK(memory_stats(kCuda0).allocations == during.allocations);
    CHECK(memory_stats(kCuda0).current_bytes == during.current_bytes);
  }
  const MemoryStats after = memory_stats(kCuda0);
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes >= before.current_bytes + 12000);
  reset_peak_memory(kCuda0);
  CHECK(memory_stats(kCuda0).peak_bytes == after.current_bytes);

  // A freed block is reused by the next allocation on the stream, and still counted exactly.
  for (int i = 0; i < 3; ++i) {
    Tensor t = Tensor::empty({1 << 20}, DType::u8, kCuda0);
    CHECK(memory_stats(kCuda0).current_bytes == before.current_bytes + (1 << 20));
  }
  CHECK(memory_stats(kCuda0).current_bytes == before.current_bytes);
  CHECK(memory_stats(kCuda0).peak_bytes == before.current_bytes + (1 << 20));
}

TEST_CASE("cuda copy: every dtype pair round-trips through strided views with conversion", "[cuda][runtime]") {
  if (skip_without_cuda()) return;
  const int64_t baseline = memory_stats(kCuda0).current_bytes;
  const std::vector<double> values = sample_values(35);
  for (DType src : kAllDTypes) {
    const Tensor host = from_vector(values, {5, 7}, {src, Device::cpu()});
    const Tensor dev = host.to(kCuda0);
    REQUIRE(dev.device() == kCuda0);
    CHECK(dev.to(Device::cpu()).to_vector() == host.to_vector());
    for (DType dst : kAllDTypes) {
      INFO(dtype_name(src) << " -> " << dtype_name(dst));
      // Device-side conversion of a strided source (transposed, then narrowed), compared with the host's.
      const Tensor view_dev = dev.transpose(0, 1).narrow(0, 1, 5);
      const Tensor view_host = host.transpose(0, 1).narrow(0, 1, 5);
      const Tensor converted = view_dev.to(dst);
      CHECK(converted.device() == kCuda0);
      CHECK(converted.dtype() == dst);
      CHECK(converted.to(Device::cpu()).to_vector() == view_host.to(dst).to_vector());

      // Conversion into a strided destination, on the device and across devices.
      const Tensor want = Tensor::empty({7, 5}, dst, Device::cpu());
      want.transpose(0, 1).copy_(host);
      for (Device where : {kCuda0, Device::cpu()}) {
        INFO("destination " << where.str());
        const Tensor out = zeros({7, 5}, {dst, where});
        out.transpose(0, 1).copy_(dev);
        CHECK(out.to_vector() == want.to_vector());
      }
      // Host source, strided device destination.
      const Tensor out = zeros({7, 5}, {dst, kCuda0});
      out.transpose(0, 1).copy_(host);
      CHECK(out.to_vector() == want.to_vector());
    }
  }
  {  // 0-d and empty tensors
    const Tensor scalar = full({}, 2.5, {DType::f32, kCuda0});
    CHECK(scalar.to(DType::f64).item() == 2.5);
    CHECK(scalar.to(DType::i32).item() == 2.0);
    const Tensor empty = zeros({0, 3}, {DType::bf16, kCuda0});
    CHECK(empty.to(DType::f32).to(Device::cpu()).numel() == 0);
  }
  // Every staging buffer the copies made has been returned.
  CHECK(memory_stats(kCuda0).current_bytes == baseline);
}

TEST_CASE("cuda fill_: every dtype, contiguous and strided", "[cuda][runtime]") {
  if (skip_without_cuda()) return;
  for (DType t : kAllDTypes) {
    INFO(dtype_name(t));
    for (double value : {2.75, 0.0, 1.00390625, -0.0}) {
      INFO("value " << value);
      // The host conversion of the same value is the reference.
      const double want = full({1}, value, {t, Device::cpu()}).item();
      const Tensor dev = Tensor::empty({33, 7}, t, kCuda0);
      dev.fill_(value);
      CHECK(dev.to_vector() == std::vector<double>(33 * 7, want));
      // A strided view: only its elements change.
      const Tensor base = full({4099, 2}, 1.0, {t, kCuda0});
      base.narrow(1, 1, 1).fill_(value);
      const std::vector<double> got = base.to_vector();
      bool ok = true;
      for (int64_t i = 0; i < 4099; ++i) ok = ok && got[2 * i] == 1.0 && got[2 * i + 1] == want;
      CHECK(ok);
    }
  }
}

TEST_CASE("cuda rand/randn draw what the host draws for the same seed", "[cuda][runtime]") {
  if (skip_without_cuda()) return;
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4099}}) {
      INFO(dtype_name(t) << " n=" << n);
      Generator host_gen(1234), dev_gen(1234);
      // Uniform is bit-exact, also with bounds that make a fused multiply-add round differently.
      const Tensor u_host = rand({n}, {t, Device::cpu()}, &host_gen, -1.7, 3.3);
      const Tensor u_dev = rand({n}, {t, kCuda0}, &dev_gen, -1.7, 3.3);
      CHECK(u_dev.device() == kCuda0);
      CHECK(u_dev.dtype() == t);
      CHECK(u_dev.to_vector() == u_host.to_vector());
      // Normal: the device's log and cos may differ from the host's in the last ulp.
      const std::vector<double> want = randn({n}, {t, Device::cpu()}, &host_gen, 0.5, 2.0).to_vector();
      const std::vector<double> got = randn({n}, {t, kCuda0}, &dev_gen, 0.5, 2.0).to_vector();
      REQUIRE(got.size() == want.size());
      // One ulp of bf16/f16 where rounding the f32 draw lands the other side of a tie point.
      const double rel = t == DType::f64 ? 1e-12 : t == DType::f32 ? 1e-6 : t == DType::bf16 ? 8e-3 : 1e-3;
      int bad = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        if (std::abs(got[i] - want[i]) > rel * std::max(1.0, std::abs(want[i]))) ++bad;
      }
      CHECK(bad == 0);
    }
  }
  // The default generator: the same seed gives the same tensor on either device.
  manual_seed(77);
  const Tensor a = rand({1000}, {DType::f32, Device::cpu()});
  manual_seed(77);
  const Tensor b = rand({1000}, {DType::f32, kCuda0});
  CHECK(b.to_vector() == a.to_vector());
}
