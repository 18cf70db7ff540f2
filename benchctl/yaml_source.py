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


def load_yaml(text: str, file: str) -> tuple[Any, dict[Path_, int]]:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError(file, line, "", f"YAML syntax error: {exc.problem or exc}; fix the YAML") from None
    finally:
        loader.dispose()
    if root is None:
        raise SpecError(file, None, "", "the file is empty; a campaign needs name, budget_usd, target, matrix "
                        "(see docs/campaign-reference.md)")
    lines: dict[Path_, int] = {}
    return _build(loader, root, (), lines, file), lines


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, lines: dict[Path_, int], file: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in result:
                raise SpecError(file, key_node.start_mark.line + 1, format_path((*path, key)),
                                f"duplicate key {key!r} (first at line {lines[(*path, key)]}); keep one")
            result[key] = _build(loader, value_node, (*path, key), lines, file)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), lines, file) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


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
