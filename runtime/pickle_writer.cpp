#include "runtime/pickle_writer.h"

#include <bit>
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "runtime/errors.h"

namespace shardrt {

static_assert(std::endian::native == std::endian::little, "pickle integers are written little-endian");

namespace {

// The opcodes used, by their pickle names (Python's Lib/pickle.py lists them all).
enum Op : unsigned char {
  PROTO = 0x80, STOP = '.', MARK = '(', GLOBAL = 'c', BINPUT = 'q', LONG_BINPUT = 'r', BINGET = 'h',
  LONG_BINGET = 'j', EMPTY_TUPLE = ')', TUPLE = 't', TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87,
  BINUNICODE = 'X', BININT = 'J', BININT1 = 'K', BININT2 = 'M', LONG1 = 0x8a, NEWTRUE = 0x88, NEWFALSE = 0x89,
  NONE = 'N', EMPTY_DICT = '}', SETITEMS = 'u', REDUCE = 'R', BINPERSID = 'Q',
};

// Python's pickler flushes SETITEMS every 1000 pairs; the same keeps the unpickler's stack bounded.
constexpr std::size_t kItemsPerBatch = 1000;

}  // namespace

PickleWriter::PickleWriter() {
  op(PROTO);
  op(2);
}

void PickleWriter::op(unsigned char code) {
  SHARDRT_CHECK(!finished_, ValueError, "PickleWriter: write after finish()");
  out_.push_back(code);
}

void PickleWriter::raw(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  out_.insert(out_.end(), p, p + n);
}

void PickleWriter::put_memo(uint32_t slot) {
  if (slot < 256) {
    op(BINPUT);
    op(static_cast<unsigned char>(slot));
  } else {
    op(LONG_BINPUT);
    raw(&slot, 4);
  }
}

void PickleWriter::get_memo(uint32_t slot) {
  if (slot < 256) {
    op(BINGET);
    op(static_cast<unsigned char>(slot));
  } else {
    op(LONG_BINGET);
    raw(&slot, 4);
  }
}

void PickleWriter::global(const std::string& module, const std::string& name) {
  SHARDRT_CHECK(module.find('\n') == std::string::npos && name.find('\n') == std::string::npos, ValueError,
                "PickleWriter::global: a newline in '", module, "' / '", name, "'");
  const std::string full = module + "\n" + name + "\n";
  if (auto it = global_memo_.find(full); it != global_memo_.end()) return get_memo(it->second);
  op(GLOBAL);
  raw(full.data(), full.size());
  global_memo_.emplace(full, next_memo_);
  put_memo(next_memo_++);
}

void PickleWriter::mark() { op(MARK); }
void PickleWriter::empty_tuple() { op(EMPTY_TUPLE); }
void PickleWriter::tuple_from_mark() { op(TUPLE); }

void PickleWriter::tuple_of(int n) {
  SHARDRT_CHECK(n >= 1 && n <= 3, ValueError, "PickleWriter::tuple_of: ", n, " items (1 to 3)");
  op(n == 1 ? TUPLE1 : n == 2 ? TUPLE2 : TUPLE3);
}

void PickleWriter::text(const std::string& s) {
  SHARDRT_CHECK(s.size() <= std::numeric_limits<uint32_t>::max(), ValueError, "PickleWriter::text: ", s.size(),
                " bytes is too long for BINUNICODE");
  op(BINUNICODE);
  const auto n = static_cast<uint32_t>(s.size());
  raw(&n, 4);
  raw(s.data(), s.size());
}

void PickleWriter::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    op(BININT1);
    op(static_cast<unsigned char>(v));
  } else if (v >= 0 && v < 65536) {
    op(BININT2);
    const auto u = static_cast<uint16_t>(v);
    raw(&u, 2);
  } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    op(BININT);
    const auto s = static_cast<int32_t>(v);
    raw(&s, 4);
  } else {
    // LONG1: the shortest little-endian two's complement that keeps the sign bit right.
    unsigned char bytes[8];
    std::memcpy(bytes, &v, 8);
    int n = 8;
    while (n > 1 && ((bytes[n - 1] == 0x00 && !(bytes[n - 2] & 0x80)) || (bytes[n - 1] == 0xFF && (bytes[n - 2] & 0x80))))
      --n;
    op(LONG1);
    op(static_cast<unsigned char>(n));
    raw(bytes, static_cast<std::size_t>(n));
  }
}

void PickleWriter::boolean(bool v) { op(v ? NEWTRUE : NEWFALSE); }
void PickleWriter::none() { op(NONE); }
void PickleWriter::empty_dict() { op(EMPTY_DICT); }
void PickleWriter::set_items() { op(SETITEMS); }
void PickleWriter::reduce() { op(REDUCE); }
void PickleWriter::persistent_id() { op(BINPERSID); }

std::vector<unsigned char> PickleWriter::finish() {
  op(STOP);
  finished_ = true;
  return std::move(out_);
}

const char* torch_storage_name(DType dtype) {
  switch (dtype) {
    case DType::f64: return "DoubleStorage";
    case DType::f32: return "FloatStorage";
    case DType::bf16: return "BFloat16Storage";
    case DType::f16: return "HalfStorage";
    case DType::i64: return "LongStorage";
    case DType::i32: return "IntStorage";
    case DType::u8: return "ByteStorage";
    case DType::boolean: return "BoolStorage";
  }
  throw DTypeError(detail::concat("torch_storage_name: dtype ", static_cast<int>(dtype), " has no torch storage"));
}

std::vector<unsigned char> pickle_state_dict(const std::vector<PickledStateEntry>& entries) {
  PickleWriter w;
  // OrderedDict() — the dict torch.save gets from Module.state_dict().
  w.global("collections", "OrderedDict");
  w.empty_tuple();
  w.reduce();
  for (std::size_t first = 0; first < entries.size(); first += kItemsPerBatch) {
    w.mark();
    for (std::size_t i = first; i < std::min(entries.size(), first + kItemsPerBatch); ++i) {
      const PickledStateEntry& e = entries[i];
      int64_t numel = 1;
      for (int64_t d : e.shape) {
        SHARDRT_CHECK(d >= 0, ValueError, "pickle_state_dict: '", e.key, "' has a negative size");
        numel *= d;
      }
      w.text(e.key);
      w.global("torch._utils", "_rebuild_tensor_v2");
      w.mark();
      // The storage, by persistent id: ('storage', torch.<T>Storage, key, location, numel).
      w.mark();
      w.text("storage");
      w.global("torch", torch_storage_name(e.dtype));
      w.text(e.storage_key);
      w.text("cpu");
      w.integer(numel);
      w.tuple_from_mark();
      w.persistent_id();
      w.integer(0);  // storage offset
      // Size and (contiguous, row-major) stride tuples.
      std::vector<int64_t> stride(e.shape.size(), 1);
      for (std::size_t d = e.shape.size(); d-- > 1;) stride[d - 1] = stride[d] * std::max<int64_t>(e.shape[d], 1);
      for (const std::vector<int64_t>* dims : std::initializer_list<const std::vector<int64_t>*>{&e.shape, &stride}) {
        if (dims->empty()) {
          w.empty_tuple();
          continue;
        }
        w.mark();
        for (int64_t d : *dims) w.integer(d);
        w.tuple_from_mark();
      }
      w.boolean(false);  // requires_grad
      w.global("collections", "OrderedDict");  // backward hooks: none
      w.empty_tuple();
      w.reduce();
      w.tuple_from_mark();
      w.reduce();
    }
    w.set_items();
  }
  return w.finish();
}

}  // namespace shardrt
