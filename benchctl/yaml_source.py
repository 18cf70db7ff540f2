"""Load YAML into plain Python values while remembering where each value came from.

``load_yaml(text, file)`` returns ``(data, lines)``: ``lines`` maps a path tuple such as
``("matrix", 2, "count")`` to its 1-based line. Duplicate keys, syntax errors and an empty
document raise SpecError with the file and line.
"""

from __future__ import annotations

from typing import Any

import yaml

from benchctl.errors import SpecError

Path_ = tuple[str | int, ...]


CAMPAIGN_NEEDS = "a campaign needs name, budget_usd, target, matrix (see docs/campaign-reference.md)"


def load_yaml(text: str, file: str, needs: str = CAMPAIGN_NEEDS) -> tuple[Any, dict[Path_, int]]:
    """``needs`` completes the error for an empty file: what the file should hold."""
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses characters YAML does not allow, at once
    except yaml.YAMLError as exc:
        raise _unreadable(file, exc) from None
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError(file, line, "", f"YAML syntax error: {exc.problem or exc}; fix the YAML") from None
    except yaml.YAMLError as exc:
        raise _unreadable(file, exc) from None
    finally:
        loader.dispose()
    if root is None:
        raise SpecError(file, None, "", f"the file is empty; {needs}")
    lines: dict[Path_, int] = {}
    return _build(loader, root, (), lines, file), lines


def _unreadable(file: str, exc: yaml.YAMLError) -> SpecError:
    return SpecError(file, None, "", f"not readable as YAML ({' '.join(str(exc).split())}); fix the file")


def _construct(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, file: str) -> Any:
    """A scalar (or a collection used as a key), with construction errors as SpecError."""
    try:
        return loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(file, node.start_mark.line + 1, format_path(path),
                        f"cannot read this value ({problem}); use a plain YAML value") from None


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, lines: dict[Path_, int], file: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        try:
            loader.flatten_mapping(node)  # resolve `<<: *anchor` merge keys
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", exc)
            raise SpecError(file, node.start_mark.line + 1, format_path(path),
                            f"bad merge key ({problem}); merge a mapping with `<<: *name`") from None
        result: dict[Any, Any] = {}
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = _construct(loader, key_node, path, file)
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise SpecError(file, key_node.start_mark.line + 1, format_path(path),
                                f"the key {key!r} is not a name; keys are words such as `count`")
            if key in seen and seen[key] < 0:
                result.pop(key)  # a merged key that the mapping itself overrides
            elif key in result:
                raise SpecError(file, key_node.start_mark.line + 1, format_path((*path, key)),
                                f"duplicate key {key!r} (first at line {lines[(*path, key)]}); keep one")
            result[key] = _build(loader, value_node, (*path, key), lines, file)
            seen[key] = -1 if key_node.start_mark.line < node.start_mark.line else key_node.start_mark.line
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), lines, file) for i, item in enumerate(node.value)]
    return _construct(loader, node, path, file)


def format_path(path: Path_) -> str:
    """``("matrix", 2, "count")`` → ``matrix[2].count``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def line_of(lines: dict[Path_, int], path: Path_) -> int | None:
    """The line of ``path`` or of its nearest ancestor that appears in the file."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None
