// Tensors over the caller's memory: pointer, dtype, shape and strides wrapped in place (no copy), the device read
// from the pointer, and the copy policy that decides what happens when a later call needs the data otherwise.
#include <algorithm>
#include <numeric>

#include "capi/objects.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/storage.h"

#ifdef SHARDRT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace shardrt::capi {

namespace {

constexpr int kMaxDims = 8;

std::string list(const int64_t* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Where `data` lives. Without CUDA every pointer is host memory; with it, the driver says (device and managed
// memory are the GPU's, registered or plain host memory the CPU's).
Device device_of_pointer(const void* data) {
#ifdef SHARDRT_WITH_CUDA
  if (data && cuda_device_count() > 0) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, data) == cudaSuccess &&
        (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged))
      return Device::cuda(attr.device);
    cudaGetLastError();  // an unregistered host pointer leaves an error behind on older runtimes
  }
#else
  (void)data;
#endif
  return Device::cpu();
}

Device resolve_device(const void* data, int device, const char* fn) {
  const Device found = device_of_pointer(data);
  if (device == SHARDRT_DEVICE_AUTO) return found;
  if (device == SHARDRT_DEVICE_CPU) {
    SHARDRT_CHECK(found.is_cpu(), DeviceError, fn, ": device SHARDRT_DEVICE_CPU but the pointer is memory of ",
                  found.str());
    return found;
  }
  SHARDRT_CHECK(device >= 0, ValueError, fn, ": device ", device,
                " must be SHARDRT_DEVICE_AUTO (-2), SHARDRT_DEVICE_CPU (-1) or a GPU index");
  SHARDRT_CHECK(device < cuda_device_count(), DeviceError, fn, ": device cuda:", device, " is not usable here (",
                cuda_device_count(), " CUDA devices",
#ifdef SHARDRT_WITH_CUDA
                ""
#else
                "; this ShardRT was built without CUDA"
#endif
                , ")");
  SHARDRT_CHECK(found == Device::cuda(device), DeviceError, fn, ": device cuda:", device,
                " but the pointer is memory of ", found.str());
  return found;
}

// No two elements may share an address: with the dims of extent > 1 ordered by stride, each stride must step over
// everything the smaller ones span. (That is sufficient; exotic interleavings that never collide are refused too,
// which no simulation array needs.)
// a * b + c, or a ShapeError: extents and strides the caller declares can be anything up to 2^63 - 1, and their
// span must be computed without signed overflow (found by the capi fuzz target: a stride of 2^62 times extent 3).
int64_t span_step(int64_t a, int64_t b, int64_t c, const int64_t* shape, const int64_t* strides, int ndim,
                  const char* fn) {
  int64_t ab = 0, r = 0;
  const bool overflow = __builtin_mul_overflow(a, b, &ab) || __builtin_add_overflow(ab, c, &r);
  SHARDRT_CHECK(!overflow, ShapeError, fn, ": shape ", list(shape, ndim),
                strides ? " with strides " + list(strides, ndim) : std::string(),
                " spans more than 2^63 elements of memory; no array is that large");
  return r;
}

void check_no_overlap(const int64_t* shape, const int64_t* strides, int ndim, const char* fn) {
  std::vector<int> dims;
  for (int k = 0; k < ndim; ++k)
    if (shape[k] > 1) dims.push_back(k);
  std::sort(dims.begin(), dims.end(), [&](int a, int b) { return strides[a] < strides[b]; });
  int64_t span = 1;  // elements addressed by the dims so far, as one block
  for (size_t i = 0; i < dims.size(); ++i) {
    const int k = dims[i];
    SHARDRT_CHECK(strides[k] >= span, ShapeError, fn, ": strides ", list(strides, ndim), " of shape ",
                  list(shape, ndim), " make elements overlap: dim ", k, " (extent ", shape[k], ", stride ",
                  strides[k], ") steps by less than the ", span, " elements the dims of smaller strides span",
                  i > 0 ? " (dim " + std::to_string(dims[i - 1]) + ")" : std::string(),
                  "; pass strides in elements (not bytes) that describe distinct elements");
    span = span_step(strides[k], shape[k] - 1, span, shape, strides, ndim, fn);
  }
}

}  // namespace

void TensorObj::note_copy(const char* fn, const std::string& why, int64_t bytes) {
  if (!copies_allowed)
    throw CapiError{SHARDRT_ERR_COPY_FORBIDDEN,
                    std::string(fn) + ": " + why + " needs a copy of " + std::to_string(bytes) + " bytes of " +
                        view.str() + ", but the tensor forbids copies (SHARDRT_COPY_FORBID); pass the data " +
                        "in the dtype and layout the call needs, or wrap it with SHARDRT_COPY_ALLOW"};
  copies.fetch_add(1), copy_bytes.fetch_add(bytes);
  ctx->copies.fetch_add(1), ctx->copy_bytes.fetch_add(bytes);
}

}  // namespace shardrt::capi

using namespace shardrt;
using namespace shardrt::capi;

extern "C" {

shardrt_status shardrt_tensor_wrap(shardrt_tensor* out, shardrt_context c, void* data, int dtype, int ndim,
                                   const int64_t* shape, const int64_t* strides, int layout, int device, int flags) {
  const char* fn = "shardrt_tensor_wrap";
  return entry(fn, [&] {
    require(out, fn, "out");
    out->id = 0;
    auto ctx = open_handle(contexts(), c.id, "ctx", fn);
    const DType dt = to_dtype(dtype, fn);
    SHARDRT_CHECK(ndim >= 0 && ndim <= kMaxDims, ShapeError, fn, ": ndim ", ndim, " must be 0..", kMaxDims);
    if (ndim > 0) require(shape, fn, "shape");
    for (int k = 0; k < ndim; ++k)
      SHARDRT_CHECK(shape[k] >= 0, ShapeError, fn, ": shape ", list(shape, ndim), " has a negative extent (dim ", k,
                    ")");
    SHARDRT_CHECK(layout == SHARDRT_LAYOUT_ROW_MAJOR || layout == SHARDRT_LAYOUT_COL_MAJOR, ValueError, fn,
                  ": layout ", layout,
                  " is neither SHARDRT_LAYOUT_ROW_MAJOR (0) nor SHARDRT_LAYOUT_COL_MAJOR (1)");
    SHARDRT_CHECK(flags == SHARDRT_COPY_DEFAULT || flags == SHARDRT_COPY_ALLOW || flags == SHARDRT_COPY_FORBID,
                  ValueError, fn, ": flags ", flags,
                  " must be SHARDRT_COPY_DEFAULT (0), SHARDRT_COPY_ALLOW (1) or SHARDRT_COPY_FORBID (2)");
    Strides st(static_cast<size_t>(ndim));
    if (strides) {
      for (int k = 0; k < ndim; ++k) {
        SHARDRT_CHECK(strides[k] >= 0, ShapeError, fn, ": strides ", list(strides, ndim),
                      " hold a negative stride (dim ", k, "); reversed views are not supported");
        SHARDRT_CHECK(strides[k] > 0 || shape[k] <= 1, ShapeError, fn, ": strides ", list(strides, ndim),
                      " give dim ", k, " of extent ", shape[k], " stride 0, which repeats one element");
        st[static_cast<size_t>(k)] = strides[k];
      }
      check_no_overlap(shape, strides, ndim, fn);
    } else {
      int64_t s = 1;
      for (int i = 0; i < ndim; ++i) {
        const int k = layout == SHARDRT_LAYOUT_ROW_MAJOR ? ndim - 1 - i : i;
        st[static_cast<size_t>(k)] = s;
        s = span_step(s, std::max<int64_t>(shape[k], 1), 0, shape, nullptr, ndim, fn);
      }
    }
    Shape sh(shape, shape + ndim);
    const int64_t numel = shape_numel(sh, fn);
    // The elements span [0, last]: the storage must cover exactly that, for the bounds checks of views.
    int64_t last = 0;
    for (int k = 0; k < ndim; ++k)
      last = span_step(shape[k] > 0 ? shape[k] - 1 : 0, st[static_cast<size_t>(k)], last, shape, strides, ndim, fn);
    const int64_t elements = numel > 0 ? span_step(last, 1, 1, shape, strides, ndim, fn) : 0;  // last + 1
    const int64_t byte_span = span_step(elements, int64_t(dtype_size(dt)), 0, shape, strides, ndim, fn);
    if (numel > 0) require(data, fn, "data (with elements to wrap)");
    const Device dev = resolve_device(data, device, fn);
    const size_t bytes = static_cast<size_t>(byte_span);
    auto storage = Storage::wrap(data, bytes, dev, nullptr);
    auto t = std::make_shared<TensorObj>();
    t->ctx = ctx;
    t->view = Tensor(std::move(storage), sh, st, 0, dt);
    t->copies_allowed = flags == SHARDRT_COPY_ALLOW ||
                        (flags == SHARDRT_COPY_DEFAULT && (ctx->flags & SHARDRT_FORBID_COPIES) == 0);
    out->id = tensors().add(std::move(t));
  });
}

shardrt_status shardrt_tensor_destroy(shardrt_tensor t) {
  return entry("shardrt_tensor_destroy", [&] { tensors().remove(t.id, "tensor"); });
}

shardrt_status shardrt_tensor_shape(shardrt_tensor t, int* ndim, int64_t* shape, int cap) {
  const char* fn = "shardrt_tensor_shape";
  return entry(fn, [&] {
    auto obj = open_handle(tensors(), t.id, "tensor", fn);
    require(ndim, fn, "ndim");
    if (cap > 0) require(shape, fn, "shape");
    *ndim = obj->view.dim();
    for (int k = 0; k < obj->view.dim() && k < cap; ++k) shape[k] = obj->view.size(k);
  });
}

shardrt_status shardrt_tensor_dtype(shardrt_tensor t, shardrt_dtype* dtype) {
  const char* fn = "shardrt_tensor_dtype";
  return entry(fn, [&] {
    auto obj = open_handle(tensors(), t.id, "tensor", fn);
    require(dtype, fn, "dtype");
    *dtype = static_cast<shardrt_dtype>(static_cast<int>(obj->view.dtype()));
  });
}

shardrt_status shardrt_tensor_is_contiguous(shardrt_tensor t, int* contiguous) {
  const char* fn = "shardrt_tensor_is_contiguous";
  return entry(fn, [&] {
    auto obj = open_handle(tensors(), t.id, "tensor", fn);
    require(contiguous, fn, "contiguous");
    *contiguous = obj->view.is_contiguous() ? 1 : 0;
  });
}

shardrt_status shardrt_tensor_copies(shardrt_tensor t, int64_t* count, int64_t* bytes) {
  const char* fn = "shardrt_tensor_copies";
  return entry(fn, [&] {
    auto obj = open_handle(tensors(), t.id, "tensor", fn);
    if (count) *count = obj->copies.load();
    if (bytes) *bytes = obj->copy_bytes.load();
  });
}

}  // extern "C"
