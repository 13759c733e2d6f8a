#include "bench/training_flops.h"

namespace ft::bench {

std::int64_t matmul_parameters(const io::LlamaConfig& m) {
  // All parameters but the norms' weights and, untied, the embedding table (a lookup): the tied
  // table is the output head too.
  const std::int64_t norms = (2 * m.num_hidden_layers + 1) * m.hidden_size;
  const std::int64_t lookup_only = m.tie_word_embeddings ? 0 : m.vocab_size * m.hidden_size;
  return m.num_parameters() - norms - lookup_only;
}

double training_flops_per_token(const io::LlamaConfig& m, std::int64_t seq_len, std::int64_t lora_parameters) {
  const double n = static_cast<double>(matmul_parameters(m));
  const double attention = 12.0 * static_cast<double>(m.num_hidden_layers) * static_cast<double>(m.num_attention_heads) *
                           static_cast<double>(m.head_dim) * static_cast<double>(seq_len);
  if (lora_parameters == 0) return 6.0 * n + attention;
  return 4.0 * n + 6.0 * static_cast<double>(lora_parameters) + attention;
}

}  // namespace ft::bench
