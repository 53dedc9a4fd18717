// The sharded Darcy loader: each rank reads only its own window of each sample of a batch, straight from the
// mapped shard files, and hands back ShardTensors a model takes as they are.
//
// Layout. A batch is the global tensor (B, H, W, 1) (channels_last, FLARE's fx) or (B, 1, H, W) (channels_first,
// an image model's), for each of the two fields. Its placements (one per mesh axis; Shard of the sample, row or
// column dim, or Replicate) and extents (empty: the one split rule, split_extents) decide every rank's window:
// samples [s0, s0 + bs) of the batch, rows [r0, r0 + hs), columns [c0, c0 + ws). A model states them through
// Model::input_placements / input_extents; the default is the bundled models' layout (samples over the first
// batch axis, rows over the first domain axis). A rank reads exactly its window — bs * hs * ws values of each
// field — and nothing else: no rank reads whole samples to scatter them (bytes_read counts it), and building the
// ShardTensors needs no collective, since every rank computes every rank's extents locally.
//
// Order. Batches are consecutive slices of an epoch's order of the split's samples: a Philox permutation of
// seed and epoch (identical on every rank, since it is a pure function), or the file order without shuffle.
// An epoch has floor(S / B) batches (the remainder is left out of that epoch; it is a different remainder each
// shuffled epoch). Batch k of the loader is batch k % batches_per_epoch() of epoch k / batches_per_epoch().
//
// Prefetch. With prefetch on, batch k+1 is read on a worker thread while the caller uses batch k (file reads
// only: MPI is never called off the main thread). Prefetch changes when a batch is read, never what it holds.
#pragma once
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/normalizer.h"
#include "data/shard_reader.h"
#include "patches/shard_tensor.h"

namespace shardrt::data {

enum class FieldLayout { channels_last, channels_first };

struct LoaderOptions {
  int64_t batch_size = 1;  // global samples per batch
  bool shuffle = true;
  uint64_t seed = 0;       // of the shuffle
  bool prefetch = true;
  FieldLayout layout = FieldLayout::channels_last;
  DType dtype = DType::f32;  // f32 or f64
  Placements placements;     // empty: samples over the first batch axis, rows over the first domain axis
  AxisExtents extents;       // empty: split_extents for every Shard axis
  std::optional<Normalizer> normalizer;  // applied to both fields when set
};

struct DarcyBatch {
  ShardTensor permeability, darcy;
  int64_t epoch = 0, step = 0;   // step: the batch's index within its epoch
  std::vector<int64_t> samples;  // the split indices of the batch's B samples, in batch order (same on every rank)
};

class DarcyLoader {
 public:
  // Opens the manifest and maps every shard (headers checked) on every rank. ValueError for options that do not
  // fit (batch size out of [1, samples], a Partial placement or a sharded channel dim, a dtype other than
  // f32/f64), IoError for missing or malformed files, ShapeError for extents that do not fit (ShardSpec).
  DarcyLoader(const std::string& manifest_path, const Mesh& mesh, LoaderOptions options);
  ~DarcyLoader();
  DarcyLoader(const DarcyLoader&) = delete;
  DarcyLoader& operator=(const DarcyLoader&) = delete;

  DarcyBatch next();
  // Continue from batch `position` (a resumed run): the same batches as a loader that had handed out that many.
  void seek(int64_t position);
  int64_t position() const { return position_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  const DarcyManifest& manifest() const { return manifest_; }
  const ShardSpec& spec() const { return spec_; }  // of each field's batch tensor
  // Bytes this rank copied out of the shard files, the prefetched batch included (waited for, so the count is
  // settled).
  int64_t bytes_read() const {
    if (pending_.valid()) pending_.wait();
    return counter_->bytes.load();
  }

 private:
  struct LocalBatch {
    Tensor permeability, darcy;
    int64_t epoch = 0, step = 0;
    std::vector<int64_t> samples;
  };
  LocalBatch read(int64_t position) const;

  DarcyManifest manifest_;
  Mesh mesh_;
  LoaderOptions options_;
  ShardSpec spec_;
  int64_t batches_per_epoch_ = 0;
  int64_t position_ = 0;
  // This rank's window: [begin, begin + length) of the sample, row and column dims.
  int64_t s0_ = 0, bs_ = 0, r0_ = 0, hs_ = 0, c0_ = 0, ws_ = 0;
  std::shared_ptr<ByteCounter> counter_;
  std::vector<std::unique_ptr<ShardFile>> files_;
  std::future<LocalBatch> pending_;  // batch position_, when prefetching
};

// The order of the split's `samples` in epoch `epoch`: a Fisher-Yates permutation drawn from Philox (key from
// `seed`, stream position `epoch`), or 0..samples-1 without shuffle.
std::vector<int64_t> epoch_order(int64_t samples, uint64_t seed, int64_t epoch, bool shuffle);

// The global shape of a batch tensor: (B, H, W, 1) or (B, 1, H, W).
Shape batch_shape(FieldLayout layout, int64_t batch, int64_t height, int64_t width);

}  // namespace shardrt::data
