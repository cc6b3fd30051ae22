"""The known notices of megatron-core and torch that tell a launcher user nothing, filtered in
this one place, each with why. Anything else, a warning about the user's own settings included,
is shown as it comes. Installed by every rank, and by `launch-prepare`, before megatron is
imported. Standard library only: every stage may import it."""

import logging
import warnings

# (what the warning's message starts with, why it is not shown)
WARNINGS = [
    ("Transformer Engine and Apex are not installed",
     "megatron-core falls back to torch on purpose: the local layer spec is the torch one"),
    ("Apex is not installed", "the same fall-back, for its norms"),
    ("absl.logging is not installed", "megatron-core's optional logging backend; nothing uses it"),
    ("MimoModelConfig is experimental", "a model class the launcher never builds"),
]

# (logger, what the record's message starts with, why it is not shown)
LOG_RECORDS = [
    ("megatron.core.models.gpt.gpt_model", "GPTModel IS DEPRECATED",
     "megatron-core 0.19.2 says so once per rank for every GPT; the launcher builds GPTModel on "
     "purpose (upstream still fixes it, Megatron-LM #6071), and the user cannot act on it"),
    ("torch.utils.cpp_extension", "No CUDA runtime is found",
     "printed on a CPU machine that has a CUDA toolkit; a CPU run needs no CUDA runtime"),
]


class _Drop(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def install() -> None:
    for prefix, _ in WARNINGS:
        warnings.filterwarnings("ignore", message=f".*{prefix}")
    for name, prefix, _ in LOG_RECORDS:
        logging.getLogger(name).addFilter(_Drop(prefix))
