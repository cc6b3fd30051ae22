"""The configuration reference, docs/configuration.md, generated from the typed schema:

    .venv/bin/python -m launcher.config.reference > docs/configuration.md

Every key of `launch --cfg job`, section by section, with its type, its default (what `launch
--cfg job` prints without overrides: the schema's defaults and the default model option's values),
its allowed values (an enum's every value; a range only where a rule of the schema states one)
and the first sentence of its attribute docstring; each config group's options and the recipes,
with the purpose their header comments give. The docstrings and the rules are read from the
schema's source with ast, the defaults composed by Hydra as `launch` composes them; nothing here
imports torch. tests/unit/test_reference.py fails when the page is stale.
"""

import ast
import dataclasses
import inspect
import re
import textwrap
import typing
from enum import Enum
from importlib import resources

from launcher.config.schema import Config, as_dict, lookup
from launcher.config.values import INT_CEILING, LIMITS, shown

COMMAND = ".venv/bin/python -m launcher.config.reference > docs/configuration.md"

# the rules' helpers (launcher/config/error.py), and what each says a value may be
HELPERS = {"positive": ">= 1", "size_or_null": ">= 1", "text_or_null": "not empty"}

# what a ConfigError message says after "KEY=VALUE must be|lie ...": the ranges it may state
RANGES = (
    (r"(?:>=|at least) (\S+)", r">= \1"),
    (r"(?:>|more than) (\S+)", r"> \1"),
    (r"positive", "> 0"),
    (r"(?:in )?([\[(][^\])]*[\])])", r"\1"),
    (r"between (\S+) and (\S+)", r"[\1, \2]"),
)


def field_docs(cls) -> dict:
    """{field name: its attribute docstring} of a dataclass, read from its source: the string
    literal right after each field."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def class_doc(cls) -> str:
    """A class's own docstring on one line ("" for none: not the signature dataclass makes)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    return " ".join((ast.get_docstring(tree) or "").split())


def first_sentence(text: str) -> str:
    """The text up to its first full stop outside parentheses that ends a sentence (a stop then
    a capital, or the end), on one line."""
    text, depth = " ".join(text.split()), 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "." and depth == 0 and re.match(r"\s+[A-Z`]", text[i + 1:]):
            return text[:i + 1]
    return text


def sections(cls=Config, prefix: str = "") -> list:
    """(dotted prefix, dataclass) of every section under the root, depth first, in field order."""
    found = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.type):
            found.append((f"{prefix}{f.name}", f.type))
            found += sections(f.type, f"{prefix}{f.name}.")
    return found


def leaves(cls) -> list:
    """The fields of a section that hold values (not subsections)."""
    return [f for f in dataclasses.fields(cls) if not dataclasses.is_dataclass(f.type)]


def type_name(tp) -> str:
    """int, float, bool, str, an enum's name, `list of X`, `optional X`, dict."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union and type(None) in args:
        return "optional " + type_name(next(a for a in args if a is not type(None)))
    if origin is list:
        return "list of " + type_name(args[0])
    if origin is dict:
        return "dict"
    return tp.__name__


def enum_of(tp):
    """The Enum a field's values come from (itself, optional or in a list), else None."""
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp
    found = [enum_of(a) for a in typing.get_args(tp)]
    return next((e for e in found if e is not None), None)


def stated_ranges() -> dict:
    """{dotted key: the range its rules state}, read from every section's methods: the helpers'
    (positive, size_or_null, text_or_null) and ConfigError messages "KEY=VALUE must be|lie
    RANGE". Loops over a tuple of key names are unrolled. Nothing is stated that a rule does not
    say; a rule across keys that is no range ("must divide") is left to the docstring."""
    found = {}
    for _, cls in sections():
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                _scan(node, {}, found)
    return {key: ", ".join(merged(ranges)) for key, ranges in found.items()}


def _scan(node, names: dict, found: dict) -> None:
    if (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
            and isinstance(node.iter, ast.Tuple)
            and all(isinstance(e, ast.Constant) for e in node.iter.elts)):
        for element in node.iter.elts:
            for statement in node.body:
                _scan(statement, {**names, node.target.id: element.value}, found)
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        text = _text(node.args[0], names)
        if node.func.id in HELPERS and "{}" not in text:
            found.setdefault(text, []).append(HELPERS[node.func.id])
        elif node.func.id == "ConfigError":
            said = re.match(r"([\w.]+)=\{\} must (?:be|lie) (.*)", text)
            if said:
                # up to the fix, or to a parenthesis that explains (not an interval's bracket)
                phrase = re.split(r";| \((?=[a-z])", said.group(2).replace("={}", ""))[0]
                for pattern, shown in RANGES:
                    if re.fullmatch(pattern, phrase):
                        found.setdefault(said.group(1), []).append(
                            re.sub(pattern, shown, phrase))
                        break
    for child in ast.iter_child_nodes(node):
        _scan(child, names, found)


def _text(node, names: dict) -> str:
    """A string literal or f-string, its loop names filled in, other values as {}."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part, names) for part in node.values)
    if (isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Name)
            and node.value.id in names):
        return str(names[node.value.id])
    return "{}"


def merged(ranges: list) -> list:
    """One copy of each; an interval says the bounds, so it drops the bare bounds."""
    unique = list(dict.fromkeys(ranges))
    if any(r[0] in "[(" for r in unique):
        unique = [r for r in unique if r[0] in "[("]
    return unique


def compose_default():
    """(the default config as plain data, {group: chosen option}): `launch --cfg job` with no
    overrides, composed by Hydra from conf/ as `launch` composes it."""
    from hydra import compose, initialize_config_module
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="schema", node=Config)
    with initialize_config_module(config_module="launcher.conf", version_base=None):
        composed = compose(config_name="config", return_hydra_config=True)
    choices = {k: v for k, v in composed.hydra.runtime.choices.items() if "/" not in k}
    values = OmegaConf.to_container(composed, enum_to_str=True)
    values.pop("hydra")
    return values, choices


def header(text: str) -> list:
    """The lines of a YAML file's leading comment block, Hydra's package line left out."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            lines.append(line[1:].strip())
    return lines


def option_purpose(lines: list) -> str:
    """A group option's purpose: the first sentence of its header comment."""
    return first_sentence(" ".join(lines))


def recipe_purpose(lines: list) -> str:
    """A recipe's purpose: its header's first line, as `launch --help` shows it."""
    return lines[0] if lines else ""


def options(package, purpose=option_purpose) -> list:
    """(option, purpose) of every YAML file in a package folder, by name."""
    files = sorted((p for p in package.iterdir() if p.name.endswith(".yaml")),
                   key=lambda p: p.name)
    return [(p.name[:-5], purpose(header(p.read_text()))) for p in files]


def cell(text: str) -> str:
    """Prose for a Markdown table cell: pipes, tags and emphasis characters escaped."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")


def table(prefix: str, cls, defaults: dict, schema: dict, ranges: dict) -> list:
    docs = field_docs(cls)
    lines = ["| Key | Type | Default | Allowed | Description |", "|---|---|---|---|---|"]
    for f in leaves(cls):
        key = f"{prefix}.{f.name}"
        default = f"`{shown(lookup(defaults, key), separator=', ')}`"
        if lookup(defaults, key) != lookup(schema, key):
            default += f" (schema: `{shown(lookup(schema, key), separator=', ')}`)"
        enum = enum_of(f.type)
        allowed = ", ".join(f"`{e.value}`" for e in enum) if enum else cell(bounds(key, ranges))
        lines.append(f"| `{key}` | {type_name(f.type)} | {default} | {allowed} | "
                     f"{cell(first_sentence(docs.get(f.name, '')) + acts_only(key))} |")
    return lines


def bounds(key: str, ranges: dict) -> str:
    """The range the rules state, with the key's own upper limit (launcher.config.values) where
    they state no interval that already holds it."""
    upper = f"<= {LIMITS[key].most}" if key in LIMITS else ""
    return ", ".join(merged([r for r in (ranges.get(key), upper) if r]))


def acts_only(key: str) -> str:
    """Where the key acts only under another's value (launcher.config.effect's table)."""
    from launcher.config.effect import TABLE, sweep_keys

    enable = [rule.enable for rule in TABLE if key in rule.keys]
    if key in sweep_keys():
        enable.insert(0, "`launch -m`")
    return f" Acts only with {' and '.join(enable)}." if enable else ""


def render() -> str:
    """The whole page."""
    defaults, choices = compose_default()
    schema, ranges = as_dict(Config()), stated_ranges()
    conf, found = resources.files("launcher.conf"), sections()
    count = sum(len(leaves(cls)) for _, cls in found)
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from launcher/config/ by `{COMMAND}`; do not edit by hand "
        "(tests/unit/test_reference.py fails when it is stale). -->",
        "",
        f"Every key of `launch --cfg job`: {count} keys in {len(dataclasses.fields(Config))} "
        "sections, one per config group. Set any of them on the command line as `KEY=VALUE` "
        "(`fsdp.prefetch_first_param_group=false`), choose a group's option as `GROUP=OPTION` "
        "(`model=llama3_8b`), and start from a recipe with `+recipe=NAME`.",
        "",
        "- **Default**: what `launch --cfg job` prints without overrides. The dataclasses in "
        "launcher/config/ hold every default, and the option each group chooses by default "
        "(conf/config.yaml) changes none of them, except the model's: `model="
        f"{choices['model']}`; where its value is not the schema's, the schema's follows.",
        "- **Allowed**: an enum's every value; otherwise the range a rule of the schema states "
        "(blank: any value of the type). Rules across keys are in each section's docstring and "
        "refused at compose time with the key and the fix. Every int is at most "
        f"{INT_CEILING.most} unless its row says otherwise, every float is finite, and a bool takes "
        "true or false only (launcher/config/values.py).",
        "- **Description**: the first sentence of the field's docstring (the whole docstring is "
        "in the section's source file, named under each heading); and, where the key acts only "
        "under another's value, which: set without it, the key is refused before any rank "
        "starts (launcher/config/effect.py).",
        "",
        "## Recipes",
        "",
        "`+recipe=NAME` (recipes/NAME.yaml): a delta on the defaults, then any override on top.",
        "",
        "| Recipe | Purpose |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {cell(what)} |"
              for name, what in options(resources.files("launcher.recipes"), recipe_purpose)]
    for prefix, cls in found:
        group = "." not in prefix
        source = inspect.getsourcefile(cls).split("launcher/config/")[-1]
        lines += ["", f"{'##' if group else '###'} `{prefix}`", "",
                  f"`{cls.__name__}` (launcher/config/{source}): "
                  f"{cell(class_doc(cls))}", ""]
        if group:
            lines += [f"Options (`{prefix}=OPTION`, conf/{prefix}/OPTION.yaml):", ""]
            for name, what in options(conf / prefix):
                chosen = " (the default)" if choices.get(prefix) == name else ""
                lines.append(f"- `{name}`{chosen}" + (f": {cell(what)}" if what else ""))
            lines.append("")
        lines += table(prefix, cls, defaults, schema, ranges)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
