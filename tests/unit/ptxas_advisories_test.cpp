// jit::ptxas_advisories: ptxas' C75xx performance notes picked out of an NVRTC log (the
// lines the sidecar records and `kjit-cli compile` prints), the rest of the log left out. The
// catalog-wide check is the CLI test "compile --all again is all cached, without ptxas
// advisories".
#include <catch2/catch.hpp>

#include "jit/compiler.hpp"

using kjit::jit::ptxas_advisories;

TEST_CASE("ptxas advisories: the performance notes of a log, without the prefix", "[jit][ptxas]") {
  // As NVRTC 13.0 logged main's prefill ping-pong kernel on 2026-12-06 (function name cut).
  const std::string log =
      "k.cu(5): warning #177-D: variable \"kjit_spec::kernel\" was declared but never referenced\n"
      "\n"
      "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are "
      "serialized due to non wgmma instructions reading accumulator registers of  a wgmma "
      "between start and end of the pipeline stage in the function '_ZN4kjit9attention'\n"
      "ptxas info    : (C7517) warpgroup.wait is injected in around line 2150 by compiler to "
      "allow use of registers defined by GMMA in function '_ZN4kjit9attention'\r\n"
      "ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are "
      "serialized due to program dependence on compiler-inserted WG.DP in divergent path";
  const std::vector<std::string> a = ptxas_advisories(log);
  REQUIRE(a.size() == 3);
  CHECK(a[0].rfind("(C7514) Potential Performance Loss: wgmma.mma_async", 0) == 0);
  CHECK(a[0].find("'_ZN4kjit9attention'") != std::string::npos);
  CHECK(a[1].rfind("(C7517) warpgroup.wait is injected", 0) == 0);
  CHECK(a[1].back() == '\'');  // the \r of a CRLF line dropped
  CHECK(a[2].rfind("(C7518) Potential Performance Loss", 0) == 0);
  CHECK(a[2].back() == 'h');  // the last line has no newline
}

TEST_CASE("ptxas advisories: none in a clean or empty log", "[jit][ptxas]") {
  CHECK(ptxas_advisories("").empty());
  CHECK(ptxas_advisories("k.cu(5): warning #177-D: variable declared but never referenced\n\n")
            .empty());
  // ptxas' other info lines (with -v) are not advisories.
  CHECK(ptxas_advisories("ptxas info    : Used 168 registers, used 2 barriers\n"
                         "ptxas         .     0 bytes stack frame, 0 bytes spill stores\n")
            .empty());
}
