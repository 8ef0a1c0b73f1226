"""Loading the configuration: the root :class:`Settings` and :func:`load_settings`, its one builder.

The sources and their priority are listed in :mod:`service.settings`; :meth:`Settings.
settings_customise_sources` orders them, and the cross-section rules are its validators.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from service.settings.sections import (
    BOOTSTRAP_ENV_VAR,
    CONFIG_ENV_VAR,
    ENV_NESTED_DELIMITER,
    ENV_PREFIX,
    NON_SETTING_ENV_VARS,
    BoundSettings,
    CheckpointSettings,
    HttpSettings,
    KafkaSettings,
    LoggingSettings,
    MixingSettings,
    ModelSettings,
    ServiceSettings,
    SettingsError,
)


class Settings(BaseSettings):
    """Every setting of the service. Frozen: build it once with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        frozen=True,
        extra="forbid",
        case_sensitive=False,
    )

    kafka: KafkaSettings = KafkaSettings()
    model: ModelSettings = ModelSettings()
    bound: BoundSettings = BoundSettings()
    http: HttpSettings = HttpSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()
    logging: LoggingSettings = LoggingSettings()
    service: ServiceSettings = ServiceSettings()
    mixing: MixingSettings = MixingSettings()

    @model_validator(mode="after")
    def _mixing_needs_fixed_shapes(self) -> Settings:
        if not self.mixing.enabled:
            return self
        if self.model.encoding == "vocabulary":
            raise ValueError(
                'mixing needs a fixed encoder: shards cannot mix the growing "vocabulary" '
                'encoding (use "hashing")'
            )
        if self.model.variant == "multiclass" and not self.model.classes:
            raise ValueError("mixing a multiclass model needs its classes declared")
        return self

    @model_validator(mode="after")
    def _replica_follows_a_fixed_encoder(self) -> Settings:
        if self.service.role == "replica" and self.model.encoding == "vocabulary":
            raise ValueError(
                'service.role "replica" needs a fixed encoder: a replica cannot follow the '
                'growing "vocabulary" encoding (use "hashing")'
            )
        return self

    @model_validator(mode="after")
    def _references_fit_model(self) -> Settings:
        features = self.model.feature_dimension
        if features is None:
            if self.bound.references:
                raise ValueError(
                    "bound.references need a fixed model dimension; the vocabulary encoding grows"
                )
            return self
        expected = features + int(self.model.bias)
        for ref in self.bound.references:
            if ref.weights is not None:
                reference_shape_problem = _reference_shape_problem(
                    ref.weights, self.model, expected
                )
                if reference_shape_problem:
                    raise ValueError(f"bound.references {ref.name!r}: {reference_shape_problem}")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [
            init_settings,
            env_settings,
            _BootstrapEnvSource(settings_cls),
        ]
        config_path = _CONFIG_PATH.get()
        if config_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_path))
        return tuple(sources)


def _reference_shape_problem(
    weights: tuple[float, ...] | tuple[tuple[float, ...], ...], model: ModelSettings, width: int
) -> str | None:
    """What is wrong with the shape of inline reference weights, if anything."""
    coordinates = f"{width} coordinates (bias first when model.bias is true)"
    if model.variant == "binary":
        if weights and isinstance(weights[0], tuple):
            return f"a binary model needs one vector of {coordinates}, not a matrix"
        if len(weights) != width:
            return f"has {len(weights)} weights; the model has {coordinates}"
        return None
    if not weights or not all(isinstance(row, tuple) for row in weights):
        return f"a multiclass model needs one row per class, each of {coordinates}"
    if model.classes and len(weights) != len(model.classes):
        return f"has {len(weights)} rows; the model has {len(model.classes)} classes"
    for row in weights:
        assert isinstance(row, tuple)
        if len(row) != width:
            return f"a row has {len(row)} weights; the model has {coordinates}"
    return None


class _BootstrapEnvSource(PydanticBaseSettingsSource):
    """``KAFKA_BOOTSTRAP_SERVERS``: the conventional variable that names the broker."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        servers = os.environ.get(BOOTSTRAP_ENV_VAR, "").strip()
        return {"kafka": {"bootstrap_servers": servers}} if servers else {}


# pydantic-settings builds its sources from the class, so load_settings() hands the file over
# through a context variable for the duration of one call.
_CONFIG_PATH: ContextVar[Path | None] = ContextVar("novikoff_config_path", default=None)


def load_settings(config_path: Path | str | None = None, **overrides: Any) -> Settings:
    """Build the one settings object of the process.

    Parameters
    ----------
    config_path
        TOML file to read; defaults to ``$NOVIKOFF_CONFIG``; without either, code defaults apply.
    **overrides
        Section tables (e.g. ``http={"port": 0}``) that win over every other source.

    Raises
    ------
    SettingsError
        With one line per problem: where it is, what is wrong, what is expected.
    """
    path = _config_path(config_path)
    _reject_unknown_env_vars()
    token = _CONFIG_PATH.set(path)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, path)) from None
    finally:
        _CONFIG_PATH.reset(token)


def _config_path(config_path: Path | str | None) -> Path | None:
    raw = config_path if config_path is not None else os.environ.get(CONFIG_ENV_VAR)
    if raw is None or str(raw) == "":
        return None
    path = Path(raw)
    if not path.is_file():
        raise SettingsError(f"config file {path} does not exist (named by {CONFIG_ENV_VAR}?)")
    try:
        tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    return path


def _reject_unknown_env_vars() -> None:
    sections = set(Settings.model_fields)
    pattern = re.compile(
        rf"^{ENV_PREFIX}([A-Za-z]+){ENV_NESTED_DELIMITER}[A-Za-z_]+$", flags=re.IGNORECASE
    )
    problems = []
    for name in os.environ:
        if not name.upper().startswith(ENV_PREFIX) or name.upper() in NON_SETTING_ENV_VARS:
            continue
        match = pattern.match(name)
        if match is None or match.group(1).lower() not in sections:
            problems.append(
                f"{name}: not a setting; use {ENV_PREFIX}<SECTION>__<KEY> with SECTION one of "
                f"{', '.join(sorted(sections))}"
            )
    if problems:
        raise SettingsError("invalid environment:\n  " + "\n  ".join(problems))


def _describe(exc: ValidationError, path: Path | None) -> str:
    origin = f"config file {path}" if path else "defaults"
    lines = [f"invalid settings ({origin}, {ENV_PREFIX}* environment, {BOOTSTRAP_ENV_VAR}):"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown setting (check the spelling against config/default.toml)"
        shown = _short(error.get("input"))
        lines.append(f"  {where}: {message}" + (f" (got {shown})" if shown else ""))
    return "\n".join(lines)


def _short(value: object, limit: int = 60) -> str:
    if value is None or isinstance(value, Mapping):
        return ""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
