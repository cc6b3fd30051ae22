"""Types and magnitudes (launcher/config/values.py): a bool takes only true or false, every int
lies at or below its limit, every float is finite; through Hydra's real parser and compose, as
`launch` reads a command line (launcher.cli.compose)."""

import math
import re
from dataclasses import dataclass, field

import pytest

from launcher.cli import compose
from launcher.config import Config, ConfigError
from launcher.config.values import INT_CEILING, LIMITS, bool_keys, check_number, check_values


@pytest.mark.parametrize("override,read", [
    ("fsdp.prefetch_first_param_group=2", "true"),
    ("fsdp.prefetch_first_param_group=yes", "true"),
    ("fsdp.prefetch_first_param_group=off", "false"),
    ("fsdp.prefetch_first_param_group='0'", "false"),
    ("train.check_nan_in_grad=1", "true"),  # Optional[bool]: null, true or false
])
def test_a_bool_takes_only_true_or_false(override, read):
    key, _, value = override.partition("=")
    value = value.strip("'")
    with pytest.raises(ConfigError, match=rf"^{key}={value}: {value} is not true or false, and "
                                          rf"would be read as {read}; give {key} true or "
                                          rf"false$"):
        compose(["+recipe=tiny_cpu", override])


def test_true_false_and_null_are_bools():
    cfg = compose(["+recipe=tiny_cpu", "fsdp.prefetch_first_param_group=False",
                   "fsdp.overlap_grad_reduce='true'", "train.check_nan_in_grad=null"])
    assert cfg.fsdp.prefetch_first_param_group is False and cfg.fsdp.overlap_grad_reduce is True


def test_the_bool_keys_are_read_from_the_type_hints():
    keys = bool_keys(Config)
    assert {"fsdp.prefetch_first_param_group", "train.check_nan_in_grad", "model.fusions.rope",
            "logging.wandb.verbose", "sweep.tune"} <= keys
    assert not keys & {"train.steps", "train.lr", "fsdp.sharding_strategy"}


def test_an_int_above_the_ceiling_is_refused_on_a_field_no_limit_names():
    assert "train.eval_iters" not in LIMITS
    with pytest.raises(ConfigError, match=r"^train.eval_iters=2147483648 is above 2147483647, "
                                          r"the most a count may be \(a 32-bit signed "
                                          r"integer\); set train.eval_iters to at most "
                                          r"2147483647$"):
        compose(["+recipe=tiny_cpu", "train.eval_iters=2147483648"])


def test_the_run_the_issue_found_is_refused_before_it_trains():
    with pytest.raises(ConfigError, match=r"^train.steps=1000000000000000000000000000000 is "
                                          r"above 2147483647"):
        compose(["+recipe=tiny_cpu", "train.steps=1000000000000000000000000000000"])


@pytest.mark.parametrize("key", sorted(LIMITS))
def test_each_limit_is_refused_one_above_and_taken_at_it(key):
    most = LIMITS[key].most
    with pytest.raises(ConfigError, match=rf"^{key}={most + 1} is above {most}, "
                                          rf"{re.escape(LIMITS[key].why)}"
                                          rf"; set {key} to at most {most}$"):
        compose(["+recipe=tiny_cpu", f"{key}={most + 1}"])
    check_number(key, most, most)


def test_a_list_of_ints_names_the_entry_above_the_ceiling():
    with pytest.raises(ConfigError, match=r"^profile.ranks=\[0, 2147483648\] holds 2147483648, "
                                          r"which is above 2147483647"):
        compose(["+recipe=tiny_cpu", "profile=torch", "profile.ranks=[0,2147483648]"])


@pytest.mark.parametrize("override", ["train.lr=nan", "train.lr=inf", "model.hidden_dropout=-inf",
                                      "sweep.pending_limit_min=inf"])
def test_a_float_must_be_finite(override):
    key, _, value = override.partition("=")
    with pytest.raises(ConfigError, match=rf"^{key}={value} is not a finite number; give {key} "
                                          rf"a finite number$"):
        compose(["+recipe=tiny_cpu", override])


@dataclass
class Inner:
    rate: float = 0.5


@dataclass
class Added:
    """A section no table names: its fields are checked by their types alone."""

    count: int = 1
    inner: Inner = field(default_factory=Inner)


def test_a_new_field_is_covered_without_being_listed():
    check_values({"count": INT_CEILING.most, "inner": {"rate": 1e300}}, Added, "added.")
    with pytest.raises(ConfigError, match=r"^added.count=2147483648 is above 2147483647"):
        check_values({"count": 2**31, "inner": {"rate": 0.5}}, Added, "added.")
    with pytest.raises(ConfigError, match=r"^added.inner.rate=nan is not a finite number"):
        check_values({"count": 1, "inner": {"rate": math.nan}}, Added, "added.")
