"""Which starter ran a process, and the layout it gave, from the variables each starter sets."""

import pytest

from launcher.preflight import ranks
from launcher.config import ClusterConfig, ConfigError, RuntimeConfig, resolve_world

TORCH_VARS = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2",
              "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}


@pytest.fixture
def clean_env(monkeypatch):
    for var in [*TORCH_VARS, "TORCHELASTIC_RUN_ID", "SUBMITIT_EXECUTOR"]:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_launch_itself_is_not_an_external_starter(clean_env):
    assert ranks.external_starter() is None


def test_torchrun_is_recognised_and_its_layout_read(clean_env):
    for var, value in {**TORCH_VARS, "TORCHELASTIC_RUN_ID": "job"}.items():
        clean_env.setenv(var, value)
    assert ranks.external_starter() == "torchrun"
    found = ranks.layout("torchrun")
    assert (found.rank, found.local_rank, found.world_size, found.num_nodes) == (3, 1, 8, 4)
    assert (found.master_addr, found.master_port) == ("node0", 29500)


def test_submitit_is_recognised(clean_env):
    clean_env.setenv("SUBMITIT_EXECUTOR", "slurm")
    assert ranks.external_starter() == "submitit"


@pytest.mark.parametrize("runtime,message", [
    (RuntimeConfig(nproc_per_node=4), r"runtime.nproc_per_node=4 and torchrun's "
                                      r"--nproc-per-node=2 name two worlds; set "
                                      r"runtime.nproc_per_node=2 or null"),
    (RuntimeConfig(nnodes=2, rdzv_endpoint="h:1"),
     r"runtime.nnodes=2 and torchrun's --nnodes=4 name two worlds"),
])
def test_a_runtime_setting_must_match_what_the_starter_gave(runtime, message):
    found = ranks.Layout("torchrun", 0, 0, 8, 2, "h", 1)
    with pytest.raises(ConfigError, match=message):
        resolve_world(runtime, ClusterConfig(), found.stated())


def test_unset_runtime_layout_takes_what_the_starter_gave():
    found = ranks.Layout("submitit", 0, 0, 32, 8, "h", 1)
    world = resolve_world(RuntimeConfig(), ClusterConfig(), found.stated())
    assert (world.per_node, world.nodes, world.source) == (
        8, 4, "hydra.launcher.tasks_per_node x hydra.launcher.nodes")
    world = resolve_world(RuntimeConfig(nproc_per_node=8, nnodes=4, rdzv_endpoint="h:1"),
                          ClusterConfig(), found.stated())
    assert world.size == 32
