// Tensor: a strided view onto shared, ref-counted storage on one device.
//
// A Tensor is a value type: copying it shares the storage and the autograd identity (the same variable).
// View methods (narrow, transpose, permute, expand, view, ...) share storage and carry no autograd history;
// the differentiable versions live in autograd/ops.h. Every method checks its arguments and throws a typed
// error naming the method and the shapes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"
#include "runtime/storage.h"

namespace shardrt {

struct AutogradMeta;  // defined by autograd/; a Tensor only carries the slot

class Tensor {
 public:
  Tensor() = default;  // undefined tensor (defined() == false)
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype);

  // --- factories (uninitialised memory / wrapping) ---
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A tensor over memory the caller owns (see Storage::wrap); contiguous.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                          std::shared_ptr<void> keep_alive = nullptr);

  // --- metadata ---
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;  // d may be negative
  int64_t stride(int d) const;
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  bool is_contiguous() const;
  // Bytes of the elements this view addresses (not of its storage); ShapeError when an expanded view addresses
  // more than int64 counts.
  std::size_t nbytes() const { return static_cast<std::size_t>(shape_nbytes(shape_, dtype_, "nbytes")); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // "f32[2, 3] cpu": used in every error message.
  std::string str() const;

  // --- data access (first element of this view) ---
  void* raw_data() const;
  template <typename T>
  T* data() const {
    check_dtype_for_data(dtype_of<T>::value);
    return static_cast<T*>(raw_data());
  }

  // --- views (share storage, no autograd history) ---
  Tensor view(const Shape& shape) const;  // -1 allowed once; ShapeError if the strides do not allow it
  Tensor reshape(const Shape& shape) const;  // a view when possible, otherwise a contiguous copy
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  Tensor select(int dim, int64_t index) const;  // drops `dim`
  Tensor transpose(int d0, int d1) const;
  Tensor permute(const std::vector<int>& dims) const;
  Tensor expand(const Shape& shape) const;  // broadcast to `shape` with stride 0 on expanded dims
  Tensor unsqueeze(int dim) const;
  Tensor squeeze(int dim) const;  // the dim must have size 1
  Tensor flatten() const { return reshape({numel()}); }
  // The same view without autograd history: what an op saves for backward and returns as a fresh output.
  Tensor detach() const { return with_geometry(shape_, strides_, offset_); }

  // --- copies ---
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(Device device) const;  // itself when already there
  Tensor to(DType dtype) const;    // itself when already that dtype
  // Copies `src` (same shape, any dtype, any device) into this tensor's elements, converting the dtype.
  void copy_(const Tensor& src) const;
  void fill_(double value) const;
  void zero_() const { fill_(0.0); }

  // --- host-side reads, mainly for tests and small values ---
  double item() const;                    // numel() must be 1
  std::vector<double> to_vector() const;  // all elements in row-major order, converted to double

  // --- autograd slot (see autograd/tape.h) ---
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_; }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> m) { autograd_ = std::move(m); }

  // Same storage, shape, strides and offset: the two tensors are the same view.
  bool is_same(const Tensor& o) const {
    return storage_ == o.storage_ && offset_ == o.offset_ && shape_ == o.shape_ && strides_ == o.strides_;
  }

 private:
  void check_dtype_for_data(DType requested) const;
  Tensor with_geometry(Shape shape, Strides strides, int64_t offset) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::f32;
  std::shared_ptr<AutogradMeta> autograd_;
};

// Raises DTypeError / DeviceError / ShapeError naming `op` unless the condition holds.
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_defined(const char* op, const Tensor& t, const char* what);

}  // namespace shardrt
