"""data: the tokens a rank reads, and preparing them.

Owns the training and validation datasets (`datasets.py`: mock data, and megatron-core's
GPTDataset over indexed datasets, cut into each rank's microbatches), the checks a data path
passes before any rank starts (`check.py`), and `launch-prepare` (`prepare.py`) with its
tokenizers (`tokenizer.py`) and the shipped corpus (`corpus.py`). Used by `preflight`,
`run` and `launch-prepare`; it may import `config` and `files`, no other stage.
"""
