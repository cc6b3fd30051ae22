"""The `launch` sweeper (hydra/sweeper=launch, the default of `launch -m`).

Hydra instantiates sweepers only from the hydra_plugins namespace and finds this one by scanning
it; the logic is launcher.sweep.driver. The plugin depends on the package, never the reverse.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper


@dataclass
class LaunchSweeperConf:
    _target_: str = "hydra_plugins.launch_sweeper.LaunchSweeper"
    params: Optional[Dict[str, str]] = None
    """The grid a recipe declares, as Hydra's basic sweeper takes it: {key: "a,b"}."""


ConfigStore.instance().store(group="hydra/sweeper", name="launch", node=LaunchSweeperConf,
                             provider="mfsdp-launcher")


class LaunchSweeper(Sweeper):
    """Pre-flight of the whole grid, repeats in shuffled rounds, resumable, then the report."""

    def __init__(self, params: Optional[Dict[str, str]] = None) -> None:
        self.params = params or {}
        self.config = self.hydra_context = self.task_function = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.hydra_context, self.config, self.task_function = hydra_context, config, task_function

    def make_launcher(self):
        """hydra/launcher, instantiated only after the pre-flight has checked its values."""
        from hydra.core.plugins import Plugins

        return Plugins.instance().instantiate_launcher(
            hydra_context=self.hydra_context, task_function=self.task_function, config=self.config)

    def sweep(self, arguments: List[str]) -> Any:
        from launcher.sweep.driver import run_sweep

        code = run_sweep(self.config, self.hydra_context.config_loader, self.make_launcher,
                         self.params, arguments)
        # Nothing in Hydra runs after a sweep returns: end the process with the sweep's code
        # (SystemExit passes through Hydra's error reporting, which catches Exception only).
        raise SystemExit(code)
