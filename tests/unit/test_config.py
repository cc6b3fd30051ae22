"""Schema and every validation rule, through Hydra's real compose and OmegaConf.to_object."""

from importlib import resources

import pytest
from hydra.errors import ConfigCompositionException

from conftest import make_config as make
from launcher.config import ConfigError, check_steady_state, check_world_size, no_steady_state, \
    resolve_world


RECIPES = sorted(p.name[:-5] for p in resources.files("launcher.recipes").iterdir()
                 if p.name.endswith(".yaml"))


def test_the_recipes_are_found():
    assert {"gpt", "tiny_cpu", "sweep_tiny_cpu", "sweep_prefetch_vs_cuda_graph"} <= set(RECIPES)


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_composes_and_validates(recipe):
    extra = ["data.path=data/stdlib"] if recipe == "tiny_cpu_text" else []
    cfg = make(f"+recipe={recipe}", *extra)
    assert cfg.train.steps > 0


def test_gpt_recipe_is_gpt2_small_bf16():
    cfg = make("+recipe=gpt")
    assert (cfg.model.num_layers, cfg.model.hidden_size) == (12, 768)
    assert cfg.train.precision.value == "bf16"


@pytest.mark.parametrize("override", ["model.hidden_sise=64", "model.num_layers=two",
                                      "fsdp.sharding_strategy=zero3", "cuda_graph.impl=sometimes"])
def test_compose_rejects_bad_keys_types_and_enums(override):
    with pytest.raises(ConfigCompositionException):
        make(override)


def test_a_misspelled_key_is_explained_with_the_schema_s_nearest_keys():
    from launcher.config.explain import explain

    with pytest.raises(ConfigCompositionException) as caught:
        make("fsdp.prefetch_first_param_grp=false")
    assert explain(caught.value).startswith("fsdp.prefetch_first_param_grp is not a config key "
                                            "(did you mean fsdp.prefetch_first_param_group?)")
    with pytest.raises(ConfigError, match=r"\(added with \+; did you mean train.lr or "
                                          r"train.min_lr\?\)"):
        make("+train.lrr=1")
    with pytest.raises(ConfigError, match=r"model.foo is not a config key \(added with \+\); "):
        make("+model.foo=1")  # nothing near enough: no guess


def test_an_enum_s_choices_leave_out_what_no_run_can_use():
    from launcher.config.explain import explain

    with pytest.raises(ConfigCompositionException) as caught:
        make("cuda_graph.impl=full")
    assert "expected one of [none, full_iteration] (local and transformer_engine: per-layer " \
           "graphs" in explain(caught.value)
    with pytest.raises(ConfigCompositionException) as caught:
        make("fsdp.sharding_strategy=zero3")
    assert "expected one of [no_shard, optim, optim_grads, optim_grads_params]; set" in \
        explain(caught.value)


RULES = [
    (["fsdp.bucket_size=0"], r"fsdp.bucket_size"),
    (["fsdp.suggested_communication_unit_size=-1"], r"fsdp.suggested_communication_unit_size"),
    (["+recipe=gpt", "fsdp.main_params_dtype=auto"],
     r"fsdp.main_params_dtype=auto keeps bf16 main weights .*set fsdp.main_params_dtype=fp32, "
     r"or train.grad_clip=0"),
    (["fsdp.main_params_dtype=bf16"], r"fsdp.main_params_dtype=bf16 keeps bf16 main weights"),
    (["+recipe=gpt", "fsdp.main_params_dtype=auto", "train.grad_clip=0",
      "fsdp.main_grads_dtype=fp32"],
     r"fsdp.main_grads_dtype=fp32 needs main weights to cast into.*set fsdp.main_params_dtype="),
    (["fsdp.prefetch_first_param_group=true", "cuda_graph=full_iteration"],
     r"fsdp.prefetch_first_param_group=true cannot be captured by cuda_graph.impl=full_iteration.*"
     r"set fsdp.prefetch_first_param_group=false"),
    (["fsdp.prefetch_first_param_group=false", "cuda_graph=full_iteration",
      "cuda_graph.modules=[attn]"],
     r"cuda_graph.modules=\[attn\] must be empty with cuda_graph.impl=full_iteration"),
    (["model.num_attention_heads=4", "parallel.tensor_model_parallel_size=3"],
     r"model.num_attention_heads=4 is not divisible by parallel.tensor_model_parallel_size=3"),
    (["train.global_batch_size=7"], r"train.global_batch_size=7 is not divisible by "
                                    r"train.micro_batch_size=2"),
    (["fsdp.overlap_param_gather=false", "fsdp.prefetch_first_param_group=false"],
     r"fsdp.overlap_param_gather=false is not possible with fsdp.sharding_strategy="
     r"optim_grads_params"),
    (["fsdp.sharding_strategy=optim_grads", "fsdp.overlap_grad_reduce=false"],
     r"fsdp.overlap_grad_reduce=false is not possible with fsdp.sharding_strategy=optim_grads"),
    (["fsdp.sharding_strategy=no_shard"],
     r"fsdp.prefetch_first_param_group=true has no effect with fsdp.sharding_strategy=no_shard"),
    (["cuda_graph.impl=local", "fsdp.prefetch_first_param_group=false"],
     r"cuda_graph.impl=local \(per-layer graphs\) is not supported with Megatron-FSDP"),
    (["model.num_query_groups=3"], r"model.num_query_groups=3 must divide"),
    (["parallel.pipeline_model_parallel_size=2"],
     r"parallel.pipeline_model_parallel_size=2 cannot run with Megatron-FSDP: megatron-core "
     r"0.19.2 builds its device mesh from data x tensor parallel ranks only"),
    (["cuda_graph=full_iteration", "fsdp.prefetch_first_param_group=false",
      "train.inject_nan_at_step=4"],
     r"train.inject_nan_at_step=4 cannot poison a replayed CUDA graph \(cuda_graph.impl="
     r"full_iteration runs no Python inside the step\); remove train.inject_nan_at_step"),
    (["train.steps=0"], r"train.steps=0 must be at least 1"),
    (["train.lr_warmup_steps=-1"], r"train.lr_warmup_steps=-1 must be >= 0"),
    (["runtime.nnodes=2"], r"runtime.nnodes=2 needs a rendezvous every node can reach; set "
                           r"runtime.rdzv_endpoint=HOST:PORT"),
    (["runtime.rdzv_endpoint=node1"], r"runtime.rdzv_endpoint=node1 is not HOST:PORT"),
    (["runtime.rdzv_endpoint=127.0.0.1:99999"],
     r"runtime.rdzv_endpoint=127.0.0.1:99999: port 99999 is out of range \(1-65535\); set a "
     r"port in it, like runtime.rdzv_endpoint=127.0.0.1:29500"),
    (["runtime.rdzv_endpoint=node1:0"], r"runtime.rdzv_endpoint=node1:0: port 0 is out of range"),
    (["runtime.rdzv_endpoint=node1:1234567"], r"port 1234567 is out of range \(1-65535\)"),
    (["runtime.rdzv_endpoint='node1:-5'"], r"runtime.rdzv_endpoint=node1:-5 is not HOST:PORT"),
    (["runtime.rdzv_timeout_s=0"], r"runtime.rdzv_timeout_s=0 must be at least 1; set "
                                   r"runtime.rdzv_timeout_s to a positive integer"),
    # an optional size's default is null, never 0; an optional path or name's, never ""
    (["runtime.nproc_per_node=0"], r"runtime.nproc_per_node=0 must be a positive integer or "
                                   r"null \(null is its default, never 0\); set "
                                   r"runtime.nproc_per_node=null or a positive integer"),
    (["model.ffn_hidden_size=0"], r"model.ffn_hidden_size=0 must be a positive integer or null"),
    (["model.num_query_groups=0"], r"model.num_query_groups=0 must be a positive integer or null"),
    (["model.vocab_size=0"], r"set model.vocab_size=null or a positive integer"),
    (["fsdp.bucket_size=0"], r"set fsdp.bucket_size=null or a positive integer"),
    (["fsdp.suggested_communication_unit_size=0"],
     r"set fsdp.suggested_communication_unit_size=null or a positive integer"),
    (["runtime.nnodes=0"], r"set runtime.nnodes=null or a positive integer"),
    (["train.inject_nan_at_step=0"], r"set train.inject_nan_at_step=null or a positive integer"),
    (["train.checkpoint.dir=''"], r"train.checkpoint.dir is empty; set "
                                  r"train.checkpoint.dir=null for its default"),
    (["train.checkpoint.resume=''"], r"set train.checkpoint.resume=null for its default"),
    (["data.cache_dir=''"], r"set data.cache_dir=null for its default"),
    (["logging.wandb.name=''"], r"set logging.wandb.name=null for its default"),
    (["logging.wandb.group=''"], r"set logging.wandb.group=null for its default"),
    (["logging.wandb.entity=''"], r"set logging.wandb.entity=null for its default"),
    (["logging.wandb.project=''"], r"logging.wandb.project is empty; give it a name"),
    (["logging.tensorboard.dir=''"], r"set logging.tensorboard.dir=null for its default"),
    (["logging.tensorboard.name=''"], r"set logging.tensorboard.name=null for its default"),
    (["sweep.memory_limit_gib=0", "sweep.tune=true"],
     r"sweep.memory_limit_gib=0.0 must be more than 0; set it to the GiB a cell may use"),
    (["profile=torch", "profile.steps=[4,3]"],
     r"profile.steps=\[4, 3\] is not a window \[first, last\]"),
    (["profile=torch", "profile.steps=[3]"], r"profile.steps=\[3\] is not a window"),
    (["profile=torch", "profile.ranks=[]"], r"profile.ranks=\[\] must name distinct global"),
    (["profile=torch", "train.steps=2", "train.warmup_steps=2"],
     r"profile=torch profiles the first two steady-state steps unless profile.steps says "
     r"otherwise, and train.steps=2 leaves no steady-state step after the 2 excluded"),
    (["logging.tensorboard.hparams=[fsdp.prefetch]"],
     r"logging.tensorboard.hparams names fsdp.prefetch, which is not a config value"),
    (["logging.tensorboard.hparams=[fsdp]"],
     r"logging.tensorboard.hparams names fsdp, which is not a config value"),
    # CPU offloading: megatron-core's TransformerConfig rules, before any rank
    (["model.num_layers=4", "model.cpu_offloading_num_layers=4"],
     r"^model.cpu_offloading_num_layers=4 must be a whole number from 0 to "
     r"model.num_layers-1=3 \(megatron-core offloads fewer layers than the model has\); set it "
     r"in that range, or 0 for none$"),
    (["model.cpu_offloading_num_layers=-1"], r"^model.cpu_offloading_num_layers=-1 must be"),
    (["model.num_layers=4", "model.cpu_offloading_num_layers=2",
      "model.recompute.granularity=selective"],
     r"^model.cpu_offloading_num_layers=2 cannot be combined with "
     r"model.recompute.granularity=selective \(megatron-core refuses CPU offloading with "
     r"recomputation\); set model.recompute.granularity=null, or "
     r"model.cpu_offloading_num_layers=0$"),
]

WORLD_RULES = [
    (["train.global_batch_size=8", "train.micro_batch_size=2", "runtime.nproc_per_node=3"],
     r"train.global_batch_size=8 is not divisible by train.micro_batch_size x data-parallel "
     r"size = 2 x 3; set train.global_batch_size to a multiple of 6"),
    (["runtime.nproc_per_node=3", "parallel.tensor_model_parallel_size=2"],
     r"world size 3 \(runtime.nproc_per_node x runtime.nnodes\) is not divisible by tp x pp x cp "
     r"= 2; change runtime.nproc_per_node x runtime.nnodes or the parallel sizes"),
    (["runtime.nproc_per_node=2", "runtime.nnodes=2", "runtime.rdzv_endpoint=h:1",
      "parallel.tensor_model_parallel_size=3", "model.num_attention_heads=6",
      "model.hidden_size=66"], r"world size 4 .* is not divisible by tp x pp x cp = 3"),
]


@pytest.mark.parametrize("overrides,message", WORLD_RULES, ids=[r[1][:40] for r in WORLD_RULES])
def test_world_size_rule(overrides, message):
    cfg = make(*overrides)  # valid on its own: the world size is checked where it is known
    with pytest.raises(ConfigError, match=message):
        check_world_size(cfg, resolve_world(cfg.runtime, cfg.cluster).size)


@pytest.mark.parametrize("overrides,message", RULES, ids=[r[1][:40] for r in RULES])
def test_rule(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make(*overrides)


def test_valid_cells_of_the_grid_pass_unchanged():
    cell = make("fsdp.prefetch_first_param_group=false", "cuda_graph=full_iteration")
    assert cell.fsdp.prefetch_first_param_group is False
    assert cell.cuda_graph.impl.value == "full_iteration" and cell.excluded_steps == 2 + 3 + 1
    cell = make("fsdp.prefetch_first_param_group=true", "cuda_graph=none")
    assert cell.fsdp.prefetch_first_param_group is True and cell.excluded_steps == 2


@pytest.mark.parametrize("endpoint", ["node001:1", "127.0.0.1:65535", "localhost:29500"])
def test_a_rendezvous_endpoint_with_a_port_in_range_is_accepted(endpoint):
    assert make(f"runtime.rdzv_endpoint={endpoint}").runtime.rdzv_endpoint == endpoint


def test_the_rendezvous_limit_defaults_to_torchrun_s_join_timeout():
    assert make().runtime.rdzv_timeout_s == 600


def test_a_sweep_cell_needs_a_steady_state_step():
    cfg = make("train.steps=2")  # a single run of 2 steps runs (its throughput is null)
    assert no_steady_state(make("train.steps=3")) == ""
    with pytest.raises(ConfigError, match=r"train.steps=2 leaves no steady-state step after the "
                                          r"2 excluded .*; set train.steps above 2"):
        check_steady_state(cfg)
    graph = make("train.steps=5", "cuda_graph=full_iteration",
                 "fsdp.prefetch_first_param_group=false")
    with pytest.raises(ConfigError, match=r"after the 6 excluded"):
        check_steady_state(graph)


def test_a_run_shorter_than_its_lr_warmup_is_valid():
    assert make("+recipe=gpt", "train.steps=5").train.lr_warmup_steps == 10


def test_documents_per_split_is_megatron_s_rounding():
    from launcher.data.check import documents_per_split

    assert documents_per_split("98,2,0", 1) == [1, 0, 0]
    assert documents_per_split("98,2,0", 100) == [98, 2, 0]
    assert documents_per_split("98,2,0", 427) == [418, 9, 0]
    assert documents_per_split("1,1,1", 2) == [1, 0, 1]


def test_a_split_without_training_weight_is_refused():
    with pytest.raises(ConfigError, match=r"data.split=0,1,0 gives the training split no weight"):
        make("data.split='0,1,0'")


@pytest.mark.parametrize("key", ["vocab_size", "mock_vocab_size"])
def test_a_one_token_vocabulary_is_refused(key):
    with pytest.raises(ConfigError, match=rf"model.{key}=1 leaves nothing to predict"):
        make(f"model.{key}=1")


def test_validation_of_a_split_without_validation_weight_is_refused():
    make("data=indexed", "data.path=x", "data.split='100,0,0'")  # valid without validation
    with pytest.raises(ConfigError, match=r"train.eval_interval=5 reads the validation split, "
                                          r"which data.split=100,0,0 gives no weight"):
        make("data=indexed", "data.path=x", "data.split='100,0,0'", "train.eval_interval=5")


def test_vocab_size_is_null_by_default_with_a_mock_vocabulary():
    cfg = make("+recipe=gpt")
    assert cfg.model.vocab_size is None and cfg.model.mock_vocab_size == 50257
    from launcher.preflight.check import with_vocab

    assert with_vocab(cfg).model.vocab_size == 50257
    assert with_vocab(make("model.vocab_size=300")).model.vocab_size == 300


def test_bf16_main_weights_without_clipping_and_fp32_auto_are_accepted():
    assert make("+recipe=gpt", "fsdp.main_params_dtype=auto", "train.grad_clip=0")
    assert make("+recipe=tiny_cpu", "fsdp.main_params_dtype=auto")  # fp32 weights: fp32
