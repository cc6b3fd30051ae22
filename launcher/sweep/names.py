"""A sweep's display names: a swept key's short name and a cell's label, as the console, the
tables, the charts and the runs' names (wandb, TensorBoard) show them."""

from typing import Dict, List


def short_names(keys: List[str]) -> Dict[str, str]:
    """The last part of each key (prefetch_first_param_group), unless two keys share it."""
    last = [k.split(".")[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def label(values: Dict[str, str]) -> str:
    names = short_names(list(values))
    return ", ".join(f"{names[k]}={v}" for k, v in values.items()) or "(no swept key)"
