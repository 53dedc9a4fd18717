// Point-to-point: send/recv, ring shifts (uneven sizes, P shifts return the original, async) and neighbour
// halo exchange with unequal widths per rank, edges untouched.
#include "mesh/communicator.h"
#include "mesh_testing.h"
#include "runtime/errors.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("p2p: send and recv", "[mesh][p2p]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  for (DType t : all_dtypes()) {
    INFO(dtype_name(t));
    if (r == 0) {
      for (int j = 1; j < p; ++j) c.send(tensor_of(gen_vec(j, j + 2), t), j, 7);
      for (int j = 1; j < p; ++j) {
        Tensor back = Tensor::empty({j}, t);
        c.recv(back, j, 8);
        CHECK_VALUES(back, gen_vec(100 + j, j));
      }
    } else {
      Tensor in = Tensor::empty({r + 2}, t);
      c.recv(in, 0, 7);
      CHECK_VALUES(in, gen_vec(r, r + 2));
      c.send(tensor_of(gen_vec(100 + r, r), t), 0, 8);
    }
  }
  CHECK_THROWS_AS(c.send(Tensor::empty({1}), r), ValueError);  // to itself
  CHECK_THROWS_AS(c.send(Tensor::empty({1}), p), ValueError);
  CHECK_THROWS_AS(c.recv(Tensor::empty({1}), (r + 1) % p, Communicator::max_user_tag + 1), ValueError);
}

TEST_CASE("p2p: ring shift of uneven blocks returns the original after P shifts", "[mesh][p2p]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank();
  auto len = [](int owner) { return static_cast<int64_t>(owner + 1); };  // every block has its own size
  for (DType t : all_dtypes())
    for (int offset : {1, -1, 2}) {
      INFO(dtype_name(t) << " offset " << offset);
      int owner = r;
      Tensor cur = tensor_of(gen_vec(owner, len(owner)), t);
      for (int step = 1; step <= p; ++step) {
        int from = ((owner - offset) % p + p) % p;
        Tensor next = Tensor::empty({len(from)}, t);
        c.ring_shift(cur, next, offset);
        owner = from;
        cur = next;
        CHECK_VALUES(cur, gen_vec(owner, len(owner)));
      }
      CHECK(owner == r);
      CHECK_VALUES(cur, gen_vec(r, len(r)));
    }
}

TEST_CASE("p2p: async ring shift overlaps with local work", "[mesh][p2p]") {
  const auto& c = world();
  const int p = c.size(), r = c.rank(), prev = (r + p - 1) % p;
  Tensor k = tensor_of(gen_vec(r, 16, 3), DType::f32), v = tensor_of(gen_vec(r, 8, 4), DType::bf16);
  Tensor k_next = Tensor::empty({16}), v_next = Tensor::empty({8}, DType::bf16);
  CommHandle hk = c.ring_shift_async(k, k_next);
  CommHandle hv = c.ring_shift_async(v, v_next);  // two shifts in flight at once match in issue order
  CHECK(hk.pending() == (p > 1));
  double local = 0;
  for (double x : k.to_vector()) local += x;  // "compute" while the blocks travel
  CHECK(local > 0);
  while (!hv.ready()) {
  }
  CHECK_FALSE(hv.pending());
  hk.wait();
  CHECK_FALSE(hk.pending());
  CHECK_VALUES(k_next, gen_vec(prev, 16, 3));
  CHECK_VALUES(v_next, gen_vec(prev, 8, 4));
  CHECK_THROWS_AS(c.ring_shift(k, k), ValueError);  // in and out overlap
}

namespace {

// A (2, ext, 3) tensor per rank, sharded along dim `dim` (1 = strided slabs, 0 = contiguous ones). Interior
// slice k of rank r is global slice offset(r) + k; its elements are small integers (exact in every dtype) that
// differ between neighbouring slices and positions. Halo slices start at a sentinel no element takes.
struct HaloCase {
  int dim;
  DType dtype;
};

void run_halo(const Communicator& c, HaloCase hc, bool async) {
  const int p = c.size(), r = c.rank();
  HaloWidths w{std::vector<int64_t>(p), std::vector<int64_t>(p)};
  std::vector<int64_t> interior(p), offset(p + 1, 0);
  for (int j = 0; j < p; ++j) {
    w.left[j] = j % 2 + 1;     // 1, 2, 1, 2: unequal per rank and between sides
    w.right[j] = (j + 2) % 3;  // 2, 0, 1, 2
    interior[j] = 3 + j;
    offset[j + 1] = offset[j] + interior[j];
  }
  const int64_t left = w.left[r], right = w.right[r], ext = left + interior[r] + right;
  Shape shape = hc.dim == 1 ? Shape{2, ext, 3} : Shape{ext, 2, 3};
  const int64_t outer = hc.dim == 1 ? 2 : 1, inner = hc.dim == 1 ? 3 : 6;
  auto value = [&](int64_t global_slice, int64_t o, int64_t i) {
    return static_cast<double>((global_slice * 13 + o * inner + i) % 97);
  };
  const double sentinel = 200.0;
  std::vector<double> init(static_cast<std::size_t>(outer * ext * inner), sentinel);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = left; s < left + interior[r]; ++s)
      for (int64_t i = 0; i < inner; ++i)
        init[static_cast<std::size_t>((o * ext + s) * inner + i)] = value(offset[r] + s - left, o, i);
  Tensor padded = from_vector(init, shape, {hc.dtype});
  if (async) {
    CommHandle h = c.halo_exchange_async(padded, hc.dim, w);
    h.wait();
  } else {
    c.halo_exchange(padded, hc.dim, w);
  }
  auto got = padded.to_vector();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = 0; s < ext; ++s)
      for (int64_t i = 0; i < inner; ++i) {
        double want;
        if (s < left) want = r == 0 ? sentinel : value(offset[r] - left + s, o, i);  // global edge: untouched
        else if (s >= left + interior[r])
          want = r == p - 1 ? sentinel : value(offset[r + 1] + s - left - interior[r], o, i);
        else want = value(offset[r] + s - left, o, i);
        INFO("rank " << r << " dim " << hc.dim << " slice " << s << " outer " << o << " inner " << i);
        CHECK(got[static_cast<std::size_t>((o * ext + s) * inner + i)] == want);
      }
}

}  // namespace

TEST_CASE("p2p: halo exchange with unequal widths leaves the global edges untouched", "[mesh][p2p]") {
  const auto& c = world();
  for (DType t : all_dtypes())
    for (int dim : {1, 0})
      for (bool async : {false, true}) {
        INFO(dtype_name(t) << " dim " << dim << (async ? " async" : " blocking"));
        run_halo(c, HaloCase{dim, t}, async);
      }
}

TEST_CASE("p2p: halo exchange argument errors are typed and raised before any transfer", "[mesh][p2p]") {
  const auto& c = world();
  const int p = c.size();
  HaloWidths big{std::vector<int64_t>(p, 5), std::vector<int64_t>(p, 5)};
  CHECK_THROWS_AS(c.halo_exchange(Tensor::empty({4, 2}), 0, big), ShapeError);  // widths exceed the extent
  HaloWidths short_w{std::vector<int64_t>(p + 1, 0), std::vector<int64_t>(p, 0)};
  CHECK_THROWS_AS(c.halo_exchange(Tensor::empty({4, 2}), 0, short_w), ValueError);
  HaloWidths none{std::vector<int64_t>(p, 0), std::vector<int64_t>(p, 0)};
  CHECK_THROWS_AS(c.halo_exchange(Tensor::empty({4, 2}), 2, none), ShapeError);
  CHECK_THROWS_AS(c.halo_exchange(Tensor::empty({4, 2}).transpose(0, 1), 0, none), ShapeError);
  c.halo_exchange(Tensor::empty({4, 2}), 0, none);  // nothing to move: completes at once
}
