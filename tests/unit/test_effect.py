"""No setting is silently inert: every key of launcher.config.effect's table, set away from its
default without its governor, is refused in one line naming the governor; with the governor on,
or swept, it is not. Configs are composed by Hydra, as `launch` composes them."""

import dataclasses
import typing
from enum import Enum
from importlib import resources

import pytest

from conftest import make_config as make
from launcher.config import Config, ConfigError, as_dict
from launcher.config.effect import (
    TABLE, check_effect, given_keys, is_swept, moot_notes, sweep_keys,
)
from launcher.config.schema import Missing, lookup
from launcher.config.values import shown

# Values that the generic choice below would get wrong (a list needs its shape, a number its range)
EXAMPLES = {
    "profile.steps": "[3,4]", "profile.ranks": "[1]", "model.moe.layer_freq": "[1,1]",
    "model.recompute.modules": "[mlp]", "model.recompute.num_layers": "1",
    "model.rotary_percent": "0.5", "cuda_graph.modules": "[attn]", "data.path": "/tmp/corpus",
    "data.split": "'90,5,5'", "train.min_lr": "0.0001", "logging.tensorboard.hparams": "[train.lr]",
    "logging.wandb.tags": "[a]", "model.moe.router_topk": "3", "model.rope_scaling_factor": "8",
    "parallel.expert_model_parallel_size": "2", "cluster.gpu": "h100_sxm",
}
# What else turns a governor off where its `active` reads more than the governor
ALSO_OFF = {"cluster.gpu": ["runtime.nproc_per_node=1"]}


def field_type(key: str):
    """The annotated type of a dotted key, Optional unwrapped."""
    schema = Config
    for part in key.split("."):
        kind = {f.name: f.type for f in dataclasses.fields(schema)}[part]
        schema = kind
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) is typing.Union else kind


def away_from_default(key: str) -> str:
    """A value of `key` other than its default, as a Hydra override's text."""
    if key in EXAMPLES:
        return EXAMPLES[key]
    kind, default = field_type(key), lookup(as_dict(Config()), key)
    if kind is bool:
        return shown(not default)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return next(m.value for m in kind if m.value != default)
    if kind is int:
        return str((default or 0) + 1)
    if kind is float:
        return str((default or 0) + 0.5)
    return "x"


CASES = [(rule, key) for rule in TABLE for key in rule.keys]


def governor_off(rule) -> list:
    """Overrides that turn the rule's governor off: none where the default config has it off,
    else the first value of the governor's type that does."""
    also = ALSO_OFF.get(rule.keys[0], [])
    if not rule.active(make(*also)):
        return also
    kind = field_type(rule.governor)
    values = [m.value for m in kind] if issubclass(kind, Enum) else ["false", "true", "0", "1"]
    for value in values:
        override = f"{rule.governor}={value}"
        try:
            if not rule.active(make(override, *also)):
                return [override, *also]
        except ConfigError:
            continue
    raise AssertionError(f"no value of {rule.governor} turns it off")


def test_the_table_names_schema_keys_only():
    values = as_dict(Config())
    for rule in TABLE:
        for key in (*rule.keys, rule.governor):
            assert not isinstance(lookup(values, key), Missing), key


@pytest.mark.parametrize("rule,key", CASES, ids=[f"{k}|{r.governor}" for r, k in CASES])
def test_a_key_without_its_governor_is_refused_naming_it(rule, key):
    cfg = make(f"{key}={away_from_default(key)}", *governor_off(rule))
    sweep = [] if key.startswith("sweep.") else None  # the sweep section acts in a sweep only
    with pytest.raises(ConfigError, match=rf"^{key}=.* has no effect with {rule.governor}=.*; "
                                          rf"set .*, or leave {key} at its default"):
        check_effect(cfg, swept=sweep)
    check_effect(cfg, swept=[rule.governor])  # a sweep that varies the governor lets it through


GOVERNED = [  # each governed key with its governor on: no refusal
    ["profile=torch", "profile.steps=[3,4]", "profile.with_stack=true"],
    ["model=moe_tiny", "model.moe.router_topk=3", "model.moe.grouped_gemm=false"],
    ["model.recompute.granularity=full", "model.recompute.method=uniform",
     "model.recompute.num_layers=1"],
    ["model.recompute.granularity=selective", "model.recompute.modules=[mlp]"],
    ["model=llama_tiny", "model.rotary_percent=0.5", "model.rope_scaling=true",
     "model.rope_scaling_factor=8"],
    ["cuda_graph=full_iteration", "fsdp.prefetch_first_param_group=false",
     "cuda_graph.warmup_steps=1"],
    ["data=indexed", "data.path=/tmp/corpus", "data.split='90,5,5'"],
    ["train.eval_interval=5", "train.eval_iters=3"],
    ["train.lr_schedule=cosine", "train.min_lr=0.0001"],
    ["train.checkpoint.interval=5", "train.checkpoint.dir=/tmp/ckpt"],
    ["logging.tensorboard.enabled=true", "logging.tensorboard.name=x"],
    ["logging.wandb.mode=offline", "logging.wandb.project=x"],
]


@pytest.mark.parametrize("overrides", GOVERNED, ids=[o[-1] for o in GOVERNED])
def test_a_key_with_its_governor_on_is_accepted(overrides):
    check_effect(make(*overrides))


@pytest.mark.parametrize("key", sweep_keys())
def test_a_sweep_key_in_a_single_run_is_refused_naming_minus_m(key):
    if key == "sweep.baseline":  # a mapping: Hydra's override grammar cannot add to it
        cfg = make()
        cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(
            cfg.sweep, baseline={"fsdp": {"prefetch_first_param_group": False}}))
    else:
        value = {"sweep.name": "s"}.get(key) or away_from_default(key)
        race = ["sweep.min_repeats=1"] if key == "sweep.tune" else []  # a race of 1 repeat
        cfg = make(f"{key}={value}", *race)
    with pytest.raises(ConfigError, match=rf"^{key}=.* has no effect in a single run .*; add -m"):
        check_effect(cfg)
    if not any(key in rule.keys for rule in TABLE):  # those need sweep.tune too: tested above
        check_effect(cfg, swept=[])


def test_a_governor_chosen_by_a_swept_group_counts_as_swept():
    assert is_swept("profile.kind", ["profile"]) and is_swept("cuda_graph.impl", ["cuda_graph"])
    assert not is_swept("cuda_graph.impl", ["cuda_graph.warmup_steps"])


RECIPES = sorted(p.name[:-5] for p in resources.files("launcher.recipes").iterdir()
                 if p.name.endswith(".yaml"))


@pytest.mark.parametrize("recipe", RECIPES)
def test_no_recipe_sets_a_key_it_leaves_without_effect(recipe):
    extra = ["data.path=data/stdlib"] if recipe == "tiny_cpu_text" else []
    cfg = make(f"+recipe={recipe}", *extra)
    check_effect(cfg, swept=None if not recipe.startswith("sweep_") else
                 list(make_sweep_keys(recipe)))


def make_sweep_keys(recipe: str):
    """The keys a sweep recipe varies (its hydra.sweeper.params)."""
    from omegaconf import OmegaConf

    text = resources.files("launcher.recipes").joinpath(f"{recipe}.yaml").read_text()
    return OmegaConf.create(text).hydra.sweeper.params.keys()


GOVERNORS_OFF = [  # what a user types to turn a governor off, whatever the recipe set under it
    "train.eval_interval=0", "profile=none", "train.checkpoint.interval=0",
    "logging.tensorboard.enabled=false", "logging.wandb.mode=disabled",
    "train.lr_schedule=constant", "model.recompute.granularity=null",
]


@pytest.mark.parametrize("recipe", RECIPES)
def test_turning_the_governors_off_works_on_every_recipe(recipe):
    """The recipe's keys under them become moot, not wrong: the run starts, and says so. (Each
    key's rule reads its own governor only: all of them off at once is each of them off.)"""
    extra = ["data.path=data/stdlib"] if recipe == "tiny_cpu_text" else []
    overrides = [f"+recipe={recipe}", *extra, *GOVERNORS_OFF]
    cfg = make(*overrides)
    swept = list(make_sweep_keys(recipe)) if recipe.startswith("sweep_") else None
    check_effect(cfg, swept=swept, given=given_keys(overrides))
    for note in moot_notes(cfg, given_keys(overrides)):
        assert note.split("=")[0] not in given_keys(overrides), note


def test_a_key_the_user_sets_under_a_governor_the_user_turns_off_is_refused():
    overrides = ["+recipe=tiny_cpu_text", "data.path=data/stdlib", "train.eval_interval=0"]
    cfg = make(*overrides)
    assert moot_notes(cfg, given_keys(overrides)) == (
        "train.eval_iters=4 (not set on the command line) has no effect with "
        "train.eval_interval=0",)
    with pytest.raises(ConfigError, match=r"^train.eval_iters=3 has no effect with "
                                          r"train.eval_interval=0; set train.eval_interval"):
        given = [*overrides, "train.eval_iters=3"]
        check_effect(make(*given), given=given_keys(given))


def test_a_recipe_key_left_inert_by_nobody_on_the_command_line_is_still_refused():
    """A governor the user did not touch: the composed config contradicts itself."""
    overrides = ["model.moe.router_topk=4"]
    with pytest.raises(ConfigError, match="has no effect with model.moe.num_experts=null"):
        check_effect(make(*overrides), given=["train.steps"])


def test_cluster_gpu_acts_in_a_run_only_where_it_states_the_ranks_per_node():
    check_effect(make("cluster.gpu=h100_sxm"), given=["cluster.gpu"])
    check_effect(make("cluster.gpu=h100_sxm", "runtime.nproc_per_node=1", "runtime.dry_run=true"))
    with pytest.raises(ConfigError, match=r"^cluster.gpu=h100_sxm has no effect with "
                                          r"runtime.dry_run=false; set runtime.dry_run=true"):
        check_effect(make("cluster.gpu=h100_sxm", "runtime.nproc_per_node=1"))
    check_effect(make("cluster.gpu=h100_sxm", "runtime.nproc_per_node=1"), swept=[])  # predicted
