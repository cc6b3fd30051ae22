"""What a value may be beyond its type, for every field of the schema, found from the dataclasses'
type hints (a new field is covered without being listed here).

omegaconf converts what it can, and Python's numbers have no size: a bool field takes 2, "yes"
or "off" (its BooleanNode reads them as true or false), an int field any integer (10**30 trains
for ever, or overflows on a rank), and a float field nan or inf, which pass every `x > 0` rule
(nan compares false both ways). So:
- a bool takes only true or false (null where it is optional). After composition it is already
  a bool, so the raw value is checked where it can still be seen: Hydra's parsed overrides
  (`check_bool_overrides`: a run's task overrides, a sweep's arguments, every swept value);
- every int lies at or below its limit (LIMITS, else INT_CEILING), every float is finite
  (`check_values`, on the composed values before any section's rules read them). The lower
  bounds are each section's own rules (positive, size_or_null, >= 0).
"""

import dataclasses
import math
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Iterator, Tuple

from launcher.config.error import ConfigError


@dataclass(frozen=True)
class Limit:
    most: int
    """The largest value the key takes."""
    why: str
    """Why a larger value is a mistake, as the refusal says it after the number."""


INT_CEILING = Limit(2**31 - 1, "the most a count may be (a 32-bit signed integer)")
"""Every int field without a limit of its own: no count of a run comes near it (2**31 steps at
one a second take 68 years), and the C++ and CUDA code under torch and megatron-core keeps many
counts in 32-bit ints (c10d's ranks and world size, kernel launch sizes), where a larger one
overflows with no message that names the key."""

FFN = "5x the widest MLP published (Megatron-LM's 1T GPT: 102400)"
VOCABULARY = "16x the largest vocabulary published (Gemma 3: 262144)"
ELEMENTS = "elements (2 TiB in bf16, more than any GPU holds)"

LIMITS = {
    # each repeat runs every cell once more; the sweep's schedule holds every repeat
    "sweep.repeats": Limit(1000, "the most repeats a sweep runs (each runs every cell once "
                                 "more)"),
    # a collective timeout turns a stalled rank into a failed job: a week is longer than anyone
    # waits for one. torch's own limit is far above (checked, torch 2.11 gloo: 9.2e9 s works,
    # 1e10 s overflows the c10d store's deadline in int64 nanoseconds and fails at once)
    "runtime.timeout_s": Limit(7 * 24 * 3600, "7 days (a collective that waits longer is a "
                                              "hung job)"),
    "runtime.rdzv_timeout_s": Limit(7 * 24 * 3600, "7 days (a rendezvous that waits longer "
                                                   "is a hung job)"),
    # numpy's seed range (np.random.seed), which train.seed's own rule also states
    "train.seed": Limit(2**32 - 1, "numpy's largest seed"),
    # Model sizes: several times the largest published, so a real model always fits and a
    # slipped digit does not.
    "model.num_layers": Limit(4096, "4x the deepest transformer published (DeepNet: 1000 "
                                    "layers)"),
    "model.hidden_size": Limit(2**17, "5x the widest model published (Megatron-LM's 1T GPT: "
                                      "25600)"),
    "model.ffn_hidden_size": Limit(2**19, FFN),
    "model.moe.ffn_hidden_size": Limit(2**19, FFN),
    "model.moe.shared_expert_ffn_hidden_size": Limit(2**19, FFN),
    "model.num_attention_heads": Limit(1024, "6x the most heads published (Megatron-LM's 1T "
                                             "GPT: 160)"),
    "model.kv_channels": Limit(4096, "16x the widest head published (Gemma: 256 channels)"),
    "model.seq_length": Limit(2**24, "16x the longest sequence trained on (1M tokens)"),
    "model.vocab_size": Limit(2**22, VOCABULARY),
    "model.mock_vocab_size": Limit(2**22, VOCABULARY),
    # elements, not a count of things: a bucket may hold more than 2**31 (one bucket of an 8B
    # model unsharded); 2**40 bf16 elements are 2 TiB, several times any GPU's memory
    "fsdp.bucket_size": Limit(2**40, ELEMENTS),
    "fsdp.suggested_communication_unit_size": Limit(2**40, ELEMENTS),
}


def dotted(tree: dict, prefix: str = "") -> dict:
    """{fsdp: {prefetch_first_param_group: true}} -> {"fsdp.prefetch_first_param_group": true}."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def fields_of(schema, prefix: str = "") -> Iterator[Tuple[str, type]]:
    """(dotted key, type hint) of every leaf field of the dataclass `schema`, nested sections
    walked into."""
    hints = typing.get_type_hints(schema)
    for item in dataclasses.fields(schema):
        kind = hints[item.name]
        if dataclasses.is_dataclass(kind):
            yield from fields_of(kind, f"{prefix}{item.name}.")
        else:
            yield f"{prefix}{item.name}", kind


def bool_keys(schema) -> set:
    """The dotted keys typed bool or Optional[bool]."""
    return {key for key, kind in fields_of(schema)
            if kind is bool or kind == typing.Optional[bool]}


def check_values(values: dict, schema, prefix: str = "") -> None:
    """Every int of `values` (the plain, resolved data of `schema`) at or below its limit, every
    float finite; raises ConfigError naming the first that is not."""
    for name, kind in typing.get_type_hints(schema).items():
        key, value = f"{prefix}{name}", values.get(name)
        if dataclasses.is_dataclass(kind) and isinstance(value, dict):
            check_values(value, kind, f"{key}.")
        else:
            for number in value if isinstance(value, list) else [value]:
                check_number(key, number, value)


def check_number(key: str, number, given) -> None:
    """One number of `key` (`given`: the key's whole value, a list where it holds several)."""
    one = given is number
    shown = f"{key}={given}" if one else f"{key}={given} holds {number}, which"
    each = key if one else f"each entry of {key}"
    if isinstance(number, float) and not math.isfinite(number):
        raise ConfigError(f"{shown} is not a finite number; give {each} a finite number")
    if isinstance(number, int) and not isinstance(number, bool):
        limit = LIMITS.get(key, INT_CEILING)
        if number > limit.most:
            raise ConfigError(f"{shown} is above {limit.most}, {limit.why}; set {each} to at "
                              f"most {limit.most}")


def check_bool_overrides(overrides: Iterable, schema) -> None:
    """Hydra's parsed overrides (every value of a swept one) against the bool fields of
    `schema`: a value omegaconf would silently read as true or false (2, yes, off) is refused.
    Values omegaconf refuses itself (maybe, 1.5) are left to its message (launcher.config.
    explain); an interpolation is the value of the key it names."""
    from hydra.core.override_parser.types import QuotedString

    keys = bool_keys(schema)
    for override in overrides:
        if override.key_or_group not in keys or override.is_delete():
            continue
        given = (override.sweep_iterator() if override.is_discrete_sweep()
                 else [override.value()])
        for value in given:
            value = value.text if isinstance(value, QuotedString) else value
            check_bool(override.key_or_group, value)


def check_bool(key: str, value) -> None:
    """One value given to a bool key; refused where omegaconf would convert it silently."""
    from omegaconf import BooleanNode
    from omegaconf.errors import ValidationError

    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str) and (value.lower() in ("true", "false") or "${" in value):
        return  # a quoted true is the word itself
    try:
        read = BooleanNode().validate_and_convert(value)
    except ValidationError:
        return
    raise ConfigError(f"{key}={value}: {value} is not true or false, and would be read as "
                      f"{str(read).lower()}; give {key} true or false")


def parse(arguments: Iterable[str]) -> list:
    """Override strings (`key=value`) as Hydra's parser reads them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(list(arguments))


def shown(value, separator: str = ",", quote: bool = False) -> str:
    """A config value as one line of text, as an override spells it: null, true or false, an
    Enum's value, a list in brackets (its items joined by `separator`: `[0,1]` in a refusal,
    `[0, 1]` as `launch --cfg job` writes it), a mapping in braces; anything else as str. With
    `quote`, a string is quoted, as a hardware file's refusal shows it (the quotes tell a string
    from a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, list):
        return "[" + separator.join(shown(v, separator, quote) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{shown(k, separator, quote) if quote else k}: "
                               f"{shown(v, separator, quote)}" for k, v in value.items()) + "}"
    return repr(value) if quote and isinstance(value, str) else str(value)
