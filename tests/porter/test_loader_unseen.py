"""The loader at shapes no bucket was ported for (issue 31): the config derived for the shape
from the module's own rule for the device, a same-width bucket's config, the kernel-vs-eager
estimate from the neighbours' measurements, and manifests written before any of this."""

from __future__ import annotations

import functools
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import hwmodels
from porter.packs.loader import MARGIN_PER_OCTAVE
from porter.packs.loader import PackFallbackWarning
from porter.packs.loader import load_pack
from porter.packs.writer import write_pack
from porter.port import BucketChoice
from porter.port import PortResult
from porter.port import TargetResult
from tests.porter.test_pack_helpers import make_pack

REFERENCE = '''
import torch

def reference(x):
    return torch.softmax(x, dim=-1)
'''


@functools.lru_cache(maxsize=1)
def _softmax_op() -> Any:
    from porter.codegen import generate

    return generate(lambda x: torch.softmax(x, dim=-1), (torch.randn(4, 100),), name="softmax")


def _numbers(speedup: float | None, *, t: float = 0.025, nbytes: int = 64 << 20) -> dict[str, Any]:
    if speedup is None:  # ported on a CPU: a projection, never compared with eager
        return {"time_ms": t, "label": "projected", "pct_of_peak": 80.0, "bytes_moved": nbytes}
    return {"time_ms": t, "p20_ms": t, "p80_ms": t, "label": "measured", "pct_of_peak": 88.0,
            "bytes_moved": nbytes, "speedup_vs_eager": speedup,
            "speedup_vs_eager_p20_p80": [speedup * 0.98, speedup * 1.02]}


def _one_block(block: int, warps: int, dtype: str) -> dict[str, Any]:
    return {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": block, "num_warps": warps,
            "num_stages": 1, "dtype": dtype}


def _pack(tmp: Path, buckets: dict[str, tuple[dict[str, Any], float | None]], *,
          tier: str = "measured", cpu_buckets: tuple[str, ...] = (),
          forms: dict[str, dict[str, float]] | None = None) -> Path:
    """A softmax pack of the real generated module: h100 and mi300x entries with the given bf16
    buckets ({bucket: (config, kernel-vs-eager ratio or None)}), and interpreted-tier fp32
    buckets `cpu_buckets` (default configs) for the CPU; `forms`: {bucket: {form: ratio}}, the
    rule configs of other forms the port timed at a bucket (its `form_speedups`)."""
    op = _softmax_op()
    source = op.triton_module_source()

    def choice(bucket: str, dtype: str, config: dict[str, Any], speedup: float | None,
               tier: str) -> BucketChoice:
        shape = tuple(int(d) for d in bucket.split("x"))
        numbers = _numbers(speedup)
        if dtype == "bf16" and bucket in (forms or {}):
            numbers["form_speedups"] = {f: {"config": {"strategy": f}, "speedup_vs_eager": r,
                                            "time_ms": 0.03} for f, r in forms[bucket].items()}
        return BucketChoice(bucket=bucket, dtype=dtype, shape=shape, config=config,
                            source=source, tier=tier, numbers=numbers)

    def entry(target: str, vendor: str, backend: str, arch: str) -> TargetResult:
        chosen = [choice(b, "bf16", cfg, s, tier) for b, (cfg, s) in buckets.items()]
        chosen += [choice(b, "fp32", {**op.default_config(
            hwmodels.get(target), (torch.empty(*map(int, b.split("x"))),)), "dtype": "fp32"},
            None, "interpreted") for b in cpu_buckets]
        return TargetResult(target, vendor, backend, arch, "ab" * 32, "bf16: atol=1e-2",
                            tuple(chosen))

    spec = tmp / "spec.py"
    spec.write_text(REFERENCE)
    result = PortResult(op="softmax_u", spec_path=spec, run_dir=tmp / "run",
                        targets=(entry("h100", "nvidia", "triton-cuda", "90"),
                                 entry("mi300x", "amd", "triton-hip", "gfx942")),
                        versions={"torch": "x", "triton": "y"}, fusion={}, signature=("tensor",),
                        reference_function="reference")
    return write_pack(result, tmp / "packs").path


# bf16 buckets at two widths, each with a config tuned there (not the rule's default)
TWO_WIDTHS = {"4096x1024": (_one_block(1024, 2, "bf16"), 1.6),
              "4096x8192": (_one_block(8192, 16, "bf16"), 1.5)}


def _x(rows: int, cols: int, dtype: torch.dtype = torch.bfloat16, device: str = "meta"):
    return (torch.empty(rows, cols, dtype=dtype, device=device),)


def _without_lanes(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in ("LANES", "waves_per_eu")}


@pytest.mark.parametrize("device", ["h100", "mi300x"])
def test_unseen_width_runs_the_config_derived_for_it(tmp_path: Path, device: str) -> None:
    """Between two ported widths the loader derives the config for the asked width by the
    module's own rule with the device's warp width and thread limit: the config the port's
    generator gives that shape on that device (variants.default_config), not a neighbour's."""
    op = load_pack(_pack(tmp_path, TWO_WIDTHS), device=device)
    x = _x(4096, 3000)  # bucket 4096x3072: no bucket of this width
    c = op.choose(*x)
    assert c.runs_kernel and c.unseen and c.target == device
    want = _softmax_op().default_config(hwmodels.get(device), x)
    assert _without_lanes(c.config) == _without_lanes(want)
    # a softmax's lanes follow the warp width; 32-wide warps' are the launcher's own
    assert c.config.get("LANES", want["LANES"]) == want["LANES"]
    assert ("LANES" in c.config) is (device == "mi300x")
    assert c.config not in [cfg for cfg, _ in TWO_WIDTHS.values()]
    text = op.describe(*x)
    assert "derived for this shape by the module's own rule (rowwise_default with warp_size " \
        f"{hwmodels.get(device).warp_size}" in text
    assert f"config {c.config}" in text and "timed neighbours: 4096x1024 ran 1.60x eager" in text


def test_exact_bucket_keeps_its_tuned_config(tmp_path: Path) -> None:
    op = load_pack(_pack(tmp_path, TWO_WIDTHS), device="h100")
    c = op.choose(*_x(4096, 8192))
    assert c.runs_kernel and not c.unseen and c.config == TWO_WIDTHS["4096x8192"][0]
    assert "exact bucket 4096x8192/bf16" in op.describe(*_x(4096, 8192))


def test_same_width_bucket_lends_its_config_to_nearby_row_counts(tmp_path: Path) -> None:
    op = load_pack(_pack(tmp_path, TWO_WIDTHS), device="h100")
    near = op.choose(*_x(1000, 8192))  # 1024 rows: 2 octaves from 4096, same width
    assert near.unseen and near.config == TWO_WIDTHS["4096x8192"][0]
    assert "tuned for rows this wide" in near.basis
    far = op.choose(*_x(64, 8192))  # 6 octaves fewer rows: tuned for another regime
    assert far.unseen and "derived for this shape" in far.basis
    assert _without_lanes(far.config) == _without_lanes(
        _softmax_op().default_config(hwmodels.get("h100"), _x(64, 8192)))


@pytest.mark.parametrize(("speedups", "cols", "runs_kernel"), [
    ((1.6, 1.5), 3000, True),  # both neighbours beat eager by far more than the margin
    ((1.6, 0.7), 3000, False),  # the wider neighbour lost to eager
    ((0.8, 1.5), 3000, False),  # the narrower one did
    ((0.7, 0.9), 7000, False),  # both did
    ((0.8, 1.5), 7000, True),  # a loss 2.8 octaves away, a win 0.19 octaves away
], ids=["both-won", "wider-lost", "narrower-lost", "both-lost", "near-win-far-loss"])
def test_reference_runs_where_the_neighbours_lost_to_eager(
        tmp_path: Path, speedups: tuple[float, float], cols: int, runs_kernel: bool) -> None:
    pairs = zip(TWO_WIDTHS.items(), speedups, strict=True)
    buckets = {b: (cfg, s) for (b, (cfg, _)), s in pairs}
    op = load_pack(_pack(tmp_path, buckets), device="h100")
    c = op.choose(*_x(4096, cols))
    assert c.runs_kernel is runs_kernel and c.unseen
    text = op.describe(*_x(4096, cols))
    assert f"4096x1024 ran {speedups[0]:.2f}x eager" in text
    assert f"4096x8192 ran {speedups[1]:.2f}x eager" in text
    if runs_kernel:
        assert c.reference_why is None and "runs h100 entry, no exact bucket" in text
    else:
        assert "estimated slower than eager here" in c.reference_why
        assert "runs the reference op instead of the kernel" in text


def test_margin_grows_with_distance(tmp_path: Path) -> None:
    """A bucket that beat eager by 8% is enough next door, not an octave and more away."""
    buckets = {"4096x8192": (_one_block(8192, 16, "bf16"), 1.08)}
    op = load_pack(_pack(tmp_path, buckets), device="h100")
    assert op.choose(*_x(4096, 7000)).runs_kernel  # 7168: 0.19 octaves, needs 1.02x
    far = op.choose(*_x(4096, 3000))  # 3072: 1.42 octaves, needs 1 + 0.142x
    assert not far.runs_kernel
    assert f"needs >= {1 + MARGIN_PER_OCTAVE * 1.415:.2f}x" in far.reference_why


def test_a_form_never_timed_counts_the_other_forms_halved(tmp_path: Path) -> None:
    """At a vocabulary width the rule picks the looped kernel, and every timed bucket ran one
    block per row: their speed says little about the looped form's, so a thin lead over eager
    there (1.5-1.6x, halved) runs the reference, and a wide one (6-12x, cross-entropy's) the
    kernel (bench/NOTES.md item 59)."""
    op = load_pack(_pack(tmp_path, TWO_WIDTHS), device="h100")
    c = op.choose(*_x(1024, 50257))
    assert c.config["strategy"] == "looped" and not c.runs_kernel
    assert "estimated slower than eager here" in c.reference_why
    assert "(the one-block form where this shape needs the looped form: counted / 2)" \
        in c.reference_why
    (tmp_path / "wide").mkdir()
    ahead = {b: (cfg, 8.0) for b, (cfg, _) in TWO_WIDTHS.items()}
    far = load_pack(_pack(tmp_path / "wide", ahead), device="h100").choose(*_x(1024, 50257))
    assert far.config["strategy"] == "looped" and far.runs_kernel
    assert "counted / 2" in far.evidence


def test_a_timed_chunked_form_counts_for_the_looped_one(tmp_path: Path) -> None:
    """A vocabulary-width bucket timed with another chunked strategy (looped_l2) is evidence for
    the looped kernel the rule picks at an unported vocabulary width."""
    wide = {"strategy": "looped_l2", "ROWS": 1, "BLOCK_N": 8192, "num_warps": 8,
            "num_stages": 1, "dtype": "bf16"}
    # an odd width: 2-byte rows not 16-byte aligned, where the rule keeps the looped kernel,
    # and a bucket of unaligned rows too
    op = load_pack(_pack(tmp_path, {**TWO_WIDTHS, "1024x131071": (wide, 1.5)}), device="h100")
    c = op.choose(*_x(1024, 151937))  # bucket 1024x163840
    assert c.config["strategy"] == "looped" and c.runs_kernel
    assert "1024x131071 ran 1.50x eager" in c.evidence and "4096x8192" not in c.evidence


def test_a_bucket_of_aligned_rows_counts_halved_for_unaligned_ones(tmp_path: Path) -> None:
    """Rows 16-byte aligned load 16 bytes at a time, odd-width 2-byte rows one element at a
    time in the one-block kernels: the looped softmax at 4096 x 50257 bf16 (before its SHIFT
    body) ran 0.79x eager on an H100 where a bucket at 128256 columns had run 1.34x
    (bench/NOTES.md item 58); a kernel far ahead of eager stays ahead."""
    op = load_pack(_pack(tmp_path, TWO_WIDTHS), device="h100")
    assert op.choose(*_x(4096, 3000)).runs_kernel  # aligned (8 x 375): 1.5-1.6x counts as is
    c = op.choose(*_x(4096, 3001))
    assert c.config["strategy"] == "single_pass" and not c.runs_kernel
    assert "estimated slower than eager" in c.reference_why
    assert "(rows 16-byte aligned where these are not: counted / 2)" in c.reference_why
    (tmp_path / "far").mkdir()
    far = {b: (cfg, 8.0) for b, (cfg, _) in TWO_WIDTHS.items()}
    assert load_pack(_pack(tmp_path / "far", far), device="h100").choose(
        *_x(4096, 3001)).runs_kernel


def test_shifted_kernels_count_buckets_of_either_alignment(tmp_path: Path) -> None:
    """The looped kernel starts its blocks on the rows' 16-byte boundaries where rows are not
    aligned (SHIFT, bench/NOTES.md item 60): at 4096 x 50257 bf16, where the rule derives it,
    an aligned looped bucket's ratio counts as it is; without SHIFT in the module it would
    count halved (the one-block kernels' case above)."""
    looped = {"strategy": "looped", "ROWS": 1, "BLOCK_N": 8192, "num_warps": 8,
              "num_stages": 1, "dtype": "bf16"}
    op = load_pack(_pack(tmp_path, {**TWO_WIDTHS, "4096x128256": (looped, 1.34)}),
                   device="h100")
    c = op.choose(*_x(4096, 50257))
    assert c.config["strategy"] == "looped" and c.runs_kernel
    assert "4096x128256 ran 1.34x eager" in c.evidence and "counted / 2" not in c.evidence
    assert op._shifted(c.bucket, c.config)
    assert not op._shifted(c.bucket, {**c.config, "strategy": "single_pass"})


def test_where_no_bucket_kept_the_form_its_rule_config_timed_there_is_the_evidence(
        tmp_path: Path) -> None:
    """The port times, at each bucket, the module rule's config of each other kernel form
    beside eager (`form_speedups`, porter/judge/device.py). At a shape that needs a form no
    bucket kept, those ratios are the evidence, counted as they are (not halved for the form);
    a rule config slower than eager there says eager."""
    wide = {**TWO_WIDTHS, "4096x32768": (_one_block(32768, 32, "bf16"), 1.5)}
    forms = {"4096x32768": {"looped": 1.1, "split_coop": 1.3}, "4096x8192": {"looped": 1.2}}
    op = load_pack(_pack(tmp_path, wide, forms=forms), device="h100")
    c = op.choose(*_x(1024, 50000))  # aligned rows (8 x 6250): the rule splits them
    assert c.config["strategy"] == "split_coop" and c.runs_kernel
    assert "4096x32768's split_coop rule config ran 1.30x eager (its kept one-block kernel " \
        "1.50x)" in c.evidence and "counted / 2" not in c.evidence
    assert "4096x8192" not in c.evidence
    (tmp_path / "slow").mkdir()
    slow = {"4096x32768": {"split_coop": 0.9}}
    c = load_pack(_pack(tmp_path / "slow", wide, forms=slow),
                  device="h100").choose(*_x(1024, 50000))
    assert not c.runs_kernel and "split_coop rule config ran 0.90x eager" in c.reference_why
    # beside a bucket that kept the form: each side's nearest, by its own evidence (rmsnorm's
    # pack kept split_coop at 4096 x 4096, and nothing wider, on an H100: item 61)
    coop = {"strategy": "split_coop", "ROWS": 1, "BLOCK_N": 16384, "SPLIT": 1, "num_warps": 8,
            "num_stages": 1, "PROGRAMS_PER_SM": 2, "dtype": "bf16"}
    (tmp_path / "kept").mkdir()
    fast = {"4096x32768": {"split_coop": 1.6}}
    c = load_pack(_pack(tmp_path / "kept", {**wide, "4096x1024": (coop, 1.2)}, forms=fast),
                  device="h100").choose(*_x(1024, 50000))
    assert c.runs_kernel and "4096x32768's split_coop rule config ran 1.60x eager" in c.evidence
    assert "4096x1024" not in c.evidence  # farther on the same side
    c = load_pack(_pack(tmp_path / "kept", {**wide, "4096x131072": (
        {**coop, "SPLIT": 8}, 1.4)}, forms=slow), device="h100").choose(*_x(1024, 50000))
    assert "4096x131072 ran 1.40x eager" in c.evidence
    assert "4096x32768's split_coop rule config ran 0.90x eager" in c.evidence


def test_a_rule_configs_ratio_from_aligned_rows_counts_halved_even_with_shift(
        tmp_path: Path) -> None:
    """SHIFT kept cross-entropy's kept looped kernels at their speed at 50,257 wide, but
    softmax's looped rule config ran 0.91x eager there (bench/NOTES.md item 60): a rule
    config's ratio timed on aligned rows counts halved for unaligned ones, SHIFT or not."""
    forms = {"4096x8192": {"looped": 1.8}}
    op = load_pack(_pack(tmp_path, TWO_WIDTHS, forms=forms), device="h100")
    c = op.choose(*_x(4096, 50257))
    assert c.config["strategy"] == "looped" and op._shifted(c.bucket, c.config)
    assert not c.runs_kernel
    assert "looped rule config ran 1.80x eager" in c.reference_why
    assert "(rows 16-byte aligned where these are not: counted / 2)" in c.reference_why


def test_aligned_vocabulary_rows_derive_the_split_coop_kernel(tmp_path: Path) -> None:
    """At an aligned vocabulary width the rule splits each row over co-resident programs
    (bench/NOTES.md item 58); a split_coop bucket's timing is the evidence for it, a looped
    one's is not (the looped kernel reads each row twice, split_coop once)."""
    wide = {"strategy": "split_coop", "ROWS": 1, "BLOCK_N": 16384, "SPLIT": 8, "num_warps": 8,
            "num_stages": 1, "PROGRAMS_PER_SM": 2, "dtype": "bf16"}
    op = load_pack(_pack(tmp_path, {**TWO_WIDTHS, "4096x131072": (wide, 1.6)}), device="h100")
    c = op.choose(*_x(1024, 151936))  # bucket 1024x163840
    assert {k: c.config[k] for k in ("strategy", "BLOCK_N", "SPLIT", "num_warps",
                                     "PROGRAMS_PER_SM")} == {
        "strategy": "split_coop", "BLOCK_N": 16384, "SPLIT": 10, "num_warps": 8,
        "PROGRAMS_PER_SM": 2}
    assert c.runs_kernel and "4096x131072 ran 1.60x eager" in c.evidence
    looped = {"strategy": "looped", "ROWS": 1, "BLOCK_N": 8192, "num_warps": 8,
              "num_stages": 1, "dtype": "bf16"}
    (tmp_path / "b").mkdir()
    op = load_pack(_pack(tmp_path / "b", {**TWO_WIDTHS, "4096x131072": (looped, 1.6)}),
                   device="h100")
    c = op.choose(*_x(1024, 151936))
    assert c.config["strategy"] == "split_coop" and not c.runs_kernel
    # no split_coop kernel on a HIP device: its rule keeps the looped kernel
    (tmp_path / "c").mkdir()
    amd = load_pack(_pack(tmp_path / "c", TWO_WIDTHS), device="mi300x")
    assert amd.choose(*_x(1024, 151936)).config["strategy"] == "looped"


def test_no_timed_bucket_means_no_estimate_and_the_kernel_runs(tmp_path: Path) -> None:
    buckets = {b: (cfg, None) for b, (cfg, _) in TWO_WIDTHS.items()}
    op = load_pack(_pack(tmp_path, buckets, tier="interpreted"), device="h100")
    c = op.choose(*_x(4096, 3000))
    assert c.runs_kernel and "no estimate either way" in c.evidence


def test_reference_decision_is_logged_once_and_cached(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    buckets = {b: (cfg, 0.9) for b, (cfg, _) in TWO_WIDTHS.items()}
    op = load_pack(_pack(tmp_path, buckets), device="h100")
    x = _x(4096, 3000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackFallbackWarning)  # an entry fits: not a fallback
        with caplog.at_level(logging.WARNING, logger="porter.packs.loader"):
            y = op(*x)
            op(*x)
            op(*_x(4090, 3001))  # the same bucket and dtype: no second message
    assert y.shape == x[0].shape and y.device.type == "meta"  # the reference op ran
    said = [r for r in caplog.records if "running the reference op" in r.getMessage()]
    assert len(said) == 1 and "4096x3072/bf16" in said[0].getMessage()
    assert "calls: the reference op" in op.describe(*x)


def test_cpu_runs_the_derived_config_correctly(tmp_path: Path) -> None:
    """The derived config launches: under the interpreter at a width no bucket has."""
    op = load_pack(_pack(tmp_path, TWO_WIDTHS, cpu_buckets=("8x128", "8x1024")), device="cpu")
    x = (3.0 * torch.randn(5, 300, generator=torch.Generator().manual_seed(1)),)
    c = op.choose(*x)
    assert c.runs_kernel and c.interpret and c.unseen and c.config["BLOCK_N"] == 512
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackFallbackWarning)
        y = op(*x)
    torch.testing.assert_close(y, torch.softmax(x[0], dim=-1), atol=1e-5, rtol=1e-5)


def test_a_module_without_rules_keeps_the_nearest_buckets_config(tmp_path: Path) -> None:
    """A kernel with its own launcher (here the hand-written stand-in; in a real pack a user's
    kernel) has no generator rule to ask: at an unseen width it runs with the nearest bucket's
    launch options, as before."""
    op = load_pack(make_pack(tmp_path), device="h100")
    c = op.choose(torch.empty(64, 200, device="meta"), torch.empty(200, device="meta"))
    assert c.runs_kernel and c.unseen and c.config == {"num_warps": 4}
    assert "nearest bucket 64x256's: the module has none of the generator's rules" in c.basis


def test_manifest_from_before_unseen_shapes_still_loads(tmp_path: Path) -> None:
    """A manifest of an older port: buckets without origin or numbers and configs without a
    strategy, entries without provenance; it loads, chooses at an unseen shape, and runs."""
    pack = make_pack(tmp_path)
    m = yaml.safe_load((pack / "manifest.yaml").read_text())
    for key in ("signature", "fusion", "versions"):
        m.pop(key, None)
    for e in m["entries"]:
        e.pop("provenance", None)
        for b in e["buckets"]:
            b.pop("origin", None)
            b.pop("numbers", None)
    (pack / "manifest.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    gpu = load_pack(pack, device="h100")
    c = gpu.choose(torch.empty(64, 200, device="meta"), torch.empty(200, device="meta"))
    assert c.runs_kernel and c.unseen and "no estimate either way" in c.evidence
    cpu = load_pack(pack, device="cpu")
    x = torch.randn(5, 300)
    w = torch.randn(300)
    want = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
    torch.testing.assert_close(cpu(x, w), want, atol=1e-5, rtol=1e-5)


def test_force_kernel_runs_the_chosen_kernel_or_says_why_not(tmp_path: Path) -> None:
    """force_kernel (bench/suite.py --unseen times it where the pack ran eager) runs the same
    kernel and config as choose() picks; with no kernel for the inputs it raises, naming why."""
    op = load_pack(_pack(tmp_path, TWO_WIDTHS, cpu_buckets=("8x128", "8x1024")), device="cpu")
    x = torch.randn(5, 300, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(op.force_kernel(x), torch.softmax(x, dim=-1), atol=1e-5,
                               rtol=1e-5)
    with pytest.raises(ValueError, match="no config for fp16"):
        op.force_kernel(x.half())


def test_fp32_matmul_config_derived_for_an_unseen_shape_uses_tf32x3_where_offered() -> None:
    """The derived config of an fp32 matmul module runs its fp32 dots as tf32x3 where a port
    would (CUDA with tf32 tensor cores), with the tile the rule gives that shape; exact fp32 on
    MI300X (Triton's HIP backend has no tf32x3)."""
    from porter.codegen import generate
    from porter.codegen.loading import load_generated_module
    from porter.packs.unseen import derive_config

    op = generate(lambda a, b: a @ b, (torch.randn(64, 128), torch.randn(128, 32)),
                  name="mm_unseen")
    inputs = (torch.empty(4096, 2048, device="meta"), torch.empty(2048, 4096, device="meta"))
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=True)
    cfg, how = derive_config(mod, hwmodels.get("h100"), inputs)
    assert cfg is not None and cfg["tf32x3"] is True and cfg["ieee"] is False, how
    assert (cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) == (128, 128, 64)
    assert "tf32x3 True" in how
    cfg, how = derive_config(mod, hwmodels.get("mi300x"), inputs)
    assert cfg is not None and "tf32x3" not in cfg and "tf32x3 False" in how


USER_SOFTMAX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _user_softmax(x_ptr, y_ptr, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x.to(tl.float32) - tl.max(x.to(tl.float32), axis=0))
    tl.store(y_ptr + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty),
             mask=cols < n_cols)


def launch(x, out=None, config=None):
    x = x.contiguous()
    y = out if out is not None else torch.empty_like(x)
    _user_softmax[(x.shape[0],)](x, y, x.shape[-1], BLOCK_N=triton.next_power_of_2(x.shape[-1]),
                                 num_warps=(config or {}).get("num_warps", 4))
    return y
'''


def _mixed_pack(tmp: Path) -> Path:
    """A softmax pack whose 4096x4096 bf16 bucket kept a user's kernel (a launcher of its own,
    no generator rule) and whose 4096x1024 bucket kept the generated module."""
    generated = _softmax_op().triton_module_source()
    numbers = _numbers(1.4)
    chosen = (BucketChoice(bucket="4096x4096", dtype="bf16", shape=(4096, 4096),
                           config={"num_warps": 8}, source=USER_SOFTMAX, tier="measured",
                           numbers=numbers),
              BucketChoice(bucket="4096x1024", dtype="bf16", shape=(4096, 1024),
                           config=_one_block(1024, 2, "bf16"), source=generated,
                           tier="measured", numbers=numbers))
    spec = tmp / "spec.py"
    spec.write_text(REFERENCE)
    result = PortResult(op="softmax_mixed", spec_path=spec, run_dir=tmp / "run",
                        targets=(TargetResult("h100", "nvidia", "triton-cuda", "90", "ab" * 32,
                                              "bf16: atol=1e-2", chosen),),
                        versions={"torch": "x", "triton": "y"}, fusion={},
                        signature=("tensor",), reference_function="reference")
    return write_pack(result, tmp / "packs").path


def test_unseen_shape_near_a_users_kernel_runs_the_generated_module_sized_for_it(
        tmp_path: Path) -> None:
    """At a shape no bucket was ported for, where the nearest bucket kept a user's kernel (no
    rule to size itself) and another bucket kept the generated module, the loader runs the
    generated module with the config its rule derives for the shape, and says so; at the user
    kernel's own bucket the user's kernel runs."""
    op = load_pack(_mixed_pack(tmp_path), device="h100")
    c = op.choose(*_x(10000, 3000))
    assert c.runs_kernel and c.unseen and c.bucket["bucket"] == "4096x1024"
    assert c.config["BLOCK_N"] == 4096 and c.config["dtype"] == "bf16"
    assert "bucket 4096x1024's generated module" in c.basis
    assert "nearest bucket 4096x4096's kernel has no rule" in c.basis
    exact = op.choose(*_x(4096, 4096))
    assert exact.bucket["bucket"] == "4096x4096" and exact.config == {"num_warps": 8}
