// Data movement for shape ops: strided block copies, concatenation / split along a middle dim, and N-d padding.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu {

// dst[r · dst_stride + c] = src[r · src_stride + c] for r < rows, c < cols (strides in elements).
template <typename T>
void copy_block(int64_t rows, int64_t cols, const T* src, int64_t src_stride, T* dst, int64_t dst_stride);

// Concatenation along the middle dim of (outer, n, inner): part p is (outer, part_n[p], inner) and
// out is (outer, Σ part_n, inner).
template <typename T>
void cat(int64_t outer, int64_t inner, int64_t n_parts, const T* const* parts, const int64_t* part_n, T* out);

// The inverse of cat (and its backward): in (outer, Σ part_n, inner) is cut into parts[p] (outer, part_n[p], inner).
template <typename T>
void split(int64_t outer, int64_t inner, int64_t n_parts, const T* in, const int64_t* part_n, T* const* parts);

// What a padded position reads, for output index o along a dim of size n, with s = o - pad_lo:
enum class PadMode {
  constant,   // value when s is outside [0, n)
  reflect,    // mirror without repeating the edge: s = -1 reads 1, s = n reads n - 2 (PyTorch 'reflect')
  replicate,  // the nearest edge element
  circular,   // s mod n
};

// Pads the trailing nd (1..3) dims of x (outer, *in) into y (outer, *out) with out[d] = in[d] + pad_lo[d] +
// pad_hi[d]; in, pad_lo and pad_hi hold nd entries. Negative pads crop (for every mode). PyTorch's limits apply
// for an exact match: reflect needs pad < in, circular pad <= in; beyond them the index maps above keep
// folding periodically. Non-constant modes need in[d] >= 1 on every padded dim. value is read for constant only.
template <typename T>
void pad(PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* pad_lo, const int64_t* pad_hi,
         T value, const T* x, T* y);

// gx (outer, *in), overwritten, from gy (outer, *out): every gy element is added to the input element it was
// read from (several for reflect/replicate/circular; none for constant fill). Parallel over outer only, so the
// folded sums do not depend on the thread count.
template <typename T>
void pad_backward(PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* pad_lo,
                  const int64_t* pad_hi, const T* gy, T* gx);

}  // namespace shardrt::kernels::cpu
