"""Defaults live in one place, the schema's dataclasses; the YAML files only choose.

Each conf/<group>/OPTION.yaml sets only values that differ from what the config has without the
line (the schema's default, or the parent option's value for a model like llama_tiny that starts
from `defaults: [llama3_8b]`); a recipe likewise, unless its line says why it is pinned; and the
config composed without overrides is the dataclasses' defaults, the chosen model's own values
aside. So a default is changed in one place, and a YAML copy of it cannot drift."""

import dataclasses
import functools
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.config import Config, as_dict
from launcher.config.reference import compose_default

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}
OPTIONS = sorted(p for p in (ROOT / "conf").glob("*/*.yaml") if p.parent.name in SECTIONS)
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


def split(path: Path) -> tuple:
    """(the defaults list, the values) of a YAML file."""
    node = OmegaConf.load(path)
    return list(node.pop("defaults", [])), node


def leaves(node, cls, prefix: str = "") -> list:
    """The dotted keys a YAML section sets, subsections walked (a dict-typed field is a value)."""
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    found = []
    for key in node:
        if key in fields and dataclasses.is_dataclass(fields[key]):
            found += leaves(node[key], fields[key], f"{prefix}{key}.")
        else:
            found.append(f"{prefix}{key}")
    return found


def value(node, key: str):
    """A dotted key's value as plain data (enums as strings)."""
    values = node if isinstance(node, dict) else OmegaConf.to_container(node, enum_to_str=True)
    for part in key.split("."):
        values = values[part]
    return values


def dropped(node, key: str):
    """A copy of `node` without the dotted key."""
    copy = node.copy()
    *parents, last = key.split(".")
    target = copy
    for part in parents:
        target = target[part]
    del target[last]
    return copy


def with_option(base, group: str, option: str):
    """`base` with a group option merged as Hydra merges it: its parent options first."""
    parents, values = split(ROOT / "conf" / group / f"{option}.yaml")
    for parent in parents:
        base = with_option(base, group, parent)
    return OmegaConf.merge(base, values)


def test_every_group_has_a_section():
    groups = {p.name for p in (ROOT / "conf").iterdir() if p.is_dir()} - {"hydra", "__pycache__"}
    assert groups == set(SECTIONS)


@pytest.mark.parametrize("path", OPTIONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_each_option_sets_only_what_differs(path):
    group = path.parent.name
    parents, values = split(path)
    base = OmegaConf.structured(SECTIONS[group])
    for parent in parents:
        base = with_option(base, group, parent)
    composed = OmegaConf.merge(base, values)
    source = f"{', '.join(parents)}'s value" if parents else "the schema's default"
    restated = [f"conf/{group}/{path.name}: {group}.{key}={value(composed, key)!r} is what "
                f"{group}={path.stem} has without that line ({source}); remove the line"
                for key in leaves(values, SECTIONS[group])
                if value(composed, key) == value(OmegaConf.merge(base, dropped(values, key)), key)]
    assert restated == [], "\n".join(restated)


def plain_diff(composed: dict, schema: dict, prefix: str = "") -> list:
    """Dotted keys whose values differ between two plain configs."""
    found = []
    for key in composed.keys() | schema.keys():
        a, b = composed.get(key), schema.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found += plain_diff(a, b, f"{prefix}{key}.")
        elif a != b or isinstance(a, bool) != isinstance(b, bool):
            found.append(f"{prefix}{key}")
    return sorted(found)


def test_the_default_config_is_the_dataclasses():
    """`launch --cfg job` without overrides is Config()'s defaults, but for the model section,
    which differs exactly where the default model option says so."""
    composed, choices = compose_default()
    schema = as_dict(Config())
    differ = plain_diff(composed, schema)
    outside = [f"{key}: conf/{key.split('.')[0]}/{choices[key.split('.')[0]]}.yaml gives "
               f"{value(composed, key)!r}, the schema {value(schema, key)!r}"
               for key in differ if not key.startswith("model.")]
    assert outside == [], ("the options conf/config.yaml chooses by default change these "
                           "defaults; set them in the dataclass instead:\n" + "\n".join(outside))
    _, tiny = split(ROOT / "conf" / "model" / f"{choices['model']}.yaml")
    assert differ == sorted(f"model.{key}" for key in leaves(tiny, SECTIONS["model"]))


@functools.cache
def registered() -> None:
    from launcher.cli import register_configs

    register_configs()


def composed(*override_lists) -> list:
    """The plain config Hydra composes for each list of overrides (one initialisation)."""
    from hydra import compose, initialize_config_module

    registered()
    with initialize_config_module(config_module="launcher.conf", version_base=None):
        return [OmegaConf.to_container(compose(config_name="config", overrides=list(o)),
                                       enum_to_str=True) for o in override_lists]


def line_of(text: str, key: str) -> str:
    """The line of a YAML text that sets the dotted key (block style, as recipes are written)."""
    stack = []
    for line in text.splitlines():
        name = line.strip().split(":")[0]
        if not line.strip() or line.lstrip().startswith(("#", "-")) or ":" not in line:
            continue
        indent = len(line) - len(line.lstrip())
        stack = [(i, k) for i, k in stack if i < indent] + [(indent, name)]
        if ".".join(k for _, k in stack) == key:
            return line
    raise AssertionError(f"{key} not found")


def starting_point(defaults: list) -> list:
    """A recipe's defaults list as overrides: its parent recipe and its group choices, what its
    values are applied on."""
    found = []
    for entry in defaults:
        if isinstance(entry, str):
            found += [f"+recipe={entry}"] if entry != "_self_" else []
        else:
            found += [f"{key.removeprefix('override').strip(' /')}={option}"
                      for key, option in entry.items()]
    return found


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_each_recipe_sets_only_what_differs_or_says_why(path):
    """A recipe is a delta: a value it restates (the schema's, a group option's or its parent
    recipe's) goes, unless its line pins it on purpose (`# pinned: why`). Each value is compared
    with the config composed from the recipe's defaults list alone (its values hold no
    interpolation, so one line's value does not depend on the others)."""
    defaults, values = split(path)
    start = starting_point(defaults)
    base, full = composed(start, [f"+recipe={path.stem}"])
    text = path.read_text()
    restated = [f"recipes/{path.name}: {key}={value(full, key)!r} is what the recipe has without "
                f"that line ({' '.join(start) or 'the defaults'}); remove it, or say why it is "
                "pinned in a comment on its line (# pinned: ...)"
                for key in leaves(values, Config)
                if key != "hydra" and value(full, key) == value(base, key)
                and "pinned" not in line_of(text, key).partition("#")[2]]
    assert restated == [], "\n".join(restated)
