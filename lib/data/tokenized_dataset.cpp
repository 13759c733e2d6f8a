#include "data/tokenized_dataset.h"

#include <algorithm>
#include <thread>

#include "data/dataset_file.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/hash.h"

namespace ft::data {

SampleSettings SampleSettings::from_config(const config::DataConfig& data, const Tokenizer* tokenizer) {
  SampleSettings s;
  s.format = data.format;
  s.tmpl = resolve_template(data.template_spec, s.format, tokenizer);
  s.max_seq_len = data.max_seq_len;
  s.drop_too_long = data.too_long == config::TooLong::kDrop;
  s.train_on_prompt = data.train_on_prompt;
  s.skip_bad_records = data.on_bad_record == config::OnBadRecord::kSkip;
  s.max_bad_records = data.max_bad_records;
  return s;
}

Json SampleSettings::to_json() const {
  return Json{{"format", record_format_name(format)}, {"template", tmpl.to_json()},
              {"max_seq_len", max_seq_len},            {"too_long", drop_too_long ? "drop" : "truncate"},
              {"train_on_prompt", train_on_prompt},    {"on_bad_record", skip_bad_records ? "skip" : "error"},
              {"max_bad_records", max_bad_records}};
}

std::uint64_t SampleSettings::hash() const {
  const std::string text = to_json().dump();
  return fnv1a64(text.data(), text.size());
}

Json DataStats::to_json() const {
  return Json{{"records", records},       {"bad_records", bad_records},
              {"truncated", truncated},   {"dropped_too_long", dropped_too_long},
              {"dropped_no_target", dropped_no_target}, {"samples", samples},
              {"tokens", tokens},         {"target_tokens", target_tokens}};
}

std::string DataStats::summary() const {
  return str(samples, " samples (", tokens, " tokens, ", target_tokens, " trained on) from ", records, " records; ",
             truncated, " truncated, ", dropped_too_long, " dropped as too long, ", dropped_no_target,
             " dropped with no target token, ", bad_records, " bad records skipped");
}

namespace {

// Special tokens inside one template-text range: a '<' followed within 64 bytes by a '>' whose
// span the tokenizer knows as a special token.
struct SpecialAt {
  std::size_t begin, end;
  std::int64_t id;
};

std::vector<SpecialAt> find_specials(const Segment& s, const Tokenizer& tokenizer) {
  std::vector<SpecialAt> found;
  for (const auto& [range_begin, range_end] : s.template_text) {
    for (std::size_t i = range_begin; i < range_end; ++i) {
      if (s.text[i] != '<') continue;
      const std::size_t close = s.text.find('>', i + 1);
      if (close == std::string::npos || close >= range_end || close - i > 64) continue;
      const std::int64_t id = tokenizer.special_token_id(s.text.substr(i, close - i + 1));
      if (id < 0) continue;
      found.push_back({i, close + 1, id});
      i = close;
    }
  }
  return found;
}

}  // namespace

void tokenize_segments(const std::vector<Segment>& segments, const Tokenizer& tokenizer, bool train_on_prompt,
                       std::vector<std::int32_t>& ids, std::vector<std::uint8_t>& targets) {
  ids.clear();
  targets.clear();
  for (const Segment& s : segments) {
    const std::uint8_t target = s.target || train_on_prompt ? 1 : 0;
    auto append = [&](const std::vector<std::int64_t>& piece) {
      for (std::int64_t id : piece) {
        ids.push_back(static_cast<std::int32_t>(id));
        targets.push_back(target);
      }
    };
    const std::vector<SpecialAt> specials = find_specials(s, tokenizer);
    if (specials.empty()) {
      append(tokenizer.encode(s.text, s.bos, s.eos));
      continue;
    }
    if (s.bos && tokenizer.bos_id() >= 0) append({tokenizer.bos_id()});
    std::size_t at = 0;
    for (const SpecialAt& special : specials) {
      if (special.begin > at) append(tokenizer.encode(s.text.substr(at, special.begin - at), false, false));
      append({special.id});
      at = special.end;
    }
    if (at < s.text.size()) append(tokenizer.encode(s.text.substr(at), false, false));
    if (s.eos && tokenizer.eos_id() >= 0) append({tokenizer.eos_id()});
  }
  if (!targets.empty()) targets[0] = 0;
}

void validate_template(const PromptTemplate& tmpl, RecordFormat format, const Tokenizer* tokenizer) {
  Record probe;
  probe.location = "template check";
  switch (format) {
    case RecordFormat::kAlpaca: probe.fields = {{"instruction", "i"}, {"input", "x"}, {"output", "o"}}; break;
    case RecordFormat::kPromptCompletion: probe.fields = {{"prompt", "p"}, {"completion", "c"}}; break;
    case RecordFormat::kText: probe.fields = {{"text", "t"}}; break;
    case RecordFormat::kChat:
    case RecordFormat::kShareGpt:
      probe.messages = {{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "u"}, {"assistant", "a"}};
      break;
  }
  render_record(tmpl, probe, format);
  if (format == RecordFormat::kAlpaca) {  // also the branch without input
    probe.fields["input"] = "";
    render_record(tmpl, probe, format);
  }
  if (tokenizer == nullptr) return;
  const std::string which = tmpl.name == "custom" ? "data.template" : "data.template \"" + tmpl.name + "\"";
  FT_CHECK(tmpl.stop.empty() || tokenizer->special_token_id(tmpl.stop) >= 0, which, ": its turns end with ", tmpl.stop,
           ", which is not a special token of ", tokenizer->path(),
           " (this template is for another model family; \"auto\" picks the tokenizer's own chat format)");
  const std::pair<const char*, const std::string*> fields[] = {
      {"prompt", &tmpl.prompt}, {"prompt_with_input", &tmpl.prompt_with_input}, {"response", &tmpl.response},
      {"user", &tmpl.user},     {"system_user", &tmpl.system_user},             {"assistant", &tmpl.assistant}};
  for (const auto& [key, text] : fields) {
    for (std::size_t i = text->find("<|"); i != std::string::npos; i = text->find("<|", i + 2)) {
      const std::size_t close = text->find("|>", i + 2);
      if (close == std::string::npos) break;
      const std::string token = text->substr(i, close + 2 - i);
      FT_CHECK(tokenizer->special_token_id(token) >= 0, which, ".", key, ": ", token, " is not a special token of ",
               tokenizer->path(), " (it would be trained on as plain text)");
    }
  }
}

std::vector<std::int64_t> encode_prompt(const PromptTemplate& tmpl, const std::string& prompt, const Tokenizer& tokenizer) {
  if (tmpl.name == "none") return tokenizer.encode(prompt, /*add_bos=*/true);
  Record record;
  record.location = "--prompt";
  RecordFormat format = RecordFormat::kAlpaca;
  if (tmpl.name == "alpaca") {
    record.fields = {{"instruction", prompt}, {"input", ""}, {"output", "-"}};
  } else {
    format = RecordFormat::kChat;
    record.messages = {{"user", prompt}, {"assistant", "-"}};
  }
  std::vector<Segment> segments = render_record(tmpl, record, format);
  segments.resize(1);  // the prompt part
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> targets;
  tokenize_segments(segments, tokenizer, false, ids, targets);
  return std::vector<std::int64_t>(ids.begin(), ids.end());
}

namespace {

struct BadRecord {
  std::size_t index;
  std::string message;
};

// Per-thread output for a contiguous range of records; merged in record order.
struct Chunk {
  TokenizedDataset data;
  std::vector<BadRecord> bad;
};

void process_range(const std::vector<RawRecord>& records, std::size_t begin, std::size_t end,
                   const SampleSettings& settings, const Tokenizer& tokenizer, Chunk& out) {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> targets;
  DataStats& st = out.data.stats;
  for (std::size_t i = begin; i < end; ++i) {
    try {
      Record record = parse_record(records[i].text, settings.format, records[i].location);
      tokenize_segments(render_record(settings.tmpl, record, settings.format), tokenizer, settings.train_on_prompt,
                        ids, targets);
    } catch (const Error& e) {
      out.bad.push_back({i, e.what()});
      continue;
    }
    if (settings.drop_too_long && static_cast<std::int64_t>(ids.size()) > settings.max_seq_len) {
      ++st.dropped_too_long;
      continue;
    }
    const bool truncate = static_cast<std::int64_t>(ids.size()) > settings.max_seq_len;
    if (truncate) {
      ids.resize(settings.max_seq_len);
      targets.resize(settings.max_seq_len);
    }
    const auto n_targets = std::count(targets.begin(), targets.end(), 1);
    if (n_targets == 0) {
      ++st.dropped_no_target;
      continue;
    }
    if (truncate) ++st.truncated;
    out.data.tokens.insert(out.data.tokens.end(), ids.begin(), ids.end());
    out.data.targets.insert(out.data.targets.end(), targets.begin(), targets.end());
    out.data.offsets.push_back(out.data.tokens.size());
    ++st.samples;
    st.tokens += ids.size();
    st.target_tokens += n_targets;
  }
}

}  // namespace

TokenizedDataset tokenize_dataset(const std::string& path, const SampleSettings& settings, const Tokenizer& tokenizer,
                                  int threads) {
  validate_template(settings.tmpl, settings.format, &tokenizer);
  FT_CHECK(file_exists(path), path, ": dataset not found");
  const std::string contents = read_file(path);
  const std::vector<RawRecord> records = split_records(contents, path);

  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<std::size_t>(threads, std::max<std::size_t>(1, records.size() / 64)));
  std::vector<Chunk> chunks(threads);
  std::vector<std::thread> workers;
  const std::size_t per = (records.size() + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const std::size_t begin = std::min(records.size(), t * per), end = std::min(records.size(), begin + per);
    workers.emplace_back([&, t, begin, end] { process_range(records, begin, end, settings, tokenizer, chunks[t]); });
  }
  for (auto& w : workers) w.join();

  TokenizedDataset out;
  std::vector<BadRecord> bad;
  for (Chunk& c : chunks) {
    const std::uint64_t base = out.tokens.size();
    out.tokens.insert(out.tokens.end(), c.data.tokens.begin(), c.data.tokens.end());
    out.targets.insert(out.targets.end(), c.data.targets.begin(), c.data.targets.end());
    for (std::size_t i = 1; i < c.data.offsets.size(); ++i) out.offsets.push_back(base + c.data.offsets[i]);
    const DataStats& s = c.data.stats;
    out.stats.truncated += s.truncated;
    out.stats.dropped_too_long += s.dropped_too_long;
    out.stats.dropped_no_target += s.dropped_no_target;
    out.stats.samples += s.samples;
    out.stats.tokens += s.tokens;
    out.stats.target_tokens += s.target_tokens;
    bad.insert(bad.end(), c.bad.begin(), c.bad.end());
  }
  out.stats.records = static_cast<std::int64_t>(records.size());
  out.stats.bad_records = static_cast<std::int64_t>(bad.size());

  const bool too_many = static_cast<std::int64_t>(bad.size()) > settings.max_bad_records;
  if (!bad.empty() && (!settings.skip_bad_records || too_many)) {
    std::string message =
        settings.skip_bad_records
            ? str(path, ": ", bad.size(), " bad records, more than data.max_bad_records = ", settings.max_bad_records,
                  ":")
            : str(path, ": ", bad.size(), bad.size() == 1 ? " bad record" : " bad records",
                  " (set data.on_bad_record to \"skip\" to skip and count them):");
    for (std::size_t i = 0; i < bad.size() && i < 5; ++i) message += "\n  " + bad[i].message;
    if (bad.size() > 5) message += str("\n  ... and ", bad.size() - 5, " more");
    throw Error(message);
  }
  FT_CHECK(out.stats.samples > 0, path, ": no usable samples (", out.stats.summary(), ")");
  return out;
}

}  // namespace ft::data
