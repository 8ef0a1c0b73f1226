"""Settings: one frozen object from TOML, NOVIKOFF_* overrides and KAFKA_BOOTSTRAP_SERVERS."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pydantic
import pytest

from learning import HashingEncoder
from service.model import build_encoder
from service.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_TOML = ROOT / "config" / "default.toml"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("NOVIKOFF_") or name == "KAFKA_BOOTSTRAP_SERVERS":
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "novikoff.toml"
    path.write_text(text)
    return path


def test_default_toml_documents_exactly_the_code_defaults() -> None:
    assert load_settings(DEFAULT_TOML) == Settings()


def test_default_toml_names_every_setting() -> None:
    text = DEFAULT_TOML.read_text()
    documented = tomllib.loads(text)
    for section, model in Settings.model_fields.items():
        assert section in documented, f"[{section}] missing from default.toml"
        annotation = model.annotation
        assert isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)
        for key, field in annotation.model_fields.items():
            name = field.alias or key
            # Optional settings are documented as commented-out examples.
            assert (
                f"\n{name} =" in text or f"\n# {name} =" in text or f"[{section}.{name}]" in text
            ), f"{section}.{name} is not documented in default.toml"


def test_file_values_are_loaded(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[kafka]
topic = "mushrooms"
[model]
dim = 1
predictor = "last"
[[bound.references]]
name = "u"
weights = [0.0, -1.0]
[http]
port = 9001
""",
    )
    settings = load_settings(path)
    assert settings.kafka.topic == "mushrooms"
    assert settings.kafka.dead_letter_topic == "mushrooms.dlq"
    assert settings.model.predictor == "last"
    assert settings.bound.references[0].weights == (0.0, -1.0)
    assert settings.http.port == 9001
    assert settings.http.host == "127.0.0.1"


def test_config_env_var_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVIKOFF_CONFIG", str(write(tmp_path, '[kafka]\ntopic = "from-env"\n')))
    assert load_settings().kafka.topic == "from-env"


def test_env_overrides_one_key_and_keeps_the_rest_of_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, '[kafka]\ntopic = "a"\ngroup_id = "g"\n')
    monkeypatch.setenv("NOVIKOFF_KAFKA__TOPIC", "b")
    monkeypatch.setenv("NOVIKOFF_BOUND__GAMMA_GRID", "[0.1, 0.5]")
    settings = load_settings(path)
    assert settings.kafka.topic == "b"
    assert settings.kafka.group_id == "g"
    assert settings.bound.gamma_grid == (0.1, 0.5)


def test_kafka_bootstrap_servers_overrides_the_file_but_not_novikoff_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, '[kafka]\nbootstrap_servers = "file:1"\n')
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "cluster-a:9093,cluster-b:9093")
    assert load_settings(path).kafka.bootstrap_servers == "cluster-a:9093,cluster-b:9093"
    assert load_settings(path).kafka.consumer_config()["bootstrap_servers"] == [
        "cluster-a:9093",
        "cluster-b:9093",
    ]
    monkeypatch.setenv("NOVIKOFF_KAFKA__BOOTSTRAP_SERVERS", "explicit:1")
    assert load_settings(path).kafka.bootstrap_servers == "explicit:1"


def test_keyword_overrides_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVIKOFF_HTTP__PORT", "9000")
    assert load_settings(http={"port": 0}).http.port == 0


def test_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(pydantic.ValidationError):
        settings.http.port = 1  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        settings.kafka = settings.kafka  # type: ignore[misc]


def test_consumer_config_uses_manual_offsets_and_kafkas_group_timing() -> None:
    config = load_settings().kafka.consumer_config()
    assert config["enable_auto_commit"] is False
    assert config["auto_offset_reset"] == "earliest"
    assert config["session_timeout_ms"] == 45_000
    assert config["heartbeat_interval_ms"] == 3_000
    assert config["max_poll_interval_ms"] == 300_000
    assert config["heartbeat_interval_ms"] * 3 <= config["session_timeout_ms"]


def test_sasl_and_tls_settings_pass_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
[kafka]
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_plain_username = "novikoff"
ssl_cafile = "/etc/ca.pem"
""",
    )
    monkeypatch.setenv("NOVIKOFF_KAFKA__SASL_PLAIN_PASSWORD", "s3cret")
    settings = load_settings(path)
    config = settings.kafka.consumer_config()
    assert config["security_protocol"] == "SASL_SSL"
    assert config["sasl_mechanism"] == "SCRAM-SHA-512"
    assert config["sasl_plain_username"] == "novikoff"
    assert config["sasl_plain_password"] == "s3cret"
    assert config["ssl_cafile"] == "/etc/ca.pem"
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[kafka]\nsession_timeout_ms = -5\n", "kafka.session_timeout_ms"),
        ("[kafka]\nbootstrap_servers = 'nohost'\n", "is not host:port"),
        ("[kafka]\ntopicc = 'x'\n", "kafka.topicc: unknown setting"),
        ("[kafka]\nheartbeat_interval_ms = 50000\n", "heartbeat_interval_ms must be below"),
        ("[kafka]\nsecurity_protocol = 'SASL_SSL'\n", "needs sasl_mechanism"),
        ("[model]\nvariant = 'ternary'\n", "model.variant"),
        ("[model]\nlabels = {yes = 1, no = 1}\n", "labels must map"),
        ("[model]\nvariant = 'multiclass'\nclasses = ['a']\n", "at least two distinct"),
        ("[model]\nencoding = 'schema'\n", "needs feature_names"),
        ("[model]\ndim = 1\n[[bound.references]]\nname = 'u'\nweights = [1.0]\n", "has 1 weights"),
        ("[[bound.references]]\nname = 'u'\n", "exactly one of weights or path"),
        ("[[bound.references]]\nname = 'u'\npath = '../../etc/passwd'\n", "must not contain"),
        ("[[bound.references]]\nname = 'u'\npath = '/etc/passwd'\n", "must be relative"),
        ("[[bound.references]]\nname = 'a b'\nweights = [0, 0, 0]\n", "bound.references.0.name"),
        ("[bound]\ngamma_grid = [0.1, -1]\n", "positive numbers"),
        ("[http]\nport = 70000\n", "http.port"),
        ("[logging]\nlevel = 'loud'\n", "logging.level"),
    ],
)
def test_invalid_settings_say_where_and_what(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(write(tmp_path, text))
    assert message in str(caught.value)
    assert str(tmp_path) in str(caught.value)


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_broken_toml_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings(write(tmp_path, "[kafka\n"))


def test_misspelt_environment_variable_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVIKOFF_HTTP_PORT", "9000")
    with pytest.raises(SettingsError, match="NOVIKOFF_HTTP_PORT: not a setting"):
        load_settings()


def test_bad_environment_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVIKOFF_HTTP__PORT", "eighty")
    with pytest.raises(SettingsError, match=r"http\.port"):
        load_settings()


def test_the_per_event_bound_and_the_hash_reach_the_encoder(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[model]\nencoding = "hashing"\nhashing = "blake2b"\nmax_features_per_event = 7\n',
    )
    encoder = build_encoder(load_settings(path).model)
    assert isinstance(encoder, HashingEncoder)
    assert (encoder.hash, encoder.max_features_per_event) == ("blake2b", 7)
    default = build_encoder(load_settings(model={"encoding": "hashing"}).model)
    assert isinstance(default, HashingEncoder)
    assert (default.hash, default.max_features_per_event) == ("murmur3", 10_000)
    with pytest.raises(SettingsError, match="hashing"):
        load_settings(model={"encoding": "hashing", "hashing": "md5"})


def test_the_moved_http_feature_limit_says_where_it_went(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"model\.max_features_per_event"):
        load_settings(write(tmp_path, "[http]\nmax_features = 32\n"))
    assert load_settings(write(tmp_path, "[http]\nmax_batch_size = 32\n")).http.max_batch_size == 32


def test_mixing_is_off_by_default_and_needs_fixed_shapes() -> None:
    assert not Settings().mixing.enabled
    on = load_settings(mixing={"round_events": 100}, model={"encoding": "hashing"})
    assert on.mixing.enabled
    assert on.mixing.contributions_topic_name(on.kafka.topic) == "events.mixing"
    for refused in (
        {"model": {"encoding": "vocabulary"}},
        {"model": {"variant": "multiclass"}},
    ):
        with pytest.raises(SettingsError, match="mixing"):
            load_settings(mixing={"round_events": 100}, **refused)
        # Control: the same settings without mixing load.
        assert not load_settings(**refused).mixing.enabled
    # A read replica follows the mixed models (tests/integration/test_mixing.py).
    replica = {"service": {"role": "replica"}, "model": {"encoding": "hashing"}}
    assert load_settings(mixing={"round_events": 100}, **replica).mixing.enabled
