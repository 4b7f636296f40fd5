// libcurl, loaded with dlopen the first time a download is needed. libkjit.so must load on
// machines without libcurl (most inference hosts never fetch), so it is never linked: only the
// types come from <curl/curl.h>.
#pragma once

#define CURL_DISABLE_TYPECHECK  // the setopt type-check macros would wrap our function pointers
#include <curl/curl.h>

#include <string>

namespace kjit::aot {

struct CurlApi {
  CURLcode (*global_init)(long flags) = nullptr;
  CURL* (*easy_init)() = nullptr;
  CURLcode (*easy_setopt)(CURL* handle, CURLoption option, ...) = nullptr;
  CURLcode (*easy_perform)(CURL* handle) = nullptr;
  CURLcode (*easy_getinfo)(CURL* handle, CURLINFO info, ...) = nullptr;
  void (*easy_reset)(CURL* handle) = nullptr;
  void (*easy_cleanup)(CURL* handle) = nullptr;
  const char* (*easy_strerror)(CURLcode code) = nullptr;
  char* (*version)() = nullptr;
  std::string library;  // the file that was loaded
};

// The loaded API, initialized once (curl_global_init) and never unloaded. Throws
// kjit::Error(KJIT_ERROR_UNSUPPORTED) naming the libraries tried when none loads: KJIT_CURL_LIBRARY
// when set, else libcurl.so.4 then libcurl-gnutls.so.4.
const CurlApi& curl();

}  // namespace kjit::aot
