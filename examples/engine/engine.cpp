#include "engine.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "checkpoint.hpp"

namespace engine {

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
}
#define CUDA_CHECK(call) cuda_check((call), #call)

constexpr DLDataType kBF16{kDLBfloat, 16, 1};
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};
constexpr DLDataType kE4M3{KJIT_DL_FLOAT8_E4M3FN, 8, 1};

// A DLTensor that owns its shape and strides. get() points the tensor at them, so a Dl may be
// returned by value and still hand kjit a consistent tensor.
struct Dl {
  DLTensor t{};
  int64_t shape[4] = {};
  int64_t strides[4] = {};
  bool strided = false;
  DLTensor* get() {
    t.shape = shape;
    t.strides = strided ? strides : nullptr;
    return &t;
  }
};

Dl tensor(const void* data, DLDataType dtype, std::initializer_list<int64_t> shape,
          std::initializer_list<int64_t> strides = {}, int device = 0) {
  Dl d;
  d.t.data = const_cast<void*>(data);
  d.t.device = {kDLCUDA, device};
  d.t.dtype = dtype;
  d.t.ndim = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), d.shape);
  if (strides.size() != 0) {
    d.strided = true;
    std::copy(strides.begin(), strides.end(), d.strides);
  }
  return d;
}

const char* at(const void* p, int64_t elems, int64_t elem_bytes) {
  return static_cast<const char*>(p) + elems * elem_bytes;
}

int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

}  // namespace

// Every kjit call goes through here: a failure names the call and carries kjit's message, and the
// count is what --stats reports.
void Engine::check(kjit_status s, const char* what) {
  ++calls_;
  if (s != KJIT_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + kjit_status_string(s) + ": " +
                             kjit_last_error());
  }
}
#define KJIT_CHECK(call) check((call), #call)

void* Engine::alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  allocations_.push_back(p);
  return p;
}

void Engine::free_allocation(void* p) {
  allocations_.erase(std::find(allocations_.begin(), allocations_.end(), p));
  CUDA_CHECK(cudaFree(p));
}

// fp8: replaces the bf16 weight [n, k] at w by its e4m3 quantization, one scale per row (output
// channel) into `scale`.
void Engine::quantize_weight(void*& w, void*& scale, int64_t n, int64_t k) {
  void* q = alloc(static_cast<size_t>(n * k));
  scale = alloc(static_cast<size_t>(n * 4));
  KJIT_CHECK(kjit_quant_fp8(
      tensor(w, kBF16, {n, k}, {}, device_).get(), tensor(q, kE4M3, {n, k}, {}, device_).get(),
      tensor(scale, kF32, {n}, {}, device_).get(), KJIT_FP8_PER_ROW, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  free_allocation(w);
  weight_bytes_ -= static_cast<size_t>(n * k) * 2;
  weight_bytes_ += static_cast<size_t>(n * k + n * 4);
  w = q;
}

// fp8: x's rows quantized per row into the GEMM input buffer and its scales.
void Engine::quantize_rows(DLTensor* x, int64_t rows, int64_t k) {
  KJIT_CHECK(kjit_quant_fp8(x, tensor(x8_, kE4M3, {rows, k}, {}, device_).get(),
                            tensor(x_scale_, kF32, {rows}, {}, device_).get(), KJIT_FP8_PER_ROW,
                            stream_));
}

// out [rows, n] = in [rows, k] . w [n, k]^T. fp8: the input is the quantized rows in x8_ (written
// by a fused norm or by quantize_rows before the call), `in` is not read.
void Engine::linear(DLTensor* in, int64_t rows, int64_t k, const void* w, const void* w_scale,
                    int64_t n, DLTensor* out) {
  // The weights (and the fp8 ones' scales) are loaded once and never written by a forward pass,
  // so each projection may start streaming its weight while the kernel before it (a norm, a
  // quantizer, attention, SiLU-and-mul) finishes (docs/c-api.md, "Launch mode").
  kjit_gemm_options opt;
  kjit_gemm_options_init(&opt);
  opt.weights_early = opt_.weights_early ? 1 : 0;
  if (!fp8_) {
    KJIT_CHECK(
        kjit_gemm(in, tensor(w, kBF16, {n, k}, {}, device_).get(), nullptr, out, &opt, stream_));
    return;
  }
  KJIT_CHECK(kjit_gemm_fp8(tensor(x8_, kE4M3, {rows, k}, {}, device_).get(),
                           tensor(w, kE4M3, {n, k}, {}, device_).get(),
                           tensor(x_scale_, kF32, {rows}, {}, device_).get(),
                           tensor(w_scale, kF32, {n}, {}, device_).get(), out, &opt, stream_));
}

// Copies a checkpoint tensor straight from its mmap'ed bytes to the device (into `dst` when
// given: a slice of a fused weight).
void* Engine::upload(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> shape,
                     void* dst) {
  const TensorView& v = ckpt.get(name, "BF16", shape);
  if (dst == nullptr) dst = alloc(v.bytes);
  CUDA_CHECK(cudaMemcpy(dst, v.data, v.bytes, cudaMemcpyHostToDevice));
  weight_bytes_ += v.bytes;
  return dst;
}

Engine::Engine(const Checkpoint& ckpt, const ModelConfig& cfg, int device, bool fp8)
    : cfg_(cfg), device_(device), fp8_(fp8) {
  if (cfg.qk_norm && cfg.llama3_rope) {
    throw std::runtime_error(
        "q / k norm with llama3 rope scaling: kjit_qk_rmsnorm_rope has no Llama 3.1 frequencies");
  }
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  const int64_t Nq = int64_t{cfg.num_q_heads} * cfg.head_dim;
  const int64_t Nkv = int64_t{cfg.num_kv_heads} * cfg.head_dim;
  embed_ = upload(ckpt, "model.embed_tokens.weight", {V, H});
  final_norm_ = upload(ckpt, "model.norm.weight", {H});
  lm_head_ = cfg.tie_word_embeddings || !ckpt.has("lm_head.weight")
                 ? embed_
                 : upload(ckpt, "lm_head.weight", {V, H});
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer L;
    L.ln1 = upload(ckpt, p + "input_layernorm.weight", {H});
    L.ln2 = upload(ckpt, p + "post_attention_layernorm.weight", {H});
    // q, k and v as one [Nq + 2 Nkv, H] weight, gate and up as one [2 I, H]: one GEMM each, the
    // [gate | up] rows being what kjit_silu_and_mul reads.
    L.qkv = alloc(static_cast<size_t>((Nq + 2 * Nkv) * H * 2));
    upload(ckpt, p + "self_attn.q_proj.weight", {Nq, H}, L.qkv);
    upload(ckpt, p + "self_attn.k_proj.weight", {Nkv, H}, const_cast<char*>(at(L.qkv, Nq * H, 2)));
    upload(ckpt, p + "self_attn.v_proj.weight", {Nkv, H},
           const_cast<char*>(at(L.qkv, (Nq + Nkv) * H, 2)));
    L.o = upload(ckpt, p + "self_attn.o_proj.weight", {H, Nq});
    L.gate_up = alloc(static_cast<size_t>(2 * I * H * 2));
    upload(ckpt, p + "mlp.gate_proj.weight", {I, H}, L.gate_up);
    upload(ckpt, p + "mlp.up_proj.weight", {I, H}, const_cast<char*>(at(L.gate_up, I * H, 2)));
    L.down = upload(ckpt, p + "mlp.down_proj.weight", {H, I});
    if (cfg.qk_norm) {
      L.q_norm = upload(ckpt, p + "self_attn.q_norm.weight", {cfg.head_dim});
      L.k_norm = upload(ckpt, p + "self_attn.k_norm.weight", {cfg.head_dim});
    }
    if (fp8_) {
      quantize_weight(L.qkv, L.qkv_scale, Nq + 2 * Nkv, H);
      quantize_weight(L.o, L.o_scale, H, Nq);
      quantize_weight(L.gate_up, L.gate_up_scale, 2 * I, H);
      quantize_weight(L.down, L.down_scale, H, I);
    }
    layers_.push_back(L);
  }
}

Engine::~Engine() {
  if (graph_ != nullptr) cudaGraphExecDestroy(graph_);
  kjit_prefill_plan_destroy(prefill_plan_);
  kjit_decode_plan_destroy(decode_plan_);
  for (void* p : allocations_) cudaFree(p);
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
  if (offset_host_ != nullptr) cudaFreeHost(offset_host_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void Engine::upload_meta(int64_t from, int64_t to) {
  CUDA_CHECK(cudaMemcpyAsync(meta_dev_ + from, meta_host_ + from,
                             static_cast<size_t>(to - from) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream_));
}

void Engine::reserve(const RunOptions& opt) {
  if (batch_ != 0) throw std::runtime_error("Engine::reserve: once per engine");
  if (opt.max_batch < 1 || opt.max_total_len < 1 || opt.max_prefill_tokens < 1 ||
      opt.page_size < 1) {
    throw std::runtime_error("Engine::reserve: sizes must be >= 1");
  }
  opt_ = opt;
  batch_ = opt.max_batch;
  max_tokens_ = std::max(opt.max_prefill_tokens, batch_);
  pages_per_req_ = ceil_div(opt_.max_total_len, opt_.page_size);
  const int64_t B = batch_, T = max_tokens_, H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int64_t Nq = int64_t{cfg_.num_q_heads} * cfg_.head_dim;
  const int64_t Nkv = int64_t{cfg_.num_kv_heads} * cfg_.head_dim;

  // Activations for the longest pass (a full prefill), bf16; logits fp32.
  residual_ = alloc(static_cast<size_t>(T * H * 2));
  hidden_ = alloc(static_cast<size_t>(T * H * 2));
  qkv_ = alloc(static_cast<size_t>(T * (Nq + 2 * Nkv) * 2));
  attn_ = alloc(static_cast<size_t>(T * Nq * 2));
  gate_up_ = alloc(static_cast<size_t>(T * 2 * I * 2));
  act_ = alloc(static_cast<size_t>(T * I * 2));
  last_hidden_ = alloc(static_cast<size_t>(B * H * 2));
  if (fp8_) {
    x8_ = alloc(static_cast<size_t>(T * std::max({H, Nq, I})));
    x_scale_ = alloc(static_cast<size_t>(T * 4));
  }
  logits_ = alloc(static_cast<size_t>((opt_.all_logits ? T : B) * cfg_.vocab_size * 4));
  // The paged KV cache, NHD: [pages, page_size, kv heads, head_dim] per layer for K and for V;
  // slot b owns pages [b * pages_per_req_, (b + 1) * pages_per_req_).
  const size_t cache_bytes = static_cast<size_t>(B * pages_per_req_) * opt_.page_size * Nkv * 2;
  for (Layer& L : layers_) {
    L.k_cache = alloc(cache_bytes);
    L.v_cache = alloc(cache_bytes);
  }
  meta_.ids = 0;
  meta_.pos = meta_.ids + T;
  meta_.batch_idx = meta_.pos + T;
  meta_.qo_indptr = meta_.batch_idx + T;
  meta_.kv_indptr = meta_.qo_indptr + B + 1;
  meta_.last_len = meta_.kv_indptr + B + 1;
  meta_.kv_indices = meta_.last_len + B;
  meta_.last_rows = meta_.kv_indices + B * pages_per_req_;
  meta_.total = meta_.last_rows + B;
  meta_dev_ = static_cast<int32_t*>(alloc(static_cast<size_t>(meta_.total) * 4));
  CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&meta_host_), static_cast<size_t>(meta_.total) * 4));
  std::memset(meta_host_, 0, static_cast<size_t>(meta_.total) * 4);
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&offset_host_), sizeof(int64_t)));
  *offset_host_ = 0;
  seed_ = alloc(8);
  offset_ = alloc(8);
  CUDA_CHECK(cudaMemcpy(seed_, &opt_.sampling.seed, 8, cudaMemcpyHostToDevice));
  lens_.assign(static_cast<size_t>(batch_), 0);
  active_.assign(static_cast<size_t>(batch_), false);
}

// The Philox offset of the next sampling pass, in device memory where the pass (or the graph)
// reads it.
void Engine::set_offset() {
  *offset_host_ = draws_++;
  CUDA_CHECK(cudaMemcpyAsync(offset_, offset_host_, 8, cudaMemcpyHostToDevice, stream_));
}

std::vector<int32_t> Engine::admit(const std::vector<int>& slots,
                                   const std::vector<std::vector<int32_t>>& prompts) {
  if (batch_ == 0) throw std::runtime_error("Engine::admit before reserve");
  const int n = static_cast<int>(slots.size());
  if (n == 0 || prompts.size() != slots.size()) {
    throw std::runtime_error("Engine::admit: one prompt per slot, at least one");
  }
  int total = 0;
  for (int i = 0; i < n; ++i) {
    const int slot = slots[static_cast<size_t>(i)];
    const auto& p = prompts[static_cast<size_t>(i)];
    if (slot < 0 || slot >= batch_ || active_[static_cast<size_t>(slot)]) {
      throw std::runtime_error("Engine::admit: slot " + std::to_string(slot) + " is not free");
    }
    if (p.empty() || static_cast<int>(p.size()) > opt_.max_total_len) {
      throw std::runtime_error("Engine::admit: a prompt of " + std::to_string(p.size()) +
                               " tokens (1.." + std::to_string(opt_.max_total_len) + ")");
    }
    total += static_cast<int>(p.size());
  }
  if (total > max_tokens_) {
    throw std::runtime_error("Engine::admit: " + std::to_string(total) +
                             " prompt tokens exceed max_prefill_tokens");
  }
  // The prompts' metadata: tokens, positions, owners (the i-th admitted request), row offsets
  // and their slots' pages.
  int32_t* m = meta_host_;
  int row = 0, page_row = 0;
  m[meta_.qo_indptr] = 0;
  m[meta_.kv_indptr] = 0;
  for (int b = 0; b < n; ++b) {
    const int slot = slots[static_cast<size_t>(b)];
    const auto& p = prompts[static_cast<size_t>(b)];
    const int len = static_cast<int>(p.size());
    for (int i = 0; i < len; ++i, ++row) {
      m[meta_.ids + row] = p[static_cast<size_t>(i)];
      m[meta_.pos + row] = i;
      m[meta_.batch_idx + row] = b;
    }
    m[meta_.qo_indptr + b + 1] = row;
    m[meta_.last_rows + b] = row - 1;
    const int pages = ceil_div(len, opt_.page_size);
    for (int i = 0; i < pages; ++i) m[meta_.kv_indices + page_row++] = slot * pages_per_req_ + i;
    m[meta_.kv_indptr + b + 1] = page_row;
    m[meta_.last_len + b] = len - (pages - 1) * opt_.page_size;
    lens_[static_cast<size_t>(slot)] = len;
    active_[static_cast<size_t>(slot)] = true;
  }
  upload_meta(0, meta_.total);

  // A ragged prefill: each prompt attends its own rows (causal), its slot's cache being empty.
  const int32_t* rows = m + meta_.qo_indptr;
  kjit_prefill_plan_destroy(prefill_plan_);
  prefill_plan_ = nullptr;
  KJIT_CHECK(kjit_batch_prefill_plan(rows, rows, n, cfg_.num_q_heads, cfg_.num_kv_heads,
                                     cfg_.head_dim, 0, KJIT_KV_LAYOUT_NHD, kBF16, kBF16, nullptr,
                                     device_, &prefill_plan_));
  if (!opt_.all_logits) set_offset();
  forward(total, n, /*prefill=*/true, opt_.all_logits, /*sample=*/!opt_.all_logits);
  logits_rows_ = opt_.all_logits ? total : n;
  std::vector<int32_t> first;
  if (!opt_.all_logits) {
    first.resize(static_cast<size_t>(n));
    CUDA_CHECK(cudaMemcpyAsync(first.data(), meta_dev_ + meta_.ids, first.size() * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return first;
}

void Engine::release(int slot) {
  if (slot < 0 || slot >= batch_ || !active_[static_cast<size_t>(slot)]) {
    throw std::runtime_error("Engine::release: slot " + std::to_string(slot) + " is not busy");
  }
  active_[static_cast<size_t>(slot)] = false;
  lens_[static_cast<size_t>(slot)] = 0;
}

// The page table after appending one token to every slot: positions, dense page counts,
// last-page lengths; the owners are the slots themselves. A free slot appends at position 0.
void Engine::set_decode_meta() {
  int32_t* m = meta_host_;
  int page_row = 0;
  m[meta_.kv_indptr] = 0;
  for (int b = 0; b < batch_; ++b) {
    const int len = lens_[static_cast<size_t>(b)];  // before this step's token; 0 when free
    if (len + 1 > opt_.max_total_len) {
      throw std::runtime_error("decode past max_total_len " + std::to_string(opt_.max_total_len));
    }
    m[meta_.pos + b] = len;
    m[meta_.batch_idx + b] = b;
    const int pages = ceil_div(len + 1, opt_.page_size);
    for (int i = 0; i < pages; ++i) m[meta_.kv_indices + page_row++] = b * pages_per_req_ + i;
    m[meta_.kv_indptr + b + 1] = page_row;
    m[meta_.last_len + b] = len + 1 - (pages - 1) * opt_.page_size;
  }
  // The whole table from ids on: one copy (the ids, positions and owners of rows >= batch_ ride
  // along unread).
  upload_meta(meta_.ids, meta_.total);
}

std::vector<int32_t> Engine::decode(const std::vector<int32_t>& tokens) {
  if (batch_ == 0) throw std::runtime_error("Engine::decode before reserve");
  if (static_cast<int>(tokens.size()) != batch_) {
    throw std::runtime_error("decode: one token per slot");
  }
  std::copy(tokens.begin(), tokens.end(), meta_host_ + meta_.ids);
  set_decode_meta();
  const bool sample_step = !opt_.all_logits;
  if (sample_step) set_offset();
  if (decode_plan_ == nullptr) {
    // Planned once for the first step's lengths: runs are correct for any lengths, only the
    // split-KV partition follows the planned ones.
    KJIT_CHECK(kjit_batch_decode_plan(
        meta_host_ + meta_.kv_indptr, batch_, cfg_.num_q_heads, cfg_.num_kv_heads, cfg_.head_dim,
        opt_.page_size, KJIT_KV_LAYOUT_NHD, kBF16, kBF16, nullptr, device_, &decode_plan_));
    workspace_bytes_ = kjit_decode_plan_workspace_bytes(decode_plan_);
    if (workspace_bytes_ > 0) workspace_ = alloc(workspace_bytes_);
  }
  if (decode_steps_ == 0 || !opt_.use_graph) {
    // The first step runs eagerly: it loads every specialization the step uses, so the capture
    // below compiles and loads nothing (kjit refuses a cold load under capture with
    // KJIT_ERROR_CAPTURING, which would end the run here).
    const int before = calls_;
    forward(batch_, batch_, /*prefill=*/false, false, sample_step);
    stats_.kjit_calls = calls_ - before;
    if (opt_.use_graph) {
      cudaGraph_t graph = nullptr;
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
      try {
        forward(batch_, batch_, /*prefill=*/false, false, sample_step);
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph != nullptr) cudaGraphDestroy(graph);
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      size_t nodes = 0;
      CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
      std::vector<cudaGraphNode_t> list(nodes);
      CUDA_CHECK(cudaGraphGetNodes(graph, list.data(), &nodes));
      stats_.graph_kernels = 0;
      for (cudaGraphNode_t n : list) {
        cudaGraphNodeType type;
        CUDA_CHECK(cudaGraphNodeGetType(n, &type));
        stats_.graph_kernels += type == cudaGraphNodeTypeKernel;
      }
      CUDA_CHECK(cudaGraphInstantiate(&graph_, graph, 0));
      CUDA_CHECK(cudaGraphDestroy(graph));
    }
  } else {
    CUDA_CHECK(cudaGraphLaunch(graph_, stream_));
  }
  ++decode_steps_;
  for (int b = 0; b < batch_; ++b) {
    if (active_[static_cast<size_t>(b)]) ++lens_[static_cast<size_t>(b)];
  }
  logits_rows_ = batch_;
  std::vector<int32_t> out;
  if (sample_step) {
    out.resize(static_cast<size_t>(batch_));
    CUDA_CHECK(cudaMemcpyAsync(out.data(), meta_dev_ + meta_.ids, out.size() * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

std::vector<float> Engine::logits() const {
  std::vector<float> out(static_cast<size_t>(logits_rows_) * cfg_.vocab_size);
  CUDA_CHECK(cudaMemcpy(out.data(), logits_, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

// One forward pass over `tokens` rows of the metadata and `batch` requests: the admitted
// prompts' tokens (prefill, ragged attention over their own keys) or one token per slot (decode,
// paged attention over the cache). Both append the new keys and values to the cache.
void Engine::forward(int tokens, int batch, bool prefill, bool all_logits, bool do_sample) {
  const int64_t T = tokens, B = batch, H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int64_t V = cfg_.vocab_size, hd = cfg_.head_dim;
  const int64_t nq = cfg_.num_q_heads, nkv = cfg_.num_kv_heads;
  const int64_t Nq = nq * hd, Nkv = nkv * hd, Nqkv = Nq + 2 * Nkv;
  const int d = device_;
  void* s = stream_;
  const int32_t* meta = meta_dev_;
  auto ints = [&](int64_t offset, int64_t n) { return tensor(meta + offset, kI32, {n}, {}, d); };
  Dl ids = ints(meta_.ids, T), pos = ints(meta_.pos, T), owner = ints(meta_.batch_idx, T);
  Dl qo_indptr = ints(meta_.qo_indptr, B + 1), kv_indptr = ints(meta_.kv_indptr, B + 1);
  Dl last_len = ints(meta_.last_len, B);
  // The whole cache: pages are numbered by slot, and a captured graph keeps this shape while
  // the used prefix grows.
  const int64_t pages = int64_t{batch_} * pages_per_req_;
  Dl kv_indices = ints(meta_.kv_indices, pages);
  Dl residual = tensor(residual_, kBF16, {T, H}, {}, d);
  Dl hidden = tensor(hidden_, kBF16, {T, H}, {}, d);

  KJIT_CHECK(
      kjit_embedding(tensor(embed_, kBF16, {V, H}, {}, d).get(), ids.get(), residual.get(), s));
  const int before_layers = calls_;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    Dl ln1 = tensor(L.ln1, kBF16, {H}, {}, d);
    // fp8: the norms write the next GEMM's quantized input and its row scales instead of hidden.
    Dl x8 = tensor(x8_, kE4M3, {T, H}, {}, d), x_scale = tensor(x_scale_, kF32, {T}, {}, d);
    if (l == 0) {
      KJIT_CHECK(fp8_
                     ? kjit_rmsnorm_quant_fp8(residual.get(), ln1.get(), x8.get(), x_scale.get(),
                                              cfg_.rms_norm_eps, s)
                     : kjit_rmsnorm(residual.get(), ln1.get(), hidden.get(), cfg_.rms_norm_eps, s));
    } else {
      // residual += the last MLP's output; hidden = norm(residual).
      KJIT_CHECK(fp8_ ? kjit_fused_add_rmsnorm_quant_fp8(hidden.get(), ln1.get(), residual.get(),
                                                         x8.get(), x_scale.get(), cfg_.rms_norm_eps,
                                                         s)
                      : kjit_fused_add_rmsnorm(ln1.get(), hidden.get(), residual.get(),
                                               cfg_.rms_norm_eps, s));
    }
    // q, k, v: views of one GEMM's [T, Nq + 2 Nkv] output. Qwen3 normalizes q and k per head
    // before RoPE: one launch over the views does both.
    linear(hidden.get(), T, H, L.qkv, L.qkv_scale, Nqkv,
           tensor(qkv_, kBF16, {T, Nqkv}, {}, d).get());
    Dl q = tensor(qkv_, kBF16, {T, nq, hd}, {Nqkv, hd, 1}, d);
    Dl k = tensor(at(qkv_, Nq, 2), kBF16, {T, nkv, hd}, {Nqkv, hd, 1}, d);
    Dl v = tensor(at(qkv_, Nq + Nkv, 2), kBF16, {T, nkv, hd}, {Nqkv, hd, 1}, d);
    Dl kc = tensor(L.k_cache, kBF16, {pages, opt_.page_size, nkv, hd}, {}, d);
    Dl vc = tensor(L.v_cache, kBF16, {pages, opt_.page_size, nkv, hd}, {}, d);
    if (!prefill && !cfg_.qk_norm) {
      // Decode: RoPE and the append in one launch (attention reads k from the cache, so the
      // rotated k need not exist elsewhere); q rotated in place.
      KJIT_CHECK(
          cfg_.llama3_rope
              ? kjit_llama31_rope_append_paged_kv_cache(
                    q.get(), k.get(), v.get(), pos.get(), owner.get(), pos.get(), kv_indices.get(),
                    kv_indptr.get(), last_len.get(), nullptr, nullptr, q.get(), kc.get(), vc.get(),
                    0, KJIT_ROPE_NEOX, cfg_.rope_factor, cfg_.rope_theta, cfg_.low_freq_factor,
                    cfg_.high_freq_factor, cfg_.original_max_position, KJIT_KV_LAYOUT_NHD, s)
              : kjit_rope_append_paged_kv_cache(
                    q.get(), k.get(), v.get(), pos.get(), owner.get(), pos.get(), kv_indices.get(),
                    kv_indptr.get(), last_len.get(), nullptr, nullptr, q.get(), kc.get(), vc.get(),
                    0, KJIT_ROPE_NEOX, 1.0f, cfg_.rope_theta, KJIT_KV_LAYOUT_NHD, s));
    } else if (cfg_.qk_norm) {
      KJIT_CHECK(kjit_qk_rmsnorm_rope(tensor(L.q_norm, kBF16, {hd}, {}, d).get(),
                                      tensor(L.k_norm, kBF16, {hd}, {}, d).get(), pos.get(),
                                      q.get(), k.get(), cfg_.rms_norm_eps, 0, KJIT_ROPE_NEOX, 1.0f,
                                      cfg_.rope_theta, s));
    } else if (cfg_.llama3_rope) {
      KJIT_CHECK(kjit_apply_llama31_rope_pos_ids(q.get(), k.get(), pos.get(), q.get(), k.get(), 0,
                                                 KJIT_ROPE_NEOX, cfg_.rope_factor, cfg_.rope_theta,
                                                 cfg_.low_freq_factor, cfg_.high_freq_factor,
                                                 cfg_.original_max_position, s));
    } else {
      KJIT_CHECK(kjit_apply_rope_pos_ids(q.get(), k.get(), pos.get(), q.get(), k.get(), 0,
                                         KJIT_ROPE_NEOX, 1.0f, cfg_.rope_theta, s));
    }
    if (prefill || cfg_.qk_norm) {
      KJIT_CHECK(kjit_append_paged_kv_cache(k.get(), v.get(), owner.get(), pos.get(),
                                            kv_indices.get(), kv_indptr.get(), last_len.get(),
                                            kc.get(), vc.get(), KJIT_KV_LAYOUT_NHD, s));
    }
    Dl attn = tensor(attn_, kBF16, {T, nq, hd}, {}, d);
    if (prefill) {
      KJIT_CHECK(kjit_batch_prefill_ragged_run(prefill_plan_, q.get(), k.get(), v.get(),
                                               qo_indptr.get(), qo_indptr.get(), nullptr,
                                               attn.get(), nullptr, 1.0f, 1.0f, s));
    } else {
      Dl ws = tensor(workspace_, DLDataType{kDLUInt, 8, 1}, {int64_t(workspace_bytes_)}, {}, d);
      KJIT_CHECK(kjit_batch_decode_run(decode_plan_, q.get(), kc.get(), vc.get(), kv_indices.get(),
                                       kv_indptr.get(), last_len.get(),
                                       workspace_bytes_ > 0 ? ws.get() : nullptr, attn.get(),
                                       nullptr, 1.0f, 1.0f, s));
    }
    Dl attn_rows = tensor(attn_, kBF16, {T, Nq}, {}, d);
    if (fp8_) quantize_rows(attn_rows.get(), T, Nq);
    linear(attn_rows.get(), T, Nq, L.o, L.o_scale, H, hidden.get());
    Dl ln2 = tensor(L.ln2, kBF16, {H}, {}, d);
    KJIT_CHECK(fp8_
                   ? kjit_fused_add_rmsnorm_quant_fp8(hidden.get(), ln2.get(), residual.get(),
                                                      x8.get(), x_scale.get(), cfg_.rms_norm_eps, s)
                   : kjit_fused_add_rmsnorm(ln2.get(), hidden.get(), residual.get(),
                                            cfg_.rms_norm_eps, s));
    Dl gate_up = tensor(gate_up_, kBF16, {T, 2 * I}, {}, d);
    Dl act = tensor(act_, kBF16, {T, I}, {}, d);
    linear(hidden.get(), T, H, L.gate_up, L.gate_up_scale, 2 * I, gate_up.get());
    // fp8: silu_and_mul then a per-row quantization (kjit_silu_and_mul_quant_fp8 scales per
    // 1 x 128 group, which pairs with 128 x 128 weight blocks, not per-channel weight scales).
    KJIT_CHECK(kjit_silu_and_mul(gate_up.get(), act.get(), s));
    if (fp8_) quantize_rows(act.get(), T, I);
    linear(act.get(), T, I, L.down, L.down_scale, H, hidden.get());
  }
  stats_.kjit_calls_per_layer = (calls_ - before_layers) / static_cast<int>(layers_.size());
  KJIT_CHECK(kjit_fused_add_rmsnorm(tensor(final_norm_, kBF16, {H}, {}, d).get(), hidden.get(),
                                    residual.get(), cfg_.rms_norm_eps, s));
  Dl lm_head = tensor(lm_head_, kBF16, {V, H}, {}, d);
  const int64_t rows = prefill && !all_logits ? B : T;
  Dl head_in = hidden;
  if (prefill && !all_logits) {
    // Each prompt's last row, gathered with the embedding op from the final hidden states.
    head_in = tensor(last_hidden_, kBF16, {B, H}, {}, d);
    KJIT_CHECK(kjit_embedding(hidden.get(), ints(meta_.last_rows, B).get(), head_in.get(), s));
  }
  Dl logits = tensor(logits_, kF32, {rows, V}, {}, d);
  kjit_gemm_options opt;
  kjit_gemm_options_init(&opt);
  opt.weights_early = opt_.weights_early ? 1 : 0;  // the LM head, as the projections (linear)
  KJIT_CHECK(kjit_gemm(head_in.get(), lm_head.get(), nullptr, logits.get(), &opt, s));
  if (do_sample) sample(static_cast<int>(rows));
}

// Writes the next token of each request into the metadata's ids, where the next decode step (or
// its graph) reads them.
void Engine::sample(int rows) {
  const int d = device_;
  void* s = stream_;
  Dl logits = tensor(logits_, kF32, {rows, cfg_.vocab_size}, {}, d);
  Dl next = tensor(meta_dev_ + meta_.ids, kI32, {rows}, {}, d);
  if (opt_.sampling.greedy) {
    KJIT_CHECK(kjit_argmax(logits.get(), next.get(), s));
    return;
  }
  kjit_sampling_options o;
  kjit_sampling_options_init(&o);
  if (opt_.sampling.top_k > 0) o.top_k = opt_.sampling.top_k;
  o.top_p = opt_.sampling.top_p;
  o.temperature = opt_.sampling.temperature;
  KJIT_CHECK(kjit_top_k_top_p_sampling_from_logits(
      logits.get(), nullptr, nullptr, nullptr, tensor(seed_, kI64, {1}, {}, d).get(),
      tensor(offset_, kI64, {1}, {}, d).get(), next.get(), nullptr, &o, s));
}

}  // namespace engine
