"""Every config field with its type, default and meaning (``rlxf config-docs``)."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from rlxf.config.schema import Config


def _type_name(ann: Any) -> str:
    origin = typing.get_origin(ann)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(ann))
    if origin is not None:
        names = [_type_name(a) for a in typing.get_args(ann)]
        name = getattr(origin, "__name__", str(origin))
        # a union's members are joined by " | ", and only they: tuple[int, int] keeps its comma
        return " | ".join(names) if name in ("Union", "UnionType") else f"{name}[{', '.join(names)}]"
    if ann is type(None):
        return "null"
    return getattr(ann, "__name__", str(ann))


def _sub_model(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in typing.get_args(ann):
        found = _sub_model(arg)
        if found is not None:
            return found
    return None


def _union_members(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for arg in typing.get_args(ann) for m in _union_members(arg)]


def field_docs(model: type[BaseModel] = Config, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(path, type, default, description) for every leaf field under ``model``: a model's own
    fields first, then its sub-sections (printed under their headings, a field after one would
    read as the sub-section's)."""
    rows = []
    fields = model.model_fields.items()
    nested = [(n, f) for n, f in fields if _sub_model(f.annotation) is not None
              or len(_union_members(f.annotation) if typing.get_origin(f.annotation) is list else []) > 1]
    for name, field in [(n, f) for n, f in fields if (n, f) not in nested] + nested:
        path = f"{prefix}{name}"
        sub = _sub_model(field.annotation)
        is_list = typing.get_origin(field.annotation) is list
        if sub is not None and not is_list:
            rows.append((path, "section", "", field.description or ""))
            rows.extend(field_docs(sub, path + "."))
            continue
        members = _union_members(field.annotation) if is_list else []
        if len(members) > 1:  # a discriminated union (reward.verifiers): one block per kind
            rows.append((path, f"list[{' | '.join(m.__name__ for m in members)}]", _default(field),
                         field.description or ""))
            for member in members:
                rows.extend(field_docs(member, f"{path}[type={member.model_fields['type'].default}]."))
            continue
        if sub is not None and is_list:
            rows.append((path, f"list[{sub.__name__}]", _default(field), field.description or ""))
            rows.extend(field_docs(sub, path + "[]."))
            continue
        rows.append((path, _type_name(field.annotation), _default(field), field.description or ""))
    return rows


def _default(field) -> str:
    """A field's default as config text: a list of sections by their kinds (reward.verifiers'
    ``[{type: math}]``), anything else as its repr."""
    if field.default is PydanticUndefined and field.default_factory is None:
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, list) and any(isinstance(v, BaseModel) for v in value):
        return "[" + ", ".join(f"{{type: {v.type}}}" if "type" in type(v).model_fields else f"{type(v).__name__}()"
                               for v in value) + "]"
    return repr(value)


def render(section: str | None = None, task_options: dict[str, type[BaseModel]] | None = None) -> str:
    """The docs of every field (of ``section``); ``task_options`` (task name -> its options
    model) are listed after ``data.task_options``, from the models themselves."""
    rows = field_docs()
    at = next((i + 1 for i, r in enumerate(rows) if r[0] == "data.task_options"), len(rows))
    extra = [row for name, model in (task_options or {}).items()
             for row in field_docs(model, f"data.task_options[task={name}].")]
    rows[at:at] = extra
    if section:
        rows = [r for r in rows if r[0] == section or r[0].startswith((section + ".", section + "["))]
        if not rows:
            sections = sorted(Config.model_fields)
            raise KeyError(f"no config section {section!r}; sections: {', '.join(sections)}")
    lines = []
    for path, type_, default, desc in rows:
        if type_ == "section":
            lines.append(f"\n[{path}]  {desc}")
        else:
            lines.append(f"  {path}: {type_} = {default}\n      {desc}")
    return "\n".join(lines).lstrip("\n")
