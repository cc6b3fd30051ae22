"""docs/configuration.md against the schema it is generated from: the page is current, every field
has the docstring the page shows, and the generator reads types and stated ranges as written."""

import dataclasses
from pathlib import Path
from typing import List, Optional

from launcher.config import Config, reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_page_is_current():
    assert PAGE.read_text() == reference.render(), (
        f"docs/configuration.md is stale (the schema, its docstrings, conf/ or recipes/ changed); "
        f"regenerate it: {reference.COMMAND}")


def test_every_field_has_a_docstring():
    """The page's descriptions: each section's fields, each with its attribute docstring, and
    each section with a class docstring. (The root's fields are the sections themselves, described
    by those class docstrings.)"""
    missing = [f"{cls.__name__}.{f.name} ({prefix}.{f.name})"
               for prefix, cls in reference.sections()
               for f in dataclasses.fields(cls) if f.name not in reference.field_docs(cls)]
    missing += [cls.__name__ for _, cls in reference.sections() if not reference.class_doc(cls)]
    assert missing == [], ("fields without a one-line docstring (the string literal right after "
                           f"the field): {', '.join(missing)}")


def test_the_page_lists_every_key_once():
    keys = [f"{prefix}.{f.name}" for prefix, cls in reference.sections()
            for f in reference.leaves(cls)]
    page = PAGE.read_text()
    assert [k for k in keys if page.count(f"| `{k}` |") != 1] == []
    assert f"{len(keys)} keys in {len(dataclasses.fields(Config))} sections" in page


def test_stated_ranges_come_from_the_rules():
    ranges = reference.stated_ranges()
    assert ranges["train.steps"] == ">= 1"  # positive(), in a loop over key names
    assert ranges["model.vocab_size"] == ">= 1"  # size_or_null()
    assert ranges["model.hidden_dropout"] == "[0, 1)"  # a ConfigError's "must lie in [0, 1)"
    assert ranges["model.rotary_percent"] == "(0, 1]"
    assert ranges["train.min_lr"] == "[0, train.lr]"  # "must lie between 0 and train.lr"
    assert ranges["model.recompute.num_layers"] == "[1, model.num_layers]"
    assert ranges["model.num_query_groups"] == ">= 1"  # and not "must divide": no range
    keys = {f"{p}.{f.name}" for p, cls in reference.sections() for f in reference.leaves(cls)}
    assert set(ranges) <= keys


def test_types_and_sentences():
    assert reference.type_name(Optional[List[int]]) == "optional list of int"
    assert reference.first_sentence("Its factor (e.g. 8.0. Or more); null: off.\n Needs x.") \
        == "Its factor (e.g. 8.0. Or more); null: off."
    assert reference.first_sentence("null: megatron's 10000. rope only.") \
        == "null: megatron's 10000. rope only."
