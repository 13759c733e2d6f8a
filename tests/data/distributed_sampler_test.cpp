// ft::data::DistributedSampler: every list PyTorch 1.13's DistributedSampler produced in
// sampler_reference.json (tests/reference/make_sampler_reference.py), coverage across ranks,
// reshuffling per epoch, the resumable stream, save/restore on the same and on other world
// sizes (the guarantee documented in distributed_sampler.h), and the pinned error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/distributed_sampler.h"
#include "test_support.h"
#include "util/json.h"

namespace ft::data {
namespace {

using Ids = std::vector<std::int64_t>;

const Json& reference() {
  static const Json j = parse_json_file(test::data_path("sampler_reference.json"));
  return j;
}

std::string describe(std::int64_t n, std::int64_t w, std::int64_t r, bool shuffle, bool drop_last,
                     std::int64_t seed, std::int64_t epoch) {
  return str("n=", n, " world_size=", w, " rank=", r, " shuffle=", shuffle,
             " drop_last=", drop_last, " seed=", seed, " epoch=", epoch);
}

// The endless sequence S of an epoch (header): S[p] = perm[p % n].
std::int64_t s_at(const Ids& perm, std::int64_t p) {
  return perm[p % static_cast<std::int64_t>(perm.size())];
}
Ids epoch_perm(std::int64_t n, bool shuffle, std::int64_t seed, std::int64_t epoch) {
  DistributedSampler one(n, 1, 0, shuffle, seed, false);
  one.set_epoch(epoch);
  return one.epoch_indices();  // W = 1 without drop_last: exactly perm
}

TEST(DistributedSamplerTest, EqualsPyTorchOnEveryReferenceCase) {
  const Json& cases = reference().at("cases");
  ASSERT_GT(cases.size(), 1000u);
  std::int64_t lists = 0;
  for (const Json& c : cases) {
    const auto n = c.at("n").get<std::int64_t>();
    const auto w = c.at("world_size").get<std::int64_t>();
    const auto shuffle = c.at("shuffle").get<bool>();
    const auto drop_last = c.at("drop_last").get<bool>();
    const auto seed = c.at("seed").get<std::int64_t>();
    const auto epoch = c.at("epoch").get<std::int64_t>();
    ASSERT_EQ(c.at("ranks").size(), static_cast<std::size_t>(w));
    for (std::int64_t r = 0; r < w; ++r) {
      SCOPED_TRACE(describe(n, w, r, shuffle, drop_last, seed, epoch));
      DistributedSampler s(n, w, r, shuffle, seed, drop_last);
      s.set_epoch(epoch);
      const Ids expected = c.at("ranks")[r].get<Ids>();
      EXPECT_EQ(s.num_samples(), c.at("num_samples").get<std::int64_t>());
      EXPECT_EQ(s.total_size(), c.at("total_size").get<std::int64_t>());
      EXPECT_EQ(s.epoch_indices(), expected);
      // The stream, one at a time, yields the same list and then stops.
      Ids streamed;
      for (Ids one = s.next_indices(1); !one.empty(); one = s.next_indices(1)) {
        streamed.push_back(one[0]);
      }
      EXPECT_EQ(streamed, expected);
      ++lists;
    }
  }
  EXPECT_GT(lists, 4000);
}

TEST(DistributedSamplerTest, EqualsPyTorchOnLargeDatasets) {
  for (const Json& c : reference().at("large")) {
    const auto n = c.at("n").get<std::int64_t>();
    const auto w = c.at("world_size").get<std::int64_t>();
    const auto drop_last = c.at("drop_last").get<bool>();
    const auto seed = c.at("seed").get<std::int64_t>();
    const auto epoch = c.at("epoch").get<std::int64_t>();
    for (std::int64_t r = 0; r < w; ++r) {
      SCOPED_TRACE(describe(n, w, r, true, drop_last, seed, epoch));
      DistributedSampler s(n, w, r, true, seed, drop_last);
      s.set_epoch(epoch);
      const Ids got = s.epoch_indices();
      ASSERT_EQ(static_cast<std::int64_t>(got.size()), c.at("num_samples").get<std::int64_t>());
      const Ids head = c.at("heads")[r].get<Ids>();
      EXPECT_EQ(Ids(got.begin(), got.begin() + head.size()), head);
      std::int64_t digest = 0;  // sum((j + 1) * index_j), < 2^63 for these sizes
      for (std::size_t j = 0; j < got.size(); ++j) {
        digest += static_cast<std::int64_t>(j + 1) * got[j];
      }
      EXPECT_EQ(digest, c.at("digests")[r].get<std::int64_t>());
    }
  }
}

TEST(DistributedSamplerTest, SetEpochReshufflesDeterministically) {
  DistributedSampler s(100, 4, 1, true, 7, false);
  const Ids e0 = s.epoch_indices();
  s.set_epoch(1);
  const Ids e1 = s.epoch_indices();
  EXPECT_NE(e0, e1);
  s.set_epoch(0);
  EXPECT_EQ(s.epoch_indices(), e0);
  // PyTorch seeds with seed + epoch: (seed 7, epoch 2) is (seed 9, epoch 0).
  s.set_epoch(2);
  DistributedSampler t(100, 4, 1, true, 9, false);
  EXPECT_EQ(s.epoch_indices(), t.epoch_indices());
  // Another seed, another order; without shuffle every epoch is arange.
  EXPECT_NE(DistributedSampler(100, 4, 1, true, 8, false).epoch_indices(), e0);
  DistributedSampler plain(10, 4, 1, false, 7, false);
  const Ids p0 = plain.epoch_indices();
  EXPECT_EQ(p0, (Ids{1, 5, 9}));
  plain.set_epoch(5);
  EXPECT_EQ(plain.epoch_indices(), p0);
}

// llm.c's check: build every rank side by side, every sample is covered once per epoch (plus
// PyTorch's head repeats without drop_last, minus fewer than W tail samples with it).
TEST(DistributedSamplerTest, RanksTogetherCoverEveryIndexOncePerEpoch) {
  for (std::int64_t n = 1; n <= 41; ++n) {
    for (std::int64_t w = 1; w <= 8; ++w) {
      for (bool drop_last : {false, true}) {
        if (drop_last && n < w) continue;
        for (std::int64_t epoch : {0, 3}) {
          SCOPED_TRACE(describe(n, w, -1, true, drop_last, 11, epoch));
          std::vector<std::int64_t> count(n, 0);
          std::int64_t total = 0;
          std::int64_t per_rank = -1;
          for (std::int64_t r = 0; r < w; ++r) {
            DistributedSampler s(n, w, r, true, 11, drop_last);
            s.set_epoch(epoch);
            const Ids ids = s.epoch_indices();
            if (per_rank < 0) per_rank = static_cast<std::int64_t>(ids.size());
            EXPECT_EQ(static_cast<std::int64_t>(ids.size()), per_rank);  // equal on every rank
            for (std::int64_t i : ids) {
              ASSERT_GE(i, 0);
              ASSERT_LT(i, n);
              ++count[i];
              ++total;
            }
          }
          EXPECT_EQ(total, per_rank * w);
          const Ids perm = epoch_perm(n, true, 11, epoch);
          if (!drop_last) {
            EXPECT_EQ(total, (n + w - 1) / w * w);
            // Each index perm[i] is read once plus once per repeat of position i in the
            // padding, which repeats the head: positions n.. map to perm[0], perm[1], ...
            for (std::int64_t i = 0; i < n; ++i) {
              std::int64_t expected = 0;
              for (std::int64_t p = 0; p < total; ++p) expected += (p % n == i);
              EXPECT_EQ(count[perm[i]], expected) << "index " << perm[i];
              EXPECT_GE(count[perm[i]], 1);
            }
          } else {
            EXPECT_EQ(total, n / w * w);
            EXPECT_LT(n - total, w);
            // Only the tail of the permutation is dropped, each kept index read exactly once.
            for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(count[perm[i]], i < total ? 1 : 0);
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerTest, StreamYieldsTheEpochInChunksAndNeverWraps) {
  DistributedSampler s(23, 3, 2, true, 5, false);  // 8 per rank, one head repeat
  const Ids all = s.epoch_indices();
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(s.remaining(), 8);
  EXPECT_TRUE(s.next_indices(0).empty());
  const Ids a = s.next_indices(3);
  EXPECT_EQ(s.state().consumed, 9);  // 3 per rank on 3 ranks: global samples
  EXPECT_EQ(s.remaining(), 5);
  const Ids b = s.next_indices(3);
  const Ids c = s.next_indices(3);  // only 2 left: fewer, not wrapped into the next epoch
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(s.remaining(), 0);
  EXPECT_EQ(s.state().consumed, s.total_size());
  EXPECT_TRUE(s.next_indices(5).empty());
  EXPECT_EQ(s.state().consumed, s.total_size());
  Ids joined = a;
  joined.insert(joined.end(), b.begin(), b.end());
  joined.insert(joined.end(), c.begin(), c.end());
  EXPECT_EQ(joined, all);
  // The next epoch starts from the beginning with a new order.
  s.set_epoch(1);
  EXPECT_EQ(s.state().consumed, 0);
  EXPECT_EQ(s.remaining(), 8);
  EXPECT_EQ(s.next_indices(100), s.epoch_indices());
}

TEST(DistributedSamplerTest, SaveAndRestoreMidEpochContinuesExactly) {
  for (std::int64_t w : {1, 2, 3, 8}) {
    for (bool drop_last : {false, true}) {
      for (std::int64_t r = 0; r < w; ++r) {
        SCOPED_TRACE(describe(101, w, r, true, drop_last, 3, 2));
        DistributedSampler s(101, w, r, true, 3, drop_last);
        s.set_epoch(2);
        const Ids all = s.epoch_indices();
        const std::int64_t steps_before = s.num_samples() / 3;  // stop mid-epoch
        for (std::int64_t i = 0; i < steps_before; ++i) s.next_indices(1);
        const SamplerState saved = s.state();
        EXPECT_EQ(saved.epoch, 2);
        EXPECT_EQ(saved.consumed, steps_before * w);

        DistributedSampler resumed(101, w, r, true, 3, drop_last);  // a new process: epoch 0
        resumed.restore(saved);
        EXPECT_EQ(resumed.state().epoch, 2);
        EXPECT_EQ(resumed.remaining(), s.remaining());
        const Ids rest = resumed.next_indices(1000);
        EXPECT_EQ(rest, Ids(all.begin() + steps_before, all.end()));
        EXPECT_EQ(rest, s.next_indices(1000));  // and the same as the sampler that went on
      }
    }
  }
}

// Runs `world` ranks in lock step with `per_step` indices per rank until every rank runs out
// (all must run out together) or `max_steps` steps; returns the indices in global order:
// within a step, sample j of rank 0, 1, ..., W-1, then j + 1 (positions c + r + W*j).
Ids run_ranks(std::vector<DistributedSampler>& ranks, std::int64_t per_step,
              std::int64_t max_steps) {
  const std::int64_t w = static_cast<std::int64_t>(ranks.size());
  Ids global;
  for (std::int64_t step = 0; step < max_steps; ++step) {
    std::vector<Ids> got;
    for (auto& s : ranks) got.push_back(s.next_indices(per_step));
    for (std::int64_t r = 1; r < w; ++r) EXPECT_EQ(got[r].size(), got[0].size()) << "rank " << r;
    if (got[0].empty()) break;
    for (std::size_t j = 0; j < got[0].size(); ++j) {
      for (std::int64_t r = 0; r < w; ++r) global.push_back(got[r][j]);
    }
    for (auto& s : ranks) EXPECT_EQ(s.state().consumed, ranks[0].state().consumed);
  }
  return global;
}

std::vector<DistributedSampler> make_ranks(std::int64_t n, std::int64_t w, bool drop_last) {
  std::vector<DistributedSampler> ranks;
  for (std::int64_t r = 0; r < w; ++r) ranks.emplace_back(n, w, r, true, 21, drop_last);
  return ranks;
}

// The guarantee in distributed_sampler.h: a state saved on W ranks, restored on W' ranks, reads
// exactly S[c, end'(c)) of the same global sequence S, in order, every rank the same number.
TEST(DistributedSamplerTest, ResumingOnAnotherWorldSizeReadsTheRemainingGlobalSamples) {
  for (std::int64_t n : {1, 5, 17, 24, 100}) {
    for (bool drop_last : {false, true}) {
      for (std::int64_t w = 1; w <= 8; ++w) {
        if (drop_last && n < w) continue;
        for (std::int64_t w2 = 1; w2 <= 8; ++w2) {
          if (drop_last && n < w2) continue;
          for (std::int64_t steps : {0, 1, 3, 1000}) {  // 1000: the epoch already ended
            SCOPED_TRACE(str("n=", n, " drop_last=", drop_last, " W=", w, " W'=", w2,
                             " steps before=", steps));
            std::vector<DistributedSampler> before = make_ranks(n, w, drop_last);
            for (auto& s : before) s.set_epoch(4);
            Ids read = run_ranks(before, 2, steps);
            const SamplerState saved = before[0].state();
            const std::int64_t c = saved.consumed;
            EXPECT_EQ(static_cast<std::int64_t>(read.size()), c);

            std::vector<DistributedSampler> after = make_ranks(n, w2, drop_last);
            for (auto& s : after) s.restore(saved);
            const std::int64_t remaining = after[0].remaining();
            const Ids rest = run_ranks(after, 3, 1 << 20);
            EXPECT_EQ(static_cast<std::int64_t>(rest.size()), remaining * w2);
            read.insert(read.end(), rest.begin(), rest.end());

            // Global order: exactly S[0, end) with end = end'(c) from the header.
            std::int64_t end = c;
            if (c < n) {
              end = drop_last ? c + (n - c) / w2 * w2 : c + (n - c + w2 - 1) / w2 * w2;
            }
            const Ids perm = epoch_perm(n, true, 21, 4);
            Ids expected;
            for (std::int64_t p = 0; p < end; ++p) expected.push_back(s_at(perm, p));
            ASSERT_EQ(read, expected);

            // What that means per sample.
            std::vector<std::int64_t> count(n, 0);
            for (std::int64_t i : read) ++count[i];
            const std::int64_t extra = static_cast<std::int64_t>(read.size()) - n;
            if (!drop_last) {
              for (std::int64_t i = 0; i < n; ++i) EXPECT_GE(count[i], 1) << "index " << i;
              // Head repeats only: fewer than W', or than W when the epoch ended on W ranks.
              EXPECT_LT(extra, c < n ? w2 : w);
            } else {
              for (std::int64_t i = 0; i < n; ++i) EXPECT_LE(count[i], 1) << "index " << i;
              EXPECT_LT(-extra, w2);  // skipped at the tail
            }
            // When W' divides c as well, the rest is what W' ranks would read from the start.
            if (c % w2 == 0) {
              for (std::int64_t r = 0; r < w2; ++r) {
                DistributedSampler fresh(n, w2, r, true, 21, drop_last);
                fresh.set_epoch(4);
                DistributedSampler resumed(n, w2, r, true, 21, drop_last);
                resumed.restore(saved);
                const Ids all = fresh.epoch_indices();
                const std::int64_t skip = std::min<std::int64_t>(c / w2, all.size());
                EXPECT_EQ(resumed.next_indices(1 << 20), Ids(all.begin() + skip, all.end()))
                    << "rank " << r;
              }
            }
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerTest, ErrorsSayWhatWasExpectedAndFound) {
  EXPECT_FT_ERROR(DistributedSampler(10, 0, 0),
                  "DistributedSampler: world_size must be at least 1, got 0");
  EXPECT_FT_ERROR(DistributedSampler(10, 4, 4),
                  "DistributedSampler: rank must be in [0, 3] for world_size 4, got 4");
  EXPECT_FT_ERROR(DistributedSampler(10, 4, -1),
                  "DistributedSampler: rank must be in [0, 3] for world_size 4, got -1");
  EXPECT_FT_ERROR(DistributedSampler(0, 2, 0),
                  "DistributedSampler: the dataset must hold at least 1 sample, got 0");
  EXPECT_FT_ERROR(DistributedSampler(3, 4, 0, true, 0, true),
                  "DistributedSampler: drop_last with 3 samples on 4 ranks leaves every rank 0 "
                  "samples; expected at least 4 samples (hint: turn drop_last off or use fewer "
                  "ranks)");
  EXPECT_NO_THROW(DistributedSampler(3, 4, 0, true, 0, false));  // PyTorch pads instead

  DistributedSampler s(10, 2, 1);
  EXPECT_FT_ERROR(s.set_epoch(-1), "DistributedSampler: epoch must be >= 0, got -1");
  EXPECT_FT_ERROR(s.restore(SamplerState{2, -4}),
                  "DistributedSampler: restored state has consumed = -4 samples in epoch 2; "
                  "expected >= 0");
  EXPECT_FT_ERROR(s.restore(SamplerState{-1, 0}), "epoch must be >= 0, got -1");
  EXPECT_FT_ERROR(s.next_indices(-1),
                  "DistributedSampler::next_indices: count must be >= 0, got -1");
}

}  // namespace
}  // namespace ft::data
