#include "bench/training_flops.h"

namespace ft::bench {

std::int64_t matmul_parameters(const io::LlamaConfig& m) {
  const std::int64_t h = m.hidden_size, q = m.num_attention_heads * m.head_dim, kv = m.num_key_value_heads * m.head_dim;
  const std::int64_t layer = q * h + 2 * kv * h + h * q + 3 * h * m.intermediate_size;
  return m.num_hidden_layers * layer + m.vocab_size * h;
}

double training_flops_per_token(const io::LlamaConfig& m, std::int64_t seq_len, std::int64_t lora_parameters) {
  const double n = static_cast<double>(matmul_parameters(m));
  const double attention = 12.0 * static_cast<double>(m.num_hidden_layers) * static_cast<double>(m.num_attention_heads) *
                           static_cast<double>(m.head_dim) * static_cast<double>(seq_len);
  if (lora_parameters == 0) return 6.0 * n + attention;
  return 4.0 * n + 6.0 * static_cast<double>(lora_parameters) + attention;
}

}  // namespace ft::bench
