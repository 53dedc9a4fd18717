// Tensor metadata, views, copies, dtype conversion, factories, RNG and allocator accounting.
#include <catch2/catch.hpp>
#include <cmath>

#include "runtime/allocator.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/half.h"
#include "runtime/tensor.h"

using namespace shardrt;

namespace {
Tensor iota(const Shape& s, DType t = DType::f64) { return arange(0, static_cast<double>(shape_numel(s)), 1, {t}).reshape(s); }
}  // namespace

TEST_CASE("tensor: shape, strides and contiguity", "[runtime]") {
  Tensor t = Tensor::empty({2, 3, 4});
  CHECK(t.dim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.strides() == Strides{12, 4, 1});
  CHECK(t.is_contiguous());
  CHECK(t.size(-1) == 4);
  CHECK(t.str() == "f32[2, 3, 4] cpu");
  CHECK_FALSE(t.transpose(0, 2).is_contiguous());
  CHECK(Tensor::empty({0, 5}).numel() == 0);
  CHECK(Tensor::empty({}).numel() == 1);
  CHECK_THROWS_AS(Tensor::empty({2, -1}), ShapeError);
  CHECK_THROWS_AS(t.size(3), ShapeError);
}

TEST_CASE("tensor: views share storage and index correctly", "[runtime]") {
  Tensor t = iota({2, 3, 4});
  Tensor tr = t.transpose(0, 2);  // (4, 3, 2)
  CHECK(tr.shape() == Shape{4, 3, 2});
  auto v = tr.contiguous().to_vector();
  // tr[i][j][k] = t[k][j][i] = k*12 + j*4 + i
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) CHECK(v[(i * 3 + j) * 2 + k] == k * 12 + j * 4 + i);

  Tensor n = t.narrow(1, 1, 2);  // (2, 2, 4) starting at row 1
  CHECK(n.to_vector()[0] == 4);
  CHECK(n.storage() == t.storage());
  Tensor s = t.select(2, 3);  // (2, 3): t[:, :, 3]
  CHECK(s.to_vector() == std::vector<double>{3, 7, 11, 15, 19, 23});
  Tensor p = t.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.contiguous().to_vector()[1] == 4);  // p[0][0][1] = t[0][1][0]
  Tensor e = iota({3, 1}).expand({2, 3, 4});
  CHECK(e.strides()[0] == 0);
  CHECK(e.contiguous().to_vector()[4] == 1);
  CHECK(t.unsqueeze(1).shape() == Shape{2, 1, 3, 4});
  CHECK(t.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(t.unsqueeze(0).squeeze(0).shape() == t.shape());
  CHECK_THROWS_AS(t.squeeze(0), ShapeError);
  CHECK_THROWS_AS(t.narrow(1, 2, 2), ShapeError);
  CHECK_THROWS_AS(t.permute({0, 0, 1}), ShapeError);
  CHECK_THROWS_AS(iota({3, 2}).expand({3, 4}), ShapeError);
}

TEST_CASE("tensor: view versus reshape", "[runtime]") {
  Tensor t = iota({2, 3, 4});
  CHECK(t.view({6, 4}).storage() == t.storage());
  CHECK(t.view({-1}).numel() == 24);
  CHECK(t.view({2, 12}).shape() == Shape{2, 12});
  CHECK(t.view({4, 3, 2}).is_contiguous());
  Tensor tr = t.transpose(1, 2);  // (2, 4, 3) non-contiguous
  CHECK_THROWS_AS(tr.view({2, 12}), ShapeError);
  Tensor r = tr.reshape({2, 12});
  CHECK(r.is_contiguous());
  CHECK(r.to_vector()[1] == 4);  // tr[0][0][1] = t[0][1][0]
  // splitting a dim of a non-contiguous view is still a view
  Tensor sp = tr.view({2, 2, 2, 3});
  CHECK(sp.storage() == t.storage());
  CHECK(sp.contiguous().to_vector() == tr.contiguous().to_vector());
  // merging two dims that are contiguous with each other inside a non-contiguous tensor
  Tensor nar = iota({4, 3, 5}).narrow(2, 0, 2);  // (4, 3, 2), strides (15, 5, 1)
  CHECK_THROWS_AS(nar.view({4, 6}), ShapeError);
  CHECK(nar.view({2, 2, 3, 2}).shape() == Shape{2, 2, 3, 2});
  CHECK_THROWS_AS(t.view({5, -1}), ShapeError);
  CHECK_THROWS_AS(t.view({-1, -1}), ShapeError);
  CHECK(Tensor::empty({0, 3}).view({3, 0}).numel() == 0);
  CHECK(Tensor::empty({}).view({1, 1}).shape() == Shape{1, 1});
}

TEST_CASE("tensor: dtype conversion round trips", "[runtime]") {
  Tensor x = from_vector({-2.5, -1, 0, 0.5, 1, 3, 65504, 1e-3}, {8}, {DType::f64});
  auto f = x.to(DType::f32).to(DType::f64).to_vector();
  CHECK(std::vector<double>(f.begin(), f.end() - 1) == std::vector<double>{-2.5, -1, 0, 0.5, 1, 3, 65504});
  CHECK(f[7] == static_cast<double>(1e-3f));  // rounded to the nearest f32
  CHECK(x.to(DType::f16).to(DType::f64).to_vector()[6] == 65504);
  auto h = x.to(DType::f16).to_vector();
  CHECK(h[7] == Approx(1e-3).epsilon(1e-3));
  auto b = x.to(DType::bf16).to_vector();
  CHECK(b[0] == -2.5);
  CHECK(b[7] == Approx(1e-3).epsilon(4e-3));
  CHECK(x.to(DType::i64).to_vector() == std::vector<double>{-2, -1, 0, 0, 1, 3, 65504, 0});
  CHECK(x.to(DType::boolean).to_vector() == std::vector<double>{1, 1, 0, 1, 1, 1, 1, 1});
  CHECK(from_vector({300}, {1}, {DType::i32}).to(DType::u8).item() == 44);  // modular, like C
  // f16 special values and subnormals survive a round trip through float
  for (uint16_t bits : {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x3c00}) {
    f16 h16{bits};
    CHECK(float_to_f16(f16_to_float(h16)).bits == bits);
  }
  CHECK(std::isnan(f16_to_float(float_to_f16(NAN))));
  CHECK(float_to_bf16(1.0f).bits == 0x3f80);
  CHECK(float_to_bf16(1.00390625f).bits == 0x3f80);  // exactly halfway: ties to even
}

TEST_CASE("tensor: copy_, fill_ and clone", "[runtime]") {
  Tensor a = zeros({3, 4}, {DType::f32});
  Tensor col = a.narrow(1, 1, 1);
  col.fill_(7);
  CHECK(a.to_vector() == std::vector<double>{0, 7, 0, 0, 0, 7, 0, 0, 0, 7, 0, 0});
  Tensor src = iota({4, 3}, DType::f64).transpose(0, 1);  // (3, 4) non-contiguous
  a.copy_(src);
  CHECK(a.to_vector()[1] == 3);
  CHECK_THROWS_AS(a.copy_(iota({4, 3})), ShapeError);
  Tensor c = a.clone();
  c.fill_(1);
  CHECK(a.to_vector()[0] == 0);
  CHECK(full({2}, 3.5, {DType::f64}).to_vector() == std::vector<double>{3.5, 3.5});
  CHECK(ones({2, 2}, {DType::i32}).to_vector() == std::vector<double>{1, 1, 1, 1});
  CHECK(arange(0, 1, 0.25, {DType::f64}).to_vector() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(5, 0, 1).numel() == 0);
  CHECK_THROWS_AS(from_vector({1, 2}, {3}), ShapeError);
  CHECK_THROWS_AS(a.data<double>(), DTypeError);
  CHECK_THROWS_AS(Tensor().to_vector(), ValueError);
}

TEST_CASE("tensor: counter-based RNG is reproducible and well distributed", "[runtime]") {
  Generator g1(42), g2(42);
  Tensor a = rand({1000}, {DType::f32}, &g1);
  Tensor b = rand({1000}, {DType::f32}, &g2);
  CHECK(a.to_vector() == b.to_vector());
  Tensor a2 = rand({1000}, {DType::f32}, &g1);  // the next draw differs
  CHECK(a.to_vector() != a2.to_vector());
  // the f64 draw is a different stream of bits but also in [0, 1)
  Tensor n = randn({20000}, {DType::f64}, &g1);
  double mean = 0, var = 0;
  for (double v : n.to_vector()) mean += v;
  mean /= 20000;
  for (double v : n.to_vector()) var += (v - mean) * (v - mean);
  var /= 20000;
  CHECK(std::abs(mean) < 0.03);
  CHECK(std::abs(var - 1) < 0.05);
  for (double v : a.to_vector()) {
    CHECK(v >= 0);
    CHECK(v < 1);
  }
  // prefix property: element i does not depend on the tensor's size
  Generator g3(7), g4(7);
  auto small = rand({10}, {DType::f64}, &g3).to_vector();
  auto big = rand({100}, {DType::f64}, &g4).to_vector();
  CHECK(std::vector<double>(big.begin(), big.begin() + 10) == small);
  CHECK_THROWS_AS(rand({2}, {DType::i32}), DTypeError);
}

TEST_CASE("allocator: current and peak bytes are exact", "[runtime]") {
  MemoryStats before = memory_stats(Device::cpu());
  reset_peak_memory(Device::cpu());
  {
    Tensor t = Tensor::empty({1000}, DType::f64);
    MemoryStats during = memory_stats(Device::cpu());
    CHECK(during.current_bytes - before.current_bytes == 8000);
    Tensor view = t.narrow(0, 0, 10);  // views allocate nothing
    CHECK(memory_stats(Device::cpu()).current_bytes == during.current_bytes);
  }
  MemoryStats after = memory_stats(Device::cpu());
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes >= before.current_bytes + 8000);
  CHECK_THROWS_AS(Tensor::empty({2}, DType::f32, Device::cuda(0)), DeviceError);
}

TEST_CASE("tensor: without a usable CUDA device the stream entry points throw DeviceError", "[runtime]") {
  // In every build: cuda_context.h names no CUDA type, and a build without CUDA has no devices.
  if (cuda_available()) return;
  CHECK_THROWS_AS(current_stream(0), DeviceError);
  CHECK_THROWS_AS(cuda_synchronize(0), DeviceError);
}
