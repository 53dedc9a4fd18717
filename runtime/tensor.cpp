#include "runtime/tensor.h"

#include <algorithm>
#include <numeric>

#include "runtime/copy.h"
#include "runtime/errors.h"

namespace shardrt {

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)), shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset),
      dtype_(dtype) {
  SHARDRT_CHECK(shape_.size() == strides_.size(), ShapeError, "Tensor: shape ", shape_str(shape_), " and strides ",
                shape_str(strides_), " differ in rank");
  // Every tensor's element count fits in int64, so numel() and the loops over it never wrap.
  shape_numel(shape_, "Tensor");
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  auto storage = Storage::allocate(static_cast<std::size_t>(shape_nbytes(shape, dtype, "empty")), device);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> keep_alive) {
  auto storage = Storage::wrap(data, static_cast<std::size_t>(shape_nbytes(shape, dtype, "from_blob")), device,
                               std::move(keep_alive));
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

int64_t Tensor::size(int d) const { return shape_[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int d) const { return strides_[wrap_dim(d, dim(), "stride")]; }
Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;  // the stride of a size-1 dim never matters
    if (shape_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return detail::concat(dtype_name(dtype_), shape_str(shape_), " ", device().str());
}

void* Tensor::raw_data() const {
  SHARDRT_CHECK(defined(), ValueError, "data: tensor is undefined");
  SHARDRT_CHECK(storage_->resident(), ValueError, "data: the storage of ", str(),
                " is released (a ZeRO-3 parameter outside its block's forward and backward, optim/zero3.h); refill it "
                "first");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

void Tensor::check_dtype_for_data(DType requested) const {
  SHARDRT_CHECK(defined(), ValueError, "data: tensor is undefined");
  SHARDRT_CHECK(requested == dtype_, DTypeError, "data<", dtype_name(requested), ">: tensor is ", str());
}

Tensor Tensor::with_geometry(Shape shape, Strides strides, int64_t offset) const {
  Tensor t(storage_, std::move(shape), std::move(strides), offset, dtype_);
  return t;  // autograd meta deliberately not carried: a view is a new, history-free tensor
}

namespace {
// Resolves a single -1 in `shape` against `numel`.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      SHARDRT_CHECK(infer < 0, ShapeError, op, ": more than one -1 in ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      SHARDRT_CHECK(out[i] >= 0, ShapeError, op, ": negative size in ", shape_str(shape));
      SHARDRT_CHECK(!__builtin_mul_overflow(known, out[i], &known), ShapeError, op, ": shape ", shape_str(shape),
                    " has more than 2^63 - 1 elements");
    }
  }
  if (infer >= 0) {
    SHARDRT_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": cannot infer -1 in ", shape_str(shape),
                  " for ", numel, " elements (from ", shape_str(from), ")");
    out[infer] = numel / known;
  }
  const int64_t out_numel = shape_numel(out, op);
  SHARDRT_CHECK(out_numel == numel, ShapeError, op, ": shape ", shape_str(shape), " has ", out_numel,
                " elements but the tensor ", shape_str(from), " has ", numel);
  return out;
}

// Strides for viewing (shape, strides) as `target` without copying, if the memory layout allows it.
// Source dims are grouped into chunks that are contiguous with each other; each chunk can be split into
// target dims freely, but no target dim may straddle two chunks.
bool view_strides(const Shape& shape, const Strides& strides, const Shape& target, Strides* out) {
  out->assign(target.size(), 0);
  if (shape_numel(shape) == 0 || shape.empty()) {
    *out = contiguous_strides(target);
    return true;
  }
  int view_d = static_cast<int>(target.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = static_cast<int>(shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= shape[tensor_d];
    bool chunk_ends = tensor_d == 0 ||
                      (shape[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
      (*out)[view_d] = view_numel * chunk_base_stride;
      view_numel *= target[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return false;
    if (tensor_d > 0) {
      chunk_base_stride = strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  return view_d == -1;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape target = infer_shape(shape, numel(), "view", shape_);
  Strides st;
  SHARDRT_CHECK(view_strides(shape_, strides_, target, &st), ShapeError, "view: a ", str(), " with strides ",
                shape_str(strides_), " cannot be viewed as ", shape_str(target), " without a copy; use reshape");
  return with_geometry(target, st, offset_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape target = infer_shape(shape, numel(), "reshape", shape_);
  Strides st;
  if (view_strides(shape_, strides_, target, &st)) return with_geometry(target, st, offset_);
  return contiguous().view(target);
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const {
  int dd = wrap_dim(d, dim(), "narrow");
  // Compared without forming start + length, which can overflow int64 and wrap to a range that looks in bounds.
  SHARDRT_CHECK(start >= 0 && length >= 0 && length <= shape_[dd] && start <= shape_[dd] - length, ShapeError,
                "narrow: start ", start, " and length ", length, " out of bounds for dim ", d, " of ", str());
  Shape s = shape_;
  s[dd] = length;
  return with_geometry(s, strides_, offset_ + start * strides_[dd]);
}

Tensor Tensor::select(int d, int64_t index) const {
  int dd = wrap_dim(d, dim(), "select");
  int64_t i = index < 0 ? index + shape_[dd] : index;
  SHARDRT_CHECK(i >= 0 && i < shape_[dd], ShapeError, "select: index ", index, " out of range for dim ", d, " of ", str());
  Shape s = shape_;
  Strides st = strides_;
  int64_t off = offset_ + i * strides_[dd];
  s.erase(s.begin() + dd);
  st.erase(st.begin() + dd);
  return with_geometry(s, st, off);
}

Tensor Tensor::transpose(int d0, int d1) const {
  int a = wrap_dim(d0, dim(), "transpose"), b = wrap_dim(d1, dim(), "transpose");
  Shape s = shape_;
  Strides st = strides_;
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return with_geometry(s, st, offset_);
}

Tensor Tensor::permute(const std::vector<int>& dims) const {
  SHARDRT_CHECK(static_cast<int>(dims.size()) == dim(), ShapeError, "permute: ", dims.size(), " dims given for ", str());
  std::vector<bool> seen(dims.size(), false);
  Shape s(dims.size());
  Strides st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int d = wrap_dim(dims[i], dim(), "permute");
    SHARDRT_CHECK(!seen[d], ShapeError, "permute: dim ", d, " repeated for ", str());
    seen[d] = true;
    s[i] = shape_[d];
    st[i] = strides_[d];
  }
  return with_geometry(s, st, offset_);
}

Tensor Tensor::expand(const Shape& shape) const {
  SHARDRT_CHECK(shape.size() >= shape_.size(), ShapeError, "expand: cannot expand ", str(), " to ", shape_str(shape));
  size_t lead = shape.size() - shape_.size();
  Shape s(shape.size());
  Strides st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      s[i] = shape[i];
      continue;
    }
    int64_t have = shape_[i - lead];
    int64_t want = shape[i] == -1 ? have : shape[i];
    SHARDRT_CHECK(have == want || have == 1, ShapeError, "expand: cannot expand ", str(), " to ", shape_str(shape));
    s[i] = want;
    st[i] = have == want ? strides_[i - lead] : 0;
  }
  // Stride 0 costs no memory, so only the count can be wrong: a negative size, or more elements than int64 holds.
  shape_numel(s, "expand");
  return with_geometry(s, st, offset_);
}

Tensor Tensor::unsqueeze(int d) const {
  int dd = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape_;
  Strides st = strides_;
  int64_t stride = dd < dim() ? strides_[dd] * shape_[dd] : 1;
  s.insert(s.begin() + dd, 1);
  st.insert(st.begin() + dd, stride);
  return with_geometry(s, st, offset_);
}

Tensor Tensor::squeeze(int d) const {
  int dd = wrap_dim(d, dim(), "squeeze");
  SHARDRT_CHECK(shape_[dd] == 1, ShapeError, "squeeze: dim ", d, " of ", str(), " has size ", shape_[dd], ", not 1");
  Shape s = shape_;
  Strides st = strides_;
  s.erase(s.begin() + dd);
  st.erase(st.begin() + dd);
  return with_geometry(s, st, offset_);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  copy_elements(out, *this);
  return out;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor out = empty(shape_, dtype_, d);
  copy_elements(out, *this);
  return out;
}

Tensor Tensor::to(DType t) const {
  if (t == dtype_) return *this;
  Tensor out = empty(shape_, t, device());
  copy_elements(out, *this);
  return out;
}

void Tensor::copy_(const Tensor& src) const { copy_elements(*this, src); }

double Tensor::item() const {
  SHARDRT_CHECK(numel() == 1, ShapeError, "item: expected one element, got ", str());
  return to_vector()[0];
}

std::vector<double> Tensor::to_vector() const {
  Tensor host = Tensor::empty(shape_, DType::f64, Device::cpu());
  copy_elements(host, *this);
  const double* p = host.data<double>();
  return std::vector<double>(p, p + host.numel());
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  SHARDRT_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtypes differ: ", a.str(), " vs ", b.str());
}
void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  SHARDRT_CHECK(a.device() == b.device(), DeviceError, op, ": devices differ: ", a.str(), " vs ", b.str());
}
void check_defined(const char* op, const Tensor& t, const char* what) {
  SHARDRT_CHECK(t.defined(), ValueError, op, ": ", what, " is undefined");
}

}  // namespace shardrt
