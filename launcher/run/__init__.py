"""Stage 4, run: the ranks, from the process that starts them to each rank's outputs.

Owns starting the ranks (`spawn.py`: torch's elastic launch, as torchrun does, or this process's
rank under another starter; `device.py`: the device torch sees here); the rank itself
(`worker.py`): the CPU compatibility layer (`cpu_compat.py`, and `gloo.py`: one worker thread per
gloo group), then the run as one object (`trainer.py`: the Trainer, its loop and its step; `forward.py`: the forward step and
its loss, as pretrain_gpt.py's) with
megatron-core's model, M-FSDP and optimizer (`build.py`), the rest of the rank's setup
(`rank_setup.py`: process groups, RNGs, hosts, the start line, microbatches) and its
full-iteration CUDA graphs (`graphs.py`); what watches a step (`hooks.py`: the step hooks in their
order), the first parameter group's all-gather counted and timed (`first_group.py`), a mixture of
experts' routing (`experts.py`), the profiling window (`profile.py`), checkpoints (`checkpoint.py`:
collective save and load, and a run's checkpoint folder, in Megatron-LM's layout;
`megatron_lm_args.py`: the Megatron-LM `args` they hold, and a Megatron-LM checkpoint's checked); what a rank records, and rank 0's summary
(`record.py`, with `step_stats.py`: the step times' statistics) and writes (`outputs.py`: each
per-step metric declared once, metrics.jsonl, wandb, TensorBoard), what the console shows
(`console.py`); the classes a failure falls into (`failures.py`) and a rank's stack kept where a
signal kills it (`crashes.py`); Hugging Face weights in and out of the GPT (`hf_weights.py`,
loaded before the M-FSDP wrap) and `launch-hf export` (`hf_export.py`). It may import `config`,
`data`, `preflight`, `estimate` and `files`, never `sweep`.
"""
