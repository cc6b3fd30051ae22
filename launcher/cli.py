"""The `launch` entry point: compose with Hydra, validate, hand a Config to the spawner.

Importing this module imports hydra and omegaconf only: `launch --cfg job` never imports torch.
"""

import sys
from importlib import resources

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from launcher.config import Config, ConfigError


def register_configs() -> None:
    """The schema, and every recipe as option of the `recipe` group (shows in --help)."""
    store = ConfigStore.instance()
    store.store(name="schema", node=Config)
    for path in sorted(resources.files("launcher.recipes").iterdir()):
        if path.name.endswith(".yaml"):
            node = OmegaConf.create(path.read_text())
            store.store(group="recipe", name=path.name[:-5], node=node, package="_global_")


def to_config(composed: DictConfig) -> Config:
    """The typed Config (plain dataclass instances, not Hydra nodes); runs every __post_init__ check."""
    return OmegaConf.to_object(composed)


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base=None, config_path="pkg://launcher.conf", config_name="config")
def _main(composed: DictConfig) -> None:
    try:
        cfg = to_config(composed)
    except ConfigError as err:
        fail(str(err))
    from hydra.core.hydra_config import HydraConfig

    from launcher.spawn import run

    resolved = OmegaConf.to_container(composed, resolve=True)
    sys.exit(run(cfg, resolved, HydraConfig.get().runtime.output_dir))


def main() -> None:
    register_configs()
    try:
        _main()
    except SystemExit as exit_:
        # Hydra exits 1 on a composition error (unknown key, wrong type, bad enum value).
        sys.exit(2 if exit_.code == 1 else exit_.code)
