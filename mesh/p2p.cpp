// Point-to-point communication of Communicator: send/recv, ring shift and neighbour halo exchange. The ring
// shift and the halo exchange post every receive and send of a rank at once, so no ordering between ranks
// can deadlock, and return a handle so compute can overlap the transfer.
#include <functional>
#include <utility>

#include "mesh/backend.h"
#include "mesh/comm_core.h"
#include "mesh/communicator.h"
#include "runtime/errors.h"

namespace shardrt {

namespace {

// Tags above Communicator::max_user_tag; each kind has its own so concurrent transfers never cross-match.
constexpr int kTagRing = 30000;
constexpr int kTagHaloToLeft = 30001;   // interior slices travelling to rank r-1
constexpr int kTagHaloToRight = 30002;  // interior slices travelling to rank r+1

// The checks format their message (naming the collective, axis and rank) only when they fail.
void require_contiguous(const CommCore& core, const char* kind, const Tensor& t, const char* what) {
  SHARDRT_CHECK(t.defined(), ValueError, core.where(kind), ": ", what, " is undefined");
  SHARDRT_CHECK(t.is_contiguous(), ShapeError, core.where(kind), ": ", what, " ", t.str(),
                " is not contiguous (collectives move flat element ranges; pass .contiguous())");
}

void require_peer(const CommCore& core, const char* kind, int peer, const char* what) {
  SHARDRT_CHECK(peer >= 0 && peer < core.size, ValueError, core.where(kind), ": ", what, " rank ", peer,
                " is not in [0, ", core.size, ")");
  SHARDRT_CHECK(peer != core.rank, ValueError, core.where(kind), ": ", what, " rank ", peer,
                " is this rank; a blocking send to itself cannot complete (use ring_shift or a copy)");
}

void require_tag(const CommCore& core, const char* kind, int tag) {
  SHARDRT_CHECK(tag >= 0 && tag <= Communicator::max_user_tag, ValueError, core.where(kind), ": tag ", tag,
                " is not in [0, ", Communicator::max_user_tag, "]");
}

bool overlap(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  auto lo_a = static_cast<const char*>(a.raw_data()), lo_b = static_cast<const char*>(b.raw_data());
  return lo_a < lo_b + b.nbytes() && lo_b < lo_a + a.nbytes();
}

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

}  // namespace

void Communicator::send(const Tensor& buf, int dst, int tag) const {
  const char* kind = "send";
  require_contiguous(*core_, kind, buf, "buffer");
  require_peer(*core_, kind, dst, "destination");
  require_tag(*core_, kind, tag);
  CommBackend& be = p2p_backend_for(buf, kind);
  record(kind, static_cast<int64_t>(buf.nbytes()));
  auto describe = [=] { return detail::concat(buf.str(), " to rank ", dst, " tag ", tag); };
  be.start_p2p({{buf, dst, tag}}, {}, core_->call(kind, describe))->wait();
}

void Communicator::recv(const Tensor& buf, int src, int tag) const {
  const char* kind = "recv";
  require_contiguous(*core_, kind, buf, "buffer");
  require_peer(*core_, kind, src, "source");
  require_tag(*core_, kind, tag);
  CommBackend& be = p2p_backend_for(buf, kind);
  record(kind, 0);
  auto describe = [=] { return detail::concat(buf.str(), " from rank ", src, " tag ", tag); };
  be.start_p2p({}, {{buf, src, tag}}, core_->call(kind, describe))->wait();
}

void Communicator::ring_shift(const Tensor& in, const Tensor& out, int offset) const {
  ring_shift_async(in, out, offset).wait();
}

CommHandle Communicator::ring_shift_async(const Tensor& in, const Tensor& out, int offset) const {
  const char* kind = "ring_shift";
  enter_collective();
  require_contiguous(*core_, kind, in, "input");
  require_contiguous(*core_, kind, out, "output");
  SHARDRT_CHECK(in.dtype() == out.dtype(), DTypeError, where(kind), ": input ", in.str(), " and output ", out.str(),
                " differ in dtype");
  SHARDRT_CHECK(in.device() == out.device(), DeviceError, where(kind), ": input ", in.str(), " and output ", out.str(),
                " are on different devices");
  SHARDRT_CHECK(!overlap(in, out), ValueError, where(kind), ": input ", in.str(), " and output ", out.str(),
                " overlap in memory; a ring shift needs a separate receive buffer");
  const int p = size(), off = ((offset % p) + p) % p;
  const int next = (rank() + off) % p, prev = (rank() - off + p) % p;
  CallSignature sig = signature_of(kind, in);
  sig.count = in.numel();
  sig.param = off;
  sig.extra = out.numel();
  check_signature(sig);
  CommBackend& be = backend_for(in, kind);
  record(kind, next != rank() ? static_cast<int64_t>(in.nbytes()) : 0);
  if (next == rank()) {  // a shift by a multiple of P keeps the data here
    SHARDRT_CHECK(out.numel() == in.numel(), ShapeError, where(kind), ": a shift by ", offset, " keeps ", in.str(),
                  " on this rank, but the output ", out.str(), " has another size");
    flat(out).copy_(flat(in));
    return CommHandle();
  }
  Call call = core_->call(kind, [=] {
    return detail::concat("send ", in.str(), " to rank ", next, ", receive ", out.str(), " from rank ", prev);
  });
  return CommHandle(be.start_p2p({{in, next, kTagRing}}, {{out, prev, kTagRing}}, std::move(call)), nullptr);
}

void Communicator::halo_exchange(const Tensor& padded, int dim, const HaloWidths& widths) const {
  halo_exchange_async(padded, dim, widths).wait();
}

CommHandle Communicator::halo_exchange_async(const Tensor& padded, int dim, const HaloWidths& widths) const {
  const char* kind = "halo_exchange";
  enter_collective();
  require_contiguous(*core_, kind, padded, "buffer");
  SHARDRT_CHECK(padded.dim() > 0 && dim >= -padded.dim() && dim < padded.dim(), ShapeError, where(kind), ": dim ", dim,
                " is out of range for ", padded.str());
  const int d = dim < 0 ? dim + padded.dim() : dim;
  const int p = size(), r = rank();
  SHARDRT_CHECK(static_cast<int>(widths.left.size()) == p && static_cast<int>(widths.right.size()) == p, ValueError,
                where(kind), ": widths have ", widths.left.size(), " left and ", widths.right.size(),
                " right entries, expected one per rank (", p, ")");
  for (int j = 0; j < p; ++j)
    SHARDRT_CHECK(widths.left[j] >= 0 && widths.right[j] >= 0, ValueError, where(kind),
                  ": negative halo width for rank ", j);
  const int64_t ext = padded.size(d), left = widths.left[r], right = widths.right[r];
  const int64_t interior = ext - left - right;
  SHARDRT_CHECK(interior >= 0, ShapeError, where(kind), ": ", padded.str(), " has extent ", ext, " along dim ", d,
                ", less than its halo widths ", left, " + ", right);
  // What the neighbours expect from this rank's interior.
  const int64_t to_left = r > 0 ? widths.right[r - 1] : 0;
  const int64_t to_right = r < p - 1 ? widths.left[r + 1] : 0;
  SHARDRT_CHECK(to_left <= interior && to_right <= interior, ShapeError, where(kind), ": the interior of ",
                padded.str(), " has ", interior, " slices along dim ", d, ", fewer than its neighbours need (", to_left,
                " for rank ", r - 1, ", ", to_right, " for rank ", r + 1, "); a halo cannot reach past one neighbour");
  int64_t slice_elements = 1;
  for (int i = 0; i < padded.dim(); ++i)
    if (i != d) slice_elements *= padded.size(i);
  CallSignature sig = signature_of(kind, padded);
  sig.param = d;
  sig.extra = slice_elements;
  sig.a = widths.left;
  sig.b = widths.right;
  check_signature(sig);
  CommBackend& be = backend_for(padded, kind);
  const int64_t slice_bytes = ext > 0 ? static_cast<int64_t>(padded.nbytes()) / ext : 0;
  record(kind, (to_left + to_right) * slice_bytes);

  // A slab along an inner dim is strided: it travels through a compact copy.
  std::vector<Transfer> sends, recvs;
  std::vector<std::pair<Tensor, Tensor>> unpack;  // (strided destination, compact receive buffer)
  if (to_left > 0) sends.push_back({padded.narrow(d, left, to_left).contiguous(), r - 1, kTagHaloToLeft});
  if (to_right > 0)
    sends.push_back({padded.narrow(d, ext - right - to_right, to_right).contiguous(), r + 1, kTagHaloToRight});
  auto add_recv = [&](int64_t start, int64_t width, int peer, int tag) {
    Tensor region = padded.narrow(d, start, width);
    if (region.is_contiguous()) return recvs.push_back({region, peer, tag});
    Tensor compact = Tensor::empty(region.shape(), region.dtype(), region.device());
    recvs.push_back({compact, peer, tag});
    unpack.emplace_back(region, compact);
  };
  if (r > 0 && left > 0) add_recv(0, left, r - 1, kTagHaloToRight);
  if (r < p - 1 && right > 0) add_recv(ext - right, right, r + 1, kTagHaloToLeft);

  Call call = core_->call(kind, [=] {
    return detail::concat(padded.str(), " dim ", d, ", receive ", left, " | ", right, " slices, send ", to_left, " | ",
                          to_right);
  });
  std::function<void()> finish;
  if (!unpack.empty())
    finish = [unpack = std::move(unpack)] {
      for (const auto& [dst, src] : unpack) dst.copy_(src);
    };
  return CommHandle(be.start_p2p(sends, recvs, std::move(call)), std::move(finish));
}

}  // namespace shardrt
