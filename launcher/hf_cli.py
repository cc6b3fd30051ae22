"""`launch-hf`: Hugging Face models in and out of the launcher.

  launch-hf import HF_DIR --recipe NAME --config-dir DIR [--base RECIPE]
      writes DIR/recipe/NAME.yaml: the base recipe (by model type: llama3_8b_tiny_cpu for
      llama, moe_small_tiny_cpu for qwen3_moe), the model section HF_DIR/config.json gives, and
      train.init_hf=HF_DIR for the weights; run it with `launch --config-dir DIR +recipe=NAME`.
  launch-hf export CHECKPOINT HF_OUT
      writes HF_OUT/config.json and HF_OUT/model.safetensors from a launcher checkpoint (a
      checkpoint folder, or the train.checkpoint.dir holding them: the newest).

A refusal is one line and exit code 2. Importing this module imports no torch: `import` reads
JSON and writes YAML; `export` loads torch only once it runs.
"""

import argparse
import sys
from pathlib import Path

import yaml

from launcher.config import ConfigError
from launcher.config.hf import model_section, read_config

BASES = {"llama": "llama3_8b_tiny_cpu", "qwen3_moe": "moe_small_tiny_cpu"}


def recipe_text(hf_dir: str, base: str) -> str:
    """The recipe delta: base recipe, then the model section and train.init_hf."""
    folder = str(Path(hf_dir).resolve())
    values = {"model": model_section(hf_dir), "train": {"init_hf": folder}}
    return "\n".join([
        "# @package _global_",
        f"# Imported by launch-hf from {folder} ({read_config(hf_dir)['model_type']}): the model",
        "# section is its config.json, the weights its safetensors (train.init_hf); the rest is",
        f"# {base}'s.",
        "defaults:", f"  - {base}", "  - _self_",
        yaml.safe_dump(values, sort_keys=False).rstrip(), ""])


def import_model(hf_dir: str, name: str, config_dir: str, base: str = None) -> Path:
    family = read_config(hf_dir).get("model_type")
    text = recipe_text(hf_dir, base or BASES.get(family, "llama3_8b_tiny_cpu"))
    path = Path(config_dir, "recipe", f"{name}.yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="launch-hf", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="a recipe from a Hugging Face model folder")
    imp.add_argument("hf_dir")
    imp.add_argument("--recipe", required=True, help="the recipe's name")
    imp.add_argument("--config-dir", required=True, help="where recipe/NAME.yaml goes")
    imp.add_argument("--base", help="the base recipe; default by model type")
    exp = sub.add_parser("export", help="a launcher checkpoint as a Hugging Face folder")
    exp.add_argument("checkpoint")
    exp.add_argument("hf_out")
    args = parser.parse_args(argv)
    try:
        if args.command == "import":
            path = import_model(args.hf_dir, args.recipe, args.config_dir, args.base)
            print(f"[launch-hf] wrote {path}; run: launch --config-dir {args.config_dir} "
                  f"+recipe={args.recipe}")
        else:
            from launcher.run.hf_export import export

            found = export(args.checkpoint, args.hf_out)
            print(f"[launch-hf] exported {found} to {args.hf_out}")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def console() -> None:
    sys.exit(main())


if __name__ == "__main__":
    console()
