"""Hydra's and OmegaConf's composition errors as one line: the key, the value, the fix.

`launch` runs Hydra with HYDRA_FULL_ERROR=1 so that the exception reaches it instead of Hydra's
multi-line report; `explain` turns it into what `launch` prints (exit code 2).
"""

import difflib
import re

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf.errors import (
    ConfigAttributeError, ConfigKeyError, GrammarParseError, InterpolationResolutionError,
    ValidationError,
)

GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic"


def explain(err: Exception) -> str:
    """One line for a composition error; falls back to the message's lines joined."""
    cause = err.__cause__ or err  # Hydra's wrap the omegaconf error; to_config's are bare
    override = re.search(r"override (\S+)", str(err))
    if isinstance(err, MissingConfigException):
        return missing_option(str(err))
    if isinstance(cause, (InterpolationResolutionError, GrammarParseError)):
        return interpolation(cause)
    if isinstance(err, OverrideParseException):
        return (f"cannot parse an override: {first_line(err)}; see {GRAMMAR} "
                "(quote values with commas or spaces)")
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        return unknown_key(getattr(cause, "full_key", None) or "?")
    if isinstance(cause, ValidationError):
        given = override.group(1) if override else cause.full_key
        said = runnable_choices(first_line(cause), cause.full_key)
        return f"{given}: {said}; {validation_fix(said, cause.full_key)}"
    ambiguous = re.search(r"Ambiguous value for argument '([^']+)'", str(err))
    if ambiguous:
        return (f"{ambiguous.group(1)}: a comma makes a sweep; quote the value for one run "
                "(key='a,b'), or sweep with -m")
    appendable = re.search(r"Could not override '(\S+)'\. No match in the defaults list.*"
                           r"use (\+\S+)", str(err), re.DOTALL)
    if appendable:
        return (f"{appendable.group(1)} is not in the defaults list, so it cannot be overridden; "
                f"add it with {appendable.group(2)}")
    if isinstance(err, ConfigCompositionException):
        return "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return f"{type(err).__name__}: {first_line(err)}"


def unknown_key(key: str, added: bool = False) -> str:
    """A key the schema lacks, with the schema's nearest keys where some are close: a misspelling
    names what was meant."""
    near = nearest_keys(key)
    notes = (["added with +"] if added else []) + (
        [f"did you mean {either(near)}?"] if near else [])
    said = f" ({'; '.join(notes)})" if notes else ""
    return (f"{key} is not a config key{said}; check its spelling (`launch --cfg job` prints "
            "every key), or remove it")


def nearest_keys(key: str, most: int = 3) -> list:
    """The schema's dotted keys closest to `key` (difflib's ratio over the whole key, 0.75 or
    more: a misspelling, not any key of the section), or those it begins (`fsdp.prefetch` ->
    fsdp.prefetch_first_param_group); none for Hydra's own."""
    from launcher.config.schema import Config
    from launcher.config.values import fields_of

    keys = [name for name, _ in fields_of(Config)]
    return (difflib.get_close_matches(key, keys, n=most, cutoff=0.75)
            or [name for name in keys if name.startswith(key)][:most])


def either(names: list) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def interpolation(err: Exception) -> str:
    """A `${...}` that names no key, no resolver, or a value that is missing (???)."""
    key = getattr(err, "full_key", None) or "?"
    return (f"{key}: {first_line(err)}; fix the ${{...}} it holds (`launch --cfg job` prints "
            f"every key), or give {key} a plain value")


def runnable_choices(message: str, key: str) -> str:
    """An Enum's "expected one of [...]" with the values no run can use (choices.UNRUNNABLE) left
    out and the reason said: the list names only what a user can pick."""
    from launcher.config.choices import UNRUNNABLE

    listed = re.search(r"expected one of \[([^\]]*)\]", message)
    if not listed or key not in UNRUNNABLE:
        return message
    left_out, why = UNRUNNABLE[key]
    names = {value.value for value in left_out}
    kept = [v for v in listed.group(1).split(", ") if v not in names]
    gone = [v for v in listed.group(1).split(", ") if v in names]
    return (f"{message[:listed.start()]}expected one of [{', '.join(kept)}] "
            f"({' and '.join(gone)}: {why})")


def first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0]


KINDS = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}


def validation_fix(message: str, key: str) -> str:
    if "expected one of" in message:
        return f"set {key} to one of those"
    if "is not a valid bool" in message:
        return f"give {key} true or false"
    if "is not Optional" in message:
        return f"give {key} a value (it cannot be null)"
    kind = re.search(r"converted to (\w+)", message)
    if kind and kind.group(1) in KINDS:
        return f"give {key} {KINDS[kind.group(1)]}"
    return f"give {key} a value of the type `launch --cfg job` shows"


def missing_option(message: str) -> str:
    """"Could not find 'recipe/nope'" plus Hydra's list of options, as one line."""
    found = re.search(r"Could not find '([^']+)'", message)
    what = found.group(1) if found else "?"
    group, _, name = what.rpartition("/")
    options = re.findall(r"^\t(\S+)$", message.split("Config search path")[0], re.MULTILINE)
    listed = ", ".join(options) or "none"
    return f"{group}={name}: no such option in `{group}`; pick one of: {listed}"
