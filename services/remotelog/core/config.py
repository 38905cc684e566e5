"""Service configuration: one frozen dataclass per service, Kafka's key names.

Values come from the dataclass defaults, then a Kafka-style `.properties` file,
then the environment (`REMOTELOG_` + the key upper-cased with dots as
underscores, e.g. `REMOTELOG_REMOTE_LOG_READER_THREADS`). An unknown key, a
value of the wrong type or out of range is refused with a one-line ConfigError
naming the key and where it came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

ENV_PREFIX = "REMOTELOG_"
# Environment variables with the prefix that are not configuration keys.
RESERVED_ENV = frozenset({"REMOTELOG_CONFIG_FILE"})

C = TypeVar("C")


class ConfigError(ValueError):
    """A configuration problem, rendered as one line naming the key and its source."""

    def __init__(self, key: str, message: str, source: str = "") -> None:
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {message}")
        self.key = key
        self.source = source


def setting(
    key: str,
    default: Any,
    doc: str,
    *,
    min: float | None = None,  # noqa: A002 - mirrors Kafka's ConfigDef.Range
    max: float | None = None,  # noqa: A002
    choices: Iterable[str] | None = None,
    form: tuple[str, str] | None = None,
    check: Callable[[str], str | None] | None = None,
    secret: bool = False,
) -> Any:
    """Declare a config field: its Kafka-style key, default, doc and bounds.

    `form` is (regular expression the whole value must match, what it says
    of a value that does not), for values a library would otherwise refuse
    with a traceback at start. `check` says what is wrong with a value (None:
    nothing), for rules a regular expression would state badly (a port's range).
    """
    meta = {
        "key": key,
        "doc": doc,
        "min": min,
        "max": max,
        "choices": tuple(choices) if choices is not None else None,
        "form": (re.compile(form[0]), form[1]) if form is not None else None,
        "check": check,
        "secret": secret,
    }
    return dataclasses.field(default=default, metadata=meta)


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def config_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """Key -> dataclass field, for every setting of a config class."""
    return {f.metadata["key"]: f for f in dataclasses.fields(cls) if "key" in f.metadata}


def _parse(raw: str, kind: type, key: str, source: str) -> Any:
    text = raw.strip()
    if kind is bool:
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ConfigError(key, f"expected true or false, got {raw!r}", source)
    if kind is int:
        try:
            return int(text.replace("_", ""), 10)
        except ValueError:
            raise ConfigError(key, f"expected an integer, got {raw!r}", source) from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(key, f"expected a number, got {raw!r}", source) from None
    return text


def _check(value: Any, field: dataclasses.Field[Any], source: str) -> None:
    meta = field.metadata
    key = meta["key"]
    if meta["min"] is not None and value < meta["min"]:
        raise ConfigError(key, f"{value} is below the minimum {meta['min']}", source)
    if meta["max"] is not None and value > meta["max"]:
        raise ConfigError(key, f"{value} is above the maximum {meta['max']}", source)
    if meta["choices"] is not None and value not in meta["choices"]:
        allowed = ", ".join(meta["choices"])
        raise ConfigError(key, f"{value!r} is not one of: {allowed}", source)
    if meta["form"] is not None and not meta["form"][0].fullmatch(value):
        raise ConfigError(key, f"{value!r} is not {meta['form'][1]}", source)
    if meta["check"] is not None and (problem := meta["check"](value)) is not None:
        # A secret's value (a key, a token) is never repeated back, not even when wrong.
        shown = "the value" if meta["secret"] else repr(value)
        raise ConfigError(key, f"{shown}: {problem}", source)


# Whitespace, then a comment character: what `value   # comment` leaves in the value.
_TRAILING_COMMENT = re.compile(r"\s+([#!].*)$")


def _refuse_trailing_comment(key: str, raw: str, source: str) -> None:
    """A value that ends in what looks like a comment: in a .properties file `#` and
    `!` start a comment only at the start of a line, so it would be part of the value."""
    found = _TRAILING_COMMENT.search(raw.strip())
    if found:
        raise ConfigError(
            key,
            f"{raw.strip()!r} ends in what looks like a comment ({found.group(1)!r}); "
            "in a .properties file a comment goes on a line of its own",
            source,
        )


def _unknown(key: str, known: Iterable[str], source: str, service: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(key, f"unknown key for {service}{hint}", source)


def read_properties(path: Path) -> list[tuple[str, str, str]]:
    """Kafka-style properties: `key=value` or `key: value`, `#`/`!` comments.

    Returns (key, raw value, "file:line") triples; a line that is not a
    key/value pair or a repeated key is a ConfigError.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("file", f"cannot read {path}: {exc.strerror}", str(path)) from None
    entries: list[tuple[str, str, str]] = []
    seen: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        source = f"{path}:{number}"
        if not stripped or stripped[0] in "#!":
            continue
        cuts = [i for i in (stripped.find("="), stripped.find(":")) if i > 0]
        if not cuts:
            raise ConfigError(stripped[:40], "expected key=value", source)
        cut = min(cuts)
        key, value = stripped[:cut].strip(), stripped[cut + 1 :].strip()
        if key in seen:
            raise ConfigError(key, f"repeated (first set at {seen[key]})", source)
        seen[key] = source
        entries.append((key, value, source))
    return entries


def load_config(
    cls: type[C],
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    service: str = "",
    all_known_keys: Iterable[str] = (),
) -> tuple[C, dict[str, str]]:
    """Build `cls` from defaults < file < environment.

    Returns the config and, per key, where its value came from. Environment
    variables with the prefix that name a key of another service
    (`all_known_keys`) are ignored; any other unknown one is refused, so a
    typo never goes unnoticed.
    """
    fields = config_fields(cls)
    hints = typing.get_type_hints(cls)
    service = service or cls.__name__
    values: dict[str, Any] = {}
    sources = dict.fromkeys(fields, "default")

    def apply(key: str, raw: str, source: str) -> None:
        field = fields[key]
        if not field.metadata["secret"]:
            _refuse_trailing_comment(key, raw, source)
        value = _parse(raw, hints[field.name], key, source)
        _check(value, field, source)
        values[field.name] = value
        sources[key] = source

    for key, raw, source in read_properties(path) if path is not None else []:
        if key not in fields:
            raise _unknown(key, fields, source, service)
        apply(key, raw, source)

    by_env = {env_name(key): key for key in fields}
    others = {env_name(key) for key in all_known_keys}
    for name, raw in sorted((environ or {}).items()):
        if not name.startswith(ENV_PREFIX) or name in RESERVED_ENV:
            continue
        if name in by_env:
            apply(by_env[name], raw, f"env {name}")
        elif name not in others:
            known_env = list(by_env)
            raise _unknown(name, known_env, "environment", service)
    config = cls(**values)
    for field in fields.values():
        _check(getattr(config, field.name), field, "default")
    # Settings that are each valid but refused together (the class says which).
    clashes = getattr(config, "clashes", None)
    for key, message in clashes() if clashes is not None else ():
        raise ConfigError(key, message, sources[key])
    return config, sources


def shown_settings(config: object) -> list[tuple[str, str]]:
    """(key, value as written in a properties file) of every setting, secrets masked."""
    shown = []
    for key, field in sorted(config_fields(type(config)).items()):
        value = getattr(config, field.name)
        if field.metadata["secret"] and value:
            text = "[hidden]"  # as Kafka prints a password
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        shown.append((key, text))
    return shown


def render(config: object, sources: Mapping[str, str]) -> list[str]:
    """`key=value  # source` lines for every setting, secrets masked."""
    return [
        f"{key}={value}  # {sources.get(key, 'default')}" for key, value in shown_settings(config)
    ]
