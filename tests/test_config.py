import pytest

from fgl_ray.config import ConfigError, load_config


@pytest.mark.parametrize("values, needles", [
    ({"dataset": "imagenet"}, ["dataset", "imagenet", "valid datasets", "cora", "twitch"]),
    ({"algorithm": "fedfoo"}, ["algorithm", "fedfoo", "valid algorithms", "fedavg", "local"]),
    ({"aggregator": "median-of-means"}, ["aggregator", "valid aggregators", "mean"]),
    ({"model": "transformer"}, ["model", "valid models", "gcn", "mlp"]),
    ({"partition": "metis"}, ["partition", "metis", "valid partitions", "louvain", "twitch-S1"]),
    ({"num_clients": 0}, ["num_clients", ">= 1"]),
    ({"rounds": 0}, ["rounds", ">= 1"]),
    ({"fraction_fit": 0.0}, ["fraction_fit", "(0, 1]"]),
    ({"fraction_fit": 1.5}, ["fraction_fit", "(0, 1]"]),
    ({"domain_ratios": [1, 2]}, ["domain_ratios", "one ratio per domain"]),
    ({"dataset": "cora", "partition": "twitch-S1"}, ["twitch-S1", "--dataset twitch"]),
    ({"split": (0.5, 0.5, 0.5)}, ["split", "sum"]),
    ({"lr": -1}, ["lr", "> 0"]),
    ({"colour": "blue"}, ["colour", "unknown field", "valid fields"]),
    ({"algorithm": "fedprox", "algorithm_options": {"bogus": 1}},
     ["algorithm_options (algorithm 'fedprox')", "bogus: unknown option", "valid options: mu"]),
    ({"aggregator": "fedia", "aggregator_options": {"rho": 2}},
     ["aggregator_options (aggregator 'fedia')", "rho", "less than or equal to 1", "beta", "mask_scope"]),
    ({"synthetic": {"num_domainz": 5}}, ["synthetic", "num_domainz: unknown option", "num_domains"]),
    ({"failures": {7: [0]}, "rounds": 3}, ["failures", "round 7"]),
    ({"dataset": "wikinet", "partition": "wikinet", "features": "svd"}, ["features 'svd'", "wikinet", "features 'raw'"]),
    ({"optimizer_state": "forget"}, ["optimizer_state", "reset", "keep"]),
    ({"lr": float("nan")}, ["lr", "finite"]),
    ({"dataset": "tu-molecules", "algorithm": "gcfl", "aggregator": "fedadam"}, ["one model per cluster", "mean"]),
    ({"dataset": "tu-molecules", "model_options": {"share": "all"}}, ["share: all", "share: convs"]),
    ({"dataset": "cora", "partition": "louvain", "model": "mm_gnn"}, ["two modalities", "synthetic-mm"]),
    ({"round_timeout_s": float("nan")}, ["round_timeout_s", "finite"]),
    ({"momentum": -1}, ["momentum", "[0, 1)"]),
    ({"momentum": 1.0}, ["momentum", "[0, 1)"]),
    ({"weight_decay": -1}, ["weight_decay", ">= 0"]),
    ({"dropout": 1.0}, ["dropout", "[0, 1)"]),
    ({"evaluate": "both"}, ["evaluate", "global", "local"]),
    ({"split_mode": "balanced"}, ["split_mode", "random", "stratified"]),
])
def test_bad_values_name_the_field_and_the_fix(values, needles):
    with pytest.raises(ConfigError) as error:
        load_config(values)
    for needle in needles:
        assert needle in str(error.value)
    if any(key.endswith("options") or key == "synthetic" for key in values):
        assert "valid fields" not in str(error.value)          # an option is not named as a config field


def test_missing_data_dir_is_named(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({"dataset": "cora", "data_dir": missing})


def test_unreadable_data_dir_is_named(tmp_path, monkeypatch):
    # Root reads every folder, so permission bits cannot make one unreadable here.
    monkeypatch.setattr("fgl_ray.config.os.access", lambda path, mode: False)
    with pytest.raises(ConfigError, match="not readable"):
        load_config({"dataset": "cora", "data_dir": tmp_path})


def test_env_data_dir_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("FGL_DATA_DIR", str(tmp_path))
    assert load_config({"dataset": "cora"}).resolved_data_dir() == tmp_path


def test_yaml_file_is_overlaid_by_values(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("rounds: 7\nlocal_epochs: 2\n")
    config = load_config({"rounds": 3}, yaml_path=path)
    assert (config.rounds, config.local_epochs) == (3, 2)


def test_config_is_frozen():
    config = load_config({})
    with pytest.raises(Exception):
        config.rounds = 4


def test_synthetic_domain_count_follows_its_options():
    config = load_config({"synthetic": {"num_domains": 5}, "domain_ratios": [1, 1, 2, 1, 1]})
    assert config.domain_ratios == [1, 1, 2, 1, 1]
    with pytest.raises(ConfigError, match="one ratio per domain"):
        load_config({"synthetic": {"num_domains": 5}, "domain_ratios": [1, 1, 1]})


def test_bad_synthetic_options_are_named():
    with pytest.raises(ConfigError, match="num_domainz"):
        load_config({"synthetic": {"num_domainz": 5}})


def test_a_preset_supplies_defaults_that_explicit_values_override():
    config = load_config({"preset": "twitch-S3", "rounds": 3})
    assert (config.dataset, config.partition, config.model, config.lr, config.rounds) == \
        ("twitch", "twitch-S3", "pmlp_gcn", 0.05, 3)
    with pytest.raises(ConfigError, match="valid presets"):
        load_config({"preset": "twitch-S9"})
