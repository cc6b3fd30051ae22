"""Megatron-FSDP's communication unit when `fsdp.suggested_communication_unit_size` is null, as
the installed megatron-core computes it; the dry run's time model (predict.py) prefetches half of
it. Reads megatron-core's version from its package metadata: imports neither megatron nor torch.

With optim_grads_params, Megatron-FSDP takes twice the mean fsdp unit (a transformer layer),
then bounds it by 1e9 elements (MegatronFSDP.__init__ in
megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py); the all-gather prefetches
half of the result, the reduce-scatter queue holds all of it. The bound depends on the version:
- 0.19.2 and earlier: a floor, `max(1_000_000_000, unit)` (lines 438-441 of that file in
  0.19.2). The prefetch window is at least 5e8 elements: about 2.3 layers of Llama 3 8B.
- Megatron-LM main since its PR #7134 (merged 2026-09-08, in no release yet): a cap,
  `min(1_000_000_000, unit)`. Where a layer is under 5e8 elements the window is one layer.
  Main numbers itself 0.20.0 (megatron/core/package_info.py) while 0.19.x patch releases come
  from their own release branch, so every version from 0.20 on takes the cap, its rc, dev and
  git builds included. A build of main from before the merge also says 0.20.0 but has the floor.
A value set in `fsdp.suggested_communication_unit_size` is used as it is, by every version.
"""

import importlib.metadata
import re
from typing import Optional

UNIT_BOUND = 1_000_000_000
"""The elements Megatron-FSDP bounds its inferred communication unit by."""
CAP_FROM = (0, 20)
"""The first megatron-core (major, minor) whose bound is a cap, not a floor."""
NEWEST_RELEASE = "0.19.2"
"""The newest megatron-core on the package index (the version pyproject.toml pins)."""


def megatron_core_version() -> str:
    """The installed megatron-core's version, from its package metadata; where megatron-core is
    not installed, the newest release's (0.19.2: the floor)."""
    try:
        return importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        return NEWEST_RELEASE


def caps_unit(version: str) -> bool:
    """Whether megatron-core `version` (as "0.19.2", "0.20.0rc0", "0.20.0+1a2b3c") caps the
    inferred unit at 1e9 elements (True) or raises it to at least 1e9 (False)."""
    return tuple(int(n) for n in re.findall(r"\d+", version)[:2]) >= CAP_FROM


def communication_unit(mean_layer: int, version: Optional[str] = None) -> int:
    """The communication unit, in elements, that megatron-core `version` (None: the installed
    one) infers for fsdp units of `mean_layer` elements on average: twice that, bounded by 1e9
    (a floor up to 0.19.x, a cap from 0.20 on)."""
    bound = min if caps_unit(version or megatron_core_version()) else max
    return bound(UNIT_BOUND, 2 * mean_layer)
