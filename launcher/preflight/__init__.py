"""Stage 2, preflight: everything the launch process decides before any rank starts. No torch.

Owns the one pre-flight of a run or a sweep's cell (`check.py`: every refusal that can be known
before a rank, in one line); who each process is in the job, whichever starter ran it
(`ranks.py`); the environment a run needs (`environment.py`); the checkpoint a run resumes from
and its folder (`resume.py`); where the outputs go (`destinations.py`: the folders a run writes,
wandb's credentials); the c10d rendezvous's port, and its failures said in one line
(`rendezvous.py`); what this installation and device can build (`support.py`) and the fused
kernels a run uses (`fusions.py`); the run as Megatron-LM's command line (`megatron_lm.py`); and a run that starts from a Hugging
Face model, held to its config.json (`hf.py`).
It may import `config`, `data`, `files` and `notices`; never `estimate`, `run` or `sweep`.
Nothing here imports torch or megatron (tests/unit/test_layout.py).
"""
