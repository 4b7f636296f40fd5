// The call log on the GPU: calls dumped at KJIT_LOGLEVEL=10 hold exactly the tensors the call
// read and wrote, `kjit-cli replay` reproduces them (out of place, in place, strided, misaligned,
// the paged KV cache), a tampered output is caught, level 5 statistics are right, and under CUDA
// graph capture the log neither synchronizes nor copies (the capture stays valid).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diag/call_log.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "support/shell.hpp"
#include "support/temp_dir.hpp"
#include "diag/safetensors.hpp"

using namespace kjit::test;
namespace fs = std::filesystem;
namespace st = kjit::util::safetensors;
namespace ref = kjit::ref;

namespace {

struct ReloadOnExit {
  ~ReloadOnExit() { kjit::api::reload_log_settings(); }
};

// Logging at `level` into a temp dir (log.txt, dumps/) for the scope.
struct Logged {
  explicit Logged(const char* level)
      : level_("KJIT_LOGLEVEL", level),
        dest_("KJIT_LOGDEST", (dir.path() / "log.txt").c_str()),
        include_("KJIT_LOG_INCLUDE", nullptr),
        exclude_("KJIT_LOG_EXCLUDE", nullptr),
        dump_("KJIT_DUMP_DIR", (dir.path() / "dumps").c_str()),
        count_("KJIT_DUMP_MAX_COUNT", nullptr),
        bytes_("KJIT_DUMP_MAX_BYTES", nullptr) {
    kjit::api::reload_log_settings();
  }
  std::string log() const {
    std::ifstream f(dir.path() / "log.txt");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  std::vector<fs::path> dumps() const {
    std::vector<fs::path> out;
    if (!fs::exists(dir.path() / "dumps")) return out;
    for (auto& e : fs::directory_iterator(dir.path() / "dumps")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  ReloadOnExit reload_;
  TempDir dir;

 private:
  ScopedEnv level_, dest_, include_, exclude_, dump_, count_, bytes_;
};

struct CliRun {
  int code = -1;
  std::string out;
};

CliRun replay(const fs::path& dump, const std::string& extra = "") {
  std::string cmd = "env -u KJIT_LOGLEVEL -u KJIT_LOGDEST -u KJIT_DUMP_DIR '" KJIT_CLI_PATH
                    "' replay '" +
                    dump.string() + "' " + extra + " 2>&1";
  CliRun r;
  const kjit::test::ShellRun sh = kjit::test::run_shell(cmd);
  REQUIRE(sh.code != -1);
  r.code = sh.code;
  r.out = sh.out;
  return r;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A host image of a device buffer and a strided view into it (element offsets, up to 4 dims).
struct View {
  size_t es = 2;
  size_t offset = 0;  // elements into the buffer
  std::vector<int64_t> shape, strides;
  // The view's elements, packed row-major: what a dump must hold.
  std::string gather(const std::vector<unsigned char>& image) const {
    std::vector<int64_t> sh = shape, sd = strides;
    while (sh.size() < 4) {
      sh.insert(sh.begin(), 1);
      sd.insert(sd.begin(), 0);
    }
    std::string out;
    for (int64_t a = 0; a < sh[0]; ++a)
      for (int64_t b = 0; b < sh[1]; ++b)
        for (int64_t c = 0; c < sh[2]; ++c)
          for (int64_t d = 0; d < sh[3]; ++d) {
            size_t e = offset + static_cast<size_t>(a * sd[0] + b * sd[1] + c * sd[2] + d * sd[3]);
            out.append(reinterpret_cast<const char*>(image.data()) + e * es, es);
          }
    return out;
  }
};

std::vector<unsigned char> random_image(size_t elems, const std::string& dtype,
                                        std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  std::vector<unsigned char> img(elems * ref::elem_size(dtype));
  for (size_t i = 0; i < elems; ++i) ref::store_elem(img.data(), i, dist(rng), dtype);
  return img;
}

std::vector<unsigned char> download(const DeviceBuffer& b) {
  std::vector<unsigned char> img(b.size());
  b.download(img.data(), img.size());
  return img;
}

std::string tensor_bytes(const st::File& f, const char* name) {
  const st::TensorInfo* t = f.find(name);
  REQUIRE(t != nullptr);
  return std::string(f.data(*t));
}

// The one dump folder of a test, with the files every completed call has.
fs::path only_dump(const Logged& l) {
  auto d = l.dumps();
  REQUIRE(d.size() == 1);
  CHECK(fs::exists(d[0] / "call.json"));
  CHECK(fs::exists(d[0] / "inputs.safetensors"));
  CHECK(fs::exists(d[0] / "outputs.safetensors"));
  return d[0];
}

// Replays `dump` and requires a bit-exact reproduction with the kernel the call used.
void expect_reproduced(const fs::path& dump) {
  CliRun r = replay(dump);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("result: reproduced") != std::string::npos);
  CHECK(r.out.find("mismatches=0/") != std::string::npos);
  CHECK(r.out.find("identical") != std::string::npos);
  // Same URI (the recorded alignment and strides select the same specialization).
  auto j = nlohmann::json::parse(read_text(dump / "call.json"));
  REQUIRE(!j["kernels"].empty());
  for (const auto& k : j["kernels"]) {
    CHECK(r.out.find("kernel replayed: " + k["uri"].get<std::string>() + " ") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("replay: rmsnorm dumped at level 10 (strided, misaligned) replays bit for bit",
          "[gpu][replay]") {
  std::mt19937_64 rng(1);
  const int64_t rows = 5, hidden = 4099, in_stride = 4104;
  const size_t in_off = 1, out_off = 3;  // 2- and 2-byte aligned starts: narrow vectors
  const size_t in_elems = in_off + (rows - 1) * in_stride + hidden;
  const size_t out_elems = out_off + rows * hidden;
  auto in_img = random_image(in_elems, "bf16", rng);
  auto w_img = random_image(hidden, "bf16", rng);
  DeviceBuffer in_dev(in_img.size()), w_dev(w_img.size()), out_dev(out_elems * 2);
  in_dev.upload(in_img.data(), in_img.size());
  w_dev.upload(w_img.data(), w_img.size());
  out_dev.fill(0xFF);
  auto in_t = make_tensor(static_cast<char*>(in_dev.get()) + in_off * 2, {rows, hidden},
                          dl_dtype("bf16"), {in_stride, 1});
  auto w_t = make_tensor(w_dev.get(), {hidden}, dl_dtype("bf16"));
  auto out_t = make_tensor(static_cast<char*>(out_dev.get()) + out_off * 2, {rows, hidden},
                           dl_dtype("bf16"));
  fs::path dump;
  TempDir keep;
  {
    Logged l("10");
    REQUIRE(kjit_rmsnorm(in_t.get(), w_t.get(), out_t.get(), 1e-5f, nullptr) == KJIT_SUCCESS);
    device_synchronize();
    const std::string log = l.log();
    INFO(log);
    CHECK(log.find("  kernel: rmsnorm_") != std::string::npos);
    CHECK(log.find("  sync: stream 0x0 synchronized before reading inputs") != std::string::npos);
    CHECK(log.find("  sync: stream 0x0 synchronized after the call") != std::string::npos);
    CHECK(log.find("  stats before input: ") != std::string::npos);
    CHECK(log.find("  stats after out: ") != std::string::npos);
    CHECK(log.find("-> KJIT_SUCCESS") != std::string::npos);
    // The kernel line comes before the status line: written before the launch.
    CHECK(log.find("  kernel: ") < log.find("-> KJIT_SUCCESS"));
    dump = keep.path() / "call";
    fs::copy(only_dump(l), dump, fs::copy_options::recursive);
  }
  st::File in = st::File::read(dump / "inputs.safetensors");
  st::File out = st::File::read(dump / "outputs.safetensors");
  CHECK(tensor_bytes(in, "input") ==
        View{2, in_off, {rows, hidden}, {in_stride, 1}}.gather(in_img));
  CHECK(tensor_bytes(in, "weight") == View{2, 0, {hidden}, {1}}.gather(w_img));
  CHECK(in.find("out") == nullptr);  // a pure output is not an input
  CHECK(out.tensors().size() == 1);
  CHECK(tensor_bytes(out, "out") ==
        View{2, out_off, {rows, hidden}, {hidden, 1}}.gather(download(out_dev)));
  auto j = nlohmann::json::parse(read_text(dump / "call.json"));
  CHECK(j["status"] == "KJIT_SUCCESS");
  CHECK(j["args"][0]["align"] == 2);
  CHECK(j["args"][0]["strides"] == nlohmann::json::array({in_stride, 1}));
  REQUIRE(j["kernels"].size() == 1);
  CHECK(j["kernels"][0]["uri"].get<std::string>().rfind("rmsnorm_", 0) == 0);
  CHECK(j["kernels"][0]["arch"].get<std::string>().rfind("sm_", 0) == 0);
  CHECK(j["device"]["name"].is_string());

  expect_reproduced(dump);

  // A tampered output must be reported, with the differing element counted.
  std::string bytes = read_text(dump / "outputs.safetensors");
  bytes[bytes.size() - 2] ^= 0x40;  // the last element's top mantissa bit: a large change
  std::ofstream(dump / "outputs.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  CliRun r = replay(dump);
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("mismatches=1/") != std::string::npos);
  CHECK(r.out.find("result: differs") != std::string::npos);
}

TEST_CASE("replay: fused_add_rmsnorm dumps both in-place tensors before and after",
          "[gpu][replay]") {
  std::mt19937_64 rng(2);
  const int64_t rows = 7, hidden = 2048;
  auto x_img = random_image(rows * hidden, "fp16", rng);
  auto r_img = random_image(rows * hidden, "fp16", rng);
  auto w_img = random_image(hidden, "fp16", rng);
  DeviceBuffer x_dev(x_img.size()), r_dev(r_img.size()), w_dev(w_img.size());
  x_dev.upload(x_img.data(), x_img.size());
  r_dev.upload(r_img.data(), r_img.size());
  w_dev.upload(w_img.data(), w_img.size());
  auto x_t = make_tensor(x_dev.get(), {rows, hidden}, dl_dtype("fp16"));
  auto r_t = make_tensor(r_dev.get(), {rows, hidden}, dl_dtype("fp16"));
  auto w_t = make_tensor(w_dev.get(), {hidden}, dl_dtype("fp16"));
  TempDir keep;
  fs::path dump = keep.path() / "call";
  {
    Logged l("10");
    REQUIRE(kjit_fused_add_rmsnorm(w_t.get(), x_t.get(), r_t.get(), 1e-6f, nullptr) ==
            KJIT_SUCCESS);
    device_synchronize();
    fs::copy(only_dump(l), dump, fs::copy_options::recursive);
  }
  st::File in = st::File::read(dump / "inputs.safetensors");
  st::File out = st::File::read(dump / "outputs.safetensors");
  const std::string x0(x_img.begin(), x_img.end()), r0(r_img.begin(), r_img.end());
  CHECK(tensor_bytes(in, "input") == x0);
  CHECK(tensor_bytes(in, "residual") == r0);
  auto x1 = download(x_dev), r1 = download(r_dev);
  CHECK(tensor_bytes(out, "input") == std::string(x1.begin(), x1.end()));
  CHECK(tensor_bytes(out, "residual") == std::string(r1.begin(), r1.end()));
  CHECK(tensor_bytes(out, "input") != x0);  // it did change
  CHECK(out.find("weight") == nullptr);
  auto j = nlohmann::json::parse(read_text(dump / "call.json"));
  CHECK(j["args"][0]["name"] == "weight");
  CHECK(j["args"][1]["data"] == "inputs.safetensors, outputs.safetensors");
  expect_reproduced(dump);
}

TEST_CASE("replay: in-place rope keeps q_out aliased to q", "[gpu][replay]") {
  std::mt19937_64 rng(3);
  const int64_t tokens = 9, qh = 4, kh = 2, D = 128;
  auto q_img = random_image(tokens * qh * D, "bf16", rng);
  auto k_img = random_image(tokens * kh * D, "bf16", rng);
  std::vector<int32_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(3 * t + 1);
  DeviceBuffer q_dev(q_img.size()), k_dev(k_img.size()), ko_dev(k_img.size()),
      p_dev(pos.size() * 4);
  q_dev.upload(q_img.data(), q_img.size());
  k_dev.upload(k_img.data(), k_img.size());
  ko_dev.fill(0xFF);
  p_dev.upload(pos.data(), pos.size() * 4);
  auto q = make_tensor(q_dev.get(), {tokens, qh, D}, dl_dtype("bf16"));
  auto k = make_tensor(k_dev.get(), {tokens, kh, D}, dl_dtype("bf16"));
  auto ko = make_tensor(ko_dev.get(), {tokens, kh, D}, dl_dtype("bf16"));
  auto p = make_tensor(p_dev.get(), {tokens}, dl_dtype("int32"));
  TempDir keep;
  fs::path dump = keep.path() / "call";
  {
    Logged l("10");
    REQUIRE(kjit_apply_rope_pos_ids(q.get(), k.get(), p.get(), q.get(), ko.get(), 64,
                                    KJIT_ROPE_NEOX, 1.0f, 1e4f, nullptr) == KJIT_SUCCESS);
    device_synchronize();
    fs::copy(only_dump(l), dump, fs::copy_options::recursive);
  }
  auto j = nlohmann::json::parse(read_text(dump / "call.json"));
  CHECK(j["args"][3]["name"] == "q_out");
  CHECK(j["args"][3]["alias_of"] == "q");
  CHECK_FALSE(j["args"][4].contains("alias_of"));
  CHECK(j["args"][5]["name"] == "rotary_dim");
  CHECK(j["args"][5]["value"] == 64);
  st::File in = st::File::read(dump / "inputs.safetensors");
  CHECK(tensor_bytes(in, "q") == std::string(q_img.begin(), q_img.end()));
  st::File out = st::File::read(dump / "outputs.safetensors");
  auto q1 = download(q_dev);
  CHECK(tensor_bytes(out, "q_out") == std::string(q1.begin(), q1.end()));
  expect_reproduced(dump);
}

TEST_CASE("replay: append_paged_kv_cache dumps the caches before and after", "[gpu][replay]") {
  std::mt19937_64 rng(4);
  const int64_t pages = 6, page = 4, H = 2, D = 64, nnz = 5;
  // Two requests: pages {0, 2} and {3}; the tokens land at positions 5, 6, 7 of request 0 and
  // 0, 1 of request 1.
  std::vector<int32_t> bi = {0, 0, 0, 1, 1}, posv = {5, 6, 7, 0, 1};
  std::vector<int32_t> indptr = {0, 2, 3}, indices = {0, 2, 3}, last = {4, 2};
  auto ak_img = random_image(nnz * H * D, "fp16", rng);
  auto av_img = random_image(nnz * H * D, "fp16", rng);
  auto kc_img = random_image(pages * page * H * D, "fp16", rng);
  auto vc_img = random_image(pages * page * H * D, "fp16", rng);
  DeviceBuffer ak(ak_img.size()), av(av_img.size()), kc(kc_img.size()), vc(vc_img.size());
  DeviceBuffer bid(bi.size() * 4), posd(posv.size() * 4), ptrd(indptr.size() * 4),
      idxd(indices.size() * 4), lastd(last.size() * 4);
  ak.upload(ak_img.data(), ak_img.size());
  av.upload(av_img.data(), av_img.size());
  kc.upload(kc_img.data(), kc_img.size());
  vc.upload(vc_img.data(), vc_img.size());
  bid.upload(bi.data(), bi.size() * 4);
  posd.upload(posv.data(), posv.size() * 4);
  ptrd.upload(indptr.data(), indptr.size() * 4);
  idxd.upload(indices.data(), indices.size() * 4);
  lastd.upload(last.data(), last.size() * 4);
  auto akt = make_tensor(ak.get(), {nnz, H, D}, dl_dtype("fp16"));
  auto avt = make_tensor(av.get(), {nnz, H, D}, dl_dtype("fp16"));
  auto kct = make_tensor(kc.get(), {pages, page, H, D}, dl_dtype("fp16"));
  auto vct = make_tensor(vc.get(), {pages, page, H, D}, dl_dtype("fp16"));
  auto bt = make_tensor(bid.get(), {nnz}, dl_dtype("int32"));
  auto pt = make_tensor(posd.get(), {nnz}, dl_dtype("int32"));
  auto it = make_tensor(idxd.get(), {3}, dl_dtype("int32"));
  auto ipt = make_tensor(ptrd.get(), {3}, dl_dtype("int32"));
  auto lt = make_tensor(lastd.get(), {2}, dl_dtype("int32"));
  TempDir keep;
  fs::path dump = keep.path() / "call";
  {
    Logged l("10");
    REQUIRE(kjit_append_paged_kv_cache(akt.get(), avt.get(), bt.get(), pt.get(), it.get(),
                                       ipt.get(), lt.get(), kct.get(), vct.get(),
                                       KJIT_KV_LAYOUT_NHD, nullptr) == KJIT_SUCCESS);
    device_synchronize();
    fs::copy(only_dump(l), dump, fs::copy_options::recursive);
  }
  st::File in = st::File::read(dump / "inputs.safetensors");
  st::File out = st::File::read(dump / "outputs.safetensors");
  CHECK(tensor_bytes(in, "paged_k_cache") == std::string(kc_img.begin(), kc_img.end()));
  auto kc1 = download(kc), vc1 = download(vc);
  CHECK(tensor_bytes(out, "paged_k_cache") == std::string(kc1.begin(), kc1.end()));
  CHECK(tensor_bytes(out, "paged_v_cache") == std::string(vc1.begin(), vc1.end()));
  CHECK(tensor_bytes(out, "paged_k_cache") != tensor_bytes(in, "paged_k_cache"));
  CHECK(tensor_bytes(in, "kv_indptr") ==
        std::string(reinterpret_cast<const char*>(indptr.data()), indptr.size() * 4));
  expect_reproduced(dump);
}

TEST_CASE("replay: kjit_sampling_options are dumped field by field and built again",
          "[gpu][replay]") {
  const int64_t batch = 3, vocab = 1001;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> probs(batch * vocab);
  for (auto& v : probs) v = dist(rng);
  DeviceBuffer pd(probs.size() * 4), od(probs.size() * 4);
  pd.upload(probs.data(), probs.size() * 4);
  od.fill(0xFF);
  auto pt = make_tensor(pd.get(), {batch, vocab}, dl_dtype("fp32"));
  auto ot = make_tensor(od.get(), {batch, vocab}, dl_dtype("fp32"));
  kjit_sampling_options o;
  kjit_sampling_options_init(&o);
  o.top_k = 17;
  TempDir keep;
  fs::path dump = keep.path() / "call";
  {
    Logged l("10");
    REQUIRE(kjit_top_k_renorm_probs(pt.get(), nullptr, ot.get(), &o, nullptr) == KJIT_SUCCESS);
    device_synchronize();
    fs::copy(only_dump(l), dump, fs::copy_options::recursive);
  }
  auto j = nlohmann::json::parse(read_text(dump / "call.json"));
  bool top_k_logged = false;
  for (const auto& a : j["args"]) {
    if (a["name"] == "options.top_k") top_k_logged = a["value"] == 17;
  }
  CHECK(top_k_logged);
  // The call kept 17 tokens of row 0 (random values, no ties): a replay that built other options
  // (the default keeps every token) would not reproduce its outputs.
  expect_reproduced(dump);
  std::vector<float> out(probs.size());
  od.download(out.data(), out.size() * 4);
  CHECK(std::count_if(out.begin(), out.begin() + vocab, [](float v) { return v > 0.0f; }) == 17);
}

TEST_CASE("replay: level 5 statistics of inputs and outputs are exact", "[gpu][replay]") {
  const int64_t rows = 3, hidden = 1000;
  std::vector<float> x(rows * hidden), w(hidden, 1.0f);
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    sum += x[i];
  }
  x[17] = std::numeric_limits<float>::quiet_NaN();
  sum -= (17 % 7) - 3;
  x[18] = -std::numeric_limits<float>::infinity();
  sum -= (18 % 7) - 3;
  DeviceBuffer xd(x.size() * 4), wd(w.size() * 4), yd(x.size() * 4);
  yd.fill(0x7B);  // poison: finite (1.3e36), so the NaN count below is the kernel's own
  xd.upload(x.data(), x.size() * 4);
  wd.upload(w.data(), w.size() * 4);
  auto xt = make_tensor(xd.get(), {rows, hidden}, dl_dtype("fp32"));
  auto wt = make_tensor(wd.get(), {hidden}, dl_dtype("fp32"));
  auto yt = make_tensor(yd.get(), {rows, hidden}, dl_dtype("fp32"));
  Logged l("5");
  REQUIRE(kjit_rmsnorm(xt.get(), wt.get(), yt.get(), 1e-6f, nullptr) == KJIT_SUCCESS);
  const std::string log = l.log();
  INFO(log);
  CHECK(log.find(fmt::format("  stats before input: min=-3 max=3 mean={:.6g} nan=1 inf=1 n=3000\n",
                             sum / 2998)) != std::string::npos);
  CHECK(log.find("  stats before weight: min=1 max=1 mean=1 nan=0 inf=0 n=1000\n") !=
        std::string::npos);
  // Row 0 holds the NaN, so its outputs are NaN; the other rows are finite.
  CHECK(log.find("  stats after out: ") != std::string::npos);
  CHECK(log.find("nan=1000 inf=0 n=3000\n") != std::string::npos);
  CHECK(l.dumps().empty());  // level 5 does not dump
}

TEST_CASE("replay: under graph capture the log neither synchronizes, copies nor dumps",
          "[gpu][replay]") {
  const auto& drv = kjit::cuda::driver();
  const int64_t rows = 4, hidden = 512;
  DeviceBuffer xd(rows * hidden * 2), wd(hidden * 2), yd(rows * hidden * 2);
  xd.fill(0x3C);  // fp16 1.0078125 everywhere (0x3C3C)
  wd.fill(0x3C);
  auto xt = make_tensor(xd.get(), {rows, hidden}, dl_dtype("fp16"));
  auto wt = make_tensor(wd.get(), {hidden}, dl_dtype("fp16"));
  auto yt = make_tensor(yd.get(), {rows, hidden}, dl_dtype("fp16"));
  CUstream s = nullptr;
  REQUIRE(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  // Load the kernel outside the capture.
  REQUIRE(kjit_rmsnorm(xt.get(), wt.get(), yt.get(), 1e-6f, s) == KJIT_SUCCESS);
  REQUIRE(drv.cuStreamSynchronize(s) == CUDA_SUCCESS);

  Logged l("10");
  // Global mode: any synchronizing call from this process would invalidate the capture.
  REQUIRE(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  const kjit_status st = kjit_rmsnorm(xt.get(), wt.get(), yt.get(), 1e-6f, s);
  CUgraph graph = nullptr;
  const CUresult end = drv.cuStreamEndCapture(s, &graph);
  CHECK(st == KJIT_SUCCESS);
  CHECK(end == CUDA_SUCCESS);
  CHECK(graph != nullptr);
  if (graph) drv.cuGraphDestroy(graph);
  drv.cuStreamDestroy(s);

  const std::string log = l.log();
  INFO(log);
  CHECK(log.find(fmt::format("  sync: stream {:#x} is capturing a CUDA graph: not synchronized; "
                             "statistics and dump skipped",
                             reinterpret_cast<uintptr_t>(s))) != std::string::npos);
  CHECK(log.find("  stats ") == std::string::npos);
  CHECK(log.find("  dump: skipped (stream is capturing)") != std::string::npos);
  CHECK(log.find("  kernel: rmsnorm_") != std::string::npos);
  CHECK(log.find("-> KJIT_SUCCESS") != std::string::npos);
  CHECK(l.dumps().empty());
}
