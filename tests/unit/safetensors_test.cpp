// safetensors writer and reader: round trips, and one test per kind of malformed file (the reader
// faces files from anywhere, so each must be rejected with a message, never a crash).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "diag/safetensors.hpp"

namespace st = kjit::util::safetensors;

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// A file from a header written by hand and `data_bytes` bytes of data.
std::string file_with(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x5A');
}

void expect_rejected(const std::string& bytes, const std::string& fragment) {
  try {
    st::File::parse(bytes);
    FAIL("accepted a malformed file; expected an error containing: " << fragment);
  } catch (const kjit::Error& e) {
    INFO(e.what());
    CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("safetensors: ") == 0);
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

struct Sample {
  std::vector<uint16_t> bf16{0x3F80, 0xBF80, 0x4000, 0x0000, 0x7FC0, 0xFF80};  // 1,-1,2,0,nan,-inf
  std::vector<int32_t> i32{7, -8, 1 << 30, 0};
  float scalar = 3.5f;
  std::vector<uint8_t> empty;
  std::vector<st::TensorView> views() const {
    return {{"weights", st::Dtype::kBF16, {2, 3}, bf16.data()},
            {"idx", st::Dtype::kI32, {4}, i32.data()},
            {"scale", st::Dtype::kF32, {}, &scalar},
            {"none", st::Dtype::kU8, {0, 5}, empty.data()}};
  }
};

}  // namespace

TEST_CASE("safetensors: round trip keeps names, dtypes, shapes, bytes and metadata",
          "[safetensors]") {
  Sample s;
  std::string bytes = st::encode(s.views(), {{"kjit_api", "kjit_rmsnorm"}, {"note", "x"}});
  // The data starts 8-byte aligned (the header is padded with spaces).
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + 12 + 16 + 4);
  // The header is plain JSON another reader understands.
  auto h = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(h["weights"]["dtype"] == "BF16");
  CHECK(h["weights"]["shape"] == nlohmann::json::array({2, 3}));
  CHECK(h["weights"]["data_offsets"] == nlohmann::json::array({0, 12}));
  CHECK(h["scale"]["shape"] == nlohmann::json::array());
  CHECK(h["__metadata__"]["kjit_api"] == "kjit_rmsnorm");

  st::File f = st::File::parse(bytes);
  REQUIRE(f.tensors().size() == 4);
  CHECK(f.metadata().at("kjit_api") == "kjit_rmsnorm");
  CHECK(f.metadata().at("note") == "x");
  const st::TensorInfo* w = f.find("weights");
  REQUIRE(w != nullptr);
  CHECK(w->dtype == st::Dtype::kBF16);
  CHECK(w->shape == std::vector<int64_t>{2, 3});
  CHECK(w->numel() == 6);
  CHECK(f.data(*w) == std::string_view(reinterpret_cast<const char*>(s.bf16.data()), 12));
  const st::TensorInfo* idx = f.find("idx");
  REQUIRE(idx != nullptr);
  CHECK(f.data(*idx) == std::string_view(reinterpret_cast<const char*>(s.i32.data()), 16));
  const st::TensorInfo* sc = f.find("scale");
  REQUIRE(sc != nullptr);
  CHECK(sc->shape.empty());
  CHECK(sc->numel() == 1);
  float back;
  std::memcpy(&back, f.data(*sc).data(), 4);
  CHECK(back == 3.5f);
  const st::TensorInfo* none = f.find("none");
  REQUIRE(none != nullptr);
  CHECK(none->numel() == 0);
  CHECK(f.data(*none).empty());
  CHECK(f.find("missing") == nullptr);
}

TEST_CASE("safetensors: a file written by the Python safetensors package parses", "[safetensors]") {
  // safetensors.numpy.save_file({"a": arange(6, float16).reshape(2, 3), "b": [1, 2] int64,
  // "e": zeros((0, 4), uint8)}, metadata={"m": "v"}), byte for byte.
  const std::string hex =
      "c8000000000000007b225f5f6d657461646174615f5f223a7b226d223a2276227d2c2262223a7b2264747970"
      "65223a22493634222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c31365d7d2c"
      "2261223a7b226474797065223a22463136222c227368617065223a5b322c335d2c22646174615f6f66667365"
      "7473223a5b31362c32385d7d2c2265223a7b226474797065223a225538222c227368617065223a5b302c345d"
      "2c22646174615f6f666673657473223a5b32382c32385d7d7d20202020202020010000000000000002000000"
      "000000000000003c0040004200440045";
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  st::File f = st::File::parse(bytes);
  CHECK(f.metadata().at("m") == "v");
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.tensors()[0].name == "b");  // data order
  const st::TensorInfo* a = f.find("a");
  REQUIRE(a != nullptr);
  CHECK(a->dtype == st::Dtype::kF16);
  CHECK(a->shape == std::vector<int64_t>{2, 3});
  const uint16_t want[] = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400, 0x4500};  // 0..5
  CHECK(f.data(*a) == std::string_view(reinterpret_cast<const char*>(want), sizeof want));
  const st::TensorInfo* b = f.find("b");
  REQUIRE(b != nullptr);
  int64_t bv[2];
  std::memcpy(bv, f.data(*b).data(), 16);
  CHECK(bv[0] == 1);
  CHECK(bv[1] == 2);
  CHECK(f.find("e")->shape == std::vector<int64_t>{0, 4});
}

TEST_CASE("safetensors: write_file and read agree, and leave no temp file", "[safetensors]") {
  kjit::test::TempDir dir;
  Sample s;
  auto path = dir.path() / "t.safetensors";
  st::write_file(path, s.views(), {{"a", "b"}});
  CHECK(st::File::read(path).find("idx") != nullptr);
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);
  std::string whole = st::encode(s.views(), {{"a", "b"}});
  st::File f = st::File::read(path);
  for (const auto& t : f.tensors()) {
    CHECK(f.data(t) == st::File::parse(whole).data(*st::File::parse(whole).find(t.name)));
  }
}

TEST_CASE("safetensors: every dtype name maps to its size and back", "[safetensors]") {
  const std::pair<const char*, size_t> rows[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
      {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8}};
  for (const auto& [name, size] : rows) {
    auto d = st::parse_dtype(name);
    REQUIRE(d.has_value());
    CHECK(st::dtype_size(*d) == size);
    CHECK(std::string(st::dtype_name(*d)) == name);
  }
  CHECK_FALSE(st::parse_dtype("bf16").has_value());  // case matters, as in the format
  CHECK_FALSE(st::parse_dtype("F4").has_value());
}

TEST_CASE("safetensors: the writer rejects duplicate, reserved and empty names", "[safetensors]") {
  uint8_t b = 0;
  CHECK_THROWS_AS(st::encode({{"a", st::Dtype::kU8, {1}, &b}, {"a", st::Dtype::kU8, {1}, &b}}),
                  kjit::Error);
  CHECK_THROWS_AS(st::encode({{"__metadata__", st::Dtype::kU8, {1}, &b}}), kjit::Error);
  CHECK_THROWS_AS(st::encode({{"", st::Dtype::kU8, {1}, &b}}), kjit::Error);
  CHECK_THROWS_AS(st::encode({{"neg", st::Dtype::kU8, {-1}, &b}}), kjit::Error);
}

TEST_CASE("safetensors: rejects truncated files", "[safetensors]") {
  expect_rejected("", "shorter than the 8-byte header length");
  expect_rejected(std::string("\x10\x00\x00", 3), "shorter than the 8-byte header length");
  // The header length promises more than the file has.
  expect_rejected(le64(64) + "{}", "runs past the end");
  // Data cut short: the last tensor's end is past the data.
  Sample s;
  std::string whole = st::encode(s.views());
  expect_rejected(whole.substr(0, whole.size() - 1), "past the");
  // The header itself cut: not JSON any more.
  std::string h = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  expect_rejected(le64(h.size() - 3) + h.substr(0, h.size() - 3) + "xx", "not valid JSON");
}

TEST_CASE("safetensors: rejects a header length that overflows or exceeds the limit",
          "[safetensors]") {
  expect_rejected(le64(~uint64_t{0}) + "{}", "exceeds");
  expect_rejected(le64(st::kMaxHeaderBytes + 1) + "{}", "exceeds");
  // 2^63 would overflow a signed size.
  expect_rejected(le64(uint64_t{1} << 63) + "{}", "exceeds");
}

TEST_CASE("safetensors: rejects offsets out of range", "[safetensors]") {
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 3),
                  "past the 3 data bytes");
  expect_rejected(
      file_with(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}})", 1),
      "too large");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 4),
                  "decrease");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}})", 2),
                  "non-negative");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", 2),
                  "data_offsets is not [begin, end]");
}

TEST_CASE("safetensors: rejects offsets that disagree with the shape", "[safetensors]") {
  expect_rejected(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
                  "need 8 bytes but data_offsets span 4");
  // The element count overflows 64 bits.
  expect_rejected(
      file_with(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4),
      "overflows");
}

TEST_CASE("safetensors: rejects overlapping tensors and gaps", "[safetensors]") {
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                            12),
                  "overlaps");
  // Two names for the same bytes overlap too.
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                            4),
                  "overlaps");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
                            12),
                  "belong to no tensor");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 6),
                  "the data has 6 bytes but the tensors cover 4");
}

TEST_CASE("safetensors: rejects unknown dtypes and malformed entries", "[safetensors]") {
  expect_rejected(file_with(R"({"a":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", 1),
                  "unknown dtype 'Q8'");
  expect_rejected(file_with(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", 1),
                  "dtype is not a string");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1),
                  "non-negative integers");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1),
                  "non-negative integers");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":1,"data_offsets":[0,1]}})", 1),
                  "shape is not an array");
  expect_rejected(file_with(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", 1),
                  "needs dtype, shape and data_offsets");
  expect_rejected(
      file_with(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}})", 1),
      "unknown field 'extra'");
  expect_rejected(file_with(R"({"a":[1,2]})", 0), "entry is not an object");
  expect_rejected(file_with(R"({"__metadata__":{"k":1}})", 0), "is not a string");
  expect_rejected(file_with(R"({"__metadata__":[]})", 0), "__metadata__ is not an object");
  std::string many_dims = R"({"a":{"dtype":"U8","shape":[)";
  for (int i = 0; i < 65; ++i) many_dims += i ? ",1" : "1";
  expect_rejected(file_with(many_dims + R"(],"data_offsets":[0,1]}})", 1), "65 dims");
}

TEST_CASE("safetensors: rejects headers that are not a JSON object", "[safetensors]") {
  expect_rejected(file_with("[]", 0), "not a JSON object");
  expect_rejected(file_with("not json", 0), "not valid JSON");
  expect_rejected(file_with(std::string("{\"a\0\":1}", 8), 0), "not valid JSON");
  expect_rejected(file_with("{} {}", 0), "not valid JSON");
}

TEST_CASE("safetensors: rejects duplicate keys", "[safetensors]") {
  expect_rejected(file_with(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                            R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                            2),
                  "key 'a' twice");
  expect_rejected(
      file_with(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", 1),
      "key 'dtype' twice");
}

TEST_CASE("safetensors: deep nesting is rejected before parsing", "[safetensors]") {
  std::string deep = "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  expect_rejected(file_with(deep, 0), "nests deeper");
  // Brackets inside strings do not count.
  std::string quoted = R"({"__metadata__":{"k":"[[[[[[[[{{{{\"]]"}})";
  CHECK_NOTHROW(st::File::parse(file_with(quoted, 0)));
  CHECK(st::File::parse(file_with(quoted, 0)).metadata().at("k") == "[[[[[[[[{{{{\"]]");
}

TEST_CASE("safetensors: an empty file list and zero-size tensors are valid", "[safetensors]") {
  CHECK(st::File::parse(file_with("{}", 0)).tensors().empty());
  CHECK(st::File::parse(file_with("{}      ", 0)).tensors().empty());  // trailing padding
  st::File f = st::File::parse(file_with(R"({"z":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},)"
                                         R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                                         2));
  CHECK(f.tensors().size() == 2);
}

TEST_CASE("safetensors: read reports a missing file", "[safetensors]") {
  kjit::test::TempDir dir;
  CHECK_THROWS_AS(st::File::read(dir.path() / "nope.safetensors"), kjit::Error);
  CHECK_THROWS_AS(st::File::read(dir.path()), kjit::Error);  // a folder
}

TEST_CASE("safetensors: random corruption is rejected or parsed, never a crash", "[safetensors]") {
  Sample s;
  const std::string good = st::encode(s.views(), {{"k", "v"}});
  std::mt19937_64 rng(12345);
  int parsed = 0, rejected = 0;
  for (int it = 0; it < 3000; ++it) {
    std::string b = good;
    switch (it % 4) {
      case 0: {  // flip a few bytes anywhere (header length included)
        int flips = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < flips; ++i) b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      }
      case 1:  // truncate
        b.resize(rng() % b.size());
        break;
      case 2:  // set a header-length byte to anything
        b[rng() % 8] = static_cast<char>(rng());
        break;
      default:  // splice random bytes into the header
        b.insert(8 + rng() % 64, std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
    }
    try {
      st::File f = st::File::parse(b);
      // Whatever parsed must be self-consistent.
      for (const auto& t : f.tensors()) {
        CHECK(f.data(t).size() == t.numel() * st::dtype_size(t.dtype));
      }
      ++parsed;
    } catch (const kjit::Error& e) {
      CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
      ++rejected;
    }
  }
  CHECK(rejected > 2000);  // almost every corruption is caught
  INFO("parsed " << parsed);
}
