#include "model/quantization.h"

#include <torch/torch.h>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "util/error.h"

namespace ft::model {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The code books as tensors: made once on the CPU, copied to another device on use.
template <std::size_t N>
torch::Tensor as_tensor(const std::array<float, N>& code) {
  return torch::from_blob(const_cast<float*>(code.data()), {static_cast<std::int64_t>(N)}, torch::kFloat).clone();
}
torch::Tensor nf4_code_tensor(const torch::Device& device) {
  static const torch::Tensor cpu = as_tensor(nf4_code_book());
  return device.is_cpu() ? cpu : cpu.to(device);
}
torch::Tensor dynamic_map_tensor(const torch::Device& device) {
  static const torch::Tensor cpu = as_tensor(dynamic_map_code());
  return device.is_cpu() ? cpu : cpu.to(device);
}

// Boundaries halfway between consecutive code values: bucketize() against them gives the index of
// the nearest value (a value exactly halfway goes to the lower one, as bitsandbytes' NF4 tree).
torch::Tensor midpoints(const torch::Tensor& code) { return (code.slice(0, 0, -1) + code.slice(0, 1)) / 2; }

// x [n] in [-1, 1] -> uint8 index of the nearest value of `code`.
torch::Tensor nearest_code(const torch::Tensor& x, const torch::Tensor& code) {
  return torch::bucketize(x, midpoints(code), /*out_int32=*/true).to(torch::kByte);
}

// 1 / absmax, and 0 where absmax is 0 (an all-zero block quantizes to code 0, not NaN).
torch::Tensor safe_reciprocal(const torch::Tensor& absmax) {
  return torch::where(absmax > 0, absmax.reciprocal(), torch::zeros_like(absmax));
}

// [n] -> [ceil(n / block), block], zero-padded.
torch::Tensor blocked(const torch::Tensor& flat, std::int64_t block) {
  const std::int64_t n = flat.numel(), padded = ceil_div(n, block) * block;
  if (padded == n) return flat.view({-1, block});
  return torch::constant_pad_nd(flat, {0, padded - n}).view({-1, block});
}

// Every byte's two NF4 values: [256, 2] fp32 (high nibble first), so dequantizing is one lookup
// per byte with 32-bit indices instead of unpacking nibbles into 64-bit ones.
torch::Tensor nf4_byte_table() {
  std::vector<float> table(512);
  const auto& code = nf4_code_book();
  for (int b = 0; b < 256; ++b) {
    table[2 * b] = code[b >> 4];
    table[2 * b + 1] = code[b & 15];
  }
  return torch::from_blob(table.data(), {256, 2}, torch::kFloat).clone();
}

}  // namespace

Quantization parse_quantization(const std::string& name, const std::string& what) {
  const int index = config::find_choice<Quantization>(name);
  if (index >= 0) return static_cast<Quantization>(index);
  FT_CHECK(false, what, ": \"", name, "\" is not a quantization; expected none, int8 or nf4");
  return Quantization::kNone;
}

std::string quantization_name(Quantization q) { return config::choice_name(q); }

const std::array<float, 16>& nf4_code_book() {
  // bitsandbytes' NF4 table (create_normal_map(offset=0.9677083), normalized to [-1, 1]); the
  // reference script derives it again from the normal quantiles.
  static const std::array<float, 16> code = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
      0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
      0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  return code;
}

const std::array<float, 256>& dynamic_map_code() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), in its fp32 arithmetic:
  // for exponent i = 0..6, the 2^i midpoints of linspace(0.1, 1, 2^i + 1) times ±10^(i-6);
  // then 0 and 1; sorted.
  static const std::array<float, 256> code = [] {
    std::vector<float> data;
    for (int i = 0; i < 7; ++i) {
      const auto boundaries = torch::linspace(0.1, 1.0, (1 << i) + 1, torch::kFloat);
      const auto means = (boundaries.slice(0, 0, -1) + boundaries.slice(0, 1)) / 2.0;
      const double magnitude = std::pow(10.0, -6 + i);
      for (const auto& part : {means * magnitude, means * -magnitude}) {
        const auto values = part.contiguous();
        data.insert(data.end(), values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
      }
    }
    data.push_back(0.0f);
    data.push_back(1.0f);
    FT_ASSERT(data.size() == 256, "dynamic map: ", data.size(), " values");
    std::sort(data.begin(), data.end());
    std::array<float, 256> out{};
    std::copy(data.begin(), data.end(), out.begin());
    return out;
  }();
  return code;
}

std::int64_t quantized_bytes(std::int64_t rows, std::int64_t cols, Quantization q) {
  const std::int64_t n = rows * cols;
  switch (q) {
    case Quantization::kInt8: return n + 4 * rows;
    case Quantization::kNf4: {
      const std::int64_t blocks = ceil_div(n, kNf4BlockSize);
      return blocks * kNf4BlockSize / 2 + blocks + 4 * ceil_div(blocks, kNf4AbsmaxBlockSize) + 4;
    }
    default: return 4 * n;  // not quantized: not asked for; fp32 for completeness
  }
}

QuantizedWeightImpl::QuantizedWeightImpl(std::int64_t rows, std::int64_t cols, Quantization q,
                                         const torch::Device& device)
    : q_(q), rows_(rows), cols_(cols) {
  FT_CHECK(q != Quantization::kNone, "QuantizedWeight needs int8 or nf4");
  allocate(device);
}

QuantizedWeightImpl::QuantizedWeightImpl(const torch::Tensor& weight, Quantization q)
    : QuantizedWeightImpl(weight.size(0), weight.dim() == 2 ? weight.size(1) : 0, q, weight.device()) {
  assign(weight);
}

void QuantizedWeightImpl::allocate(const torch::Device& device) {
  auto bytes = torch::TensorOptions().dtype(torch::kByte).device(device);
  auto floats = torch::TensorOptions().dtype(torch::kFloat).device(device);
  if (q_ == Quantization::kInt8) {
    codes = register_buffer("codes", torch::empty({rows_, cols_}, bytes.dtype(torch::kChar)));
    scale = register_buffer("scale", torch::empty({rows_}, floats));
    return;
  }
  const std::int64_t blocks = ceil_div(rows_ * cols_, kNf4BlockSize);
  codes = register_buffer("codes", torch::empty({blocks * kNf4BlockSize / 2}, bytes));
  absmax_codes = register_buffer("absmax_codes", torch::empty({blocks}, bytes));
  absmax_scale = register_buffer("absmax_scale", torch::empty({ceil_div(blocks, kNf4AbsmaxBlockSize)}, floats));
  absmax_offset = register_buffer("absmax_offset", torch::empty({1}, floats));
}

void QuantizedWeightImpl::assign(const torch::Tensor& weight) {
  FT_CHECK(weight.dim() == 2 && weight.size(0) == rows_ && weight.size(1) == cols_, "quantizing a weight of shape ",
           weight.sizes(), " into storage for [", rows_, ", ", cols_, "]");
  FT_CHECK(at::isFloatingType(weight.scalar_type()), "quantizing a ", weight.scalar_type(), " tensor");
  torch::NoGradGuard no_grad;
  const torch::Tensor w = weight.detach().to(codes.device(), torch::kFloat);
  if (q_ == Quantization::kInt8) {
    // Row absmax -> 127, round to nearest.
    const auto absmax = w.abs().amax(1);
    const auto q = (w * (safe_reciprocal(absmax) * 127.0).unsqueeze(1)).round_().clamp_(-127, 127);
    codes.copy_(q.to(torch::kChar));
    scale.copy_(absmax / 127.0);
    return;
  }
  const auto block = blocked(w.flatten(), kNf4BlockSize);               // [blocks, 64]
  const auto absmax = block.abs().amax(1);                              // [blocks]
  const auto normalized = block * safe_reciprocal(absmax).unsqueeze(1);  // as bitsandbytes: times 1/absmax
  const auto index = nearest_code(normalized, nf4_code_tensor(w.device())).view({-1, 2});
  codes.copy_(index.select(1, 0) * 16 + index.select(1, 1));            // high nibble first
  // Double quantization of the block absmaxes.
  const auto offset = absmax.mean();
  const auto centred = blocked(absmax - offset, kNf4AbsmaxBlockSize);   // [blocks / 256, 256]
  const auto absmax2 = centred.abs().amax(1);
  const auto index2 =
      nearest_code(centred * safe_reciprocal(absmax2).unsqueeze(1), dynamic_map_tensor(w.device())).flatten();
  absmax_codes.copy_(index2.slice(0, 0, absmax.numel()));
  absmax_scale.copy_(absmax2);
  absmax_offset.copy_(offset.reshape({1}));
}

torch::Tensor QuantizedWeightImpl::dequantize(c10::ScalarType dtype) const {
  if (!codes.device().is_cpu()) return dequantize_with_tensor_ops(dtype);
  // On the CPU one fused pass: each weight computed in fp32 and rounded once to `dtype`, as the
  // tensor-op path does, without its fp32 temporary (measured 4x faster at 7B shapes in bf16).
  torch::NoGradGuard no_grad;
  const std::int64_t n = rows_ * cols_;
  if (q_ == Quantization::kInt8) {
    torch::Tensor out = torch::empty({rows_, cols_}, torch::TensorOptions().dtype(dtype));
    const auto c = codes.contiguous();
    const auto s = scale.contiguous();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "dequantize_int8", [&] {
      const std::int8_t* in = c.data_ptr<std::int8_t>();
      const float* row_scale = s.data_ptr<float>();
      scalar_t* o = out.data_ptr<scalar_t>();
      const std::int64_t cols = cols_;
      at::parallel_for(0, rows_, 16, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) {
          const float f = row_scale[r];
          for (std::int64_t j = 0; j < cols; ++j)
            o[r * cols + j] = static_cast<scalar_t>(static_cast<float>(in[r * cols + j]) * f);
        }
      });
    });
    return out;
  }
  const std::int64_t blocks = absmax_codes.numel();
  const auto absmax = block_absmax().contiguous();
  const auto c = codes.contiguous();
  torch::Tensor out = torch::empty({blocks * kNf4BlockSize}, torch::TensorOptions().dtype(dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "dequantize_nf4", [&] {
    const std::uint8_t* in = c.data_ptr<std::uint8_t>();
    const float* a = absmax.data_ptr<float>();
    const float* code = nf4_code_book().data();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, blocks, 256, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t b = begin; b < end; ++b) {
        const float scale = a[b];
        const std::uint8_t* bytes = in + b * (kNf4BlockSize / 2);
        scalar_t* block = o + b * kNf4BlockSize;
        for (std::int64_t j = 0; j < kNf4BlockSize / 2; ++j) {
          block[2 * j] = static_cast<scalar_t>(code[bytes[j] >> 4] * scale);
          block[2 * j + 1] = static_cast<scalar_t>(code[bytes[j] & 15] * scale);
        }
      }
    });
  });
  return out.slice(0, 0, n).view({rows_, cols_});
}

torch::Tensor QuantizedWeightImpl::block_absmax() const {
  const std::int64_t blocks = absmax_codes.numel();
  const auto scale2 = absmax_scale.repeat_interleave(kNf4AbsmaxBlockSize).slice(0, 0, blocks);
  return dynamic_map_tensor(codes.device()).index_select(0, absmax_codes.to(torch::kInt)) * scale2 +
         absmax_offset;
}

torch::Tensor QuantizedWeightImpl::dequantize_with_tensor_ops(c10::ScalarType dtype) const {
  torch::NoGradGuard no_grad;
  if (q_ == Quantization::kInt8) return codes.to(torch::kFloat).mul_(scale.unsqueeze(1)).to(dtype);
  static const torch::Tensor cpu_table = nf4_byte_table();
  const torch::Tensor table = codes.device().is_cpu() ? cpu_table : cpu_table.to(codes.device());
  const std::int64_t blocks = absmax_codes.numel();
  // Scaled in place: at most the fp32 values and the result in `dtype` exist at once (6 bytes per
  // weight in bf16), which for a 34B model's largest matrix is still about 1 GB.
  auto values = table.index_select(0, codes.to(torch::kInt)).view({blocks, kNf4BlockSize});
  values.mul_(block_absmax().unsqueeze(1));
  return values.flatten().slice(0, 0, rows_ * cols_).view({rows_, cols_}).to(dtype);
}

std::int64_t QuantizedWeightImpl::bytes() const {
  std::int64_t n = 0;
  for (const auto& t : {codes, scale, absmax_codes, absmax_scale, absmax_offset})
    if (t.defined()) n += t.numel() * static_cast<std::int64_t>(t.element_size());
  return n;
}

// Codes and scales keep their dtypes: only the device may change.
void QuantizedWeightImpl::to(torch::Device device, torch::Dtype, bool non_blocking) { to(device, non_blocking); }
void QuantizedWeightImpl::to(torch::Dtype, bool) {}
void QuantizedWeightImpl::to(torch::Device device, bool non_blocking) { Module::to(device, non_blocking); }

RoundTripError round_trip_error(const torch::Tensor& weight, const QuantizedWeightImpl& quantized) {
  torch::NoGradGuard no_grad;
  const auto w = weight.detach().to(quantized.device(), torch::kFloat);
  const auto diff = quantized.dequantize(torch::kFloat) - w;
  RoundTripError e;
  const double rms = w.square().mean().sqrt().item<double>();
  const double diff_rms = diff.square().mean().sqrt().item<double>();
  e.relative_rms = rms > 0 ? diff_rms / rms : diff_rms;
  e.max_abs = diff.abs().max().item<double>();
  return e;
}

}  // namespace ft::model
