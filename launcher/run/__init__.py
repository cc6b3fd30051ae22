"""Stage 3, run: one training run, from the launch process to the ranks' outputs.

Owns starting the ranks (`spawn.py`: torch's elastic launch, as torchrun does) and learning each
rank's place in the world whoever started it (`ranks.py`); the rank itself (`worker.py`): the CPU
compatibility layer (`cpu_compat.py`, and `gloo.py`: one worker thread per gloo group), then the
run as one object (`trainer.py`: the Trainer and its loop) with megatron-core's model, M-FSDP and
optimizer (`build.py`) and its full-iteration CUDA graphs (`graphs.py`, megatron-core's
FullCudaGraphWrapper); what watches a step (`hooks.py`: the step hooks in their order), the first
parameter group's all-gather counted and timed (`first_group.py`), a mixture of experts' routing
(`experts.py`), the profiling window (`profile.py`), checkpoints (`checkpoint.py`: collective save
and load; `resume.py`: the checks that need no torch, in the launch process), a rank's stack kept
where a signal kills it (`crashes.py`), throughput arithmetic (`metrics.py`), what a rank records
(`record.py`) and writes (`outputs.py`: each per-step metric declared once, metrics.jsonl, wandb,
TensorBoard, the console), and what the console shows (`console.py`: each part of the step line,
the run's last lines); the classes a failure falls into (`failures.py`); the c10d rendezvous's
port checked before any rank and its failures said in one line (`rendezvous.py`); the one
pre-flight of a run or a sweep's cell (`preflight.py`); the environment a run needs, checked and
set before any rank starts (`environment.py`), and what this installation can build (`support.py`:
Transformer Engine, the layer spec, context parallelism, grouped GEMM, MoE in graphs; `fusions.py`:
the fused kernels a run uses); the run as Megatron-LM's command line (`megatron_lm.py`); and the
dry-run estimate (`estimate.py`: the same arithmetic, without torch; `fit.py`: whether its memory
fits the cluster's GPU, and the cheapest change that does; `communication_unit.py`: Megatron-FSDP's
default communication unit as the installed megatron-core's version infers it; `predict.py`, the
time model, with `kernels.py`, a GPU layer by kernel class, and `topology.py`, the cluster's
NVLink domains, NICs and collectives). It may import
`config`, `data` and `files`, never `sweep`.
torch and megatron are imported inside the modules that train, never by `ranks`, `failures`,
`metrics`, `estimate`, `fit`, `communication_unit`, `predict`, `kernels`, `topology`,
`environment`, `preflight`, `support`, `fusions`, `megatron_lm`, `resume`, `rendezvous`,
`crashes` or `console`.
"""
