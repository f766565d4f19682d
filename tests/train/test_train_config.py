import pytest

from datamind.train.config import TrainConfig, derive_run_id


def test_defaults_are_the_papers_table_2():
    c = TrainConfig()
    assert (
        c.sft.learning_rate,
        c.sft.lr_scheduler,
        c.sft.warmup_ratio,
        c.sft.batch_size,
        c.sft.epochs,
        c.sft.cutoff_len,
    ) == (1e-5, "cosine", 0.1, 16, 3, 8192)
    r = c.rl
    assert (
        r.learning_rate,
        r.warmup_steps,
        r.batch_size,
        r.mini_batch_size,
        r.epochs,
        r.max_prompt_length,
        r.max_response_length,
    ) == (1e-6, 20, 16, 2, 1, 2048, 8192)
    assert (r.clip_low, r.clip_high, r.temperature, r.top_p, r.group_size) == (0.2, 0.28, 0.7, 1.0, 4)
    assert (r.gamma_schedule, r.gamma_peak, r.gamma_valley) == ("cosine", 0.9, 0.05)
    assert (c.reward.l_min, c.reward.l_max, c.reward.format_penalty) == (256, 1024, -0.1)


def test_overrides_nested_and_dotted():
    c = TrainConfig().with_overrides({"rl.learning_rate": "2e-6", "sft": {"batch_size": 8}, "phase": "sft"})
    assert c.rl.learning_rate == 2e-6 and c.sft.batch_size == 8 and c.phase == "sft"
    assert c.rl.group_size == 4  # untouched siblings keep their defaults


def test_round_trip():
    c = TrainConfig(base_model_path="/m", export_dir="/e").with_overrides({"rl": {"clip_high": 0.3}})
    assert TrainConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"rl.learning_rat": 1}, "rl.learning_rat"),
        ({"phase": "rl"}, "phase must be one of"),
        ({"sft.batch_size": "many"}, "sft.batch_size expects int"),
        ({"sft.batch_size": 2.5}, "sft.batch_size expects int"),
        ({"rl": 3}, "rl must be a mapping"),
        ({"cold_start": "maybe"}, "cold_start expects bool"),
    ],
)
def test_bad_overrides_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig().with_overrides(overrides)


def test_validate():
    with pytest.raises(ValueError, match="base_model_path is required"):
        TrainConfig(export_dir="/e").validate()
    with pytest.raises(ValueError, match="multiple of rl.mini_batch_size"):
        TrainConfig(base_model_path="/m", export_dir="/e").with_overrides({"rl.mini_batch_size": 3}).validate()
    with pytest.raises(ValueError, match="group_size"):
        TrainConfig(base_model_path="/m", export_dir="/e").with_overrides({"rl.group_size": 1}).validate()


def test_run_id_stable_and_sensitive():
    a = TrainConfig(base_model_path="/m", export_dir="/e")
    assert derive_run_id(a, "ds-1") == derive_run_id(a.with_overrides({"data_root": "/elsewhere"}), "ds-1")
    assert derive_run_id(a, "ds-1") != derive_run_id(a, "ds-2")
    assert derive_run_id(a, "ds-1") != derive_run_id(a.with_overrides({"rl.clip_high": 0.3}), "ds-1")
