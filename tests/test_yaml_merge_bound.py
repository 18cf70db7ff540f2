"""The bound on ``<<`` merge keys is ours, the same whatever PyYAML does with repeated merges.

PyYAML up to 6.0.3 repeats a merged mapping's entries each time it is merged (a few lines merging
a mapping 9 times at each of 9 levels grow to 9^10 entries); 6.0.4 drops entries whose key object
was merged already (yaml/pyyaml#937, "Fix merge key performance": ``SafeConstructor.flatten_mapping``
keeps a set of merged key ids). Each test runs with the installed PyYAML and with that newer
behaviour put in place here, so it holds on both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
import yaml.constructor

from benchctl.campaign.yaml_source import load_yaml
from benchctl.errors import SpecError

MERGE_BOMB = "a: &a {x0: 1, x1: 1, x2: 1, x3: 1, x4: 1, x5: 1, x6: 1, x7: 1, x8: 1}\n" + "".join(
    f"{name}: &{name} {{<<: [{', '.join([f'*{before}'] * 9)}]}}\n"
    for before, name in zip("abcdefghi", "bcdefghij", strict=True))


@pytest.fixture(params=["installed", "repeats dropped"])
def merge_behaviour(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "repeats dropped":
        original = yaml.constructor.SafeConstructor.flatten_mapping

        def dropping_repeats(self: yaml.constructor.SafeConstructor, node: yaml.MappingNode) -> None:
            own = {id(pair) for pair in node.value if pair[0].tag != "tag:yaml.org,2002:merge"}
            original(self, node)
            seen: set[int] = set()
            merged = []
            for pair in node.value:
                if id(pair) not in own and id(pair[0].value) not in seen:
                    seen.add(id(pair[0].value))
                    merged.append(pair)
            node.value = merged + [pair for pair in node.value if id(pair) in own]

        monkeypatch.setattr(yaml.constructor.SafeConstructor, "flatten_mapping", dropping_repeats)
        assert len(yaml.safe_load(MERGE_BOMB)["j"]) == 9, "the newer behaviour is in place"
    yield request.param


def test_a_merge_bomb_is_refused_by_our_count(merge_behaviour: str) -> None:
    with pytest.raises(SpecError, match="expands to more than 100,000 values"):
        load_yaml(MERGE_BOMB, "bomb.yaml")


def test_merges_read_the_same(merge_behaviour: str) -> None:
    text = "base: &b {x: 1, y: 2}\nother: &o {z: 4}\nc: {<<: [*b, *o, *b], y: 3}\nd: {<<: *b}\n"
    data, lines = load_yaml(text, "m.yaml")
    assert data == {"base": {"x": 1, "y": 2}, "other": {"z": 4}, "c": {"x": 1, "y": 3, "z": 4}, "d": {"x": 1, "y": 2}}
    assert lines[("c", "y")] == 3


def test_a_mapping_merging_itself_is_refused(merge_behaviour: str) -> None:
    with pytest.raises(SpecError, match="nested deeper than 64 levels"):
        load_yaml("name: &x {<<: *x}\n", "self.yaml")
