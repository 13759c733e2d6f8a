// Lookups in the generated Unicode tables (binary search over ranges), UTF-8 helpers and NFC as
// UAX #15 specifies it (the algorithm of its sample code), checked against `tokenizers` by
// tests/interop/test_tokenizers.py on every Unicode general category.
#include "data/unicode_tables.h"

#include <algorithm>
#include <vector>

namespace ft::data::unicode {
namespace {

struct CodeRange {
  char32_t first, last;
};
struct CombiningClassRange {
  char32_t first, last;
  int ccc;
};
struct Decomposition {
  char32_t c, first, second;
};
struct Composition {
  char32_t first, second, composite;
};

#include "data/unicode_tables.inc"

template <std::size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t c) {
  const CodeRange* end = table + N;
  const CodeRange* it = std::upper_bound(table, end, c, [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != table && c <= (it - 1)->last;
}

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(char32_t c, std::vector<char32_t>* out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecomposition + std::size(kDecomposition);
  const Decomposition* it = std::lower_bound(kDecomposition, end, c, [](const Decomposition& d, char32_t v) { return d.c < v; });
  if (it == end || it->c != c) {
    out->push_back(c);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kComposition + std::size(kComposition);
  const Composition* it = std::lower_bound(kComposition, end, std::make_pair(a, b), [](const Composition& c, const std::pair<char32_t, char32_t>& v) {
    return c.first < v.first || (c.first == v.first && c.second < v.second);
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

bool is_letter_slow(char32_t c) { return in_ranges(kLetter, c); }
bool is_number_slow(char32_t c) { return in_ranges(kNumber, c); }
bool is_white_space_slow(char32_t c) { return in_ranges(kWhiteSpace, c); }

int combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const CombiningClassRange* end = kCombiningClass + std::size(kCombiningClass);
  const CombiningClassRange* it = std::upper_bound(kCombiningClass, end, c,
                                                   [](char32_t v, const CombiningClassRange& r) { return v < r.first; });
  return it != kCombiningClass && c <= (it - 1)->last ? (it - 1)->ccc : 0;
}

std::size_t valid_utf8_length(const unsigned char* p, std::size_t len) {
  const unsigned c0 = p[0];
  auto trail = [](unsigned c) { return (c & 0xC0) == 0x80; };
  if (c0 < 0x80) return 1;
  if (len >= 2 && c0 >= 0xC2 && c0 <= 0xDF) return trail(p[1]) ? 2 : 0;
  if (len >= 3 && (c0 & 0xF0) == 0xE0) {
    const unsigned lo = c0 == 0xE0 ? 0xA0 : 0x80, hi = c0 == 0xED ? 0x9F : 0xBF;
    return p[1] >= lo && p[1] <= hi && trail(p[2]) ? 3 : 0;
  }
  if (len >= 4 && c0 >= 0xF0 && c0 <= 0xF4) {
    const unsigned lo = c0 == 0xF0 ? 0x90 : 0x80, hi = c0 == 0xF4 ? 0x8F : 0xBF;
    return p[1] >= lo && p[1] <= hi && trail(p[2]) && trail(p[3]) ? 4 : 0;
  }
  return 0;
}

char32_t decode_utf8(const unsigned char* p, std::size_t length) {
  switch (length) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default: return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
}

void append_utf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// The length of the maximal prefix of a well-formed sequence at p (at least 1): the bytes one
// U+FFFD stands for.
static std::size_t maximal_subpart(const unsigned char* p, std::size_t len) {
  const unsigned c0 = p[0];
  std::size_t need;
  unsigned lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) need = 2;
  else if (c0 >= 0xE0 && c0 <= 0xEF) { need = 3; if (c0 == 0xE0) lo = 0xA0; if (c0 == 0xED) hi = 0x9F; }
  else if (c0 >= 0xF0 && c0 <= 0xF4) { need = 4; if (c0 == 0xF0) lo = 0x90; if (c0 == 0xF4) hi = 0x8F; }
  else return 1;
  std::size_t n = 1;
  if (n < len && p[n] >= lo && p[n] <= hi) ++n; else return n;
  while (n < need && n < len && (p[n] & 0xC0) == 0x80) ++n;
  return n;
}

bool utf8_lossy(std::string_view text, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n && (p[i] < 0x80 || valid_utf8_length(p + i, n - i) > 0)) i += p[i] < 0x80 ? 1 : valid_utf8_length(p + i, n - i);
  if (i == n) return false;
  out->assign(text.data(), i);
  while (i < n) {
    const std::size_t len = valid_utf8_length(p + i, n - i);
    if (len > 0) {
      out->append(text.data() + i, len);
      i += len;
    } else {
      out->append("\xEF\xBF\xBD");
      i += maximal_subpart(p + i, n - i);
    }
  }
  return true;
}

bool nfc(std::string_view text, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  bool quick = true;
  std::vector<char32_t> cps;
  cps.reserve(n);
  for (std::size_t i = 0; i < n;) {
    if (p[i] < 0x80) {
      cps.push_back(p[i++]);
      continue;
    }
    const std::size_t len = std::max<std::size_t>(1, valid_utf8_length(p + i, n - i));
    const char32_t c = decode_utf8(p + i, len);
    if (quick && (combining_class(c) != 0 || in_ranges(kNfcQuickCheckNotYes, c))) quick = false;
    cps.push_back(c);
    i += len;
  }
  if (quick) return false;
  std::vector<char32_t> d;
  d.reserve(cps.size() + 8);
  for (char32_t c : cps) decompose(c, &d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (std::size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) { ++i; continue; }
    std::size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j, [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Composition (UAX #15's sample algorithm).
  if (!d.empty()) {
    std::size_t starter = 0, comp = 1;
    int last_class = combining_class(d[0]);
    if (last_class != 0) last_class = 256;
    for (std::size_t i = 1; i < d.size(); ++i) {
      const char32_t c = d[i];
      const int cc = combining_class(c);
      const char32_t composite = compose(d[starter], c);
      if (composite != 0 && (last_class < cc || last_class == 0)) {
        d[starter] = composite;
        continue;
      }
      if (cc == 0) starter = comp;
      last_class = cc;
      d[comp++] = c;
    }
    d.resize(comp);
  }
  out->clear();
  out->reserve(n + 8);
  for (char32_t c : d) append_utf8(c, out);
  return true;
}

}  // namespace ft::data::unicode
