// Sharded tensors from the simulation's own decomposition: each rank states the box of the global field it holds
// (offsets + its local shape); one all-gather of those boxes lets every rank check the tiling and derive the same
// ShardSpec, so nothing is ever gathered but 26 integers per rank.
#include <algorithm>
#include <functional>
#include <string_view>

#include "capi/box_layout.h"
#include "capi/objects.h"
#include "runtime/errors.h"

namespace shardrt::capi {

namespace {

constexpr int kMaxDims = kMaxBoxDims;
constexpr int kRecord = 2 + 3 * kMaxDims;  // ndim, unused, global[8], offsets[8], extents[8]

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

void ShardedObj::check_replicated(const char* fn, const std::string& what, const Tensor& values) const {
  const Mesh& mh = *mesh->mesh;
  const int domain_axis = mh.axis_index("domain");
  if (mesh->domain == 1 || !mh.flat().checks_collectives() || !spec->placement(domain_axis).is_replicate()) return;
  const Tensor host = values.to(Device::cpu()).contiguous();
  Tensor mine = Tensor::empty({1}, DType::i64), all = Tensor::empty({mh.size()}, DType::i64);
  mine.data<int64_t>()[0] = static_cast<int64_t>(std::hash<std::string_view>{}(
      std::string_view(static_cast<const char*>(host.raw_data()), host.nbytes())));
  {
    auto scope = mh.flat().ledger().scope("capi.replicated_check");
    mh.flat().all_gather(mine, all);
  }
  // Every rank reads the same table: the first domain group whose ranks differ is the same error everywhere.
  const int64_t* d = all.data<int64_t>();
  for (int g = 0; g < mesh->ddp; ++g) {
    std::vector<int64_t> values_seen;
    std::vector<std::string> holders;
    for (int j = 0; j < mesh->domain; ++j) {
      const int r = g * mesh->domain + j;
      const size_t k = static_cast<size_t>(std::find(values_seen.begin(), values_seen.end(), d[r]) - values_seen.begin());
      if (k == values_seen.size()) values_seen.push_back(d[r]), holders.emplace_back();
      holders[k] += (holders[k].empty() ? "" : ", ") + std::to_string(r);
    }
    if (values_seen.size() == 1) continue;
    std::string groups;
    for (size_t k = 0; k < holders.size(); ++k)
      groups += std::string(k ? "; " : "") + (holders[k].find(',') == std::string::npos ? "rank " : "ranks ") +
                holders[k];
    throw ValueError(detail::concat(fn, ": the replicated ", what, " (global ", shape_str(spec->global_shape()), ") holds ", values_seen.size(),
                                    " different values on the ranks of domain group ", g, " (", groups,
                                    "); a tensor that every rank declares whole must hold the same values on "
                                    "every rank of its domain group (checked mode)"));
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
    auto m = open_handle(meshes(), mesh.id, "mesh", fn);
    // This rank's own statement is checked in the call's start agreement, before the gather (a rank with a bad box
    // must not leave the others waiting in it).
    std::shared_ptr<TensorObj> t;
    Box mine;
    auto s = std::make_shared<ShardedObj>();
    m->run(points ? CallId::sharded_create_points : CallId::sharded_create, fn, [&](Signature& sig) {
      t = open_handle(tensors(), local.id, "local", fn);
      const Tensor& v = t->view;
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
      sig.number("ndim", ndim, SHARDRT_ERR_SHAPE);
      sig.text("global_shape", Box::list(global_shape, 0, ndim), SHARDRT_ERR_SHAPE);
    }, [&] {
      const Tensor& v = t->view;
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
      const BoxLayout lay = analyse_boxes(boxes, m->ddp, m->domain, points, fn);
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
    auto obj = open_handle(shardeds(), s.id, "sharded", fn);
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
    auto obj = open_handle(shardeds(), s.id, "sharded", fn);
    require(copied, fn, "copied");
    *copied = obj->needs_copy ? 1 : 0;
  });
}

}  // extern "C"
