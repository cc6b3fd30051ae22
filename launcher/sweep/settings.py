"""A sweep's own settings, checked before any cell is composed: the sweep section's values and
which of its keys act under this launcher, the sweep's folder writable, and the launcher itself
(its sizes, and on Slurm the partition and the job: launcher.sweep.slurm)."""

from typing import List

from omegaconf import DictConfig, OmegaConf

from launcher.config import ConfigError, SweepConfig
from launcher.config.effect import check_sweep_section, given_keys
from launcher.config.values import check_values
from launcher.files import unwritable
from launcher.sweep.slurm import check_launcher, is_slurm


def check_sweep(master: DictConfig, arguments: List[str]) -> None:
    """Raises SweepError/ConfigError for the sweep as a whole. The sweep section's values are
    checked first: the schedule holds every repeat."""
    check_values(OmegaConf.to_container(master.sweep, resolve=True), SweepConfig, "sweep.")
    sweep: SweepConfig = OmegaConf.to_object(master.sweep)
    check_sweep_section(sweep, master.hydra.runtime.choices.get("hydra/launcher"),
                        is_slurm(master.hydra.launcher), given_keys(arguments))
    check_sweep_dir(str(master.hydra.sweep.dir))
    check_launcher(master.hydra.launcher, master.runtime.dry_run)


def check_sweep_dir(sweep_dir: str) -> None:
    """The sweep's folder can be made and written: refused before the plan, not after it."""
    why = unwritable(sweep_dir)
    if why:
        raise ConfigError(f"hydra.sweep.dir={sweep_dir} cannot be written ({why}); set "
                          "hydra.sweep.dir to a writable directory")
