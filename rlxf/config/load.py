"""Load a run config: a YAML file plus dotted overrides, validated before any work starts.

    cfg = load_config("examples/grpo_arithmetic.yaml", ["algorithm.kl_coef=0.01", "rollout.n=8"])

Every problem is reported at once, each naming the field path, the bad value, where it came
from (file and line, or the override), and what is allowed.
"""

from __future__ import annotations

import difflib
import importlib
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rlxf.config.schema import Config
from rlxf.errors import UserInputError


class ConfigError(UserInputError):
    """A config that cannot run. ``str(err)`` is a message a user can act on."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-5`` as a float (YAML 1.1 insists on ``1.0e-5``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b.c=value"`` -> (["a", "b", "c"], value parsed as YAML)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"override {text!r} is not of the form dotted.key=value (e.g. rollout.n=8)"
        )
    try:
        value = _load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({e})") from None
    return key.split("."), value


def _set_path(data: dict[str, Any], path: list[str], value: Any, origin: str) -> None:
    node: Any = data
    for i, part in enumerate(path[:-1]):
        if isinstance(node, list):
            node = node[_list_index(node, part, path[: i + 1], origin)]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"{origin}: `{'.'.join(path[:i])}` is not a section, cannot set `{part}` in it")
        if node.get(part) is None:  # a missing or empty (null) section becomes a new one
            node[part] = {}
        node = node[part]
    last = path[-1]
    if isinstance(node, list):
        node[_list_index(node, last, path, origin)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"{origin}: `{'.'.join(path[:-1])}` is not a section, cannot set `{last}` in it")


def _list_index(node: list, part: str, path: list[str], origin: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(
            f"{origin}: `{'.'.join(path)}`: `{part}` is not an index of a list of {len(node)} items"
        )
    return int(part)


def _read_yaml(path: Path) -> tuple[dict[str, Any], yaml.Node | None]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    try:
        node = yaml.compose(text, Loader=_Loader)
        data = _load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections (run:, model:, ...)")
    return data, node


def _line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the YAML node at ``loc`` (or of its nearest existing parent)."""
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part):
                    line, node = key.start_mark.line + 1, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _models_in(ann: Any) -> list[type[BaseModel]]:
    """Every pydantic model class nested in a type annotation (lists, unions, Annotated)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for arg in getattr(ann, "__args__", ()) for m in _models_in(arg)]


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class of the section at ``loc`` (for listing valid keys)."""
    model: Any = Config
    members: list[type[BaseModel]] = []
    for part in loc:
        if isinstance(part, int):
            continue
        # a discriminated union (reward.verifiers) puts the chosen member's tag in the location
        tagged = [m for m in members if getattr(m.model_fields.get("type"), "default", None) == part]
        if tagged:
            model, members = tagged[0], []
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        ann = field.annotation
        members = _models_in(ann)
        if not members:
            return None
        model = members[0]
    return model


_FIELD_PATH = re.compile(r"\b([a-z_]+(?:\.[a-z_0-9]+)+)")


def _exact_line(node: yaml.Node | None, path: list[str]) -> int | None:
    """1-based line of the key at ``path`` in the YAML file; None if the file does not set it."""
    line = None
    for part in path:
        if not isinstance(node, yaml.MappingNode):
            return None
        for key, value in node.value:
            if key.value == part:
                line, node = key.start_mark.line + 1, value
                break
        else:
            return None
    return line


def _origin(loc: tuple, msg: str, source: str, node: yaml.Node | None, overridden: dict[tuple, str]) -> str:
    """Where the value behind one error came from: the override(s), or the file and line.

    An error about one field points at it; an error of a check across fields (batch arithmetic)
    points at every field its message names, so an override is blamed when it caused the problem
    rather than the YAML file that was fine on its own.
    """
    direct = next((o for k, o in overridden.items() if loc[: len(k)] == k), None)
    if direct is not None:
        return direct
    named = [m.split(".") for m in dict.fromkeys(_FIELD_PATH.findall(msg)) if m.split(".")[0] in Config.model_fields]
    if not named:
        named = [list(map(str, loc))] if loc else []
    parts: list[str] = []
    for path in named:
        override = overridden.get(tuple(path))
        line = None if override else _exact_line(node, path)
        where = override or (f"{source}:{line}" if line else None)
        if where and where not in parts:
            parts.append(where)
    if parts:
        return ", ".join(sorted(parts, key=lambda p: not p.startswith("override")))
    line = _line_of(node, loc)
    return f"{source}:{line}" if line else source


def _format_errors(err: ValidationError, source: str, node: yaml.Node | None,
                   overridden: dict[tuple, str]) -> str:
    lines = [f"invalid config ({source}): {err.error_count()} problem(s)"]
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = ".".join(str(p) for p in loc) or "(top level)"
        kind = e["type"]
        msg = e["msg"].removeprefix("Value error, ")
        origin = _origin(loc, msg, source, node, overridden)
        if kind == "extra_forbidden":
            section = _model_at(loc[:-1])
            valid = sorted(section.model_fields) if section else []
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            hint = f" Did you mean `{close[0]}`?" if close else ""
            lines.append(f"  - {path} ({origin}): unknown field.{hint} Valid fields here: {', '.join(valid)}")
        elif kind == "missing":
            lines.append(f"  - {path} ({origin}): required field is missing")
        else:
            bad = e.get("input")
            shown = "" if isinstance(bad, dict) else f" (got {bad!r})"
            lines.append(f"  - {path} ({origin}): {msg}{shown}")
    lines.append("Run `rlxf config-docs` for every field, its type and its meaning.")
    return "\n".join(lines)


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                base: dict[str, Any] | None = None, *, given_rewards: bool = False) -> Config:
    """Read ``path`` (YAML), apply ``overrides`` (``dotted.key=value``), validate.

    ``base`` seeds the data before the file (used by tests and by commands with defaults).
    Raises ConfigError naming every problem.
    """
    data: dict[str, Any] = dict(base or {})
    node = None
    source = "defaults"
    if path is not None:
        file_data, node = _read_yaml(Path(path))
        data.update(file_data)
        source = str(path)
    overridden: dict[tuple, str] = {}
    for text in overrides:
        keys, value = parse_override(text)
        _set_path(data, keys, value, f"override {text!r}")
        overridden[tuple(keys)] = f"override {text!r}"
    try:
        cfg = Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, source, node, overridden)) from None
    check_names(cfg, Path(path).resolve().parent if path is not None else None, given_rewards=given_rewards)
    return cfg


def check_names(cfg: Config, config_dir: Path | None = None, *, given_rewards: bool = False) -> None:
    """Import ``cfg.plugins``, then check every registry name in the config exists.

    Plugin modules and custom reward functions (``reward.verifiers[i].function``) are imported
    here, found on ``sys.path`` plus the working directory and the config file's directory (as
    ``python -m`` would), so a ``my_rewards.py`` next to the YAML works without PYTHONPATH or
    ``plugins:``. Registries live in lower layers (they import torch), so they
    are imported here, lazily, once the schema itself is valid. ``given_rewards``: the caller
    hands the reward functions over as objects (``rlxf.train``), so their names are not imported.
    """
    # reward.url: the verifiers are the server's, imported there
    custom = [] if cfg.reward.url or given_rewards else [(i, v.function) for i, v in enumerate(cfg.reward.verifiers)
                                        if v.type == "custom"]
    # an environment, tool or agent program of one's own (`package.module:name`) imports the same way
    own_env = cfg.env is not None and any(":" in spec for spec in (cfg.env.name or "", cfg.env.agent or "",
                                                                   *cfg.env.tools))
    for extra in (Path.cwd(), config_dir):
        if (cfg.plugins or custom or own_env) and extra is not None and str(extra) not in sys.path:
            sys.path.append(str(extra))
    where = f"the working directory or {config_dir}" if config_dir else "the working directory"
    for module in cfg.plugins:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"plugins: cannot import {module!r}: {e}. Put it in {where}, "
                              f"or install it") from None
    # a reward function that cannot be imported is a config mistake (exit 2), found before any
    # model loads or run directory exists
    from rlxf.rewards.custom import load_function  # noqa: PLC0415 - lazy, like the registries

    for i, spec in custom:
        try:
            load_function(spec)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"reward.verifiers.{i}.function: {e}. The module must be importable: "
                              f"put it in {where}, or install it") from None
    from rlxf.algorithms import registry  # noqa: PLC0415 - lazy on purpose

    problems = []
    for field, kind in (("advantage", "advantage"), ("policy_loss", "policy_loss"),
                        ("loss_agg", "loss_agg"), ("off_policy", "off_policy")):
        name = getattr(cfg.algorithm, field)
        valid = registry.names(kind)
        if name not in valid:
            problems.append(f"  - algorithm.{field}: unknown name {name!r}; valid: {', '.join(valid)}")
    if not problems and registry.needs("advantage", cfg.algorithm.advantage).groups and cfg.rollout.n < 2:
        problems.append(f"  - rollout.n: algorithm.advantage={cfg.algorithm.advantage!r} compares samples of one "
                        f"prompt and needs rollout.n >= 2 (got {cfg.rollout.n})")
    fsdp = cfg.run.placement == "ray" and cfg.ray.learners > 1 and cfg.ray.learner_strategy == "fsdp"
    if not problems and fsdp and registry.needs("advantage", cfg.algorithm.advantage).values:
        problems.append(f"  - ray.learner_strategy: fsdp does not shard a critic, which algorithm.advantage="
                        f"{cfg.algorithm.advantage!r} needs; use ray.learner_strategy=ddp")
    if problems:
        raise ConfigError("invalid config:\n" + "\n".join(problems))


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML (what a run writes to config.yaml)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
