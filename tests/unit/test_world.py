"""The one world of a run (launcher.config.world): each way of stating it, the defaults, and each
conflict refused in one line."""

import pytest
from omegaconf import OmegaConf

from launcher.cli import compose
from launcher.config import ClusterConfig, ConfigError, RuntimeConfig, resolve_world
from launcher.config.world import recipe_note
from launcher.preflight import ranks
from launcher.preflight.check import preflight

SLURM = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
TINY = ["+recipe=tiny_cpu", "logging.wandb.mode=disabled"]


def slurm(nodes: int, tasks: int) -> ranks.Stated:
    launcher = OmegaConf.create({"_target_": SLURM, "nodes": nodes, "gpus_per_node": tasks,
                                 "tasks_per_node": "${.gpus_per_node}"})
    return ranks.planned_world(launcher).stated()


def torchrun(world: int, per_node: int) -> ranks.Stated:
    return ranks.Layout("torchrun", 0, 0, world, per_node, "h", 1).stated()


def world_of(runtime=None, cluster=None, starter=None) -> tuple:
    w = resolve_world(runtime or RuntimeConfig(), cluster or ClusterConfig(), starter)
    return w.per_node, w.nodes, w.source


@pytest.mark.parametrize("runtime, cluster, starter, expected", [
    (None, None, None, (1, 1, "runtime.nproc_per_node x runtime.nnodes")),
    (RuntimeConfig(nproc_per_node=4), None, None,
     (4, 1, "runtime.nproc_per_node x runtime.nnodes")),
    (RuntimeConfig(nproc_per_node=8, nnodes=2, rdzv_endpoint="n:1"), None, None,
     (8, 2, "runtime.nproc_per_node x runtime.nnodes")),
    (None, ClusterConfig(gpu="h100_sxm"), None,  # a named cluster's node: the hardware file's 8
     (8, 1, "cluster.gpus_per_node x cluster.nodes")),
    (None, ClusterConfig(gpu="gb200", nodes=16), None,
     (4, 16, "cluster.gpus_per_node x cluster.nodes")),
    (RuntimeConfig(nproc_per_node=4), ClusterConfig(gpu="h100_sxm"), None,  # stated beats default
     (4, 1, "runtime.nproc_per_node x cluster.nodes")),
    (None, ClusterConfig(gpus_per_node=2, nodes=3), None,
     (2, 3, "cluster.gpus_per_node x cluster.nodes")),
    (None, None, slurm(2, 8), (8, 2, "hydra.launcher.tasks_per_node x hydra.launcher.nodes")),
    (None, ClusterConfig(gpu="h100_sxm", nodes=2), slurm(2, 8),  # agreeing statements
     (8, 2, "hydra.launcher.tasks_per_node x hydra.launcher.nodes")),
    (RuntimeConfig(nproc_per_node=2), None, torchrun(8, 2),
     (2, 4, "torchrun's --nproc-per-node x torchrun's --nnodes")),
])
def test_each_way_of_stating_the_world(runtime, cluster, starter, expected):
    assert world_of(runtime, cluster, starter) == expected


@pytest.mark.parametrize("runtime, cluster, starter, message", [
    (RuntimeConfig(nproc_per_node=4), ClusterConfig(gpus_per_node=8), None,
     "cluster.gpus_per_node=8 and runtime.nproc_per_node=4 name two worlds; set "
     "cluster.gpus_per_node=4 or null"),
    (RuntimeConfig(nnodes=4, rdzv_endpoint="n:1"), ClusterConfig(nodes=8), None,
     "cluster.nodes=8 and runtime.nnodes=4 name two worlds; set cluster.nodes=4 or null"),
    (None, ClusterConfig(gpu="h100_sxm", nodes=3), slurm(2, 8),
     "cluster.nodes=3 and hydra.launcher.nodes=2 name two worlds; set cluster.nodes=2 or null"),
    (None, ClusterConfig(gpus_per_node=4), slurm(1, 8),
     "cluster.gpus_per_node=4 and hydra.launcher.tasks_per_node=8 name two worlds; set "
     "cluster.gpus_per_node=8 or null"),
    (RuntimeConfig(nproc_per_node=4), None, slurm(1, 8),
     "runtime.nproc_per_node=4 and hydra.launcher.tasks_per_node=8 name two worlds; set "
     "runtime.nproc_per_node=8 or null"),
    (RuntimeConfig(nnodes=3, rdzv_endpoint="n:1"), None, slurm(2, 8),
     "runtime.nnodes=3 and hydra.launcher.nodes=2 name two worlds; set runtime.nnodes=2 or null"),
    (RuntimeConfig(nproc_per_node=4), None, torchrun(8, 2),
     "runtime.nproc_per_node=4 and torchrun's --nproc-per-node=2 name two worlds; set "
     "runtime.nproc_per_node=2 or null"),
])
def test_each_conflict_is_refused_in_one_line(runtime, cluster, starter, message):
    with pytest.raises(ConfigError) as err:
        world_of(runtime, cluster, starter)
    assert str(err.value) == message


def test_the_config_refuses_runtime_and_cluster_statements_that_differ_at_compose():
    with pytest.raises(ConfigError, match=r"^cluster.gpus_per_node=2 and runtime.nproc_per_node=1 "
                                          r"name two worlds"):
        compose(TINY + ["runtime.nproc_per_node=1", "cluster.gpus_per_node=2"])


def test_only_a_submitit_launcher_plans_a_world():
    basic = OmegaConf.create({"_target_": "hydra._internal.core_plugins.basic_launcher."
                                          "BasicLauncher"})
    assert ranks.planned_world(basic) is None
    assert slurm(2, 8) == ranks.Stated(8, 2, "hydra.launcher.tasks_per_node",
                                       "hydra.launcher.nodes")


def test_the_preflight_hands_on_the_world_it_checked():
    cfg = compose(TINY + ["cluster.gpus_per_node=2", "train.global_batch_size=8"])
    assert preflight(cfg, None, here=False).world.size == 2
    planned = ranks.Layout("submitit", 0, 0, 4, 2, "", 0)
    cleared = preflight(compose(TINY + ["train.global_batch_size=8"]), None, planned=planned,
                        here=False)
    assert (cleared.world.per_node, cleared.world.nodes) == (2, 2)


def test_a_batch_that_does_not_fit_the_planned_world_is_refused_naming_the_launcher():
    planned = ranks.Layout("submitit", 0, 0, 3, 3, "", 0)
    with pytest.raises(ConfigError, match=r"is not divisible by train.micro_batch_size x "
                                          r"data-parallel size = 2 x 3"):
        preflight(compose(TINY + ["train.global_batch_size=8"]), None, planned=planned)


def test_a_run_launch_starts_on_several_nodes_needs_a_rendezvous():
    cfg = compose(TINY + ["cluster.nodes=2"])
    with pytest.raises(ConfigError, match=r"^cluster.nodes=2 makes this a 2-node run, and `launch` "
                                          r"starts one node's ranks .* set "
                                          r"runtime.rdzv_endpoint=HOST:PORT"):
        preflight(cfg, None)
    dry = compose(TINY + ["cluster.nodes=2", "runtime.dry_run=true"])
    assert preflight(dry, None, here=False).world.size == 2  # a dry run plans it


@pytest.mark.parametrize("cluster, runtime, expected", [
    (ClusterConfig(recipe_gpus_per_node=8), RuntimeConfig(),
     "[dry run] recipes/llama3_8b.yaml is written for one 8-GPU node; this dry run is for world 1 "
     "(runtime.nproc_per_node x runtime.nnodes): set runtime.nproc_per_node=8 (or name its "
     "cluster: cluster.gpu=h100_sxm)"),
    (ClusterConfig(recipe_gpus_per_node=8), RuntimeConfig(nproc_per_node=2),  # stated: no gpu
     "[dry run] recipes/llama3_8b.yaml is written for one 8-GPU node; this dry run is for world 2 "
     "(runtime.nproc_per_node x runtime.nnodes): set runtime.nproc_per_node=8"),
    (ClusterConfig(recipe_gpus_per_node=8, gpus_per_node=4), RuntimeConfig(),  # the deciding key
     "[dry run] recipes/llama3_8b.yaml is written for one 8-GPU node; this dry run is for world 4 "
     "(cluster.gpus_per_node x runtime.nnodes): set cluster.gpus_per_node=8"),
    (ClusterConfig(recipe_gpus_per_node=8, recipe_nodes=8, gpu="h100_sxm"), RuntimeConfig(),
     "[dry run] recipes/llama3_8b.yaml is written for 8 nodes of 8 GPUs (64 GPUs); this dry run "
     "is for world 8 (cluster.gpus_per_node x cluster.nodes): set cluster.nodes=8"),
    (ClusterConfig(recipe_gpus_per_node=8, recipe_nodes=8), RuntimeConfig(),
     "[dry run] recipes/llama3_8b.yaml is written for 8 nodes of 8 GPUs (64 GPUs); this dry run "
     "is for world 1 (runtime.nproc_per_node x runtime.nnodes): set runtime.nproc_per_node=8 "
     "runtime.nnodes=8 runtime.rdzv_endpoint=HOST:PORT (or name its cluster: cluster.gpu=h100_sxm "
     "cluster.nodes=8)"),
    (ClusterConfig(recipe_gpus_per_node=8), RuntimeConfig(nproc_per_node=8), ""),
    (ClusterConfig(recipe_gpus_per_node=8, recipe_nodes=8, gpu="gb200", nodes=16),
     RuntimeConfig(), ""),  # 64 GPUs in other nodes: the recipe's world size
    (ClusterConfig(), RuntimeConfig(), ""),  # the recipe names no world
])
def test_a_dry_run_in_another_world_than_the_recipes_says_so(cluster, runtime, expected):
    world = resolve_world(runtime, cluster)
    assert recipe_note(runtime, cluster, world, "llama3_8b") == expected


def test_the_recipes_state_their_world_as_data():
    for recipe, world in (("llama3_8b", (8, 1)), ("llama3_70b", (8, 8)),
                          ("gpt_1p3b_1gpu_bf16", (1, None))):
        cluster = compose([f"+recipe={recipe}"]).cluster
        assert (cluster.recipe_gpus_per_node, cluster.recipe_nodes) == world
