#include <catch2/catch.hpp>

#include "jit/arch.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

using kjit::jit::ArchTarget;

TEST_CASE("arch: parse accepts the spellings users write", "[arch]") {
  for (const char* s : {"sm_90a", "SM_90A", "sm90a", "9.0a", "90a", "compute_90a"}) {
    auto t = ArchTarget::parse(s);
    REQUIRE(t);
    CHECK(t->sm() == "sm_90a");
  }
  CHECK(ArchTarget::parse("8.0")->sm() == "sm_80");
  CHECK(ArchTarget::parse("sm_86")->sm() == "sm_86");
  CHECK(ArchTarget::parse("10.0a")->sm() == "sm_100a");
  CHECK(ArchTarget::parse("120")->sm() == "sm_120");
  for (const char* bad : {"", "sm_", "9", "9.", ".0", "9.0.0", "sm_9x", "abc", "sm_90b", "4.0"}) {
    CHECK_FALSE(ArchTarget::parse(bad));
  }
}

TEST_CASE("arch: lists split on space, comma and semicolon and drop duplicates", "[arch]") {
  auto v = kjit::jit::parse_arch_list("8.0 9.0a,sm_90;sm_80");
  REQUIRE(v.size() == 3);
  CHECK(kjit::jit::format_arch_list(v) == "sm_80 sm_90a sm_90");
  CHECK(kjit::jit::parse_arch_list("").empty());
  try {
    kjit::jit::parse_arch_list("8.0 bogus");
    FAIL("no throw");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("bogus") != std::string::npos);
  }
}

TEST_CASE("arch: families decide what a spec may be compiled for", "[arch]") {
  using kjit::jit::family_supports;
  std::vector<std::string> generic = {"sm_80+"};
  std::vector<std::string> hopper = {"sm_90a"};
  CHECK(family_supports(generic, {8, 0, false}));
  CHECK(family_supports(generic, {9, 0, true}));
  CHECK_FALSE(family_supports(generic, {7, 5, false}));
  CHECK(family_supports(hopper, {9, 0, true}));
  CHECK_FALSE(family_supports(hopper, {9, 0, false}));  // never a silent sm_90 for sm_90a code
  CHECK_FALSE(family_supports(hopper, {10, 0, true}));
}

TEST_CASE("arch: selection keeps supported targets and fails naming both lists", "[arch]") {
  using namespace kjit::jit;
  auto req = parse_arch_list("sm_80 sm_90 sm_90a");
  CHECK(format_arch_list(select_targets({"sm_80+"}, req, "op")) == "sm_80 sm_90 sm_90a");
  CHECK(format_arch_list(select_targets({"sm_90a"}, req, "op")) == "sm_90a");
  try {
    select_targets({"sm_90a"}, parse_arch_list("sm_80 sm_86"), "wgmma_op");
    FAIL("no throw");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
    std::string m = e.what();
    CHECK(m.find("wgmma_op") != std::string::npos);
    CHECK(m.find("sm_90a") != std::string::npos);
    CHECK(m.find("sm_80 sm_86") != std::string::npos);
  }
  try {
    select_targets({"sm_80+"}, {}, "op");
    FAIL("no throw");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
  }
}

TEST_CASE("arch: a device gets the plain target when possible, else the a-target", "[arch]") {
  using namespace kjit::jit;
  CHECK(select_device_target({"sm_80+"}, 9, 0, "op").sm() == "sm_90");
  CHECK(select_device_target({"sm_90a"}, 9, 0, "op").sm() == "sm_90a");
  CHECK(select_device_target({"sm_80+"}, 8, 6, "op").sm() == "sm_86");
  CHECK_THROWS_AS(select_device_target({"sm_90a"}, 8, 0, "op"), kjit::Error);
  CHECK_THROWS_AS(select_device_target({"sm_80+"}, 7, 5, "op"), kjit::Error);
}

// The capability helper GPU tests skip through (tests/gpu/main.cpp): its predicates agree with the
// device (or its absence), and the tags name what they need.
TEST_CASE("arch: GPU test capability tags follow the device", "[arch]") {
  const auto& caps = kjit::test::gpu_caps();
  CHECK(kjit::test::missing_capability({"gpu", "norm"}).empty());
  if (!caps.usable) {
    CHECK_FALSE(caps.why.empty());
    CHECK_FALSE(caps.sm90());
    CHECK_FALSE(caps.sm90a());
    CHECK(kjit::test::missing_capability({"gpu", "sm90"}).find("needs sm_90") != std::string::npos);
    CHECK(kjit::test::missing_capability({"sm90a"}).find("needs sm_90a") != std::string::npos);
    return;
  }
  CHECK(caps.major >= 8);
  CHECK(caps.sm90() == (caps.major >= 9));
  CHECK(caps.sm90a() == (caps.major == 9 && caps.minor == 0));
  CHECK(kjit::test::missing_capability({"sm90"}).empty() == caps.sm90());
  CHECK(kjit::test::missing_capability({"sm90a"}).empty() == caps.sm90a());
}
