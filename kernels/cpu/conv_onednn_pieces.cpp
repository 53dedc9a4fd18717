// The oneDNN convolution's pieces (see conv_onednn_pieces.h).
#include "kernels/onednn_config.h"  // generated: SHARDRT_WITH_ONEDNN

#if SHARDRT_WITH_ONEDNN
#include "kernels/cpu/conv_onednn_pieces.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/cpu/scratch.h"

namespace shardrt::kernels::cpu::onednn {

using dnnl::memory;

namespace {

std::mutex cache_mutex;
std::map<std::string, std::shared_ptr<const Piece>> piece_cache;  // nullptr: oneDNN has no fast kernel for it
std::map<std::string, std::shared_ptr<const dnnl::reorder>> reorder_cache;
// A program sees few shapes; the cap only bounds a pathological caller.
constexpr size_t kCacheCap = 4096;

// oneDNN sizes a primitive's work split by omp_get_max_threads() when the primitive is created: one made while
// OpenMP is limited to one thread runs on the calling thread alone.
template <class F>
auto with_one_thread(F f) {
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{omp_get_max_threads()};
  omp_set_num_threads(1);
  return f();
}

template <class Primitive, class PD>
std::shared_ptr<const Piece> piece_from(const PD& pd, const memory::desc& weights, bool plain_src) {
  // oneDNN's reference kernels are plain loops, far slower than im2col + GEMM: such a shape stays on that path.
  if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return nullptr;
  auto piece = std::make_shared<Piece>();
  piece->prim = Primitive(pd);
  piece->weights = weights;
  piece->scratchpad = pd.scratchpad_desc();
  piece->plain_src = plain_src;
  return piece;
}

// The primitive of one piece: n samples, ci input and co output channels, the geometry's spatial extents; the
// input blocked, or plain (see Piece::plain_src).
std::shared_ptr<const Piece> create_piece(Kind kind, const Problem& p, int64_t n, int64_t ci, int64_t co, bool bias,
                                          bool plain_src) {
  using namespace dnnl;
  const memory::desc src = plain_src ? p.plain_activation(n, ci, ci, true) : p.activation(n, ci, true);
  const memory::desc dst = p.activation(n, co, false);
  const memory::desc weights(p.weight_dims(co, ci), memory::data_type::f32, memory::format_tag::any);
  const memory::desc bias_md = bias ? memory::desc({co}, memory::data_type::f32, memory::format_tag::x) : memory::desc();
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  const auto algo = algorithm::convolution_direct;
  return with_one_thread([&]() -> std::shared_ptr<const Piece> {
    const convolution_forward::desc fd(prop_kind::forward_training, algo, src, weights, bias_md, dst, p.strides,
                                       p.dilates, p.pad_l, p.pad_r);
    const convolution_forward::primitive_desc fpd(fd, attr, engine());
    if (kind == Kind::forward) return piece_from<convolution_forward>(fpd, fpd.weights_desc(), plain_src);
    if (kind == Kind::backward_data) {
      const convolution_backward_data::desc d(algo, src, weights, dst, p.strides, p.dilates, p.pad_l, p.pad_r);
      const convolution_backward_data::primitive_desc pd(d, attr, engine(), fpd);
      return piece_from<convolution_backward_data>(pd, pd.weights_desc(), false);
    }
    const convolution_backward_weights::desc d(algo, src, weights, bias_md, dst, p.strides, p.dilates, p.pad_l,
                                               p.pad_r);
    const convolution_backward_weights::primitive_desc pd(d, attr, engine(), fpd);
    return piece_from<convolution_backward_weights>(pd, pd.diff_weights_desc(), plain_src);
  });
}

}  // namespace

std::shared_ptr<const Piece> piece(Kind kind, const Problem& p, int64_t n, int64_t ci, int64_t co, bool bias) {
  std::string key = p.key;
  key_append(key, {static_cast<int64_t>(kind), n, ci, co, bias ? 1 : 0});
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = piece_cache.find(key);
  if (it != piece_cache.end()) return it->second;
  if (piece_cache.size() >= kCacheCap) piece_cache.clear();
  // A shape oneDNN does not take (it throws) or runs only in its reference kernel: the im2col path runs it.
  const auto attempt = [&](bool plain_src) -> std::shared_ptr<const Piece> {
    try {
      return create_piece(kind, p, n, ci, co, bias, plain_src);
    } catch (const dnnl::error&) {
      return nullptr;
    }
  };
  std::shared_ptr<const Piece> made = attempt(false);
  if (!made && kind != Kind::backward_data) made = attempt(true);
  return piece_cache.emplace(key, std::move(made)).first->second;
}

memory mem(const memory::desc& md, const void* data) { return memory(md, engine(), const_cast<void*>(data)); }

// Cached per thread count, which oneDNN sizes a reorder's split by.
void reorder(const memory::desc& from, const void* src, const memory::desc& to, void* dst, bool accumulate) {
  std::string key = md_key(from) + "|" + md_key(to);
  key_append(key, {accumulate ? 1 : 0, omp_get_max_threads()});
  std::shared_ptr<const dnnl::reorder> r;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = reorder_cache.find(key);
    if (it == reorder_cache.end()) {
      if (reorder_cache.size() >= kCacheCap) reorder_cache.clear();
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, attr);
      it = reorder_cache.emplace(key, std::make_shared<const dnnl::reorder>(pd)).first;
    }
    r = it->second;
  }
  memory a = mem(from, src), b = mem(to, dst);
  r->execute(stream(), a, b);
  stream().wait();
}

void execute(const std::vector<Run>& runs) {
  const bool parallel = runs.size() > 1 && omp_get_max_threads() > 1 && !omp_in_parallel();
  size_t scratch_bytes = 0;
  for (const Run& r : runs) scratch_bytes = std::max(scratch_bytes, r.piece->scratchpad.get_size());
  std::exception_ptr failure;
#pragma omp parallel if (parallel)
  {
    Scratch<char> scratch(static_cast<int64_t>(scratch_bytes));
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < runs.size(); ++i) {
      try {
        std::unordered_map<int, memory> args = runs[i].args;
        if (runs[i].piece->scratchpad.get_size() > 0)
          args.insert({DNNL_ARG_SCRATCHPAD, mem(runs[i].piece->scratchpad, scratch.data())});
        runs[i].piece->prim.execute(stream(), args);
      } catch (...) {
#pragma omp critical(shardrt_onednn_failure)
        failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

SampleChunks chunks_for(int64_t batch, size_t groups) {
  const int64_t g = static_cast<int64_t>(groups);
  return SampleChunks(batch, std::clamp<int64_t>((kMinPieces + g - 1) / g, 1, batch));
}

memory::desc bias_md(int64_t n) { return memory::desc({n}, memory::data_type::f32, memory::format_tag::x); }


}  // namespace shardrt::kernels::cpu::onednn
#endif
