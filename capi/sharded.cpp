// Sharded tensors from the simulation's own decomposition: each rank states the box of the global field it holds
// (offsets + its local shape); one all-gather of those boxes lets every rank check the tiling and derive the same
// ShardSpec, so nothing is ever gathered but 26 integers per rank.
#include <algorithm>
#include <sstream>

#include "capi/objects.h"
#include "runtime/errors.h"

namespace shardrt::capi {

namespace {

constexpr int kMaxDims = 8;
constexpr int kRecord = 2 + 3 * kMaxDims;  // ndim, unused, global[8], offsets[8], extents[8]

struct Box {
  int ndim = 0;
  int64_t global[kMaxDims] = {}, off[kMaxDims] = {}, n[kMaxDims] = {};

  std::string global_str() const { return list(global, 0, ndim); }
  // "[o0, o0+n0) x [o1, o1+n1) ..." of dims from..ndim-1
  std::string box_str(int from) const {
    std::ostringstream os;
    for (int k = from; k < ndim; ++k) os << (k > from ? " x " : "") << "[" << off[k] << ", " << off[k] + n[k] << ")";
    return os.str();
  }
  int64_t volume(int from) const {
    int64_t v = 1;
    for (int k = from; k < ndim; ++k) v *= n[k];
    return v;
  }
  static std::string list(const int64_t* v, int from, int to) {
    std::string s = "[";
    for (int i = from; i < to; ++i) s += (i > from ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  }
};

bool overlap(const Box& a, const Box& b, int from) {
  for (int k = from; k < a.ndim; ++k)
    if (a.off[k] + a.n[k] <= b.off[k] || b.off[k] + b.n[k] <= a.off[k]) return false;
  return true;
}

// What the gathered boxes say: the model-facing global shape, placements and extents, checked identically on
// every rank (every rank reads the same table, so every rank throws the same ShapeError).
struct Layout {
  Shape global;
  int domain_dim = -1;     // the dim sharded over the domain axis; -1: replicated over it
  bool flattened = false;  // dims 1..ndim-2 flattened into points
  Extents ddp_extents, domain_extents;
};

Layout analyse(const std::vector<Box>& boxes, int ddp, int domain, bool points, const char* fn) {
  const Box& first = boxes[0];
  const int nd = first.ndim;
  for (size_t r = 1; r < boxes.size(); ++r) {
    const Box& b = boxes[r];
    SHARDRT_CHECK(b.ndim == nd && std::equal(b.global, b.global + nd, first.global), ShapeError, fn,
                  ": the ranks disagree on the global shape: rank 0 states ", first.global_str(), ", rank ", r,
                  " states ", b.global_str(), "; every rank must pass the same global_shape");
  }
  Layout out;
  SHARDRT_CHECK(nd >= 1, ShapeError, fn, ": a sharded tensor needs dim 0 (the samples); the global shape is []");
  SHARDRT_CHECK(!points || nd >= 3, ShapeError, fn, ": a point set is (samples, grid dims..., channels), at least ",
                "3 dims; the global shape is ", first.global_str());
  // dim 0: the same samples within a domain group, the groups' samples tiling global dim 0 in ddp order.
  int64_t next_sample = 0;
  for (int g = 0; g < ddp; ++g) {
    const Box& lead = boxes[static_cast<size_t>(g * domain)];
    for (int j = 1; j < domain; ++j) {
      const Box& b = boxes[static_cast<size_t>(g * domain + j)];
      SHARDRT_CHECK(b.off[0] == lead.off[0] && b.n[0] == lead.n[0], ShapeError, fn, ": the ranks of ddp group ",
                    g, " hold different samples: rank ", g * domain, " samples [", lead.off[0], ", ",
                    lead.off[0] + lead.n[0], "), rank ", g * domain + j, " samples [", b.off[0], ", ",
                    b.off[0] + b.n[0], "); a domain group holds subdomains of the same samples");
    }
    SHARDRT_CHECK(lead.off[0] == next_sample, ShapeError, fn, ": ddp group ", g, " (rank ", g * domain,
                  ") starts at sample ", lead.off[0], " but the groups before it end at ", next_sample,
                  "; the ddp groups' samples must tile dim 0 in ddp order");
    next_sample += lead.n[0];
    out.ddp_extents.push_back(lead.n[0]);
  }
  SHARDRT_CHECK(next_sample == first.global[0], ShapeError, fn, ": the ddp groups hold ", next_sample,
                " samples in all but the global shape ", first.global_str(), " has ", first.global[0]);
  // dims 1..: one box per domain index, the same in every ddp group, tiling the sample's global box exactly.
  for (int g = 1; g < ddp; ++g)
    for (int j = 0; j < domain; ++j) {
      const Box& a = boxes[static_cast<size_t>(j)];
      const Box& b = boxes[static_cast<size_t>(g * domain + j)];
      SHARDRT_CHECK(std::equal(a.off + 1, a.off + nd, b.off + 1) && std::equal(a.n + 1, a.n + nd, b.n + 1),
                    ShapeError, fn, ": ranks ", j, " and ", g * domain + j, " (domain index ", j,
                    " of ddp groups 0 and ", g, ") hold different boxes, ", a.box_str(1), " and ", b.box_str(1),
                    "; every ddp group must decompose its samples alike");
    }
  int64_t global_volume = 1, held = 0;
  for (int k = 1; k < nd; ++k) global_volume *= first.global[k];
  for (int j = 0; j < domain; ++j) {
    const Box& a = boxes[static_cast<size_t>(j)];
    held += a.volume(1);
    for (int i = 0; i < j && a.volume(1) > 0; ++i)
      SHARDRT_CHECK(boxes[static_cast<size_t>(i)].volume(1) == 0 || !overlap(boxes[static_cast<size_t>(i)], a, 1),
                    ShapeError, fn, ": the boxes of ranks ", i, " and ", j, " overlap: ",
                    boxes[static_cast<size_t>(i)].box_str(1), " and ", a.box_str(1), " of the global ",
                    first.global_str());
  }
  SHARDRT_CHECK(held == global_volume, ShapeError, fn, ": the domain ranks' boxes hold ", held,
                " elements per sample but the global box ", Box::list(first.global, 1, nd), " has ", global_volume,
                "; the extents must add up to the global shape (every element held by exactly one rank)");
  std::vector<int> split;
  for (int k = 1; k < nd; ++k)
    for (int j = 0; j < domain; ++j)
      if (boxes[static_cast<size_t>(j)].n[k] != first.global[k]) {
        split.push_back(k);
        break;
      }
  const std::string split_str =
      Box::list(std::vector<int64_t>(split.begin(), split.end()).data(), 0, static_cast<int>(split.size()));
  out.global.assign(first.global, first.global + nd);
  if (points) {
    // dims 1..nd-2 become one point dim, each rank's points in its box's row-major order, the last dim the channels.
    SHARDRT_CHECK(split.empty() || split.back() <= nd - 2, ShapeError, fn, ": the boxes split dims ", split_str,
                  " of ", first.global_str(), "; a point set splits the grid dims 1..", nd - 2,
                  " and leaves the last dim (the channels) whole");
    int64_t n_points = 1;
    for (int k = 1; k < nd - 1; ++k) n_points *= first.global[k];
    out.global = {first.global[0], n_points, first.global[nd - 1]};
    out.flattened = true;
    if (split.empty()) return out;
    for (int j = 0; j < domain; ++j) {
      const Box& a = boxes[static_cast<size_t>(j)];
      int64_t p = 1;
      for (int k = 1; k < nd - 1; ++k) p *= a.n[k];
      out.domain_extents.push_back(p);
    }
    out.domain_dim = 1;
    return out;
  }
  if (split.empty()) return out;  // every domain rank holds whole samples: replicated over the domain
  SHARDRT_CHECK(split.size() == 1, ShapeError, fn, ": the boxes split dims ", split_str, " of ",
                first.global_str(), "; a sharded grid is split along one dim (slabs): run a block decomposition as "
                "a point set with shardrt_sharded_create_points");
  const int d = split[0];
  int64_t next = 0;
  for (int j = 0; j < domain; ++j) {
    const Box& a = boxes[static_cast<size_t>(j)];
    if (a.n[d] > 0)
      SHARDRT_CHECK(a.off[d] == next, ShapeError, fn, ": along dim ", d, " rank ", j, " holds [", a.off[d], ", ",
                    a.off[d] + a.n[d], ") but the lower domain ranks end at ", next,
                    "; slabs must be in domain-rank order (rank j's offset = the extents of ranks < j)");
    next += a.n[d];
    out.domain_extents.push_back(a.n[d]);
  }
  out.domain_dim = d;
  return out;
}

}  // namespace

Tensor ShardedObj::read(const char* fn, DType dtype) {
  const Tensor& caller = tensor->view;
  Tensor t;
  if (needs_copy) {
    tensor->note_copy(fn, "flattening the strided local block into points", static_cast<int64_t>(caller.nbytes()));
    buffer.view(caller.shape()).copy_(caller);
    t = buffer;
  } else {
    t = flattened ? caller.view(model_local_shape) : caller;
  }
  if (t.dtype() == dtype) return t;
  tensor->note_copy(fn, std::string("converting ") + dtype_name(t.dtype()) + " to the model's " + dtype_name(dtype),
                    static_cast<int64_t>(t.nbytes()));
  return t.to(dtype);
}

void ShardedObj::write(const char* fn, const Tensor& local) {
  const Tensor& caller = tensor->view;
  if (local.dtype() != caller.dtype())
    tensor->note_copy(fn, std::string("converting the model's ") + dtype_name(local.dtype()) + " result to " +
                              dtype_name(caller.dtype()),
                      static_cast<int64_t>(local.nbytes()));
  if (needs_copy) {
    buffer.copy_(local);
    tensor->note_copy(fn, "writing the flattened result back into the strided local block",
                      static_cast<int64_t>(caller.nbytes()));
    caller.copy_(buffer.view(caller.shape()));
  } else {
    (flattened ? caller.view(model_local_shape) : caller).copy_(local);
  }
}

}  // namespace shardrt::capi

using namespace shardrt;
using namespace shardrt::capi;

namespace {

shardrt_status create_sharded(shardrt_sharded* out, shardrt_mesh mesh, shardrt_tensor local, int ndim,
                              const int64_t* global_shape, const int64_t* offsets, bool points, const char* fn) {
  return entry(fn, [&] {
    require(out, fn, "out");
    out->id = 0;
    auto m = meshes().get(mesh.id, "mesh");
    auto t = tensors().get(local.id, "local");
    const Tensor& v = t->view;
    // This rank's own statement, agreed on every rank before the gather (a rank with a bad box must not leave the
    // others waiting in it).
    Box mine;
    collective(m->agree_comm, true, fn, [&] {
      require(global_shape, fn, "global_shape");
      require(offsets, fn, "offsets");
      SHARDRT_CHECK(ndim == v.dim(), ShapeError, fn, ": ndim ", ndim, " but the local tensor ", v.str(), " has ",
                    v.dim(), " dims");
      SHARDRT_CHECK(ndim >= 1 && ndim <= kMaxDims, ShapeError, fn, ": ndim ", ndim, " must be 1..", kMaxDims,
                    " (dim 0 is the samples)");
      mine.ndim = ndim;
      // The sample's global volume (dims 1..) is multiplied out when the boxes are checked against it.
      int64_t volume = 1;
      for (int k = 1; k < ndim; ++k)
        SHARDRT_CHECK(global_shape[k] < 0 || !__builtin_mul_overflow(volume, global_shape[k], &volume), ShapeError,
                      fn, ": the global shape ", Box::list(global_shape, 0, ndim),
                      " holds more than 2^63 elements per sample");
      for (int k = 0; k < ndim; ++k) {
        mine.global[k] = global_shape[k], mine.off[k] = offsets[k], mine.n[k] = v.size(k);
        // offset <= global - extent, not offset + extent <= global: an offset near 2^63 would overflow the sum.
        SHARDRT_CHECK(global_shape[k] >= 0 && offsets[k] >= 0 && offsets[k] <= global_shape[k] - v.size(k),
                      ShapeError, fn, ": dim ", k, " (offset ", offsets[k], ", extent ", v.size(k),
                      ") of the local tensor ", v.str(), " lies outside the global shape ",
                      Box::list(global_shape, 0, ndim), " (offsets ", Box::list(offsets, 0, ndim), ")");
      }
    });
    auto s = std::make_shared<ShardedObj>();
    collective(m->agree_comm, m->ctx->agree_errors(), fn, [&] {
      const Mesh& mh = *m->mesh;
      Tensor rec = Tensor::empty({kRecord}, DType::i64);
      int64_t* r = rec.data<int64_t>();
      std::fill(r, r + kRecord, 0);
      r[0] = mine.ndim;
      for (int k = 0; k < kMaxDims; ++k)
        r[2 + k] = mine.global[k], r[2 + kMaxDims + k] = mine.off[k], r[2 + 2 * kMaxDims + k] = mine.n[k];
      Tensor all = Tensor::empty({kRecord * mh.size()}, DType::i64);
      {
        auto scope = mh.flat().ledger().scope("capi.sharded_create");
        mh.flat().all_gather(rec, all);
      }
      std::vector<Box> boxes(static_cast<size_t>(mh.size()));
      const int64_t* a = all.data<int64_t>();
      for (int q = 0; q < mh.size(); ++q) {
        const int64_t* x = a + q * kRecord;
        Box& b = boxes[static_cast<size_t>(q)];
        b.ndim = static_cast<int>(x[0]);
        for (int k = 0; k < kMaxDims; ++k)
          b.global[k] = x[2 + k], b.off[k] = x[2 + kMaxDims + k], b.n[k] = x[2 + 2 * kMaxDims + k];
      }
      const Layout lay = analyse(boxes, m->ddp, m->domain, points, fn);
      s->mesh = m;
      s->tensor = t;
      s->flattened = lay.flattened;
      s->model_local_shape = v.shape();
      if (lay.flattened) {
        int64_t p = 1;
        for (int k = 1; k < ndim - 1; ++k) p *= v.size(k);
        s->model_local_shape = {v.size(0), p, v.size(ndim - 1)};
        try {
          (void)v.view(s->model_local_shape);
        } catch (const ShapeError&) {
          // The caller's strides (a halo-skipping view) cannot be flattened in place: reads and writes go through
          // a buffer, each counted as a copy under the tensor's copy policy.
          s->needs_copy = true;
          if (!t->copies_allowed)  // refused now, at creation, rather than at the first forward
            t->note_copy(fn, "flattening the strided local block " + v.str() + " into points",
                        static_cast<int64_t>(v.nbytes()));
          s->buffer = Tensor::empty(s->model_local_shape, v.dtype(), v.device());
        }
      }
      Placements pl = {Placement::Shard(0),
                       lay.domain_dim >= 0 ? Placement::Shard(lay.domain_dim) : Placement::Replicate()};
      AxisExtents ext = {lay.ddp_extents, lay.domain_dim >= 0 ? lay.domain_extents : Extents{}};
      s->spec.emplace(mh, pl, lay.global, ext, fn);
    });
    out->id = shardeds().add(std::move(s));
  });
}

}  // namespace

extern "C" {

shardrt_status shardrt_sharded_create(shardrt_sharded* out, shardrt_mesh mesh, shardrt_tensor local, int ndim,
                                      const int64_t* global_shape, const int64_t* offsets) {
  return create_sharded(out, mesh, local, ndim, global_shape, offsets, false, "shardrt_sharded_create");
}

shardrt_status shardrt_sharded_create_points(shardrt_sharded* out, shardrt_mesh mesh, shardrt_tensor local,
                                             int ndim, const int64_t* global_shape, const int64_t* offsets) {
  return create_sharded(out, mesh, local, ndim, global_shape, offsets, true, "shardrt_sharded_create_points");
}

shardrt_status shardrt_sharded_destroy(shardrt_sharded s) {
  return entry("shardrt_sharded_destroy", [&] { shardeds().remove(s.id, "sharded"); });
}

shardrt_status shardrt_sharded_global_shape(shardrt_sharded s, int* ndim, int64_t* shape, int cap) {
  const char* fn = "shardrt_sharded_global_shape";
  return entry(fn, [&] {
    auto obj = shardeds().get(s.id, "sharded");
    require(ndim, fn, "ndim");
    if (cap > 0) require(shape, fn, "shape");
    const Shape& g = obj->spec->global_shape();
    *ndim = static_cast<int>(g.size());
    for (int k = 0; k < static_cast<int>(g.size()) && k < cap; ++k) shape[k] = g[static_cast<size_t>(k)];
  });
}

shardrt_status shardrt_sharded_is_copy(shardrt_sharded s, int* copied) {
  const char* fn = "shardrt_sharded_is_copy";
  return entry(fn, [&] {
    auto obj = shardeds().get(s.id, "sharded");
    require(copied, fn, "copied");
    *copied = obj->needs_copy ? 1 : 0;
  });
}

}  // extern "C"
