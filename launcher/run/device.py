"""The device a run takes on this machine: what torch sees here, asked only where the config
leaves it open (runtime.device=auto, no GPU's cluster.gpu). torch is imported only then: the
command line `runtime.print_megatron_lm=true` prints for a GPU's cluster.gpu loads none."""

from launcher.config import Config, ConfigError, Device
from launcher.preflight.support import for_gpu


def resolve_device(device: Device) -> str:
    import torch

    if device == Device.auto:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == Device.cuda and not torch.cuda.is_available():
        raise ConfigError("runtime.device=cuda but no CUDA device is visible; "
                          "set runtime.device=cpu or auto")
    return device.value


def targets_gpu(cfg: Config) -> bool:
    """Whether the run is a GPU's: as the config says (support.for_gpu), else whether one is here."""
    gpu = for_gpu(cfg)
    if gpu is not None:
        return gpu
    import torch

    return torch.cuda.is_available()
