"""Load a run config: a YAML file plus dotted overrides, validated before any work starts.

    cfg = load_config("examples/grpo_arithmetic.yaml", ["algorithm.kl_coef=0.01", "rollout.n=8"])

Every problem is reported at once, each naming the field path, the bad value, where it came
from (file and line, or the override), and what is allowed.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
import sys
import sysconfig
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from rlxf.config.algorithm import preset_sources
from rlxf.config.schema import Config
from rlxf.errors import UserInputError, raised_at


class ConfigError(UserInputError):
    """A config that cannot run. ``str(err)`` is a message a user can act on."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-5`` as a float (YAML 1.1 insists on ``1.0e-5``) and refuses
    YAML 1.1's octal ``010``, which it would read as 8 where ten was almost always meant."""


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes every string ``_Loader`` would read as something else (``1e5``), so
    the config.yaml a run writes loads again as the same config."""


for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."),
    )


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    text = str(node.value)
    if re.fullmatch(r"[-+]?0[0-7_]+", text):
        raise yaml.constructor.ConstructorError(
            None, None, f"{text} has a leading zero, which YAML 1.1 reads as an octal number "
            f"({loader.construct_yaml_int(node)}); write {int(text.replace('_', ''), 10)} for the decimal number, "
            f"or quote it ('{text}') for text", node.start_mark)
    return loader.construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _comment_at(raw: str) -> int | None:
    """Where a YAML comment starts in ``raw`` (a ``#`` no token covers), or None. YAML drops a
    comment without a word, so ``key=a #b`` would read ``a``; an override has no use for one."""
    try:
        spans = [(t.start_mark.index, t.end_mark.index) for t in yaml.scan(raw, Loader=_Loader)]
    except yaml.YAMLError:
        return None
    return next((i for i, ch in enumerate(raw) if ch == "#" and not any(a <= i < b for a, b in spans)), None)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b.c=value"`` -> (["a", "b", "c"], value parsed as YAML).

    A text field of the schema (``str``, ``str | None``, a Literal of strings) keeps the text as
    written when YAML would read something else: ``run.name=0123`` is ``"0123"``, not the octal
    83; ``data.fields.prompt=off`` is ``"off"``, not false; ``data.system_prompt=Format: 42`` is
    that sentence, not a mapping; ``data.system_prompt=Reply after ####`` keeps the ``####`` YAML
    would drop as a comment. A YAML null (``null``, ``~``, nothing) stays None. In a field of any
    other type a comment is refused: ``train.mini_batch_size=#8`` would be null without a word.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"override {text!r} is not of the form dotted.key=value (e.g. rollout.n=8)"
        )
    keys = key.split(".")
    try:
        value = _load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        if _is_text_field(keys):
            return keys, raw.strip()
        problem = getattr(e, "problem", None) or e
        raise ConfigError(f"override {text!r}: the value is not valid YAML: {problem}") from None
    comment = _comment_at(raw)
    if (comment is not None or (value is not None and not isinstance(value, str))) and _is_text_field(keys):
        return keys, raw.strip()
    if comment is not None:
        raise ConfigError(f"override {text!r}: `#` starts a YAML comment, so the value would be read as "
                          f"{value!r}, without {raw[comment:].strip()!r}; drop the `#`, or quote the value "
                          f"(\"...\") if the `#` is part of it")
    return keys, value


def _is_text_field(keys: list[str]) -> bool:
    """Whether the schema declares the field at ``keys`` as text: every type it may hold (in
    every section it may be in, for a list of tagged unions) is ``str``, a Literal of strings or
    None. False when unknown (a free-form mapping, a field not in the schema)."""
    annotations: list[Any] = [Config]
    for part in keys:
        found: list[Any] = []
        for ann in (a for annotation in annotations for a in _members(annotation)):
            origin, args = typing.get_origin(ann), typing.get_args(ann)
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                if part in ann.model_fields:
                    found.append(ann.model_fields[part].annotation)
            elif origin is list and args and part.isdigit():
                found.append(args[0])
            elif origin is dict and len(args) == 2:
                found.append(args[1])
        if not found:
            return False
        annotations = found
    leaves = [a for annotation in annotations for a in _members(annotation)]
    return any(a is str for a in leaves) and all(
        a in (str, type(None)) or (typing.get_origin(a) is Literal
                                   and all(isinstance(v, str) for v in typing.get_args(a)))
        for a in leaves
    )


def _members(annotation: Any) -> list[Any]:
    """The types a union stands for (``A | B | None`` -> [A, B, NoneType]); Annotated unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


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


def _duplicate_key(node: yaml.Node | None, path: tuple[str, ...] = (),
                   visited: set[int] | None = None) -> tuple[str, int, int] | None:
    """The first key written twice in one mapping: (dotted path, its line, the first one's line).

    YAML keeps the last of two equal keys without a word, so a second ``train:`` block would
    silently drop every field of the first. Merge keys (``<<: *anchor``) are not duplicates.
    """
    visited = set() if visited is None else visited
    if id(node) in visited:  # an alias of a node already walked (or of its own parent)
        return None
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key, _value in node.value:
            if key.tag == "tag:yaml.org,2002:merge" or not isinstance(key, yaml.ScalarNode):
                continue
            line = key.start_mark.line + 1
            first = seen.setdefault((key.tag, key.value), line)
            if first != line:
                return ".".join((*path, key.value)), line, first
        children = ((str(key.value), value) for key, value in node.value)
    elif isinstance(node, yaml.SequenceNode):
        children = ((str(i), value) for i, value in enumerate(node.value))
    else:
        return None
    for part, child in children:
        found = _duplicate_key(child, (*path, part), visited)
        if found:
            return found
    return None


def _read_yaml(path: Path) -> tuple[dict[str, Any], yaml.Node | None]:
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.y*ml"))
        inside = f" (it holds {', '.join(found[:5])}{', ...' if len(found) > 5 else ''})" if found else ""
        raise ConfigError(f"{path} is a directory, not a config file; give the path of a YAML file{inside}")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start}); "
                          f"save the config as UTF-8") from None
    try:
        node = yaml.compose(text, Loader=_Loader)
        duplicate = _duplicate_key(node)
        if duplicate:
            key, line, first = duplicate
            raise ConfigError(f"{path}:{line}: `{key}` is set twice (first on line {first}); YAML would keep "
                              f"only the last and drop the first without a word. Merge the two into one.")
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
    return _walk(loc)[0]


def _walk(loc: tuple) -> tuple[type[BaseModel] | None, tuple]:
    """(the model class of the section at ``loc`` or None, ``loc`` as a user writes it).

    A discriminated union (reward.verifiers) puts the chosen member's tag in the location
    (``reward.verifiers.0.numeric.extract``); the path shown drops it, so it can be written as
    an override (``reward.verifiers.0.extract``).
    """
    model: Any = Config
    members: list[type[BaseModel]] = []
    written: list[Any] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            written.append(part)
            continue
        tagged = [m for m in members if getattr(m.model_fields.get("type"), "default", None) == part]
        if tagged:
            model, members = tagged[0], []
            continue
        written.append(part)
        field = getattr(model, "model_fields", {}).get(part)
        members = _models_in(field.annotation) if field is not None else []
        if not members:
            return None, (*written, *loc[i + 1:])
        model = members[0]
    return model, tuple(written)


_FIELD_PATH = re.compile(r"\b([a-z_]+(?:\.[a-z_0-9]+)+)")


def _exact_line(node: yaml.Node | None, path: list[str]) -> int | None:
    """1-based line of the key (or list entry) at ``path`` in the YAML file; None if the file does not set it."""
    line = None
    for part in path:
        if isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
            continue
        if not isinstance(node, yaml.MappingNode):
            return None
        for key, value in node.value:
            if key.value == part:
                line, node = key.start_mark.line + 1, value
                break
        else:
            return None
    return line


def _origin(loc: tuple, msg: str, source: str, node: yaml.Node | None, overridden: dict[tuple, str],
            preset: dict[tuple, tuple] | None = None) -> str:
    """Where the value behind one error came from: the override(s), or the file and line.

    An error about one field points at it; an error of a check across fields (batch arithmetic)
    points at every field its message names, so an override is blamed when it caused the problem
    rather than the YAML file that was fine on its own. A field a preset filled in (``preset``:
    its path -> the path of the field that chose the preset) points at that one.
    """
    direct = next((o for k, o in overridden.items() if tuple(map(str, loc[: len(k)])) == k), None)
    if direct is not None:
        return direct
    named = [m.split(".") for m in dict.fromkeys(_FIELD_PATH.findall(msg)) if m.split(".")[0] in Config.model_fields]
    if not named:
        named = [list(map(str, loc))] if loc else []
    named = [list(preset.get(tuple(path), path)) if preset else path for path in named]
    parts: list[str] = []
    for path in named:
        override = overridden.get(tuple(path))
        # an override inside the field (data.task_options.x=1) is part of its value, as is the file's
        inside = [] if override else [o for k, o in overridden.items() if k[: len(path)] == tuple(path)]
        line = None if override else _exact_line(node, path)
        for where in (override, *inside, f"{source}:{line}" if line else None):
            if where and where not in parts:
                parts.append(where)
    if parts:
        return ", ".join(sorted(parts, key=lambda p: not p.startswith("override")))
    line = _line_of(node, loc)
    return f"{source}:{line}" if line else source


def _format_errors(err: ValidationError, origins: Origins) -> str:
    lines = [f"invalid config ({origins.source}): {err.error_count()} problem(s)"]
    for e in err.errors():
        raw = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        loc = _walk(raw)[1]
        path = ".".join(str(p) for p in loc) or "(top level)"
        kind = e["type"]
        msg = e["msg"].removeprefix("Value error, ")
        origin = origins(loc, msg)
        section = _model_at(raw[:-1]) if raw else None
        if kind == "extra_forbidden":
            valid = sorted(section.model_fields) if section else []
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            hint = f" Did you mean `{close[0]}`?" if close else ""
            lines.append(f"  - {path} ({origin}): unknown field.{hint} Valid fields here: {', '.join(valid)}")
        elif kind == "missing":
            field = section.model_fields.get(str(raw[-1])) if section else None
            what = f": {field.description.rstrip('.')}" if field is not None and field.description else ""
            lines.append(f"  - {path} ({origin}): required field is missing{what}. `rlxf config-docs "
                         f"{loc[0]}` lists what it takes")
        else:
            bad = e.get("input")
            shown = "" if isinstance(bad, dict) else f" (got {bad!r})"
            lines.append(f"  - {path} ({origin}): {msg}{shown}")
    lines.append("Run `rlxf config-docs` for every field, its type and its meaning.")
    return "\n".join(lines)


@dataclass
class Origins:
    """Where the values of a loaded config came from (the file, its YAML nodes, the overrides),
    so a check run after the schema names the file and line, or the override, as schema errors do."""

    source: str = "defaults"
    node: yaml.Node | None = None
    overridden: dict[tuple, str] = field(default_factory=dict)
    preset: dict[tuple, tuple] = field(default_factory=dict)  # see _origin

    def __call__(self, loc: tuple, msg: str = "") -> str:
        return _origin(loc, msg, self.source, self.node, self.overridden, self.preset)

    def error(self, problems: list[tuple[tuple, str]], *, names_in_message: bool = True) -> ConfigError:
        """One ConfigError listing every ``(location, message)`` problem with its origin.

        ``names_in_message``: the fields a message names are blamed too (a check across fields);
        off for messages of lower layers, which call any source's task ``data.task``.
        """
        lines = [f"invalid config ({self.source}): {len(problems)} problem(s)"]
        lines += [f"  - {'.'.join(map(str, loc))} ({self(loc, msg if names_in_message else '')}): {msg}"
                  for loc, msg in problems]
        return ConfigError("\n".join(lines))


# a check a command adds to loading: (cfg) -> [(location, message), ...]; each is reported with its origin
Check = Callable[[Config], list[tuple[tuple, str]]]


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                base: dict[str, Any] | None = None, *, given_rewards: bool = False,
                checks: tuple[Check, ...] = ()) -> Config:
    """Read ``path`` (YAML), apply ``overrides`` (``dotted.key=value``), validate.

    ``base`` seeds the data before the file (used by tests and by commands with defaults).
    ``checks``: more checks of the valid config (``rlxf explain`` checks the data); their
    problems are reported like the schema's. Raises ConfigError naming every problem.
    """
    return load_config_located(path, overrides, base, given_rewards=given_rewards, checks=checks)[0]


def load_config_located(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                        base: dict[str, Any] | None = None, *, given_rewards: bool = False,
                        checks: tuple[Check, ...] = ()) -> tuple[Config, Origins]:
    """``load_config``, and where each value came from: a command's later checks (the model
    path, the data files) name the file and line, or the override, as the schema's errors do."""
    data: dict[str, Any] = dict(base or {})
    origins = Origins()
    if path is not None:
        file_data, origins.node = _read_yaml(Path(path))
        data.update(file_data)
        origins.source = str(path)
    for text in overrides:
        keys, value = parse_override(text)
        _set_path(data, keys, value, f"override {text!r}")
        origins.overridden[tuple(keys)] = f"override {text!r}"
    origins.preset = {("algorithm", name): ("algorithm", chooser)
                      for name, chooser in preset_sources(data.get("algorithm")).items()}
    try:
        cfg = Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, origins)) from None
    check_names(cfg, Path(path).resolve().parent if path is not None else None, given_rewards=given_rewards,
                origins=origins)
    problems = [problem for check in checks for problem in check(cfg)]
    if problems:
        raise origins.error(problems, names_in_message=False)
    return cfg, origins


def _import_failure(module: str, e: Exception, where: str) -> str:
    """Why ``module`` (a plugin or a reward function's module) could not be imported, and what to do.

    A module that is missing is put on the path or installed; one that is found but fails its
    own import (a dependency it imports is missing, a syntax error) is fixed where it fails.
    """
    if isinstance(e, SyntaxError):
        text = f": {e.text.strip()}" if e.text and e.text.strip() else ""
        return f"{e.filename}:{e.lineno}: {type(e).__name__} in {module!r}: {e.msg}{text}"
    if not isinstance(e, ImportError):  # the module's own code raised while it was imported
        at = raised_at(e, outside_rlxf=True) or "an unknown line"
        return (f"importing {module!r} raised {type(e).__name__} at {at}: {str(e).rstrip('.')}. "
                f"Fix the module there")
    if e.name and (module == e.name or module.startswith(f"{e.name}.")):
        return f"cannot import {module!r}: {e}. Put it in {where}, or install it"
    try:
        spec = importlib.util.find_spec(module)
        found = f" ({spec.origin})" if spec is not None and spec.origin else ""
    except (ImportError, ValueError):
        found = ""
    fix = (f"Install {e.name!r}, which it imports, or remove that import"
           if isinstance(e, ModuleNotFoundError) and e.name else "Fix that import")
    return f"{module!r}{found} was found, but its own import failed: {e}. {fix}"


def _shadowed(module: str, folders: Sequence[Path]) -> str | None:
    """Why importing ``module`` would not give the user's own module, or None.

    The working directory and the config's folder come last on ``sys.path``, and a name already
    in ``sys.modules`` is never looked up again: so a ``calendar.py`` there loses to the standard
    library's ``calendar``, and a second run from another folder with its own ``my_module.py``
    would get the first folder's. Pool workers and Ray actors import by name along the same
    path, so the module cannot be swapped here: the user renames it.
    """
    top = module.partition(".")[0]
    if top == "__main__":
        return None
    loaded = sys.modules.get(top)
    try:
        spec = getattr(loaded, "__spec__", None) if loaded is not None else importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None  # nowhere to be found: the import says so
    places = [Path(p) for p in spec.submodule_search_locations or ()]
    if spec.origin and spec.has_location:
        places.append(Path(spec.origin).parent if Path(spec.origin).name == "__init__.py" else Path(spec.origin))
    found = places[-1] if places else f"built into Python ({spec.origin})"
    mine = [p for folder in folders for p in (Path(folder) / f"{top}.py", Path(folder) / top)
            if p.is_file() or p.is_dir()]
    if {m.resolve() for m in mine} & {p.resolve() for p in places}:
        return None  # the user's own, as meant
    libs = {Path(sysconfig.get_path(k)).resolve() for k in ("stdlib", "platstdlib")}
    installed = {"site-packages", "dist-packages"} & set(Path(str(found)).parts)
    stdlib = top in sys.stdlib_module_names and not installed and (not places or any(
        lib in p.resolve().parents for p in places for lib in libs))
    if mine and installed and not stdlib:
        return None  # an installed copy of the user's package (run from its source folder): theirs too
    if mine and isinstance(found, Path) and mine[0].is_file() and found.is_file() \
            and mine[0].read_bytes() == found.read_bytes():
        return None  # another folder's copy of the same file: the same code runs either way
    if mine:
        rename = f"Rename {mine[0].name} (and {top!r} in the config)"
        if stdlib:
            why = f"the standard library's, which Python finds first. {rename}"
        else:
            why = (f"from a folder that comes first on sys.path (put there by an earlier run in this process, or "
                   f"PYTHONPATH), and Python imports a name once per process. {rename}, or run this config in a "
                   f"new Python process")
        return f"{mine[0]} is not the module Python imports as {top!r}: that is {found}, {why}"
    if stdlib:
        return (f"{top!r} is the standard library's module ({found}), not one of yours: Python imports it before "
                f"any module of yours by that name. Name your module differently (e.g. my_{top}) and use that name")
    return None


def import_user_module(module: str, what: str, where: str, folders: Sequence[Path] = ()) -> str | None:
    """Import ``module`` (a plugin, a reward function's or an environment's module); None, or why
    it failed and what to do (``_import_failure``). Whatever the module raises while it is
    imported is reported, not only ImportError: a NameError, a registry name already taken.
    ``folders``: the user's own (working directory, config folder); a module of theirs that
    another of that name would stand in for is refused (``_shadowed``)."""
    shadowed = _shadowed(module, folders)
    if shadowed:
        return f"{what}: {shadowed}"
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any failure of the user's module is a config problem
        return f"{what}: {_import_failure(module, e, where)}"
    return None


def source_locations(cfg: Config) -> list[tuple[tuple, Any]]:
    """Each data source with its location in the config: ``data`` itself, or each entry of
    ``data.sources`` (a mixture); then ``data.ptx`` when set."""
    sources: list[tuple[tuple, Any]] = ([(("data", "sources", i), s) for i, s in enumerate(cfg.data.sources)]
                                        or [(("data",), cfg.data)])
    if cfg.data.ptx is not None:
        sources.append((("data", "ptx"), cfg.data.ptx))
    return sources


def check_names(cfg: Config, config_dir: Path | None = None, *, given_rewards: bool = False,
                origins: Origins | None = None) -> None:
    """Import ``cfg.plugins``, then check every registry name in the config exists (the
    algorithm's parts, each source's task; a reasoning-gym dataset is checked when it is made).

    Plugin modules and custom reward functions (``reward.verifiers[i].function``) are imported
    here, found on ``sys.path`` plus the working directory and the config file's directory (as
    ``python -m`` would), so a ``my_rewards.py`` next to the YAML works without PYTHONPATH or
    ``plugins:``. Registries live in lower layers (they import torch), so they
    are imported here, lazily, once the schema itself is valid. ``given_rewards``: the caller
    hands the reward functions over as objects (``rlxf.train``), so their names are not imported.
    ``origins``: where the values came from, named in the errors.
    """
    origins = origins or Origins()
    # reward.url: the verifiers are the server's, imported there
    custom = [] if cfg.reward.url or given_rewards else [(i, v.function) for i, v in enumerate(cfg.reward.verifiers)
                                        if v.type == "custom"]
    # an environment, tool or agent program of one's own (`package.module:name`) imports the same way
    own_env = cfg.env is not None and any(":" in spec for spec in (cfg.env.name or "", cfg.env.agent or "",
                                                                   *cfg.env.tools))
    folders = [p for p in (Path.cwd(), config_dir) if p is not None]
    for extra in folders:
        if (cfg.plugins or custom or own_env) and str(extra) not in sys.path:
            sys.path.append(str(extra))
    where = f"the working directory or {config_dir}" if config_dir else "the working directory"
    for i, module in enumerate(cfg.plugins):
        failure = import_user_module(module, f"plugin {module!r}", where, folders)
        if failure:
            raise origins.error([(("plugins", i), failure)])
    # a reward function, environment, tool or agent program whose module cannot be imported is a
    # config mistake (exit 2), found before any model loads or run directory exists
    from rlxf.rewards.custom import load_function  # noqa: PLC0415 - lazy, like the registries

    for i, spec in custom:
        failure = import_user_module(spec.partition(":")[0], f"custom verifier {spec!r}", where, folders)
        if failure:
            raise origins.error([(("reward", "verifiers", i, "function"), failure)])
        try:
            load_function(spec)
        except AttributeError as e:
            hint = ("; it names a function of the script that ran rlxf.train(reward_funcs=...) (a lambda, or one "
                    "defined elsewhere, is recorded under its verifier's name): pass reward_funcs again with this "
                    "config, or move the function to a module and name it here as module:function"
                    if spec.startswith("__main__:") else "")
            raise ConfigError(f"reward.verifiers.{i}.function: {e}{hint}") from None
    if own_env:
        assert cfg.env is not None
        specs = [(("env", "name"), cfg.env.name), (("env", "agent"), cfg.env.agent),
                 *((("env", "tools", i), tool) for i, tool in enumerate(cfg.env.tools))]
        for loc, spec in specs:
            if spec and ":" in spec and spec.partition(":")[0]:
                failure = import_user_module(spec.partition(":")[0], f"{'.'.join(map(str, loc))}={spec!r}", where,
                                             folders)
                if failure:
                    raise origins.error([(loc, failure)])
    from rlxf.algorithms import registry  # noqa: PLC0415 - lazy on purpose

    problems: list[tuple[tuple, str]] = []
    for name_field, kind in (("advantage", "advantage"), ("policy_loss", "policy_loss"),
                             ("loss_agg", "loss_agg"), ("off_policy", "off_policy")):
        name = getattr(cfg.algorithm, name_field)
        valid = registry.names(kind)
        if name not in valid:
            problems.append((("algorithm", name_field), f"unknown name {name!r}; valid: {', '.join(valid)}"))
    if not problems and registry.needs("advantage", cfg.algorithm.advantage).groups and cfg.rollout.n < 2:
        problems.append((("rollout", "n"), f"algorithm.advantage={cfg.algorithm.advantage!r} compares samples of "
                         f"one prompt and needs rollout.n >= 2 (got {cfg.rollout.n})"))
    if not problems and registry.needs("advantage", cfg.algorithm.advantage).nonnegative_returns:
        # the verifiers' rewards make the returns, unless a reward server's or an environment's alone do
        scored = cfg.reward if not cfg.reward.url and (cfg.env is None or cfg.env.use_verifiers) else None
        problems += cfg.algorithm.negative_return_problems(scored)
    greedy = "rollout.temperature=0" if cfg.rollout.temperature == 0 else \
        "rollout.top_k=1" if cfg.rollout.top_k == 1 else None
    if not problems and greedy and cfg.rollout.n > 1 and cfg.env is None \
            and registry.needs("advantage", cfg.algorithm.advantage).groups:
        problems.append((("rollout", "temperature" if cfg.rollout.temperature == 0 else "top_k"),
                         f"{greedy} samples greedily, so the rollout.n={cfg.rollout.n} responses to a prompt are "
                         f"identical: algorithm.advantage={cfg.algorithm.advantage!r} compares them, every group's "
                         f"rewards are equal and nothing trains. Sample (e.g. rollout.temperature=1.0, "
                         f"rollout.top_k=0)"))
    if cfg.critic.warmup_steps and cfg.critic.warmup_steps >= cfg.train.steps:
        problems.append((("critic", "warmup_steps"), f"{cfg.critic.warmup_steps} warm-up steps of {cfg.train.steps} "
                         "(train.steps) leave the actor none: it would never train; lower it"))
    if not problems and cfg.critic.warmup_steps and not registry.needs("advantage", cfg.algorithm.advantage).values:
        problems.append((("critic", "warmup_steps"), f"algorithm.advantage={cfg.algorithm.advantage!r} trains no "
                         "critic, so there is none to warm up; set critic.warmup_steps to 0, or use a critic "
                         "(algorithm.name=ppo)"))
    fsdp = cfg.run.placement == "ray" and cfg.ray.learners > 1 and cfg.ray.learner_strategy == "fsdp"
    if not problems and fsdp and registry.needs("advantage", cfg.algorithm.advantage).values:
        problems.append((("ray", "learner_strategy"), f"fsdp does not shard a critic, which algorithm.advantage="
                         f"{cfg.algorithm.advantage!r} needs; use ray.learner_strategy=ddp"))
    if cfg.env is not None and cfg.env.name and ":" not in cfg.env.name:
        from rlxf.envs.base import env_names  # noqa: PLC0415 - lazy, after the plugins

        envs = env_names()
        if cfg.env.name not in envs:
            close = difflib.get_close_matches(cfg.env.name, envs, n=1)
            hint = f" Did you mean `{close[0]}`?" if close else ""
            problems.append((("env", "name"), f"unknown environment {cfg.env.name!r}.{hint} Valid: {', '.join(envs)}, "
                             "or `package.module:Class` for your own (one registered with @register_env is known "
                             "once its module is listed in `plugins:`)"))
    from rlxf.data.tasks import REASONING_GYM_PREFIX, task_names  # noqa: PLC0415 - lazy, after the plugins

    known = task_names()
    for loc, source in source_locations(cfg):
        if source.source == "task" and source.task and not source.task.startswith(REASONING_GYM_PREFIX) \
                and source.task not in known:
            close = difflib.get_close_matches(source.task, known, n=1)
            hint = f" Did you mean `{close[0]}`?" if close else ""
            problems.append(((*loc, "task"), f"unknown task {source.task!r}.{hint} Valid tasks: {', '.join(known)}"))
    if problems:
        raise origins.error(problems)


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML (what a run writes to config.yaml)."""
    return yaml.dump(cfg.model_dump(mode="json"), Dumper=_Dumper, sort_keys=False, allow_unicode=True)
