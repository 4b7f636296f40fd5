#include <catch2/catch.hpp>

#include "ops/tensor.hpp"
#include "support/gpu.hpp"

using namespace kjit;
using kjit::test::dl_dtype;
using kjit::test::make_tensor;

TEST_CASE("tensor: row view of compact and strided tensors", "[tensor]") {
  char* base = reinterpret_cast<char*>(0x1000);
  auto t = make_tensor(base, {3, 5, 64}, dl_dtype("fp16"));
  auto m = ops::as_row_matrix(t.get(), "t");
  CHECK(m.rows == 15);
  CHECK(m.cols == 64);
  CHECK(m.row_stride == 64);
  auto v = make_tensor(base, {3, 5, 64}, dl_dtype("fp16"), {5 * 100, 100, 1});
  auto mv = ops::as_row_matrix(v.get(), "v");
  CHECK(mv.rows == 15);
  CHECK(mv.row_stride == 100);
  // Size-1 dims may carry any stride.
  auto s = make_tensor(base, {1, 4, 64}, dl_dtype("fp16"), {7, 64, 1});
  CHECK(ops::as_row_matrix(s.get(), "s").row_stride == 64);
  auto o = make_tensor(base, {4, 64}, dl_dtype("fp16"));
  o.t.byte_offset = 6;
  CHECK(ops::as_row_matrix(o.get(), "o").data == base + 6);
}

TEST_CASE("tensor: alignment is the widest power of two shared by address and stride", "[tensor]") {
  char* base = reinterpret_cast<char*>(0x1000);
  auto t = make_tensor(base, {4, 64}, dl_dtype("bf16"));
  CHECK(ops::row_alignment(ops::as_row_matrix(t.get(), "t")) == 16);
  auto s = make_tensor(base, {4, 64}, dl_dtype("bf16"), {66, 1});
  CHECK(ops::row_alignment(ops::as_row_matrix(s.get(), "s")) == 4);
  auto p = make_tensor(base + 2, {4, 64}, dl_dtype("bf16"));
  CHECK(ops::row_alignment(ops::as_row_matrix(p.get(), "p")) == 2);
  auto one = make_tensor(base, {1, 63}, dl_dtype("bf16"));
  CHECK(ops::row_alignment(ops::as_row_matrix(one.get(), "one")) == 16);  // one row: no stride
}

TEST_CASE("tensor: overlap detection allows exact in-place only", "[tensor]") {
  char* base = reinterpret_cast<char*>(0x1000);
  auto a = make_tensor(base, {4, 64}, dl_dtype("fp32"));
  auto same = make_tensor(base, {4, 64}, dl_dtype("fp32"));
  auto shifted = make_tensor(base + 256, {4, 64}, dl_dtype("fp32"));
  auto after = make_tensor(base + 4 * 64 * 4, {4, 64}, dl_dtype("fp32"));
  auto ma = ops::as_row_matrix(a.get(), "a");
  CHECK_FALSE(ops::partially_overlaps(ma, ops::as_row_matrix(same.get(), "s")));
  CHECK(ops::partially_overlaps(ma, ops::as_row_matrix(shifted.get(), "s")));
  CHECK_FALSE(ops::partially_overlaps(ma, ops::as_row_matrix(after.get(), "s")));
}

TEST_CASE("tensor: a tensor that runs past the top of the address space is refused", "[tensor]") {
  // fuzz_dltensor: data 0xffffffffffffff00 with 64 int64 elements wrapped to low addresses, so two
  // identical views looked disjoint to views_overlap.
  char* top = reinterpret_cast<char*>(~uintptr_t{0} - 255);  // 256 bytes below the top
  auto fits = make_tensor(top, {4, 8}, dl_dtype("int64"));   // exactly the last 256 bytes
  CHECK(ops::as_row_matrix(fits.get(), "x").rows == 4);
  CHECK(ops::as_strided_view(fits.get(), "x").numel() == 32);
  auto wraps = make_tensor(top, {4, 16}, dl_dtype("int64"));
  CHECK_THROWS_WITH(ops::as_row_matrix(wraps.get(), "x"),
                    Catch::Contains("x runs past the end of the address space"));
  CHECK_THROWS_WITH(ops::as_strided_view(wraps.get(), "x"),
                    Catch::Contains("runs past the end of the address space"));
  // Strides that reach past the top where the compact extent would not.
  auto strided = make_tensor(top, {2, 8}, dl_dtype("int64"), {32, 1});
  CHECK_THROWS_WITH(ops::as_strided_view(strided.get(), "x"),
                    Catch::Contains("runs past the end of the address space"));
  CHECK_THROWS_WITH(ops::as_row_matrix(strided.get(), "x"),
                    Catch::Contains("runs past the end of the address space"));
  auto empty = make_tensor(top, {0, 1 << 20}, dl_dtype("int64"));  // no bytes: nothing to check
  CHECK(ops::as_row_matrix(empty.get(), "x").numel() == 0);
}

TEST_CASE("tensor: views that end at the top of the address space still overlap", "[tensor]") {
  // fuzz_dltensor (2026-12-08): two identical int32 views of the last 256 bytes; one past their
  // end wrapped to 0, so views_overlap called them disjoint.
  char* top = reinterpret_cast<char*>(~uintptr_t{0} - 255);
  auto a = make_tensor(top, {4, 16}, dl_dtype("int32"));
  auto b = make_tensor(top, {4, 16}, dl_dtype("int32"));
  auto tail = make_tensor(top + 128, {2, 16}, dl_dtype("int32"));   // a's last two rows
  auto below = make_tensor(top - 256, {4, 16}, dl_dtype("int32"));  // the 256 bytes before a
  const auto va = ops::as_strided_view(a.get(), "a"), vb = ops::as_strided_view(b.get(), "b");
  const auto vt = ops::as_strided_view(tail.get(), "t");
  const auto vl = ops::as_strided_view(below.get(), "l");
  CHECK(ops::views_overlap(va, vb));
  CHECK(ops::views_overlap(va, vt));
  CHECK(ops::views_overlap(vt, va));
  CHECK_FALSE(ops::views_overlap(va, vl));
  CHECK_FALSE(ops::views_overlap(vl, va));
  const auto ma = ops::as_row_matrix(a.get(), "a"), mt = ops::as_row_matrix(tail.get(), "t");
  const auto ml = ops::as_row_matrix(below.get(), "l");
  CHECK_FALSE(ops::partially_overlaps(ma, ops::as_row_matrix(b.get(), "b")));  // the same view
  CHECK(ops::partially_overlaps(ma, mt));
  CHECK(ops::partially_overlaps(mt, ma));
  CHECK_FALSE(ops::partially_overlaps(ma, ml));
  CHECK_FALSE(ops::partially_overlaps(ml, ma));
}
