"""What the README, docs/ and the examples' READMEs tell a newcomer to run or set exists and
parses: every `rlxf ...` command line, every dotted config key, every flag of a `python
script.py` command, every YAML snippet; and the claims a reading found false stay fixed."""

from __future__ import annotations

import ast
import re
import shlex
import typing
from pathlib import Path

import click
import pytest
import typer
import yaml
from pydantic import BaseModel

from rlxf.cli.main import app
from rlxf.config import load_config
from rlxf.config.schema import Config

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md")),
        ROOT / "benchmarks" / "README.md"]
IDS = [str(p.relative_to(ROOT)) for p in DOCS]
CLI = typer.main.get_command(app)


def _code_and_prose(text: str) -> tuple[str, str]:
    """(the fenced and 4-space-indented code, joined; the prose without fenced blocks)."""
    fenced = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    indented = [line[4:] for line in prose.splitlines() if line.startswith("    ") and line.strip()]
    return "\n".join([*fenced, *indented]).replace("\\\n", " "), prose


def _rlxf_commands(text: str) -> list[tuple[bool, str]]:
    """(whole, command) for each `rlxf ...`: whole lines of code blocks (shell pipes, `;`, `&&` and
    env assignments split off), and inline code spans (which may name a command without its
    arguments, e.g. `rlxf eval --checkpoint`)."""
    code, prose = _code_and_prose(text)
    found = []
    for line in code.splitlines():
        for part in re.split(r"[|;&]+|\bdo\b|\bdone\b", line.split(" #")[0]):
            part = re.sub(r"^(\w+=\S+\s+)+", "", part.strip())
            if part.startswith("rlxf "):
                found.append((True, part))
    for span in re.findall(r"`([^`\n]+)`", prose):
        found += [(False, p.strip()) for p in span.split("|") if p.strip().startswith("rlxf ")]
    return found


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _is_config_key(key: str) -> bool:
    """``key`` (``data.sources[].weight``) names a field of the schema, through sub-sections,
    optional ones and lists of them."""
    sections: list[type[BaseModel]] = [Config]
    parts = key.replace("[]", "").split(".")
    for i, name in enumerate(parts):
        fields = [m.model_fields[name] for m in sections if name in m.model_fields]
        if not fields:
            return False
        sections = [m for f in fields for m in _models(f.annotation)]
        if not sections and i < len(parts) - 1:
            return False
    return True


NOT_CONFIG = {"model.generate"}  # transformers' method, named beside a section's name


def _config_keys(text: str) -> set[str]:
    keys = re.findall(r"(?<![\w/.\-])([a-z_]+(?:\.[a-z_0-9]+|\[\])+)(?==|\b)", text)
    return {k for k in keys if k.split(".")[0] in Config.model_fields and k not in NOT_CONFIG
            and not re.search(r"\.(jsonl?|py|ya?ml|html)$", k)}


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_rlxf_command_line_parses_with_the_cli(doc):
    bad = []
    for whole, line in _rlxf_commands(doc.read_text()):
        argv = shlex.split(line.replace("$SEED", "0"))[1:]
        if argv[0].startswith("-") or argv[0].isupper():  # `rlxf --help`, `rlxf COMMAND --help`
            continue
        command = CLI.get_command(None, argv[0])
        if command is None:
            bad.append(f"{line!r}: no command {argv[0]!r}")
            continue
        options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        unknown = [a.split("=")[0] for a in argv if a.startswith("-") and a.split("=")[0] not in options]
        if unknown:
            bad.append(f"{line!r}: {argv[0]} has no option {', '.join(unknown)}")
        overrides = [a.split("=", 1)[0] for a in argv[1:] if re.match(r"[a-z_]+(\.[\w\[\]]+)+=", a)]
        bad += [f"{line!r}: no config field {k}" for k in overrides if not _is_config_key(k)]
        if whole:
            try:
                command.make_context(argv[0], argv[1:])
            except click.ClickException as e:
                bad.append(f"{line!r}: {e.format_message()}")
    assert not bad, f"{doc.relative_to(ROOT)}: " + "; ".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_dotted_config_key_names_a_schema_field(doc):
    missing = sorted(k for k in _config_keys(doc.read_text()) if not _is_config_key(k))
    assert not missing, f"{doc.relative_to(ROOT)} names config fields the schema lacks: {missing} (rlxf config-docs)"


def _script_flags(script: Path) -> set[str]:
    """The option strings of every ``add_argument`` call in ``script`` (read, not run)."""
    calls = [n for n in ast.walk(ast.parse(script.read_text()))
             if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument"]
    return {a.value for c in calls for a in c.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_script_command_uses_flags_the_script_has(doc):
    bad = []
    text = doc.read_text().replace("\\\n", " ")
    for m in re.finditer(r"python3? (\S+\.py)([^`\n|;&]*)", text):
        script = next((p for p in (ROOT / m.group(1), doc.parent / m.group(1)) if p.is_file()), None)
        if script is None:
            bad.append(f"{m.group(1)} does not exist")
            continue
        flags = _script_flags(script)
        used = re.findall(r"(?<!\S)(--[\w-]+)", m.group(2).split(" #")[0])
        bad += [f"{m.group(1)} has no {u}" for u in used if u not in flags]
        for value in re.findall(r"--(?:grpo|sft)-set((?:\s+[\w.]+=\S+)+)", m.group(2)):
            bad += [f"{m.group(1)}: no config field {k}" for k in re.findall(r"([\w.]+)=", value)
                    if not _is_config_key(k)]
    assert not bad, f"{doc.relative_to(ROOT)}: " + "; ".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_yaml_snippets_are_valid_config_sections(doc):
    for block in re.findall(r"```ya?ml\n(.*?)```", doc.read_text(), flags=re.S):
        snippet = yaml.safe_load(block)
        config = {"model": {"path": "m"}, "data": {"task": "arithmetic"}, **snippet}
        if "data" in snippet and "sources" not in snippet["data"]:
            config["data"] = {"task": "arithmetic", **snippet["data"]}
        Config.model_validate(config)  # raises, naming the field, on a snippet the schema refuses


def test_readme_says_which_commands_take_a_config():
    # "Every command takes a YAML config" was false: generate, report, init-model, quickstart and
    # config-docs take none. The README's list must be exactly the commands that do.
    takes = {name for name, c in CLI.commands.items() if any(p.name == "config" for p in c.params)}
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Using rlxf"):]
    sentence = " ".join(section[:section.index("naming the field")].split())
    assert "Every command takes" not in sentence
    named = set(re.findall(r"`([a-z-]+)`", sentence[:sentence.index("take a YAML config")]))
    assert named == takes, (named, takes)


def test_readme_does_not_promise_the_cpu_build_from_a_version_pin():
    # on Linux PyPI's torch wheel is the CUDA build; only a CPU index (or a wheel directory) gives the CPU one
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "keeps a CPU machine on the CPU build" not in readme
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme


def test_quickstart_history_calls_only_the_current_remedy_current():
    # the history doc called the 3 : 1 mixture the quickstart's default "now" after it moved to PPO-ptx
    recipe = load_config(ROOT / "rlxf" / "trainer" / "recipes" / "quickstart_grpo.yaml")
    current = "PPO-ptx" if recipe.algorithm.ptx_coef > 0 else "mixture"
    text = " ".join((ROOT / "docs" / "quickstart_history.md").read_text().split())
    stale = [s for s in re.split(r"(?<=[.|])\s", text)
             if re.search(r"default now|now the default|is now a|quickstart uses now", s) and current not in s]
    assert not stale, stale


def test_example_headers_name_the_operations_their_task_draws():
    # tool_arithmetic.yaml called its sums and products "additions"
    bad = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        header = " ".join(line for line in path.read_text().splitlines() if line.startswith("#")).lower()
        data = load_config(path).data
        ops = data.task_options.get("ops", "") if data.task == "arithmetic" else ""
        if "*" in ops and "addition" in header and not re.search(r"product|multipl", header):
            bad.append(path.name)
    assert not bad, f"headers say additions, the task also draws products: {bad}"
