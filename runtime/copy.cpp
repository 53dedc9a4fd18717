#include "runtime/copy.h"

#include "runtime/copy_cpu.h"
#include "runtime/cuda/copy_cuda.h"
#include "runtime/errors.h"

namespace shardrt {

namespace {

// Host <-> device: convert and compact on the source side's device, then one contiguous memcpy, then a
// strided scatter on the destination side if its layout needs one. Device-to-host waits for the stream,
// so the host sees the data when this returns.
void copy_across(const Tensor& dst, const Tensor& src) {
  Tensor staged_src = src.contiguous().to(dst.dtype());  // on src's device, dst's dtype
  Tensor staged_dst = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), dst.device());
  const bool to_device = dst.device().is_cuda();
  const int dev = to_device ? dst.device().index : src.device().index;
  if (staged_dst.nbytes() > 0)
    copy_bytes_host_device(dev, staged_dst.raw_data(), staged_src.raw_data(), staged_dst.nbytes(), to_device);
  if (!staged_dst.is_same(dst)) copy_elements(dst, staged_dst);
}

}  // namespace

void copy_elements(const Tensor& dst, const Tensor& src) {
  check_defined("copy", dst, "destination");
  check_defined("copy", src, "source");
  SHARDRT_CHECK(dst.shape() == src.shape(), ShapeError, "copy: destination ", dst.str(), " and source ", src.str(),
                " differ in shape");
  if (dst.numel() == 0) return;
  Device dd = dst.device(), sd = src.device();
  if (dd.is_cpu() && sd.is_cpu()) {
    copy_strided_cpu(dst.dim(), dst.shape().data(), dst.raw_data(), dst.dtype(), dst.strides().data(), src.raw_data(),
                     src.dtype(), src.strides().data());
    return;
  }
  if (dd.is_cuda() && sd.is_cuda()) {
    if (dd.index != sd.index) {  // peer copy through a contiguous staging buffer on the destination
      Tensor compact = src.contiguous();
      Tensor staged = Tensor::empty(src.shape(), src.dtype(), dd);
      copy_bytes_peer(dd.index, staged.raw_data(), sd.index, compact.raw_data(), compact.nbytes());
      copy_elements(dst, staged);
      return;
    }
    SHARDRT_CHECK(dst.dim() <= 8, ShapeError, "copy: tensors of rank ", dst.dim(), " > 8 are not supported on cuda");
    copy_strided_cuda(dd.index, dst.dim(), dst.shape().data(), dst.raw_data(), dst.dtype(), dst.strides().data(),
                      src.raw_data(), src.dtype(), src.strides().data());
    return;
  }
  copy_across(dst, src);
}

void Tensor::fill_(double value) const {
  if (numel() == 0) return;
  if (!is_contiguous()) {  // fill a compact buffer, then scatter it into the view
    Tensor tmp = Tensor::empty(shape(), dtype(), device());
    tmp.fill_(value);
    copy_elements(*this, tmp);
    return;
  }
  if (device().is_cpu()) return fill_cpu(raw_data(), dtype(), numel(), value);
  fill_cuda(device().index, raw_data(), dtype(), numel(), value);
}

}  // namespace shardrt
