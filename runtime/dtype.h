// Element types a Tensor can hold, their sizes and names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardrt {

enum class DType : uint8_t { f64, f32, bf16, f16, i64, i32, u8, boolean };

// Bytes per element.
std::size_t dtype_size(DType t);
// Short lowercase name ("f32", "bf16", "bool", ...), used in every error message.
const char* dtype_name(DType t);
// Inverse of dtype_name; throws ValueError for an unknown name.
DType dtype_from_name(std::string_view name);

inline bool is_floating(DType t) { return t == DType::f64 || t == DType::f32 || t == DType::bf16 || t == DType::f16; }
inline bool is_integral(DType t) { return !is_floating(t); }

// Compile-time map from C++ type to DType, for templated kernels and factories.
template <typename T> struct dtype_of;
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };

}  // namespace shardrt
