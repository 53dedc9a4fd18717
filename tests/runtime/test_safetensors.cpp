// safetensors: exact round trips for every dtype and geometry, the written bytes, the atomic save, and one case
// per kind of malformed file, each of which must be an IoError naming the file, never a crash.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/allocator.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

using namespace shardrt;

namespace {

std::string temp_path(const std::string& tag) {
  return "/tmp/shardrt_st_" + std::to_string(::getpid()) + "_" + tag + ".safetensors";
}

// A temp path that is removed before and after the test, pass or fail.
struct TempFile {
  explicit TempFile(const std::string& tag) : path(temp_path(tag)) { std::remove(path.c_str()); }
  ~TempFile() { std::remove(path.c_str()); }
  std::string path;
};

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A safetensors file: length field, header text, data bytes.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

// The tensor's elements as raw row-major bytes, for exact (bitwise) comparison.
std::string raw_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  if (c.nbytes() == 0) return {};
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Loading `path` must throw IoError whose message names the file and contains `what`.
void require_load_error(const std::string& path, const std::string& what) {
  REQUIRE_THROWS_AS(load_safetensors(path), IoError);
  try {
    load_safetensors(path);
  } catch (const IoError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find(what) != std::string::npos);
  }
}

// Writes `bytes` to a fresh file and requires that loading it fails with a message containing `what`.
void require_malformed(const std::string& tag, const std::string& bytes, const std::string& what) {
  TempFile f(tag);
  write_raw(f.path, bytes);
  require_load_error(f.path, what);
}

Tensor iota(const Shape& s, DType t = DType::f64) {
  return arange(0, static_cast<double>(shape_numel(s)), 1, {t}).reshape(s);
}

// A tensor with the given raw element bits, so bf16/f16 patterns (NaN payloads, subnormals, -0) are exact.
template <typename Bits>
Tensor from_bits(const std::vector<Bits>& bits, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  REQUIRE(t.nbytes() == bits.size() * sizeof(Bits));
  std::memcpy(t.raw_data(), bits.data(), t.nbytes());
  return t;
}

std::map<std::string, Tensor> one_tensor_of_every_dtype() {
  const double inf = std::numeric_limits<double>::infinity();
  const float finf = std::numeric_limits<float>::infinity();
  return {
      {"f64", from_bits<double>({0.0, -0.0, 1.5, -inf, inf, std::nan("7"), 4.9e-324, 1.7976931348623157e308}, {2, 4},
                                DType::f64)},
      {"f32",
       from_bits<float>({0.0f, -0.0f, 0.1f, -finf, finf, std::nanf("3"), 1.4e-45f, 3.4028235e38f}, {4, 2}, DType::f32)},
      {"bf16", from_bits<uint16_t>({0x0000, 0x8000, 0x3f80, 0x7f80, 0xff80, 0x7fc1, 0x0001, 0xffff}, {8}, DType::bf16)},
      {"f16",
       from_bits<uint16_t>({0x0000, 0x8000, 0x3c00, 0x7c00, 0xfc00, 0x7e01, 0x0001, 0x7bff}, {2, 2, 2}, DType::f16)},
      {"i64", from_bits<int64_t>(
                  {std::numeric_limits<int64_t>::min(), -1, 0, 1, std::numeric_limits<int64_t>::max(), 123456789012345},
                  {3, 2}, DType::i64)},
      {"i32", from_bits<int32_t>({std::numeric_limits<int32_t>::min(), -1, 0, std::numeric_limits<int32_t>::max(), 7},
                                 {5}, DType::i32)},
      {"u8", arange(0, 256, 1, {DType::u8}).reshape({16, 16})},
      {"bool", from_bits<uint8_t>({1, 0, 0, 1, 1, 1, 0, 0, 1}, {3, 3}, DType::boolean)},
  };
}

}  // namespace

// ------------------------------------------------------------------------------------------------ round trips

TEST_CASE("safetensors: every dtype round-trips bit for bit", "[runtime][safetensors]") {
  TempFile f("every_dtype");
  const auto tensors = one_tensor_of_every_dtype();
  save_safetensors(f.path, tensors);
  const SafetensorsFile loaded = load_safetensors(f.path);
  REQUIRE(loaded.names() == std::vector<std::string>{"bf16", "bool", "f16", "f32", "f64", "i32", "i64", "u8"});
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const Tensor& back = loaded.get(name);
    CHECK(back.dtype() == t.dtype());
    CHECK(back.shape() == t.shape());
    CHECK(back.device() == Device::cpu());
    CHECK(back.is_contiguous());
    CHECK(raw_bytes(back) == raw_bytes(t));
  }
  CHECK(loaded.metadata().empty());
}

TEST_CASE("safetensors: a saved file loads as zero-copy, aligned views", "[runtime][safetensors]") {
  TempFile f("zero_copy");
  save_safetensors(f.path, one_tensor_of_every_dtype());
  const int64_t allocations_before = memory_stats(Device::cpu()).allocations;
  const SafetensorsFile loaded = load_safetensors(f.path);
  CHECK(memory_stats(Device::cpu()).allocations == allocations_before);  // nothing copied
  for (const auto& [name, t] : loaded.tensors())
    CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % dtype_size(t.dtype()) == 0);
}

TEST_CASE("safetensors: scalars and zero-size tensors", "[runtime][safetensors]") {
  TempFile f("scalar_zero");
  save_safetensors(f.path, {{"scalar", from_vector({3.25}, {}, {DType::f32})},
                            {"empty1d", Tensor::empty({0}, DType::f64)},
                            {"empty3d", Tensor::empty({3, 0, 2}, DType::i64)},
                            {"after", from_vector({1, 2}, {2}, {DType::i32})}});
  const SafetensorsFile loaded = load_safetensors(f.path);
  CHECK(loaded.get("scalar").shape() == Shape{});
  CHECK(loaded.get("scalar").item() == 3.25);
  CHECK(loaded.get("empty1d").shape() == Shape{0});
  CHECK(loaded.get("empty3d").shape() == Shape{3, 0, 2});
  CHECK(loaded.get("empty3d").numel() == 0);
  CHECK(loaded.get("after").to_vector() == std::vector<double>{1, 2});
}

TEST_CASE("safetensors: strided inputs are saved in row-major order", "[runtime][safetensors]") {
  TempFile f("strided");
  const Tensor base = iota({3, 4});
  const Tensor transposed = base.transpose(0, 1);       // (4, 3), not contiguous
  const Tensor narrowed = base.narrow(0, 1, 2);         // a view with an offset
  const Tensor expanded = iota({1, 3}).expand({2, 3});  // stride 0
  REQUIRE_FALSE(transposed.is_contiguous());
  save_safetensors(f.path, {{"t", transposed}, {"n", narrowed}, {"e", expanded}});
  const SafetensorsFile loaded = load_safetensors(f.path);
  CHECK(loaded.get("t").shape() == Shape{4, 3});
  CHECK(loaded.get("t").to_vector() == transposed.to_vector());
  CHECK(loaded.get("t").to_vector() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(loaded.get("n").to_vector() == std::vector<double>{4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(loaded.get("e").to_vector() == std::vector<double>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("safetensors: __metadata__ round-trips", "[runtime][safetensors]") {
  TempFile f("metadata");
  const std::map<std::string, std::string> metadata{
      {"format", "pt"}, {"note", "d\xc3\xa9j\xc3\xa0 \xe2\x9c\x93 \"quoted\"\n"}, {"empty", ""}};
  save_safetensors(f.path, {{"w", iota({2})}}, metadata);
  const SafetensorsFile loaded = load_safetensors(f.path);
  CHECK(loaded.metadata() == metadata);
  CHECK(loaded.get("w").to_vector() == std::vector<double>{0, 1});
}

TEST_CASE("safetensors: an empty map saves and loads", "[runtime][safetensors]") {
  TempFile f("nothing");
  save_safetensors(f.path, {});
  const SafetensorsFile loaded = load_safetensors(f.path);
  CHECK(loaded.names().empty());
  CHECK(loaded.metadata().empty());
}

TEST_CASE("safetensors: many tensors of mixed dtypes and odd sizes", "[runtime][safetensors]") {
  TempFile f("many");
  const DType dtypes[] = {DType::u8, DType::f32, DType::bf16, DType::f64, DType::i32, DType::f16, DType::i64};
  std::map<std::string, Tensor> tensors;
  Generator gen(42);
  for (int i = 0; i < 200; ++i) {
    const DType dt = dtypes[i % 7];
    const Shape shape{1 + i % 5, 1 + (i * 7) % 3};  // odd byte counts for u8, so alignment depends on the order
    const Tensor t = is_floating(dt) ? rand(shape, {dt}, &gen, -2.0, 2.0) : iota(shape, dt);
    tensors.emplace("layer." + std::to_string(i) + ".weight", t);
  }
  save_safetensors(f.path, tensors);
  const int64_t allocations_before = memory_stats(Device::cpu()).allocations;
  const SafetensorsFile loaded = load_safetensors(f.path);
  CHECK(memory_stats(Device::cpu()).allocations == allocations_before);
  REQUIRE(loaded.tensors().size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const Tensor& back = loaded.get(name);
    CHECK(back.dtype() == t.dtype());
    CHECK(back.shape() == t.shape());
    CHECK(raw_bytes(back) == raw_bytes(t));
  }
}

// ------------------------------------------------------------------------------------------------ file object

TEST_CASE("safetensors: get, contains and names", "[runtime][safetensors]") {
  TempFile f("accessors");
  save_safetensors(f.path, {{"b", iota({1})}, {"a", iota({1})}});
  const SafetensorsFile loaded = load_safetensors(f.path);
  CHECK(loaded.path() == f.path);
  CHECK(loaded.names() == std::vector<std::string>{"a", "b"});
  CHECK(loaded.contains("a"));
  CHECK_FALSE(loaded.contains("c"));
  REQUIRE_THROWS_AS(loaded.get("c"), IoError);
  try {
    loaded.get("c");
  } catch (const IoError& e) {
    CHECK(std::string(e.what()).find("'c'") != std::string::npos);
    CHECK(std::string(e.what()).find(f.path) != std::string::npos);
  }
}

TEST_CASE("safetensors: loaded tensors outlive the file object", "[runtime][safetensors]") {
  TempFile f("outlive");
  save_safetensors(f.path, {{"w", iota({2, 3})}});
  Tensor kept;
  {
    const SafetensorsFile loaded = load_safetensors(f.path);
    kept = loaded.get("w");
  }
  CHECK(kept.to_vector() == std::vector<double>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("safetensors: writing into a loaded tensor never reaches the file", "[runtime][safetensors]") {
  TempFile f("copy_on_write");
  save_safetensors(f.path, {{"w", iota({4})}});
  const std::string bytes_before = read_raw(f.path);
  {
    const SafetensorsFile loaded = load_safetensors(f.path);
    Tensor w = loaded.get("w");
    w.fill_(-1.0);
    CHECK(w.to_vector() == std::vector<double>{-1, -1, -1, -1});
  }
  CHECK(read_raw(f.path) == bytes_before);
  CHECK(load_safetensors(f.path).get("w").to_vector() == std::vector<double>{0, 1, 2, 3});
}

// ------------------------------------------------------------------------------------------------ written bytes

TEST_CASE("safetensors: the written bytes follow the format", "[runtime][safetensors]") {
  TempFile f("layout");
  const Tensor b = iota({2, 3}, DType::f32);
  const Tensor a = arange(1, 4, 1, {DType::u8});
  save_safetensors(f.path, {{"b", b}, {"a", a}}, {{"k", "v"}});
  const std::string bytes = read_raw(f.path);
  REQUIRE(bytes.size() >= 8);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  CHECK(header_bytes % 8 == 0);
  REQUIRE(bytes.size() == 8 + header_bytes + 24 + 3);

  const std::string header = bytes.substr(8, header_bytes);
  const std::string json_text = header.substr(0, header.find_last_not_of(' ') + 1);
  CHECK(header.substr(json_text.size()) == std::string(header.size() - json_text.size(), ' '));
  const nlohmann::json doc = nlohmann::json::parse(header);
  CHECK(doc["b"]["dtype"] == "F32");
  CHECK(doc["b"]["shape"] == nlohmann::json::array({2, 3}));
  CHECK(doc["b"]["data_offsets"] == nlohmann::json::array({0, 24}));  // 4-byte elements before 1-byte ones
  CHECK(doc["a"]["dtype"] == "U8");
  CHECK(doc["a"]["data_offsets"] == nlohmann::json::array({24, 27}));
  CHECK(doc["__metadata__"] == nlohmann::json{{"k", "v"}});
  CHECK(bytes.substr(8 + header_bytes, 24) == raw_bytes(b));
  CHECK(bytes.substr(8 + header_bytes + 24) == std::string("\x01\x02\x03", 3));
  CHECK(load_safetensors(f.path).get("b").to_vector() == b.to_vector());
}

TEST_CASE("safetensors: hand-written files with padding, any entry order and gaps load", "[runtime][safetensors]") {
  TempFile f("hand_written");
  const float values[2] = {1.5f, -2.0f};
  std::string data(16, '\0');
  std::memcpy(data.data() + 8, values, 8);  // bytes 0..8 belong to no tensor
  const std::string header = R"({"late": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},)"
                             R"( "scalar": {"dtype": "U8", "shape": [], "data_offsets": [0, 1]},)"
                             R"( "none": {"dtype": "F64", "shape": [0, 4], "data_offsets": [16, 16]}})"
                             "        ";
  write_raw(f.path, file_bytes(header, data));
  const SafetensorsFile loaded = load_safetensors(f.path);
  CHECK(loaded.get("late").to_vector() == std::vector<double>{1.5, -2.0});
  CHECK(loaded.get("scalar").item() == 0);
  CHECK(loaded.get("none").shape() == Shape{0, 4});
}

TEST_CASE("safetensors: an unaligned tensor is copied and reads correctly", "[runtime][safetensors]") {
  TempFile f("unaligned");
  // The header is padded so that the data section starts at a multiple of 8; the F32 starts one byte in, at an
  // odd address, and the F64 right after it at an address that is not a multiple of 8.
  const float floats[3] = {0.5f, -3.0f, 1e30f};
  const double doubles[2] = {-0.125, 6.02e23};
  std::string data(1 + 12 + 16, '\0');
  data[0] = 7;
  std::memcpy(data.data() + 1, floats, 12);
  std::memcpy(data.data() + 13, doubles, 16);
  std::string header = R"({"pad": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                       R"( "f": {"dtype": "F32", "shape": [3], "data_offsets": [1, 13]},)"
                       R"( "d": {"dtype": "F64", "shape": [2], "data_offsets": [13, 29]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  write_raw(f.path, file_bytes(header, data));
  const SafetensorsFile loaded = load_safetensors(f.path);
  const Tensor& t = loaded.get("f");
  CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 4 == 0);
  CHECK(t.to_vector() == std::vector<double>{0.5, -3.0, static_cast<double>(1e30f)});
  const Tensor& d = loaded.get("d");
  CHECK(reinterpret_cast<std::uintptr_t>(d.raw_data()) % 8 == 0);
  CHECK(d.to_vector() == std::vector<double>{-0.125, 6.02e23});
  CHECK(loaded.get("pad").item() == 7);
}

// ------------------------------------------------------------------------------------------------ atomic save

TEST_CASE("safetensors: a save leaves no temporary file and replaces the old file", "[runtime][safetensors]") {
  TempFile f("replace");
  const std::string temporary = f.path + ".tmp." + std::to_string(::getpid());
  save_safetensors(f.path, {{"old", iota({3})}});
  CHECK_FALSE(file_exists(temporary));
  const SafetensorsFile old_file = load_safetensors(f.path);

  save_safetensors(f.path, {{"new", iota({2}, DType::i32)}}, {{"version", "2"}});
  CHECK_FALSE(file_exists(temporary));
  const SafetensorsFile new_file = load_safetensors(f.path);
  CHECK(new_file.names() == std::vector<std::string>{"new"});
  CHECK(new_file.metadata().at("version") == "2");
  // The old tensors view the replaced file, which lives on while mapped.
  CHECK(old_file.get("old").to_vector() == std::vector<double>{0, 1, 2});
}

TEST_CASE("safetensors: a failed save leaves the previous file intact", "[runtime][safetensors]") {
  TempFile f("failed_save");
  const std::string temporary = f.path + ".tmp." + std::to_string(::getpid());
  save_safetensors(f.path, {{"w", iota({3})}});
  const std::string before = read_raw(f.path);

  SECTION("rejected before writing") {
    CHECK_THROWS_AS(save_safetensors(f.path, {{"w", iota({4})}, {"", iota({1})}}), ValueError);
  }
  SECTION("the temporary file cannot be created") {
    REQUIRE(::mkdir(temporary.c_str(), 0700) == 0);  // a directory where the temporary file would go
    REQUIRE_THROWS_AS(save_safetensors(f.path, {{"w", iota({4})}}), IoError);
    try {
      save_safetensors(f.path, {{"w", iota({4})}});
    } catch (const IoError& e) {
      CHECK(std::string(e.what()).find(f.path) != std::string::npos);
    }
    REQUIRE(::rmdir(temporary.c_str()) == 0);
  }
  CHECK(read_raw(f.path) == before);
  CHECK_FALSE(file_exists(temporary));
}

TEST_CASE("safetensors: saving into a missing directory is an IoError", "[runtime][safetensors]") {
  const std::string path = "/tmp/shardrt_st_" + std::to_string(::getpid()) + "_no_such_dir/x.safetensors";
  REQUIRE_THROWS_AS(save_safetensors(path, {{"w", iota({1})}}), IoError);
}

TEST_CASE("safetensors: invalid names and undefined tensors are rejected on save", "[runtime][safetensors]") {
  TempFile f("bad_names");
  CHECK_THROWS_AS(save_safetensors(f.path, {{"", iota({1})}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(f.path, {{"__metadata__", iota({1})}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(f.path, {{"__private", iota({1})}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(f.path, {{"bad\xff", iota({1})}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(f.path, {{"w", Tensor()}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(f.path, {{"w", iota({1})}}, {{"k", "\xc0\xaf"}}), ValueError);
  CHECK_FALSE(file_exists(f.path));
}

// ------------------------------------------------------------------------------------------------ malformed files

TEST_CASE("safetensors malformed: missing file", "[runtime][safetensors]") {
  require_load_error(temp_path("does_not_exist"), "cannot open");
}

TEST_CASE("safetensors malformed: a directory is not a readable file", "[runtime][safetensors]") {
  const std::string dir = temp_path("a_directory");
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  require_load_error(dir, "not a regular file");
  ::rmdir(dir.c_str());
}

TEST_CASE("safetensors malformed: file shorter than 8 bytes", "[runtime][safetensors]") {
  require_malformed("empty_file", "", "too short");
  require_malformed("five_bytes", std::string(5, '\0'), "too short");
}

TEST_CASE("safetensors malformed: header length past the end of the file", "[runtime][safetensors]") {
  require_malformed("length_past_eof", le64(100) + "{}", "runs past the end");
  require_malformed("length_no_header", le64(1), "runs past the end");
}

TEST_CASE("safetensors malformed: absurdly large header length", "[runtime][safetensors]") {
  require_malformed("length_huge", le64(100'000'001) + "{}", "exceeds the limit");
  require_malformed("length_u64_max", le64(std::numeric_limits<uint64_t>::max()) + "{}", "exceeds the limit");
}

TEST_CASE("safetensors malformed: header not valid UTF-8", "[runtime][safetensors]") {
  require_malformed("utf8_ff", file_bytes("{\"a\xff\": 1}"), "not valid UTF-8");
  require_malformed("utf8_overlong", file_bytes("{\"\xc0\xaf\": 1}"), "not valid UTF-8");
  require_malformed("utf8_surrogate", file_bytes("{\"\xed\xa0\x80\": 1}"), "not valid UTF-8");
  require_malformed("utf8_above_max", file_bytes("{\"\xf4\x90\x80\x80\": 1}"), "not valid UTF-8");
  require_malformed("utf8_truncated", file_bytes("{} \xe2\x82"), "not valid UTF-8");
  require_malformed("utf8_outside_string", file_bytes("{}\x80"), "not valid UTF-8");
}

TEST_CASE("safetensors malformed: header not valid JSON", "[runtime][safetensors]") {
  require_malformed("json_truncated", file_bytes(R"({"a": )"), "not valid JSON");
  require_malformed("json_empty", file_bytes(""), "not valid JSON");
  require_malformed("json_trailing", file_bytes("{} x"), "not valid JSON");
  require_malformed("json_nul_padding", file_bytes(std::string("{}\0\0", 4)), "not valid JSON");
  require_malformed("json_garbage_after_nul", file_bytes(std::string("{}\0x", 4)), "not valid JSON");
}

TEST_CASE("safetensors malformed: header not an object", "[runtime][safetensors]") {
  require_malformed("header_array", file_bytes("[1, 2]"), "expected an object");
  require_malformed("header_string", file_bytes(R"("x")"), "expected an object");
  require_malformed("header_number", file_bytes("3"), "expected an object");
}

TEST_CASE("safetensors malformed: entry not an object", "[runtime][safetensors]") {
  require_malformed("entry_array", file_bytes(R"({"a": [1]})"), "entry is array");
  require_malformed("entry_null", file_bytes(R"({"a": null})"), "entry is null");
}

TEST_CASE("safetensors malformed: dtype missing or not a string", "[runtime][safetensors]") {
  require_malformed("dtype_missing", file_bytes(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", "abcd"),
                    "missing \"dtype\"");
  require_malformed("dtype_number", file_bytes(R"({"a": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", "abcd"),
                    "\"dtype\" is number");
}

TEST_CASE("safetensors malformed: shape missing or not an array", "[runtime][safetensors]") {
  require_malformed("shape_missing", file_bytes(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", "abcd"),
                    "missing \"shape\"");
  require_malformed("shape_number",
                    file_bytes(R"({"a": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", "abcd"),
                    "\"shape\" is number");
}

TEST_CASE("safetensors malformed: data_offsets missing or not an array", "[runtime][safetensors]") {
  require_malformed("offsets_missing", file_bytes(R"({"a": {"dtype": "F32", "shape": [1]}})", "abcd"),
                    "missing \"data_offsets\"");
  require_malformed("offsets_object",
                    file_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": {"b": 0}}})", "abcd"),
                    "two non-negative integers");
  require_malformed("offsets_string",
                    file_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": "0,4"}})", "abcd"),
                    "two non-negative integers");
}

TEST_CASE("safetensors malformed: unknown dtype", "[runtime][safetensors]") {
  for (const char* dtype : {"F8_E4M3", "I16", "U16", "f32", ""}) {
    INFO(dtype);
    require_malformed(
        "dtype_unknown",
        file_bytes(std::string(R"({"a": {"dtype": ")") + dtype + R"(", "shape": [1], "data_offsets": [0, 4]}})",
                   "abcd"),
        "unsupported dtype");
  }
}

TEST_CASE("safetensors malformed: negative or non-integer shape entries", "[runtime][safetensors]") {
  for (const char* shape : {"[-1]", "[1.5]", "[1.0]", "[\"2\"]", "[true]", "[null]", "[9223372036854775808]"}) {
    INFO(shape);
    require_malformed(
        "shape_entry",
        file_bytes(std::string(R"({"a": {"dtype": "U8", "shape": )") + shape + R"(, "data_offsets": [0, 1]}})", "x"),
        "not a non-negative int64");
  }
}

TEST_CASE("safetensors malformed: shape product overflows int64", "[runtime][safetensors]") {
  require_malformed("shape_overflow",
                    file_bytes(R"({"a": {"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})"),
                    "more elements than int64");
  // Zero elements, but the other sizes still multiply past int64.
  require_malformed(
      "shape_overflow_zero",
      file_bytes(R"({"a": {"dtype": "U8", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}})"),
      "more elements than int64");
}

TEST_CASE("safetensors malformed: data_offsets not two ordered non-negative integers", "[runtime][safetensors]") {
  for (const char* offsets : {"[0]", "[0, 4, 8]", "[]", "[-4, 0]", "[0, 4.0]", "[0, \"4\"]", "[0, null]"}) {
    INFO(offsets);
    require_malformed(
        "offsets_shape",
        file_bytes(std::string(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": )") + offsets + "}}",
                   "abcdefgh"),
        "two non-negative integers");
  }
  require_malformed("offsets_reversed",
                    file_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", "abcdefgh"),
                    "begin after end");
}

TEST_CASE("safetensors malformed: data_offsets end past the data section", "[runtime][safetensors]") {
  require_malformed("offsets_past_end",
                    file_bytes(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", "abcdefgh"),
                    "past the data section");
  require_malformed(
      "offsets_u64_max",
      file_bytes(
          R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [18446744073709551615, 18446744073709551615]}})"),
      "past the data section");
}

TEST_CASE("safetensors malformed: byte count does not match dtype and shape", "[runtime][safetensors]") {
  require_malformed("size_mismatch",
                    file_bytes(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", "abcdefgh"),
                    "needs");
  require_malformed("size_not_multiple",
                    file_bytes(R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 7]}})", "abcdefgh"),
                    "needs");
  require_malformed("size_zero_shape",
                    file_bytes(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 4]}})", "abcdefgh"),
                    "needs");
}

TEST_CASE("safetensors malformed: overlapping tensors", "[runtime][safetensors]") {
  require_malformed("overlap",
                    file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                               R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                               std::string(12, '\0')),
                    "overlap");
  require_malformed("overlap_same",
                    file_bytes(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                               R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                               std::string(4, '\0')),
                    "overlap");
}

TEST_CASE("safetensors malformed: __metadata__ not an object of strings", "[runtime][safetensors]") {
  require_malformed("metadata_array", file_bytes(R"({"__metadata__": ["a"]})"), "__metadata__");
  require_malformed("metadata_number_value", file_bytes(R"({"__metadata__": {"k": 1}})"), "__metadata__");
  require_malformed("metadata_nested", file_bytes(R"({"__metadata__": {"k": {}}})"), "__metadata__");
}

TEST_CASE("safetensors malformed: a repeated tensor name", "[runtime][safetensors]") {
  require_malformed("duplicate_name",
                    file_bytes(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                               R"( "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                               "xy"),
                    "repeats the key 'a'");
}

TEST_CASE("safetensors malformed: nesting deeper than a header has", "[runtime][safetensors]") {
  require_malformed("deep_nesting", file_bytes(std::string(10000, '[') + std::string(10000, ']')), "nests deeper");
}

TEST_CASE("safetensors malformed: BOOL bytes other than 0 and 1", "[runtime][safetensors]") {
  require_malformed(
      "bool_byte",
      file_bytes(R"({"a": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})", std::string("\x01\x00\x02", 3)),
      "BOOL element 2");
}
