// The communication family without a GPU: kjit_comm_init's argument and option checks, NCCL's
// loading and its "not found" status, the /dev/shm rendezvous between threads, the size switch
// between the one-shot kernel and NCCL, the specialization choice, and every argument error of
// kjit_all_reduce / kjit_all_reduce_add_rmsnorm against a communicator described on the host
// (every such call fails before any driver call, so these run with or without a GPU).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "cuda/nccl.hpp"
#include "kjit/kjit.h"
#include "ops/comm/all_reduce.hpp"
#include "ops/comm/communicator.hpp"
#include "ops/comm/rendezvous.hpp"
#include "ops/registry.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

char* const kIn = reinterpret_cast<char*>(0x10000000);
char* const kRes = reinterpret_cast<char*>(0x20000000);
char* const kW = reinterpret_cast<char*>(0x30000000);
char* const kOut = reinterpret_cast<char*>(0x40000000);

std::string last_error() {
  return kjit_last_error();
}

// The status and message of a call into the ops layer (what the C entry points return).
struct Thrown {
  kjit_status status = KJIT_SUCCESS;
  std::string message;
};
template <typename F>
Thrown thrown(F&& f) {
  try {
    f();
  } catch (const kjit::Error& e) {
    return {e.status(), e.what()};
  }
  return {};
}

kjit_comm_id kjit_id() {
  kjit_comm_id id;
  ops::make_kjit_comm_id(&id);
  return id;
}

}  // namespace

// ---- kjit_comm_init ---------------------------------------------------------------------------

TEST_CASE("comm: options_init fills this header's defaults", "[comm]") {
  kjit_comm_options o;
  std::memset(&o, 0x7f, sizeof o);
  kjit_comm_options_init(&o);
  CHECK(o.struct_size == sizeof(kjit_comm_options));
  CHECK(o.small_max_bytes == (size_t{1} << 20));
  CHECK(o.nccl == KJIT_COMM_NCCL_AUTO);
  CHECK(o.allgather == nullptr);
  CHECK(o.allgather_user == nullptr);
  CHECK(o.timeout_ms == 60000);
  kjit_comm_options_init(nullptr);  // ignored
}

TEST_CASE("comm: init rejects each bad argument and leaves *comm NULL", "[comm]") {
  const kjit_comm_id id = kjit_id();
  kjit_comm* comm = reinterpret_cast<kjit_comm*>(0x1);
  struct Case {
    const char* what;
    const kjit_comm_id* id;
    int rank, world, device;
    const char* fragment;
  };
  const Case cases[] = {
      {"NULL id", nullptr, 0, 2, 0, "id is NULL"},  {"world 0", &id, 0, 0, 0, "world_size is 0"},
      {"world 9", &id, 0, 9, 0, "world_size is 9"}, {"rank -1", &id, -1, 2, 0, "rank is -1"},
      {"rank == world", &id, 2, 2, 0, "rank is 2"}, {"device -1", &id, 0, 2, -1, "device is -1"}};
  for (const Case& c : cases) {
    INFO(c.what);
    comm = reinterpret_cast<kjit_comm*>(0x1);
    CHECK(kjit_comm_init(c.id, c.rank, c.world, c.device, nullptr, &comm) ==
          KJIT_ERROR_INVALID_ARGUMENT);
    INFO(last_error());
    CHECK(last_error().rfind("kjit_comm_init", 0) == 0);
    CHECK(last_error().find(c.fragment) != std::string::npos);
    CHECK(comm == nullptr);
  }
  CHECK(kjit_comm_init(&id, 0, 2, 0, nullptr, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("comm is NULL") != std::string::npos);
}

TEST_CASE("comm: init rejects each bad option", "[comm]") {
  const kjit_comm_id id = kjit_id();
  struct Case {
    const char* what;
    void (*apply)(kjit_comm_options&);
    const char* fragment;
  };
  const Case cases[] = {
      {"struct_size 0", [](kjit_comm_options& o) { o.struct_size = 0; }, "struct_size is 0"},
      {"small_max_bytes over 64 MiB",
       [](kjit_comm_options& o) { o.small_max_bytes = (size_t{64} << 20) + 1; }, "small_max_bytes"},
      {"nccl 3", [](kjit_comm_options& o) { o.nccl = 3; }, "options->nccl is 3"},
      {"nccl -1", [](kjit_comm_options& o) { o.nccl = -1; }, "options->nccl is -1"},
      {"timeout -1", [](kjit_comm_options& o) { o.timeout_ms = -1; }, "timeout_ms is -1"},
      // A kjit-made id cannot carry an NCCL communicator.
      {"NCCL required with a kjit id",
       [](kjit_comm_options& o) { o.nccl = KJIT_COMM_NCCL_REQUIRED; }, "kjit-made"}};
  for (const Case& c : cases) {
    INFO(c.what);
    kjit_comm_options o;
    kjit_comm_options_init(&o);
    c.apply(o);
    kjit_comm* comm = nullptr;
    CHECK(kjit_comm_init(&id, 0, 2, 0, &o, &comm) == KJIT_ERROR_INVALID_ARGUMENT);
    INFO(last_error());
    CHECK(last_error().find(c.fragment) != std::string::npos);
    CHECK(comm == nullptr);
  }
}

TEST_CASE("comm: options read only the fields struct_size covers", "[comm]") {
  kjit_comm_options o;
  kjit_comm_options_init(&o);
  o.small_max_bytes = 4096;
  o.nccl = 7;         // beyond struct_size: not read, so not rejected
  o.timeout_ms = -5;  // likewise
  o.struct_size = offsetof(kjit_comm_options, nccl);
  const kjit_comm_options got = ops::comm_options(&o);
  CHECK(got.small_max_bytes == 4096);
  CHECK(got.nccl == KJIT_COMM_NCCL_AUTO);
  CHECK(got.timeout_ms == 60000);
  o.struct_size = sizeof o;
  CHECK(thrown([&] { ops::comm_options(&o); }).status == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("comm: a valid init gets past validation to the device", "[comm]") {
  KJIT_RUN_WITHOUT_GPU();
  const kjit_comm_id id = kjit_id();
  kjit_comm* comm = reinterpret_cast<kjit_comm*>(0x1);
  kjit_comm_options o;
  kjit_comm_options_init(&o);
  o.nccl = KJIT_COMM_NCCL_OFF;
  CHECK(kjit_comm_init(&id, 1, 2, 0, &o, &comm) == KJIT_ERROR_NO_DEVICE);
  CHECK(comm == nullptr);
  kjit_comm_destroy(nullptr);  // ignored
}

// ---- Ids and NCCL -----------------------------------------------------------------------------

TEST_CASE("comm: kjit-made ids are tagged and random", "[comm]") {
  const kjit_comm_id a = kjit_id();
  const kjit_comm_id b = kjit_id();
  CHECK(ops::is_kjit_comm_id(a));
  CHECK(ops::is_kjit_comm_id(b));
  CHECK(std::memcmp(a.bytes, b.bytes, sizeof a.bytes) != 0);
  kjit_comm_id zero{};
  CHECK_FALSE(ops::is_kjit_comm_id(zero));
  CHECK(kjit_comm_get_unique_id(nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("id is NULL") != std::string::npos);
}

TEST_CASE("comm: NCCL not found is a clear UNSUPPORTED, and REQUIRED fails init with it",
          "[comm]") {
  const kjit::cuda::NcclLoad l = kjit::cuda::load_nccl({"/nonexistent/libnccl.so.2"});
  CHECK(l.fns.ncclAllReduce == nullptr);
  CHECK(l.error.rfind("NCCL not found", 0) == 0);
  CHECK(l.error.find("/nonexistent/libnccl.so.2") != std::string::npos);
  CHECK(l.error.find("KJIT_NCCL_PATH") != std::string::npos);
  // A library without NCCL's entry points is not NCCL.
  const kjit::cuda::NcclLoad c = kjit::cuda::load_nccl({"libc.so.6"});
  CHECK(c.error.find("lacks ncclGetVersion") != std::string::npos);

  kjit_comm_options o;
  kjit_comm_options_init(&o);
  kjit_comm_id nccl_id{};  // not kjit-tagged: an NCCL id
  o.nccl = KJIT_COMM_NCCL_REQUIRED;
  const Thrown t = thrown([&] { ops::comm_nccl_plan(o, nccl_id, 2, false, l.error); });
  CHECK(t.status == KJIT_ERROR_UNSUPPORTED);
  CHECK(t.message.find("NCCL not found") != std::string::npos);
  // AUTO: the communicator still comes up, its reason kept for large messages.
  o.nccl = KJIT_COMM_NCCL_AUTO;
  CHECK(ops::comm_nccl_plan(o, nccl_id, 2, false, l.error) == l.error);
  CHECK(ops::comm_nccl_plan(o, nccl_id, 2, true, "").empty());
  CHECK(ops::comm_nccl_plan(o, kjit_id(), 2, true, "").find("kjit-made") != std::string::npos);
  CHECK_FALSE(ops::comm_nccl_plan(o, nccl_id, 1, true, "").empty());  // a group of one
  o.nccl = KJIT_COMM_NCCL_OFF;
  CHECK(ops::comm_nccl_plan(o, nccl_id, 2, true, "").find("NCCL_OFF") != std::string::npos);
}

TEST_CASE("comm: KJIT_NCCL_PATH is the only candidate when set", "[comm]") {
  ::setenv("KJIT_NCCL_PATH", "/opt/engine/libnccl.so.2", 1);
  const std::vector<std::string> c = kjit::cuda::nccl_candidates();
  ::unsetenv("KJIT_NCCL_PATH");
  CHECK(c == std::vector<std::string>{"/opt/engine/libnccl.so.2"});
  const std::vector<std::string> d = kjit::cuda::nccl_candidates();
  REQUIRE(d.size() >= 3);
  CHECK(d[0] == "libnccl.so.2");
}

// ---- The rendezvous ---------------------------------------------------------------------------

namespace {

std::string test_rendezvous_path() {
  const kjit_comm_id id = kjit_id();
  return ops::rendezvous_path(std::filesystem::temp_directory_path().string(), id.bytes,
                              sizeof id.bytes);
}

}  // namespace

TEST_CASE("comm: the file rendezvous gathers every rank's blob in rank order", "[comm]") {
  const std::string path = test_rendezvous_path();
  CHECK(path.find("kjit-comm-") != std::string::npos);
  constexpr int kWorld = 4;
  std::vector<std::vector<char>> got(kWorld);
  std::vector<Thrown> errors(kWorld);
  std::vector<std::thread> ranks;
  for (int r = kWorld - 1; r >= 0; --r) {  // late ranks first: order of arrival is not rank order
    ranks.emplace_back([&, r] {
      const std::string mine(24, static_cast<char>('a' + r));
      errors[r] =
          thrown([&] { got[r] = ops::file_allgather(path, r, kWorld, mine.data(), 24, 10000); });
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r << ": " << errors[r].message);
    REQUIRE(errors[r].status == KJIT_SUCCESS);
    REQUIRE(got[r].size() == 24 * kWorld);
    for (int s = 0; s < kWorld; ++s) CHECK(got[r][24 * s + 5] == static_cast<char>('a' + s));
  }
  CHECK_FALSE(std::filesystem::exists(path));  // the last reader removed it
}

TEST_CASE("comm: the file rendezvous names missing ranks after its timeout", "[comm]") {
  const std::string path = test_rendezvous_path();
  const char blob[8] = {};
  const Thrown t = thrown([&] { ops::file_allgather(path, 0, 3, blob, sizeof blob, 50); });
  CHECK(t.status == KJIT_ERROR_INVALID_ARGUMENT);
  INFO(t.message);
  CHECK(t.message.find("ranks 1 2 of 3 did not arrive within 50 ms") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("comm: the file rendezvous rejects another world size and a rank twice", "[comm]") {
  const std::string path = test_rendezvous_path();
  const char blob[8] = {};
  std::thread first([&] { thrown([&] { ops::file_allgather(path, 0, 2, blob, 8, 300); }); });
  while (!std::filesystem::exists(path)) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const Thrown world = thrown([&] { ops::file_allgather(path, 1, 3, blob, 8, 300); });
  CHECK(world.status == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(world.message.find("world size 2 (this rank says 3)") != std::string::npos);
  const Thrown twice = thrown([&] { ops::file_allgather(path, 0, 2, blob, 8, 300); });
  CHECK(twice.status == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(twice.message.find("rank 0 joined twice") != std::string::npos);
  first.join();
}

TEST_CASE("comm: ranks that disagree on the group or the options fail init alike", "[comm]") {
  ops::CommBlob b[2] = {};
  for (int r = 0; r < 2; ++r) {
    b[r].magic = 0x6b6a69742d626c31ULL;
    b[r].rank = r;
    b[r].world = 2;
    b[r].half_bytes = 1 << 20;
    b[r].nccl = 1;
  }
  CHECK(thrown([&] { ops::check_comm_blobs(b, 2, b[0]); }).status == KJIT_SUCCESS);
  b[1].half_bytes = 4096;
  Thrown t = thrown([&] { ops::check_comm_blobs(b, 2, b[0]); });
  CHECK(t.status == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(t.message.find("same options") != std::string::npos);
  b[1].half_bytes = 1 << 20;
  b[1].nccl = 0;  // one rank found no NCCL
  CHECK(thrown([&] { ops::check_comm_blobs(b, 2, b[0]); }).status == KJIT_ERROR_INVALID_ARGUMENT);
  b[1].nccl = 1;
  b[1].rank = 0;  // two ranks 0
  t = thrown([&] { ops::check_comm_blobs(b, 2, b[0]); });
  CHECK(t.message.find("rank 1 of the exchange says rank 0") != std::string::npos);
  b[1].rank = 1;
  b[1].world = 3;
  CHECK(thrown([&] { ops::check_comm_blobs(b, 2, b[0]); }).status == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("comm: ranks on one GPU are found, so the group goes without NCCL", "[comm]") {
  ops::CommBlob b[3] = {};
  for (int r = 0; r < 3; ++r) {
    b[r].pci[0] = 0;
    b[r].pci[1] = 0x18 + r;  // three GPUs
    b[r].pci[2] = 0;
  }
  CHECK(ops::comm_shared_gpu(b, 3).empty());
  b[2].pci[1] = 0x18;  // rank 2 on rank 0's GPU
  CHECK(ops::comm_shared_gpu(b, 3).find("ranks 0 and 2 share one GPU") != std::string::npos);
  CHECK(ops::comm_shared_gpu(b, 1).empty());
}

// ---- The size switch and the specializations --------------------------------------------------

TEST_CASE("comm: the size switch sends messages up to small_max_bytes to the one-shot kernel",
          "[comm]") {
  using P = ops::AllReducePath;
  const size_t mb = size_t{1} << 20;
  CHECK(ops::select_all_reduce_path(2, mb, 2, "") == P::kOneShot);
  CHECK(ops::select_all_reduce_path(64 * 4096 * 2, mb, 2, "") == P::kOneShot);  // 64 x 4096 bf16
  CHECK(ops::select_all_reduce_path(mb, mb, 8, "") == P::kOneShot);
  CHECK(ops::select_all_reduce_path(mb + 2, mb, 2, "") == P::kNccl);
  CHECK(ops::select_all_reduce_path(int64_t{64} << 20, mb, 8, "") == P::kNccl);
  CHECK(ops::select_all_reduce_path(mb + 2, mb, 1, "no NCCL") == P::kCopy);  // a group of one
  CHECK(ops::select_all_reduce_path(2, 0, 2, "") == P::kNccl);               // NCCL only
  const Thrown t = thrown([&] { ops::select_all_reduce_path(mb + 2, mb, 2, "NCCL not found: x"); });
  CHECK(t.status == KJIT_ERROR_UNSUPPORTED);
  CHECK(t.message.find("1048578 bytes") != std::string::npos);
  CHECK(t.message.find("NCCL not found: x") != std::string::npos);
}

TEST_CASE("comm: one-shot specializations, their grids and URIs", "[comm]") {
  using kjit::ops::DType;
  auto c = ops::select_all_reduce(DType::kBF16, 2, 4096, 16);
  CHECK(c.vec == 8);
  CHECK(c.threads == 256);
  CHECK(ops::all_reduce_grid(4096, c) == 2);         // 1 x 4096: 512 vectors
  CHECK(ops::all_reduce_grid(64 * 4096, c) == 128);  // capped at kCommMaxBlocks
  CHECK(ops::all_reduce_grid(8, c) == 1);
  CHECK(ops::select_all_reduce(DType::kBF16, 2, 4097, 16).vec == 1);
  CHECK(ops::select_all_reduce(DType::kBF16, 2, 4096, 4).vec == 2);
  CHECK(ops::select_all_reduce(DType::kF32, 8, 4096, 16).vec == 4);
  CHECK(ops::all_reduce_spec(c).uri == "all_reduce_dtype_bf16_world_2_vec_8_threads_256");
  CHECK(thrown([&] { ops::select_all_reduce(DType::kI32, 2, 8, 16); }).status ==
        KJIT_ERROR_UNSUPPORTED);
  CHECK(thrown([&] { ops::select_all_reduce(DType::kBF16, 9, 8, 16); }).status ==
        KJIT_ERROR_UNSUPPORTED);

  auto f = ops::select_all_reduce_add_rmsnorm(DType::kBF16, 2, 4096, 16);
  CHECK(f.vec == 8);
  CHECK(f.threads == 512);  // one vector a thread
  CHECK(ops::select_all_reduce_add_rmsnorm(DType::kBF16, 2, 8192, 16).threads == 512);  // capped
  CHECK(ops::select_all_reduce_add_rmsnorm(DType::kF32, 8, 4096, 16).threads == 512);
  CHECK(ops::select_all_reduce_add_rmsnorm(DType::kF16, 4, 100, 16).threads == 128);
  CHECK(ops::select_all_reduce_add_rmsnorm(DType::kF16, 4, 100, 16).vec == 4);
  CHECK(ops::all_reduce_add_rmsnorm_spec(f).uri ==
        "all_reduce_add_rmsnorm_dtype_bf16_world_2_vec_8_threads_512");
  CHECK(thrown([&] { ops::select_all_reduce_add_rmsnorm(DType::kBF16, 2, 1 << 19, 16); }).status ==
        KJIT_ERROR_UNSUPPORTED);
}

TEST_CASE("comm: the registry's catalogs build", "[comm]") {
  for (const char* name : {"all_reduce", "all_reduce_add_rmsnorm"}) {
    INFO(name);
    const ops::OpDef& d = ops::op_or_throw(name);
    const auto catalog = d.catalog();
    CHECK(catalog.size() >= 10);
    for (const auto& set : catalog) CHECK_FALSE(d.make_spec(set).uri.empty());
  }
}

// ---- kjit_all_reduce / kjit_all_reduce_add_rmsnorm argument errors ----------------------------

namespace {

// A communicator as the host knows it (two ranks on device 0, no NCCL), without device resources:
// every rejected call below fails before reading any of them.
struct HostComm {
  kjit_comm c;
  HostComm() {
    c.rank = 0;
    c.world = 2;
    c.device = 0;
    c.small_max_bytes = size_t{1} << 20;
    c.no_nccl = "NCCL not found: test";
  }
};

struct Reduce {
  HostComm hc;
  kjit_comm* comm = &hc.c;
  Tensor in = make_tensor(kIn, {64, 4096}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {64, 4096}, dl_dtype("bf16"));
  kjit_status run() { return kjit_all_reduce(comm, in.get(), out.get(), nullptr); }
};

void expect_rejected(kjit_status got, kjit_status want, const char* fn, const char* fragment) {
  INFO(fn << ": " << last_error());
  CHECK(got == want);
  CHECK(last_error().rfind(fn, 0) == 0);
  CHECK(last_error().find(fragment) != std::string::npos);
}

}  // namespace

TEST_CASE("comm: all_reduce rejects each bad argument", "[comm]") {
  const char* fn = "kjit_all_reduce";
  {
    Reduce c;
    c.comm = nullptr;
    expect_rejected(c.run(), KJIT_ERROR_INVALID_ARGUMENT, fn, "comm is NULL");
  }
  {
    Reduce c;
    CHECK(kjit_all_reduce(c.comm, nullptr, c.out.get(), nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(kjit_all_reduce(c.comm, c.in.get(), nullptr, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  }
  {
    Reduce c;
    c.out = make_tensor(kOut, {64, 4096}, dl_dtype("fp16"));
    expect_rejected(c.run(), KJIT_ERROR_INVALID_ARGUMENT, fn, "out");
  }
  {
    Reduce c;
    c.out = make_tensor(kOut, {64, 4095}, dl_dtype("bf16"));
    expect_rejected(c.run(), KJIT_ERROR_INVALID_ARGUMENT, fn, "out dim 1 is 4095");
  }
  {
    Reduce c;  // rows padded: not compact
    c.in = make_tensor(kIn, {64, 4096}, dl_dtype("bf16"), {4104, 1});
    expect_rejected(c.run(), KJIT_ERROR_INVALID_ARGUMENT, fn, "in is not compact");
  }
  {
    Reduce c;
    c.out = make_tensor(kOut, {64, 4096}, dl_dtype("bf16"), {4104, 1});
    expect_rejected(c.run(), KJIT_ERROR_INVALID_ARGUMENT, fn, "out is not compact");
  }
  {
    Reduce c;  // out starts inside in
    c.out = make_tensor(kIn + 256, {64, 4096}, dl_dtype("bf16"));
    expect_rejected(c.run(), KJIT_ERROR_INVALID_ARGUMENT, fn, "overlaps");
  }
  {
    Reduce c;
    c.in = make_tensor(kIn, {64, 4096}, dl_dtype("bf16"), {}, 1);
    c.out = make_tensor(kOut, {64, 4096}, dl_dtype("bf16"), {}, 1);
    expect_rejected(c.run(), KJIT_ERROR_INVALID_ARGUMENT, fn, "communicator on device 0");
  }
  {
    Reduce c;
    c.in = make_tensor(kIn, {64, 4096}, dl_dtype("int32"));
    c.out = make_tensor(kOut, {64, 4096}, dl_dtype("int32"));
    expect_rejected(c.run(), KJIT_ERROR_UNSUPPORTED, fn, "fp32, fp16 and bf16");
  }
  {
    Reduce c;  // 2 MiB with no NCCL
    c.in = make_tensor(kIn, {256, 4096}, dl_dtype("bf16"));
    c.out = make_tensor(kOut, {256, 4096}, dl_dtype("bf16"));
    expect_rejected(c.run(), KJIT_ERROR_UNSUPPORTED, fn, "NCCL not found: test");
  }
}

TEST_CASE("comm: valid all-reduce calls get past validation, and zero size is a no-op", "[comm]") {
  KJIT_RUN_WITHOUT_GPU();
  Reduce c;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  Reduce in_place;
  in_place.out = make_tensor(kIn, {64, 4096}, dl_dtype("bf16"));
  CHECK(in_place.run() == KJIT_ERROR_NO_DEVICE);
  Reduce odd;  // any shape
  odd.in = make_tensor(kIn, {3, 5, 7}, dl_dtype("fp32"));
  odd.out = make_tensor(kOut, {3, 5, 7}, dl_dtype("fp32"));
  CHECK(odd.run() == KJIT_ERROR_NO_DEVICE);
  Reduce zero;
  zero.in = make_tensor(kIn, {0, 4096}, dl_dtype("bf16"));
  zero.out = make_tensor(kOut, {0, 4096}, dl_dtype("bf16"));
  CHECK(zero.run() == KJIT_SUCCESS);
}

namespace {

struct Fused {
  HostComm hc;
  kjit_comm* comm = &hc.c;
  Tensor in = make_tensor(kIn, {8, 4096}, dl_dtype("bf16"));
  Tensor w = make_tensor(kW, {4096}, dl_dtype("bf16"));
  Tensor res = make_tensor(kRes, {8, 4096}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {8, 4096}, dl_dtype("bf16"));
  float eps = 1e-6f;
  kjit_status run() {
    return kjit_all_reduce_add_rmsnorm(comm, in.get(), w.get(), res.get(), out.get(), eps, nullptr);
  }
};

}  // namespace

TEST_CASE("comm: all_reduce_add_rmsnorm rejects each bad argument", "[comm]") {
  const char* fn = "kjit_all_reduce_add_rmsnorm";
  auto bad = [&](void (*apply)(Fused&), kjit_status want, const char* fragment) {
    Fused c;
    apply(c);
    expect_rejected(c.run(), want, fn, fragment);
  };
  bad([](Fused& c) { c.comm = nullptr; }, KJIT_ERROR_INVALID_ARGUMENT, "comm is NULL");
  bad([](Fused& c) { c.w = make_tensor(kW, {4095}, dl_dtype("bf16")); },
      KJIT_ERROR_INVALID_ARGUMENT, "weight must be [hidden=4096]");
  bad([](Fused& c) { c.w = make_tensor(kW, {4096}, dl_dtype("fp32")); },
      KJIT_ERROR_INVALID_ARGUMENT, "weight");
  bad(
      [](Fused& c) {
        c.res = make_tensor(kRes, {7, 4096}, dl_dtype("bf16"));
      },
      KJIT_ERROR_INVALID_ARGUMENT, "residual dim 0 is 7");
  bad(
      [](Fused& c) {
        c.out = make_tensor(kOut, {8, 2048}, dl_dtype("bf16"));
      },
      KJIT_ERROR_INVALID_ARGUMENT, "out dim 1 is 2048");
  bad(
      [](Fused& c) {
        c.res = make_tensor(kIn, {8, 4096}, dl_dtype("bf16"));
      },
      KJIT_ERROR_INVALID_ARGUMENT, "residual overlaps in");
  bad(
      [](Fused& c) {
        c.out = make_tensor(kRes, {8, 4096}, dl_dtype("bf16"));
      },
      KJIT_ERROR_INVALID_ARGUMENT, "residual overlaps out");
  bad(
      [](Fused& c) {
        c.out = make_tensor(kW, {8, 4096}, dl_dtype("bf16"));
      },
      KJIT_ERROR_INVALID_ARGUMENT, "out overlaps weight");
  bad(
      [](Fused& c) {
        c.out = make_tensor(kIn + 512, {8, 4096}, dl_dtype("bf16"));
      },
      KJIT_ERROR_INVALID_ARGUMENT, "out overlaps in");
  for (float eps :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1e-6f}) {
    Fused c;
    c.eps = eps;
    expect_rejected(c.run(), KJIT_ERROR_INVALID_ARGUMENT, fn, "eps");
  }
  bad(
      [](Fused& c) {
        c.in = make_tensor(kIn, {512, 4096}, dl_dtype("bf16"));  // 4 MiB, no NCCL
        c.res = make_tensor(kRes, {512, 4096}, dl_dtype("bf16"));
        c.out = make_tensor(kOut, {512, 4096}, dl_dtype("bf16"));
      },
      KJIT_ERROR_UNSUPPORTED, "needs NCCL");
}

TEST_CASE("comm: valid fused calls get past validation, and zero rows are a no-op", "[comm]") {
  KJIT_RUN_WITHOUT_GPU();
  Fused c;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  Fused in_place;  // out may be in
  in_place.out = make_tensor(kIn, {8, 4096}, dl_dtype("bf16"));
  CHECK(in_place.run() == KJIT_ERROR_NO_DEVICE);
  Fused strided;  // the one-shot path takes row strides
  strided.in = make_tensor(kIn, {8, 4096}, dl_dtype("bf16"), {8192, 1});
  CHECK(strided.run() == KJIT_ERROR_NO_DEVICE);
  Fused zero;
  zero.in = make_tensor(kIn, {0, 4096}, dl_dtype("bf16"));
  zero.res = make_tensor(kRes, {0, 4096}, dl_dtype("bf16"));
  zero.out = make_tensor(kOut, {0, 4096}, dl_dtype("bf16"));
  CHECK(zero.run() == KJIT_SUCCESS);
}
