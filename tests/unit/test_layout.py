"""The package's imports, read with ast (nothing executed): no cycle, and every import runs the
way the stages do (launcher/__init__.py): down the order config, data, preflight, estimate, run,
sweep, never up it; preflight and estimate import no torch or megatron, anywhere in a module;
sweep imports neither at module level; nothing in launcher imports the project's own
hydra_plugins (hydra-submitit-launcher's config is a dependency like any other)."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "megatron", "numpy", "matplotlib", "wandb", "tokenizers", "submitit")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path):
    """(imported module, at module level?) for every import in the file, functions included."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" \
        else module_name(path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found.append((base, id(node) in top))
            found += [(f"{base}.{alias.name}", id(node) in top) for alias in node.names]
    return found


MODULES = {module_name(p): p for folder in ("launcher", "hydra_plugins")
           for p in (ROOT / folder).rglob("*.py")}


def graph() -> dict:
    """module -> {(project module it imports, at module level?)}"""
    return {name: {(target, top) for target, top in imports_of(path) if target in MODULES}
            for name, path in MODULES.items()}


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "launcher" and len(parts) > 1 else parts[0]


def test_the_walk_sees_the_package():
    assert {"launcher.cli", "launcher.config.schema", "launcher.run.worker",
            "launcher.sweep.driver", "launcher.data.prepare",
            "hydra_plugins.launch_sweeper"} <= set(MODULES)
    edges = graph()
    assert ("launcher.sweep.driver", False) in edges["hydra_plugins.launch_sweeper"]
    assert ("launcher.config.schema", True) in edges["launcher.config"]


def find_cycle(edges: dict):
    """A list of modules forming a cycle (imports inside functions count), or None."""
    state, path = {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for target, _ in sorted(edges.get(node, ())):
            if target == node:
                continue
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle)


def test_find_cycle_finds_one_inside_a_function():
    # the shape of the cycle this layout removed: cli -> plugin, plugin -> cli (in a method)
    edges = {"launcher.cli": {("hydra_plugins.launch_sweeper", True)},
             "hydra_plugins.launch_sweeper": {("launcher.cli", False)}}
    assert set(find_cycle(edges)) == {"launcher.cli", "hydra_plugins.launch_sweeper"}


# The stages in the order a run passes through them: a module may import its own stage and those
# before it, never one after. `data` comes first of the rest: the pre-flight checks data files,
# a rank reads them, and data imports neither.
ORDER = ["config", "data", "preflight", "estimate", "run", "sweep"]
TORCH_FREE = ("preflight", "estimate")  # what runs in the launch process before any rank

# (importing module or stage, imported stage, why): the bottom helpers import no stage
FORBIDDEN = [
    ("config", "files", "config writes nothing"),
    ("config", "cli", "config imports no other stage"),
    ("files", "config", "files is the bottom helper"),
    ("notices", "config", "notices is a bottom helper"),
]


def upward(mine: str, theirs: str) -> bool:
    return mine in ORDER and theirs in ORDER and ORDER.index(theirs) > ORDER.index(mine)


def violations() -> list:
    found = []
    for module, path in MODULES.items():
        if not module.startswith("launcher."):
            continue
        mine = stage(module)
        for target, top in imports_of(path):
            heavy = target.split(".")[0]
            if heavy == "hydra_plugins" and target in MODULES:  # ours only
                found.append(f"{module} imports {target}: the plugin depends on the package, "
                             "never the reverse")
            if mine == "config" and heavy in HEAVY:
                found.append(f"{module} imports {target}: config imports nothing heavy")
            if mine in TORCH_FREE and heavy in ("torch", "megatron"):
                found.append(f"{module} imports {target}: {mine} runs before any rank, no torch")
            if mine == "sweep" and top and heavy in ("torch", "megatron"):
                found.append(f"{module} imports {target} at module level: sweep runs no torch")
            if target in MODULES and target.startswith("launcher."):
                if upward(mine, stage(target)):
                    found.append(f"{module} imports {target}: {mine} comes before "
                                 f"{stage(target)} (launcher/__init__.py)")
                for importer, imported, why in FORBIDDEN:
                    if mine == importer and stage(target) == imported:
                        found.append(f"{module} imports {target}: {why}")
    return found


def test_the_stage_rules_see_an_upward_and_a_torch_import(tmp_path, monkeypatch):
    """The rules fire: a preflight module importing torch inside a function, and one importing run."""
    for folder in ("preflight", "run"):
        (tmp_path / "launcher" / folder).mkdir(parents=True)
    bad, trainer = tmp_path / "launcher/preflight/bad.py", tmp_path / "launcher/run/trainer.py"
    bad.write_text("from launcher.run import trainer\n\n\ndef f():\n    import torch\n")
    trainer.write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "MODULES",
                        {"launcher.preflight.bad": bad, "launcher.run.trainer": trainer})
    assert violations() == [
        "launcher.preflight.bad imports launcher.run.trainer: preflight comes before run "
        "(launcher/__init__.py)",
        "launcher.preflight.bad imports torch: preflight runs before any rank, no torch"]


def test_imports_follow_the_stages():
    assert violations() == []


MOST_PARAMETERS = 6  # a function wanting more takes the object they belong to


def parameters(function: ast.FunctionDef) -> list:
    """The parameters a caller passes: every one but a method's self or cls."""
    args = function.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [f"*{a.arg}" for a in (args.vararg, args.kwarg) if a]
    return [n for n in names if n not in ("self", "cls")]


def wide_functions(folder: Path) -> list:
    """`path:line name(parameters)` of each function under `folder` with more than six."""
    return [f"{path.relative_to(folder.parent)}:{node.lineno} "
            f"{node.name}({', '.join(parameters(node))})"
            for path in sorted(folder.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and len(parameters(node)) > MOST_PARAMETERS]


def test_no_function_of_the_run_stage_takes_more_than_six_parameters():
    """The state of a run lives in its Trainer and what it holds, not in argument lists."""
    assert wide_functions(ROOT / "launcher" / "run") == []


def test_wide_functions_finds_a_seven_parameter_function(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "wide.py").write_text(
        "class A:\n    def f(self, a, b, c, d, e, f, g): pass\ndef g(a, b, c, d, e, f): pass\n")
    assert wide_functions(tmp_path / "run") == ["run/wide.py:2 f(a, b, c, d, e, f, g)"]


@pytest.mark.parametrize("module", ["launcher.cli", "launcher.config.schema",
                                    "launcher.preflight.ranks", "launcher.sweep.plan"])
def test_light_modules_import_no_torch_at_module_level(module):
    """What `launch --cfg job` and a sweep's pre-flight load imports no torch."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for target, top in imports_of(MODULES[name]):
            assert not (top and target.split(".")[0] in ("torch", "megatron")), \
                f"{name} (reached from {module}) imports {target} at module level"
            if top and target in MODULES:
                todo.append(target)


def test_configs_and_recipes_live_at_the_top_and_ship_in_the_wheel(tmp_path):
    """conf/ and recipes/ are where a user of a Hydra project looks for them; the package reaches
    them as launcher.conf and launcher.recipes (links in a checkout, copies in the wheel). The
    wheel is built from a copy of the checkout's files, as a fresh clone has them: a checkout's
    own build/ folder (setuptools reuses it) would hide a module missing from pyproject.toml."""
    import shutil
    import subprocess
    import sys
    import zipfile

    for name in ("conf", "recipes"):
        assert (ROOT / name).is_dir() and not (ROOT / name).is_symlink()
        assert (ROOT / "launcher" / name).resolve() == ROOT / name
    source = tmp_path / "source"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for path in listed.split():
        if (ROOT / path).exists() or (ROOT / path).is_symlink():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, source / path, follow_symlinks=False)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path), str(source)], check=True,
                   cwd=tmp_path, capture_output=True, timeout=300)
    names = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist()
    shipped = {n for n in names if n.startswith(("launcher/conf/", "launcher/recipes/"))}
    expected = {f"launcher/{p.relative_to(ROOT)}" for name in ("conf", "recipes")
                for p in (ROOT / name).rglob("*") if p.suffix in (".yaml", ".py")}
    assert shipped == expected
    # every module of the package ships, and nothing else: a stage folder missing from
    # pyproject.toml's packages would leave `launch` on an installed wheel without it
    modules = {str(p.relative_to(ROOT)) for folder in ("launcher", "hydra_plugins")
               for p in (ROOT / folder).rglob("*.py")
               if not {"conf", "recipes"} & set(p.relative_to(ROOT).parts)}
    assert {n for n in names if n.endswith(".py") and n not in shipped
            and not n.startswith("launcher/hardware/")} == modules  # hardware: data, a link
