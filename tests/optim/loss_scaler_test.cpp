// ft::optim::LossScaler against torch.cuda.amp.GradScaler's own Python driven on CPU with its
// update kernel transcribed (optim_reference.json): for each pattern of overflowing steps, the
// scale, the growth tracker and whether the optimizer step ran, after every step. The scale is an
// fp32 number changed by exact rules, so the comparison is exact. Also: unscale, state
// save/restore, and the error messages.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/loss_scaler.h"
#include "optim_test_util.h"

namespace ft::optim {
namespace {

LossScalerOptions options_of(const Json& c) {
  LossScalerOptions o;
  o.init_scale = c["init_scale"];
  o.growth_factor = c["growth_factor"];
  o.backoff_factor = c["backoff_factor"];
  o.growth_interval = c["growth_interval"];
  return o;
}

// One step as the trainer does it: scaled gradients (Inf/NaN injected on '1' steps), unscale,
// update with what unscale found.
bool replay_step(LossScaler& scaler, const Json& c, std::size_t k) {
  const float magnitude = static_cast<float>(c["grad_magnitude"].get<double>());
  auto grad = torch::tensor({0.5f, -1.25f, 3.0f, 1e-3f, -7.5f, 0.1f}) * magnitude * scaler.scale();
  if (c["pattern"].get<std::string>()[k] == '1') grad[static_cast<std::int64_t>(k % 6)] = k % 2 == 0 ? INFINITY : NAN;
  const bool found_inf = scaler.unscale_({grad});
  return scaler.update(found_inf);
}

TEST(LossScaler, MatchesGradScalerStepByStep) {
  for (const Json& c : test::reference()["scaler"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    LossScaler scaler(options_of(c));
    const std::size_t steps = c["pattern"].get<std::string>().size();
    ASSERT_EQ(c["scale"].size(), steps);
    for (std::size_t k = 0; k < steps; ++k) {
      const bool stepped = replay_step(scaler, c, k);
      ASSERT_EQ(stepped, c["stepped"][k].get<bool>()) << "step " << k;
      ASSERT_EQ(scaler.scale(), c["scale"][k].get<double>()) << "step " << k;
      ASSERT_EQ(scaler.growth_tracker(), c["growth_tracker"][k].get<std::int64_t>()) << "step " << k;
    }
  }
}

TEST(LossScaler, UnscaleMatchesGradScaler) {
  const Json& example = test::reference()["scaler"][0]["unscale_example"];
  LossScaler scaler;
  ASSERT_EQ(scaler.scale(), example["scale"].get<double>());
  torch::Tensor g = test::vec(example["scaled_grad"]);
  EXPECT_FALSE(scaler.unscale_({g}));
  EXPECT_TRUE(torch::equal(g, test::vec(example["unscaled_grad"])));
  // The tensor-op path (non-contiguous here; CUDA and fp16 tensors take it too) agrees.
  torch::Tensor wide = torch::zeros({6, 2});
  wide.select(1, 0).copy_(test::vec(example["scaled_grad"]));
  EXPECT_FALSE(scaler.unscale_({wide.select(1, 0)}));
  EXPECT_TRUE(torch::equal(wide.select(1, 0), test::vec(example["unscaled_grad"])));
  torch::Tensor bad = torch::ones({5});
  bad[4] = NAN;
  EXPECT_TRUE(scaler.unscale_({torch::ones({3}), bad}));
}

TEST(LossScaler, SaveAndRestoreContinuesIdentically) {
  const Json& c = test::reference()["scaler"][1];
  LossScaler uninterrupted(options_of(c)), first(options_of(c));
  const std::size_t steps = c["pattern"].get<std::string>().size(), resume_at = 7;
  for (std::size_t k = 0; k < steps; ++k) replay_step(uninterrupted, c, k);
  for (std::size_t k = 0; k < resume_at; ++k) replay_step(first, c, k);
  const Json saved = Json::parse(first.state_json().dump());  // through text, as a checkpoint file
  LossScaler resumed(options_of(c));
  resumed.load_state_json(saved, "scaler.json");
  for (std::size_t k = resume_at; k < steps; ++k) replay_step(resumed, c, k);
  EXPECT_EQ(resumed.scale(), uninterrupted.scale());
  EXPECT_EQ(resumed.growth_tracker(), uninterrupted.growth_tracker());
}

TEST(LossScaler, Errors) {
  LossScalerOptions o;
  o.growth_factor = 1.0;
  EXPECT_FT_ERROR(LossScaler{o}, "loss scaler: growth_factor must be > 1, got 1");
  o = {};
  o.backoff_factor = 1.0;
  EXPECT_FT_ERROR(LossScaler{o}, "loss scaler: backoff_factor must be in (0, 1), got 1");
  o = {};
  o.growth_interval = 0;
  EXPECT_FT_ERROR(LossScaler{o}, "loss scaler: growth_interval must be > 0, got 0");
  o = {};
  o.init_scale = 1e39;
  EXPECT_FT_ERROR(LossScaler{o}, "loss scaler: init_scale 1e+39 overflows fp32");

  LossScaler scaler;
  EXPECT_FT_ERROR(scaler.load_state_json(Json::parse(R"({"scale": 1024})"), "ckpt/scaler.json"),
                  "ckpt/scaler.json: loss scaler state needs an integer \"growth_tracker\", got nothing");
  EXPECT_FT_ERROR(scaler.load_state_json(Json::parse(R"({"scale": "big", "growth_tracker": 0})"), "ckpt/scaler.json"),
                  "ckpt/scaler.json: loss scaler state needs a number \"scale\", got \"big\"");
  EXPECT_FT_ERROR(scaler.load_state_json(Json::parse(R"({"scale": 2, "growth_tracker": 0, "x": 1})"), "s.json"),
                  "s.json: unknown loss scaler state key \"x\" (expected scale, growth_tracker)");
  EXPECT_FT_ERROR(scaler.load_state_json(Json::parse(R"({"scale": 2, "growth_tracker": 2000})"), "s.json"),
                  "s.json: loss scaler state: growth_tracker must be in [0, growth_interval = 2000), got 2000");
  EXPECT_FT_ERROR(scaler.load_state_json(Json::parse(R"({"scale": 0, "growth_tracker": 1})"), "s.json"),
                  "s.json: loss scaler state: scale must be a finite number > 0, got 0");
  EXPECT_FT_ERROR(scaler.load_state_json(Json::parse("[1]"), "s.json"), "s.json: loss scaler state must be an object");
  EXPECT_EQ(scaler.scale(), 65536.0f);  // untouched by the failed loads
}

}  // namespace
}  // namespace ft::optim
