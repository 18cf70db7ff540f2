"""Load YAML into plain Python values while remembering where each value came from.

``load_yaml(text, file)`` returns ``(data, lines)``: ``lines`` maps a path tuple such as
``("matrix", 2, "count")`` to its 1-based line. Duplicate keys, syntax errors and an empty
document raise SpecError with the file and line.

The input is untrusted, so it is bounded (``source_limits.Limits``): its size (``read_capped``
checks a file's before reading it), its nesting depth, and the values it expands to. Aliases and merge keys
stay allowed, but every value an alias repeats counts again, so an alias bomb (a few hundred
bytes that expand to billions of values) is refused after ``max_values``. Integers must fit in
64 bits (the store's columns). Every such refusal is a SpecError naming the file.
"""

from __future__ import annotations

from typing import Any

import yaml

from benchctl.campaign.source_limits import INT_MAX, Limits, Path_, format_path, size_text
from benchctl.errors import SpecError

CAMPAIGN_NEEDS = "a campaign needs name, budget_usd, target, matrix (see docs/campaign-reference.md)"
_MERGE_TAG = "tag:yaml.org,2002:merge"
CAMPAIGN_LIMITS = Limits(max_bytes=1024**2, max_values=100_000)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than ``limits.max_depth`` while composing (the composer
    recurses: 10,000 ``[`` would be a RecursionError) and merges that would exceed ``max_values``."""

    def __init__(self, text: str, file: str, limits: Limits) -> None:
        super().__init__(text)
        self.file, self.limits = file, limits
        self.depth = 0
        self.values = 0
        self.merged_sizes: dict[int, int] = {}
        """id of a mapping node whose merges are resolved → its entries, each merged one counted every
        time it is merged (our own count: PyYAML < 6.0.4 repeats merged entries, 6.0.4 drops repeats)."""

    def _deeper(self, mark: yaml.Mark | None) -> None:
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise SpecError(self.file, mark.line + 1 if mark else None, "", f"nested deeper than "
                            f"{self.limits.max_depth} levels (or an alias or merge key that refers to itself); "
                            "flatten the file")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._deeper(self.peek_event().start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Resolve ``<<`` merge keys, refusing a mapping that would grow past ``max_values`` entries
        (merging a merged mapping several times multiplies it at every level). The count is ours,
        made before PyYAML merges, so the bound is the same whatever PyYAML does with repeats; each
        mapping is resolved once."""
        if id(node) in self.merged_sizes:
            return
        self._deeper(node.start_mark)
        try:
            size = 0
            for key_node, value_node in node.value:
                if key_node.tag != _MERGE_TAG:
                    size += 1
                    continue
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for sub in merged:
                    if isinstance(sub, yaml.MappingNode):
                        self.flatten_mapping(sub)
                        size += self.merged_sizes[id(sub)]
            if size > self.limits.max_values:
                raise self.too_many(node)
            super().flatten_mapping(node)
            self.merged_sizes[id(node)] = size
        finally:
            self.depth -= 1

    def count(self, node: yaml.Node, path: Path_) -> None:
        """One more value built at ``path``: SpecError past the limits."""
        self.values += 1
        if self.values > self.limits.max_values:
            raise self.too_many(node)
        if len(path) > self.limits.max_depth:
            raise SpecError(self.file, node.start_mark.line + 1, "", f"nested deeper than {self.limits.max_depth} "
                            "levels (through aliases); flatten the file")

    def too_many(self, node: yaml.Node) -> SpecError:
        return SpecError(self.file, node.start_mark.line + 1, "", f"expands to more than "
                         f"{self.limits.max_values:,} values (aliases repeat what they name); write fewer")


def load_yaml(text: str, file: str, needs: str = CAMPAIGN_NEEDS,
              limits: Limits = CAMPAIGN_LIMITS) -> tuple[Any, dict[Path_, int]]:
    """``needs`` completes the error for an empty file: what the file should hold."""
    if len(text) > limits.max_bytes:
        raise SpecError(file, None, "", f"the text is over {size_text(limits.max_bytes)}; split it or trim it")
    try:
        loader = _BoundedLoader(text, file, limits)  # its reader refuses characters YAML does not allow, at once
    except yaml.YAMLError as exc:
        raise _unreadable(file, exc) from None
    try:
        root = loader.get_single_node()
    except (RecursionError, MemoryError):
        raise SpecError(file, None, "", "too deeply nested or too large to read; simplify the file") from None
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
    try:
        return _build(loader, root, (), lines, file), lines
    except (RecursionError, MemoryError):  # not expected within the limits; still one line, naming the file
        raise SpecError(file, None, "", "too deeply nested or too large to read; simplify the file") from None


def _unreadable(file: str, exc: yaml.YAMLError) -> SpecError:
    return SpecError(file, None, "", f"not readable as YAML ({' '.join(str(exc).split())}); fix the file")


def _construct(loader: _BoundedLoader, node: yaml.Node, path: Path_, file: str) -> Any:
    """A scalar (or a collection used as a key), with construction errors as SpecError."""
    try:
        value = loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(file, node.start_mark.line + 1, format_path(path),
                        f"cannot read this value ({problem}); use a plain YAML value") from None
    if isinstance(value, int) and not -INT_MAX - 1 <= value <= INT_MAX:
        raise SpecError(file, node.start_mark.line + 1, format_path(path),
                        f"the integer is out of range; give one between {-INT_MAX - 1} and {INT_MAX}")
    return value


def _build(loader: _BoundedLoader, node: yaml.Node, path: Path_, lines: dict[Path_, int], file: str) -> Any:
    loader.count(node, path)
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

