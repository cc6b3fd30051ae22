"""A sweep's plan through Hydra's real compose: the grid, the pre-flight reasons, cell ids."""

import os
import subprocess
import sys

import pytest
from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from launcher.cli import register_configs
from launcher.config import ConfigError
from launcher.sweep.error import SweepError
from launcher.sweep.plan import build_plan
from launcher.sweep.settings import check_sweep
from launcher.sweep.slurm import gpu_count

register_configs()
RECIPE = "+recipe=sweep_tiny_cpu"


def plan_for(*command_line):
    """The plan `launch -m RECIPE *command_line` makes, through Hydra's own config loader in
    multirun mode (as `launch -m` calls it): the recipe's grid, then the command line."""
    with initialize_config_module(config_module="launcher.conf", version_base=None):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", [RECIPE, *command_line], RunMode.MULTIRUN)
        params = [f"{k}={v}" for k, v in master.hydra.sweeper.params.items()]
        arguments = [*params, RECIPE, *command_line]
        check_sweep(master, arguments)  # as the driver does, first
        return build_plan(master, lambda overrides: loader.load_sweep_config(master, overrides),
                          arguments, loader)


def by_values(plan):
    return {tuple(c.values.values()): c for c in plan.cells}


def test_recipe_grid_has_four_cells_one_refused_with_its_reason():
    plan = plan_for()
    assert plan.keys == ["fsdp.prefetch_first_param_group", "cuda_graph.impl"]
    cells = by_values(plan)
    assert sorted(cells) == [("false", "full_iteration"), ("false", "none"),
                             ("true", "full_iteration"), ("true", "none")]
    refused = cells[("true", "full_iteration")]
    assert not refused.valid
    assert "cannot be captured" in refused.reason
    assert "set fsdp.prefetch_first_param_group=false" in refused.reason
    assert all(c.valid for v, c in cells.items() if v != ("true", "full_iteration"))
    assert plan.baseline == cells[("true", "none")].id and plan.repeats == 2


def test_cell_ids_are_stable_and_unique():
    first, second = plan_for(), plan_for()
    assert [c.id for c in first.cells] == [c.id for c in second.cells]
    assert len({c.id for c in first.cells}) == 4


def test_cell_ids_are_the_same_in_another_process():
    code = ("import sys; sys.path.insert(0, 'tests/unit'); from test_sweep_plan import plan_for; "
            "print(' '.join(c.id for c in plan_for().cells))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    assert out == [c.id for c in plan_for().cells]


def test_cell_ids_change_with_what_is_measured_only():
    ids = {c.id for c in plan_for().cells}
    assert not ids & {c.id for c in plan_for("model.hidden_size=128").cells}
    assert not ids & {c.id for c in plan_for("train.steps=13").cells}
    # sweep and logging settings do not change what a run measures
    assert ids == {c.id for c in plan_for("sweep.repeats=5", "logging.wandb.tags=[a]").cells}


def test_allow_numerics_change_reaches_the_plan_and_not_the_cell_ids():
    """sweep.allow_numerics_change (default false) is the tuner's gate (launcher.sweep.tuned):
    the plan carries it, and like every sweep setting it does not change what a cell measures."""
    default = plan_for("sweep.tune=true")
    allowed = plan_for("sweep.tune=true", "sweep.allow_numerics_change=true")
    assert not default.allow_numerics_change and allowed.allow_numerics_change
    assert [c.id for c in default.cells] == [c.id for c in allowed.cells]


def test_command_line_value_replaces_the_recipe_grid_for_that_key():
    plan = plan_for("cuda_graph.impl=none")
    assert plan.keys == ["fsdp.prefetch_first_param_group"]
    assert sorted(by_values(plan)) == [("false",), ("true",)]


def test_command_line_grid_replaces_the_recipe_grid():
    plan = plan_for("fsdp.prefetch_first_param_group=false", "~sweep.baseline.fsdp")
    assert [c.values for c in plan.cells] == [
        {"cuda_graph.impl": "none"}, {"cuda_graph.impl": "full_iteration"}]
    assert all(c.valid for c in plan.cells)


def test_baseline_naming_a_key_the_command_line_fixed_must_match_it():
    assert plan_for("cuda_graph.impl=none").baseline  # the recipe's baseline says impl none too
    with pytest.raises(ConfigError, match=r"sweep.baseline wants cuda_graph.impl=none, but the "
                                          r"sweep fixes cuda_graph.impl=full_iteration; sweep "
                                          r"cuda_graph.impl or drop it from the baseline "
                                          r"\(~sweep.baseline.cuda_graph.impl\)"):
        plan_for("cuda_graph.impl=full_iteration")
    plan = plan_for("cuda_graph.impl=full_iteration", "~sweep.baseline.cuda_graph.impl",
                    "sweep.baseline.fsdp.prefetch_first_param_group=false")
    assert plan.cell(plan.baseline).values == {"fsdp.prefetch_first_param_group": "false"}


def test_baseline_naming_an_unknown_key_is_refused():
    with pytest.raises(ConfigError, match=r"sweep.baseline names model.hidden_sise, which is not "
                                          r"a config key; use swept keys only"):
        plan_for("+sweep.baseline.model.hidden_sise=64")


def test_baseline_on_an_invalid_cell_is_refused():
    with pytest.raises(ConfigError, match=r"is an invalid cell .*pick a valid cell as baseline"):
        plan_for("sweep.baseline.cuda_graph.impl=full_iteration")


@pytest.mark.parametrize("override,match", [
    ("sweep.repeats=1,2", r"sweep.repeats cannot be swept .*give it one value"),
    ("train.lr=interval(0.1,0.2)", r"train.lr: only lists of values can be swept"),
])
def test_grids_that_cannot_be_swept(override, match):
    with pytest.raises(SweepError, match=match):
        plan_for(override)


def test_slurm_preset_needs_one_task_per_gpu():
    with pytest.raises(SweepError, match=r"hydra.launcher.tasks_per_node=1 with hydra.launcher."
                                         r"gpus_per_node=8: each GPU needs its own task .*set "
                                         r"hydra.launcher.tasks_per_node=8"):
        plan_for("hydra/launcher=slurm", "hydra.launcher.tasks_per_node=1")


@pytest.mark.parametrize("overrides,line", [
    (["hydra.launcher.gpus_per_node=0"],
     "hydra.launcher.tasks_per_node=0 with hydra.launcher.gpus_per_node=0: on CPU nodes each task "
     "is one rank and its count is not implied by the GPUs; set hydra.launcher.tasks_per_node=N "
     "(the ranks per node)"),
    (["hydra.launcher.gpus_per_node=-2"],
     "hydra.launcher.gpus_per_node=-2 must be a whole number >= 0; set "
     "hydra.launcher.gpus_per_node=0 or more"),
    (["hydra.launcher.gpus_per_node=0", "hydra.launcher.tasks_per_node=2",
      "hydra.launcher.mem_gb=-1"],
     "hydra.launcher.mem_gb=-1 must be a whole number >= 0; set hydra.launcher.mem_gb=0 or more"),
    (["hydra.launcher.cpus_per_task=0"],
     "hydra.launcher.cpus_per_task=0 must be a positive whole number; set "
     "hydra.launcher.cpus_per_task=1 or more"),
])
def test_slurm_preset_values_are_refused_in_one_line(overrides, line):
    with pytest.raises(SweepError) as err:
        plan_for("hydra/launcher=slurm", *overrides)
    assert str(err.value) == line


def test_gpu_counts_read_from_sinfo():
    assert [gpu_count(g) for g in ("gpu:8", "gpu:h100:8(S:0-1)", "(null)",
                                   "gpu:a100:4,gpu:h100:2", "mps:100,gpu:2")] == [8, 8, 0, 6, 2]


def test_preflight_checks_cells_against_the_submitit_world():
    # 2 nodes x 3 tasks: 6 data-parallel ranks cannot split a global batch of 8.
    plan = plan_for("hydra/launcher=submitit_local", "hydra.launcher.nodes=2",
                    "hydra.launcher.tasks_per_node=3", "~sweep.baseline.fsdp",
                    "~sweep.baseline.cuda_graph")
    assert plan.baseline is None and not any(c.valid for c in plan.cells)
    reasons = {c.reason for c in plan.cells if "cannot be captured" not in c.reason}
    assert reasons == {"train.global_batch_size=8 is not divisible by train.micro_batch_size x "
                       "data-parallel size = 2 x 6; set train.global_batch_size to a multiple of 12"}


def test_preflight_refuses_a_runtime_layout_the_launcher_will_not_give():
    plan = plan_for("hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2",
                    "runtime.nproc_per_node=4", "~sweep.baseline.fsdp", "~sweep.baseline.cuda_graph")
    assert {c.reason for c in plan.cells if "cannot be captured" not in c.reason} == {
        "runtime.nproc_per_node=4 and hydra.launcher.tasks_per_node=2 name two worlds; set "
        "runtime.nproc_per_node=2 or null"}


def test_a_cell_with_no_steady_state_step_is_refused_in_preflight():
    cells = by_values(plan_for("train.steps=4"))  # 2 warmup steps; graphs leave out 4 more
    assert cells[("false", "none")].valid and cells[("true", "none")].valid
    graph = cells[("false", "full_iteration")]
    assert not graph.valid
    assert "train.steps=4 leaves no steady-state step after the 6 excluded" in graph.reason


@pytest.mark.parametrize("grid", [
    ["fsdp.prefetch_first_param_group=true,false", "cuda_graph.impl=none,full_iteration",
     "train.micro_batch_size=1,2"],
    ["model=tiny,gpt2_small", "model.hidden_size=128,256", "cuda_graph=none,full_iteration"],
    ["+recipe=gpt", "fsdp.bucket_size=null,8192", "hydra/launcher=slurm",
     "hydra.launcher.gpus_per_node=8", "logging.wandb.mode=disabled,offline"],
])
def test_each_cell_composes_as_hydras_full_compose_does(grid):
    """The plan's composer (groups composed once, value overrides on a copy) gives every cell
    exactly the config Hydra's full compose of that cell gives."""
    from launcher.sweep.grid import CellComposer, expand_grid

    with initialize_config_module(config_module="launcher.conf", version_base=None):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", [], RunMode.MULTIRUN)

        def load(overrides):
            return loader.load_sweep_config(master, overrides)

        composer = CellComposer(load, loader)
        _, cells = expand_grid(grid, loader)
        for overrides in cells:
            fast, full = composer(overrides), load(overrides)
            for config in (fast, full):
                del config.hydra.overrides, config.hydra.job.override_dirname
            assert OmegaConf.to_container(fast) == OmegaConf.to_container(full), overrides
    assert len(composer.composed) == len({tuple(o for o in c if o.split("=")[0] in
                                                ("model", "cuda_graph", "+recipe",
                                                 "hydra/launcher")) for c in cells})


def test_a_bad_value_is_refused_by_the_composer_as_by_hydra():
    with pytest.raises(ConfigError, match="fsdp.prefetch_first_param_group"):
        plan_for("fsdp.prefetch_first_param_group=true,ture")


def test_cells_whose_cluster_keys_start_different_worlds_are_different_cells():
    # the cluster section is not in a cell's id, but where its keys decide the world, that is
    plan = plan_for("cluster.gpus_per_node=1,2", "train.global_batch_size=8",
                    "~sweep.baseline.fsdp", "~sweep.baseline.cuda_graph")
    worlds = {c.values["cluster.gpus_per_node"]: (c.id, c.world) for c in plan.cells if c.valid}
    assert worlds["1"][0] != worlds["2"][0]
    assert worlds["2"][1] == "2 (1 node(s) of 2: cluster.gpus_per_node x runtime.nnodes)"


@pytest.mark.parametrize("grid,value,read", [("true,2", "2", "true"),
                                             ("true,yes", "yes", "true"),
                                             ("range(0,2)", "0", "false")])
def test_a_swept_bool_that_is_not_true_or_false_refuses_the_whole_sweep(grid, value, read):
    """omegaconf would read it as a bool and the cell would run, labelled with what was typed."""
    key = "fsdp.prefetch_first_param_group"
    with pytest.raises(ConfigError, match=rf"^{key}={value}: {value} is not true or false, and "
                                          rf"would be read as {read}; give {key} true or false "
                                          r"\(no cell of the sweep was run\)$"):
        plan_for(f"{key}={grid}")


def test_repeats_above_their_limit_are_refused_before_the_schedule_is_built():
    with pytest.raises(ConfigError, match=r"^sweep.repeats=1000000000000000000000 is above 1000, "
                                          r"the most repeats a sweep runs .*; set sweep.repeats "
                                          r"to at most 1000$"):
        plan_for("sweep.repeats=1000000000000000000000")


def test_a_cell_with_an_int_above_its_limit_is_refused_with_the_limit():
    cells = by_values(plan_for("train.steps=20,1000000000000000000000000000000"))
    refused = [c for v, c in cells.items() if "1000000000000000000000000000000" in v]
    assert all(not c.valid and "is above 2147483647" in c.reason for c in refused)
    assert len(refused) == 4 and sum(c.valid for c in cells.values()) == 3  # the recipe's 3
