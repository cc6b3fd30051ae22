"""Where a run's outputs go, checked in the launch process before any rank: the folders it
writes besides its own, and wandb's credentials for an online run."""

from launcher.config import ConfigError, WandbMode
from launcher.files import unwritable


def check_folders(logging, data) -> None:
    """The folders a run writes besides its own, when set: TensorBoard's and the data cache."""
    wanted = [("logging.tensorboard.dir", logging.tensorboard.dir if logging.tensorboard.enabled
               else None), ("data.cache_dir", data.cache_dir)]
    for key, folder in wanted:
        why = unwritable(folder) if folder else None
        if why:
            raise ConfigError(f"{key}={folder} cannot be written ({why}); set {key} to a "
                              "writable directory, or null")


def check_wandb_login(wandb_cfg) -> None:
    """logging.wandb.mode=online needs credentials: refused in the launch process, before any
    rank, where wandb's own lookup (WANDB_API_KEY or its identity token, the .netrc entry
    `wandb login` writes, wandb's settings) finds none for its host."""
    if wandb_cfg.mode != WandbMode.online:
        return
    import wandb
    from wandb.sdk.lib.wbauth import authenticate, host_url

    host = wandb.setup().settings.base_url
    try:
        found = authenticate._use_system_auth(host=host_url.HostUrl(host), source="launch",
                                              update_session=False)
    finally:
        wandb.teardown()
    if found is None:
        raise ConfigError(f"logging.wandb.mode=online but wandb has no credentials for {host}; "
                          "run `wandb login` (or set WANDB_API_KEY), or set "
                          "logging.wandb.mode=offline")
