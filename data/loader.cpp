#include "data/loader.h"

#include "runtime/errors.h"
#include "runtime/philox.h"

namespace shardrt::data {

std::vector<int64_t> epoch_order(int64_t samples, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i) order[static_cast<size_t>(i)] = i;
  if (!shuffle) return order;
  // A key of its own, so a shuffle seed equal to the generator's seed draws from another stream.
  const uint64_t key = seed ^ 0x53485546464c4555ull;
  for (int64_t i = samples - 1; i > 0; --i) {
    const philox::U32x4 w = philox::element_bits(key, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    const uint64_t u = (static_cast<uint64_t>(w.v[0]) << 32) | w.v[1];
    std::swap(order[static_cast<size_t>(i)], order[u % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

Shape batch_shape(FieldLayout layout, int64_t batch, int64_t height, int64_t width) {
  return layout == FieldLayout::channels_last ? Shape{batch, height, width, 1} : Shape{batch, 1, height, width};
}

namespace {

// The bundled models' layout: samples over the first batch axis, rows over the first domain axis.
Placements default_placements(const Mesh& mesh, int row_dim) {
  Placements p(static_cast<size_t>(mesh.ndim()), Placement::Replicate());
  bool batch_done = false, domain_done = false;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (mesh.is_batch_axis(a) && !batch_done) {
      p[static_cast<size_t>(a)] = Placement::Shard(0), batch_done = true;
    } else if (!mesh.is_batch_axis(a) && !domain_done) {
      p[static_cast<size_t>(a)] = Placement::Shard(row_dim), domain_done = true;
    }
  }
  return p;
}

ShardSpec make_spec(const DarcyManifest& m, const Mesh& mesh, const LoaderOptions& o) {
  SHARDRT_CHECK(o.batch_size >= 1 && o.batch_size <= m.samples, ValueError, "DarcyLoader: batch_size ", o.batch_size,
                " must lie in [1, ", m.samples, "] (the samples of ", m.path, ")");
  SHARDRT_CHECK(o.dtype == DType::f32 || o.dtype == DType::f64, ValueError, "DarcyLoader: dtype ",
                dtype_name(o.dtype), " is not supported; use f32 or f64");
  const bool last = o.layout == FieldLayout::channels_last;
  const int row_dim = last ? 1 : 2, channel_dim = last ? 3 : 1;
  const Placements placements = o.placements.empty() ? default_placements(mesh, row_dim) : o.placements;
  const Shape shape = batch_shape(o.layout, o.batch_size, m.resolution, m.resolution);
  for (const Placement& p : placements) {
    SHARDRT_CHECK(!p.is_partial(), ValueError, "DarcyLoader: placements ", placements_str(placements),
                  " hold a Partial; data is Shard or Replicate");
    SHARDRT_CHECK(!p.is_shard() || (p.dim != channel_dim && p.dim != channel_dim - 4), ValueError,
                  "DarcyLoader: placements ", placements_str(placements), " shard the channel dim ", channel_dim,
                  " of the batch ", shape_str(shape), "; shard the samples, rows or columns");
  }
  if (o.extents.empty()) return ShardSpec::split_evenly(mesh, placements, shape, "DarcyLoader");
  return ShardSpec(mesh, placements, shape, o.extents, "DarcyLoader");
}

}  // namespace

DarcyLoader::DarcyLoader(const std::string& manifest_path, const Mesh& mesh, LoaderOptions options)
    : manifest_(load_darcy_manifest(manifest_path)),
      mesh_(mesh),
      options_(std::move(options)),
      spec_(make_spec(manifest_, mesh_, options_)),
      counter_(std::make_shared<ByteCounter>()) {
  batches_per_epoch_ = manifest_.samples / options_.batch_size;
  const bool last = options_.layout == FieldLayout::channels_last;
  const int dims[3] = {0, last ? 1 : 2, last ? 2 : 3};
  int64_t* begin[3] = {&s0_, &r0_, &c0_};
  int64_t* length[3] = {&bs_, &hs_, &ws_};
  const Shape local = spec_.local_shape();
  for (int i = 0; i < 3; ++i) {
    const int axis = spec_.axis_sharding(dims[i]);
    *begin[i] = axis >= 0 ? spec_.offset(axis) : 0;
    *length[i] = local[static_cast<size_t>(dims[i])];
  }
  for (const ManifestShard& s : manifest_.shards) {
    files_.push_back(std::make_unique<ShardFile>(s.path, counter_));
    for (const char* name : {"permeability", "darcy"}) {
      const Shape& sh = files_.back()->shape(name);
      SHARDRT_CHECK(sh == Shape({s.samples, manifest_.resolution, manifest_.resolution}), IoError, "DarcyLoader: '",
                    s.path, "' holds ", name, " ", shape_str(sh), " where the manifest ", manifest_.path, " states (",
                    s.samples, ", ", manifest_.resolution, ", ", manifest_.resolution, ")");
    }
  }
}

DarcyLoader::~DarcyLoader() {
  if (pending_.valid()) pending_.wait();
}

DarcyLoader::LocalBatch DarcyLoader::read(int64_t position) const {
  LocalBatch b;
  b.epoch = position / batches_per_epoch_;
  b.step = position % batches_per_epoch_;
  const std::vector<int64_t> order = epoch_order(manifest_.samples, options_.seed, b.epoch, options_.shuffle);
  const int64_t B = options_.batch_size;
  b.samples.assign(order.begin() + b.step * B, order.begin() + (b.step + 1) * B);
  const Shape local = spec_.local_shape();
  b.permeability = Tensor::empty(local, options_.dtype);
  b.darcy = Tensor::empty(local, options_.dtype);
  // With one channel both layouts store (sample, row, column) contiguously, so each sample's window is one
  // hs x ws block.
  const int64_t block = hs_ * ws_;
  auto fill = [&](auto* k, auto* p) {
    for (int64_t s = 0; s < bs_; ++s) {
      const auto [shard, row] = manifest_.locate(b.samples[static_cast<size_t>(s0_ + s)]);
      files_[shard]->read_window("permeability", row, r0_, hs_, c0_, ws_, k + s * block, ws_);
      files_[shard]->read_window("darcy", row, r0_, hs_, c0_, ws_, p + s * block, ws_);
    }
    if (options_.normalizer) {
      options_.normalizer->normalize("permeability", k, bs_ * block);
      options_.normalizer->normalize("darcy", p, bs_ * block);
    }
  };
  if (options_.dtype == DType::f32)
    fill(b.permeability.data<float>(), b.darcy.data<float>());
  else
    fill(b.permeability.data<double>(), b.darcy.data<double>());
  return b;
}

DarcyBatch DarcyLoader::next() {
  LocalBatch b = pending_.valid() ? pending_.get() : read(position_);
  ++position_;
  if (options_.prefetch)
    pending_ = std::async(std::launch::async, [this, p = position_] { return read(p); });
  DarcyBatch out;
  const Device device = mesh_.device();
  out.permeability = ShardTensor(b.permeability.to(device), spec_);
  out.darcy = ShardTensor(b.darcy.to(device), spec_);
  out.epoch = b.epoch;
  out.step = b.step;
  out.samples = std::move(b.samples);
  return out;
}

void DarcyLoader::seek(int64_t position) {
  SHARDRT_CHECK(position >= 0, ValueError, "DarcyLoader::seek: position ", position, " is negative");
  if (pending_.valid()) pending_.wait();  // a prefetched batch of the old position is dropped, errors too
  pending_ = {};
  position_ = position;
}

}  // namespace shardrt::data
