#include "aot/curl_loader.hpp"

#include <dlfcn.h>

#include <type_traits>
#include <vector>

#include "util/env.hpp"
#include "util/error.hpp"

namespace kjit::aot {
namespace {

struct Loaded {
  CurlApi api;
  std::string error;  // empty when usable
};

Loaded load_curl() {
  Loaded out;
  std::vector<std::string> names;
  if (auto v = util::env_get("KJIT_CURL_LIBRARY"); v && !v->empty()) {
    names.push_back(*v);
  } else {
    // The soname of the OpenSSL flavour, then Debian's GnuTLS flavour (same ABI, other name).
    names = {"libcurl.so.4", "libcurl-gnutls.so.4"};
  }
  std::string tried;
  void* lib = nullptr;
  for (const auto& n : names) {
    lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      out.api.library = n;
      break;
    }
    const char* why = ::dlerror();
    tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", n, why ? why : "not found");
  }
  if (lib == nullptr) {
    out.error = fmt::format(
        "downloading artifacts needs libcurl, which could not be loaded: {}. Install libcurl "
        "(Debian/Ubuntu: libcurl4), set KJIT_CURL_LIBRARY to its path, or copy the package to "
        "a local directory and set KJIT_AOT_DIR",
        tried);
    return out;
  }
  std::string missing;
  auto sym = [&](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(::dlsym(lib, name));
    if (slot == nullptr) missing += fmt::format(" {}", name);
  };
  CurlApi& c = out.api;
  sym(c.global_init, "curl_global_init");
  sym(c.easy_init, "curl_easy_init");
  sym(c.easy_setopt, "curl_easy_setopt");
  sym(c.easy_perform, "curl_easy_perform");
  sym(c.easy_getinfo, "curl_easy_getinfo");
  sym(c.easy_reset, "curl_easy_reset");
  sym(c.easy_cleanup, "curl_easy_cleanup");
  sym(c.easy_strerror, "curl_easy_strerror");
  sym(c.version, "curl_version");
  if (!missing.empty()) {
    out.error = fmt::format("{} lacks{}", c.library, missing);
    return out;
  }
  // Not thread-safe in old libcurl; this runs once, inside a function-local static's init.
  CURLcode rc = c.global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) {
    out.error = fmt::format("curl_global_init failed: {}", c.easy_strerror(rc));
  }
  return out;
}

}  // namespace

const CurlApi& curl() {
  static const Loaded loaded = load_curl();
  if (!loaded.error.empty()) throw Error(KJIT_ERROR_UNSUPPORTED, loaded.error);
  return loaded.api;
}

}  // namespace kjit::aot
