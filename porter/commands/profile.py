"""`porter profile MODEL` and `porter port-profile PROFILE`: from a whole model to its packs.

    porter profile examples/llama_block/model.py [--size toy] [--device cpu|cuda] [--hw h100] \
        [--out PROFILE.json]
    porter profile --hf llama --size toy --out profile.json      # needs kernel-porter[models]
    porter profile --hf llama --in-place --out profile.json     # for patch(inplace=True)
    porter port-profile PROFILE.json --top 2 --targets h100 --out packs/
    porter port --from-profile PROFILE.json --top 2 ...        # the same, from `porter port`
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.command("profile")
@click.argument("model", required=False, type=click.Path(dir_okay=False))
@click.option("--hf", "hf_arch", default=None,
              help="A Hugging Face architecture built from its config with random weights "
                   "(llama, qwen2, qwen3, mistral, gemma) instead of MODEL; needs "
                   "kernel-porter[models].")
@click.option("--size", default=None,
              help="Passed to the model file's get_inputs/get_init_inputs (the example's toy / "
                   "realistic); for --hf: toy (default) or realistic.")
@click.option("--device", default=None,
              help="cpu or cuda (default: cuda when a GPU is visible, else cpu).")
@click.option("--hw", "hw_name", default=None,
              help="Hardware model to rank for (default: the detected GPU, else h100).")
@click.option("--packs", "packs_dir", default=None, type=click.Path(file_okay=False),
              help="A packs folder: a group whose pack has a measured time takes s from it.")
@click.option("--steps", default=3, show_default=True, type=click.IntRange(min=1),
              help="Forward passes profiled.")
@click.option("--matmul-epilogues", is_flag=True,
              help="Also fuse a Linear into the elementwise group that alone reads it (one "
                   "matmul kernel with an epilogue) instead of leaving it to cuBLAS.")
@click.option("--in-place", "in_place", is_flag=True,
              help="Rank the groups of the model's own modules (norms, MLPs), as "
                   "`porter.patch(..., inplace=True)` replaces them, instead of the whole "
                   "graph's (implies --matmul-epilogues).")
@click.option("--out", "out_path", default=None, type=click.Path(dir_okay=False),
              help="Write the profile (JSON) for `porter port-profile`.")
def profile_cmd(model: str | None, hf_arch: str | None, size: str | None, device: str | None,
                hw_name: str | None, packs_dir: str | None, steps: int, matmul_epilogues: bool,
                in_place: bool, out_path: str | None) -> None:
    """Profile MODEL (Model/get_inputs/get_init_inputs) and rank its fused groups."""
    import torch

    from porter.errors import PorterError
    from porter.model.load import build_hf
    from porter.model.load import load_model
    from porter.model.profile import profile_model
    from porter.model.report import format_profile
    from porter.model.report import save_profile

    if (model is None) == (hf_arch is None):
        _fail("give either a MODEL file or --hf ARCH")
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev == "cuda" and not torch.cuda.is_available():
        _fail("--device cuda given, but torch sees no GPU here")
    try:
        if hf_arch is not None:
            m, inputs, source = build_hf(hf_arch, size=size or "toy", device=dev)
        else:
            m, inputs, source = load_model(model, size=size, device=dev)  # type: ignore[arg-type]
        prof = profile_model(m, inputs, source=source, hw_name=hw_name, steps=steps,
                             packs=packs_dir, matmul_epilogues=matmul_epilogues,
                             in_place=in_place)
    except PorterError as exc:
        _fail(str(exc))
    click.echo(format_profile(prof))
    if out_path:
        click.echo(f"profile: {save_profile(prof, out_path)}")


@click.command("port-profile")
@click.argument("profile", type=click.Path(dir_okay=False))
@click.option("--top", default=2, show_default=True, type=int,
              help="Port the N best-ranked groups.")
@click.option("--targets", default="h100", show_default=True,
              help="Comma-separated hardware-model names.")
@click.option("--out", "out_dir", default="packs", show_default=True, type=click.Path(),
              help="Packs folder; each group's pack goes to OUT/<group pack name>/.")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Where the specs and the port runs go (default runs/<new id>).")
@click.option("--max-variants", type=click.IntRange(min=1), default=None,
              help="As for `porter port`.")
@click.option("--max-checks", type=click.IntRange(min=0), default=None,
              help="As for `porter port`.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def port_profile_cmd(profile: str, top: int, targets: str, out_dir: str, run_dir: str | None,
                     max_variants: int | None, max_checks: int | None, verbose: bool) -> None:
    """Port the top groups of PROFILE (from `porter profile --out`) at the model's shapes."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    names = [t.strip() for t in targets.split(",") if t.strip()]
    sys.exit(run_port_profile(profile, top=top, targets=names, out_dir=out_dir, run_dir=run_dir,
                              max_variants=max_variants, max_checks=max_checks))


def run_port_profile(profile: str, *, top: int, targets: list[str], out_dir: str,
                     run_dir: str | None, max_variants: int | None = None,
                     max_checks: int | None = None, **port_kwargs: object) -> int:
    """The body of `porter port-profile` (and of `porter port --from-profile`); the exit code:
    0 every group got a kernel for every target, 1 some did not, 2 bad input (one line).
    `port_kwargs` go to `porter.port.port` (exhaustive, time_budget_s, ...)."""
    from porter.errors import PorterError
    from porter.from_profile import port_from_profile
    from porter.model.report import read_profile
    from porter.port import DEFAULT_RUNS_DIR
    from porter.port import new_run_id

    rd = Path(run_dir) if run_dir else DEFAULT_RUNS_DIR / new_run_id()
    click.echo(f"run dir: {rd}")
    try:
        prof = read_profile(profile)
        results = port_from_profile(prof, top=top, targets=targets, out_dir=out_dir, run_dir=rd,
                                    max_variants=max_variants, max_checks=max_checks,
                                    progress=click.echo, **port_kwargs)
    except PorterError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    missing = False
    for ws, res in results:
        tiers = ", ".join(f"{t.target} {t.tier}" for t in res.targets)
        click.echo(f"{ws.pack_name}: {tiers}; pack {res.pack_path or '(none written)'}")
        for tr in res.missing:
            missing = True
            for line in tr.failures:
                click.echo(f"  no kernel for {tr.target}: {line}", err=True)
    return 1 if missing else 0
