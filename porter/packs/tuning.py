"""Shapes a pack was not ported for, tuned once on the device and kept (issue 46).

At a shape with no bucket the loader derives a config from the module's rule or borrows a
neighbour's, and may run eager where its estimate is unsure: the softmax pack ran the reference
at 8192 x 1000 (54-66% of copy bandwidth) where the same op ported at that shape reached 91%.
`tune` closes that gap for one shape: on the GPU it takes a bounded set of the pack's own configs
for the shape (the module's rule for each kernel form, the nearest buckets' tuned configs, the
rule's config with half and twice the warps), checks each with the harness's correctness stages
at that shape, times the ones that pass (device time and the call time a caller sees, each beside
eager) and keeps the one whose binding time (the larger of the two) is lowest, or the reference
where eager's is lower.

The result goes to a `TuningCache`: one JSON file per (pack manifest sha256, device) under the
user's cache folder (`PORTER_TUNING_CACHE`, else `$XDG_CACHE_HOME/kernel-porter/tuning`, else
`~/.cache/kernel-porter/tuning`), keyed by the exact shape and dtype. Writers take a file lock
and replace the file whole, so concurrent processes never lose each other's entries. Each entry
carries its own sha256 and names the pack file it runs with that file's sha256: an entry that
does not verify is skipped with one warning, never run. `porter pack cache export/import` carry
the file to other machines of the same kind.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from porter.packs.format import file_lock

log = logging.getLogger(__name__)

FORMAT = 1
DEFAULT_MAX_CANDIDATES = 8
DEFAULT_BUDGET_S = 2.0  # per shape, after the first candidate: compiling is not counted
PREFER_REFERENCE_BELOW = 0.97  # as the port's device tier: eager kept only when clearly faster
_SCALARS = (bool, int, float, str)


class TuningError(ValueError):
    """A shape could not be tuned (no GPU, no inputs for it, no candidate passed); says why."""


def default_cache_dir() -> Path:
    if env := os.environ.get("PORTER_TUNING_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernel-porter" / "tuning"


def shape_key(shape: tuple[int, ...], dtype: str) -> str:
    return "x".join(str(int(d)) for d in shape) + f"/{dtype}"


@dataclass(frozen=True)
class Tuned:
    """One tuned shape: what runs there and the evidence."""

    shape: tuple[int, ...]
    dtype: str  # "bf16"
    runs: str  # "kernel" | "reference"
    file: str | None  # the pack file whose launcher runs `config` (kernel only)
    file_sha256: str | None
    config: dict[str, Any] | None
    numbers: dict[str, Any]  # binding_us, device_us, call_us and eager's, per candidate tried
    tuned_at: str
    versions: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        n = self.numbers
        return (f"tuned on this device {self.tuned_at}: {n.get('binding_us', 0):.1f} us per call "
                f"(device {n.get('device_us', 0):.1f}), eager {n.get('eager_binding_us', 0):.1f} "
                f"us; {n.get('tried', 0)} candidate(s) tried")


def _checksum(entry: dict[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _validate(entry: Any, files: dict[str, str]) -> Tuned | str:
    """The entry as a `Tuned`, or why it is refused."""
    if not isinstance(entry, dict) or entry.get("sha256") != _checksum(entry):
        return "its sha256 does not match its content"
    try:
        shape = tuple(entry["shape"])
        ok = (all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
              and isinstance(entry["dtype"], str) and entry["runs"] in ("kernel", "reference")
              and isinstance(entry["numbers"], dict))
        config = entry.get("config")
        if entry["runs"] == "kernel":
            ok = ok and isinstance(config, dict) and all(
                isinstance(k, str) and isinstance(v, _SCALARS) for k, v in config.items())
            if ok and files.get(entry["file"]) != entry["file_sha256"]:
                return f"its file {entry['file']} is not in this pack with that sha256"
        if not ok:
            return "a field has the wrong type"
        return Tuned(shape, entry["dtype"], entry["runs"], entry.get("file"),
                     entry.get("file_sha256"), config, entry["numbers"],
                     str(entry.get("tuned_at", "")), entry.get("versions") or {})
    except (KeyError, TypeError) as exc:
        return f"a field is missing or malformed ({exc})"


class TuningCache:
    """The tuned shapes of one pack (by its manifest's sha256) on one device."""

    def __init__(self, root: str | os.PathLike[str] | None, pack_sha256: str, device: str,
                 files: dict[str, str]) -> None:
        """`files`: the pack's manifest `files` (path -> sha256), which entries must name."""
        self.root = Path(root) if root is not None else default_cache_dir()
        self.pack_sha256, self.device, self.files = pack_sha256, device, files
        self.path = self.root / pack_sha256[:16] / f"{device}.json"
        self._entries: dict[str, Tuned] = {}
        self.refused: list[str] = []  # "shape/dtype: why", for entries that did not verify
        self.reload()

    def reload(self) -> None:
        self._entries, self.refused = {}, []
        data = self._read(self.path)
        for key, entry in (data.get("entries") or {}).items():
            got = _validate(entry, self.files)
            if isinstance(got, str):
                self.refused.append(f"{key}: {got}")
            else:
                self._entries[key] = got
        for why in self.refused:
            log.warning("tuning cache %s: entry %s; it is not used", self.path, why)

    def _read(self, path: Path) -> dict[str, Any]:
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("tuning cache %s is unreadable (%s); it is not used", path, exc)
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get(
                "pack_sha256") != self.pack_sha256 or data.get("device") != self.device:
            log.warning("tuning cache %s is not for this pack and device (or of another "
                        "format); it is not used", path)
            return {}
        return data

    def get(self, shape: tuple[int, ...], dtype: str) -> Tuned | None:
        return self._entries.get(shape_key(shape, dtype))

    def entries(self) -> dict[str, Tuned]:
        return dict(self._entries)

    def put(self, tuned: Tuned) -> None:
        """Add (or replace) one entry, under the file lock, keeping every other writer's."""
        entry = asdict(tuned)
        entry["shape"] = list(tuned.shape)
        entry["sha256"] = _checksum(json.loads(json.dumps(entry)))
        self._merge({shape_key(tuned.shape, tuned.dtype): json.loads(json.dumps(entry))})

    def _merge(self, new: dict[str, dict[str, Any]]) -> None:
        try:
            self._write(new)
        except OSError as exc:  # a read-only or full cache folder: said, with the way out
            raise TuningError(f"cannot write the tuning cache {self.path}: {exc} (set "
                              "PORTER_TUNING_CACHE or pass --cache)") from None
        self.reload()

    def _write(self, new: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(self.path.with_suffix(".lock")):
            data = self._read(self.path)
            entries = dict(data.get("entries") or {})
            entries.update(new)
            body = {"format": FORMAT, "pack_sha256": self.pack_sha256, "device": self.device,
                    "entries": entries}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tuning-")
            with os.fdopen(fd, "w") as fh:
                json.dump(body, fh, indent=1, sort_keys=True)
            os.replace(tmp, self.path)

    def export(self, to: str | os.PathLike[str]) -> int:
        """Write this cache's verified entries to one file; returns how many."""
        raw = json.loads(self.path.read_text())["entries"]  # the verified entries, as stored
        body = {"format": FORMAT, "pack_sha256": self.pack_sha256, "device": self.device,
                "entries": {k: raw[k] for k in self._entries}}
        Path(to).write_text(json.dumps(body, indent=1, sort_keys=True))
        return len(self._entries)

    def import_(self, path: str | os.PathLike[str]) -> tuple[int, list[str]]:
        """Merge an exported file's entries that verify; returns (merged, refused reasons).

        Raises:
            TuningError: the file is unreadable, or for another pack or device.
        """
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise TuningError(f"{path}: not a tuning cache export ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise TuningError(f"{path}: not a tuning cache export of format {FORMAT}")
        if data.get("pack_sha256") != self.pack_sha256:
            raise TuningError(f"{path}: tuned for pack {str(data.get('pack_sha256'))[:16]}, not "
                              f"this one ({self.pack_sha256[:16]}): re-tune, or load that pack")
        if data.get("device") != self.device:
            raise TuningError(f"{path}: tuned on {data.get('device')!r}, this device is "
                              f"{self.device!r}: configs tuned on one device are not evidence "
                              "for another")
        good, refused = {}, []
        for key, entry in (data.get("entries") or {}).items():
            got = _validate(entry, self.files)
            if isinstance(got, str):
                refused.append(f"{key}: {got}")
            else:
                good[key] = entry
        if good:
            self._merge(good)
        return len(good), refused


@dataclass(frozen=True)
class Candidate:
    file: str
    config: dict[str, Any]
    origin: str  # where the config came from, in words


def candidates(rules: Callable[[str, str | None], tuple[dict[str, Any] | None, str]],
               neighbours: list[tuple[str, dict[str, Any], str]], rule_file: str | None,
               dtype: str, limit: int) -> list[Candidate]:
    """The bounded set tried at one shape, best guesses first, no config twice: the module's
    rule (its own pick, then each kernel form's), the nearest buckets' tuned configs, then the
    rule's pick with half and twice its warps.

    Args:
        rules: (file, form or None) -> (config, how), the module rule of that pack file.
        neighbours: (file, config, bucket) of the same dtype, nearest first.
        rule_file: the pack file whose rule is asked (a generated module), or None.
    """
    out: list[Candidate] = []

    def add(file: str, config: dict[str, Any] | None, origin: str) -> None:
        if config is None or len(out) >= limit:
            return
        config = {**config, "dtype": dtype}
        if all(c.config != config or c.file != file for c in out):
            out.append(Candidate(file, config, origin))

    own = None
    if rule_file is not None:
        own, how = rules(rule_file, None)
        add(rule_file, own, f"the module's rule ({how})")
        for form in ("one-block", "looped", "split_coop"):
            cfg, how = rules(rule_file, form)
            add(rule_file, cfg, f"the module's rule, {form} form ({how})")
    for file, cfg, bucket in neighbours:
        add(file, cfg, f"bucket {bucket}'s tuned config")
    if own is not None and isinstance(own.get("num_warps"), int):
        for warps in (own["num_warps"] // 2, own["num_warps"] * 2):
            if 1 <= warps <= 32:
                add(rule_file or "", {**own, "num_warps": warps},
                    f"the module's rule with {warps} warps")
    return out[:limit]


def tune_shape(problem: Any, reference: Callable[..., Any], shape: tuple[int, ...],
               dtype: Any, cands: list[Candidate], launcher: Callable[[str], Any], *,
               hw: Any, budget_s: float = DEFAULT_BUDGET_S,
               progress: Callable[[str], None] | None = None) -> tuple[Candidate | None,
                                                                       dict[str, Any]]:
    """Check and time `cands` at `shape` on the GPU: (the fastest by binding time, or None where
    eager's is lower; the numbers). `launcher(file)` gives the module whose `launch` runs a
    candidate. Stops trying new candidates once `budget_s` has passed after the first.

    Raises:
        TuningError: no candidate passed its check at this shape.
    """
    import dataclasses

    import torch

    from harness import check
    from harness.timing import compare
    from porter.packs.bound import call_times

    say = progress or (lambda line: None)
    at = dataclasses.replace(problem, smoke_shape=tuple(shape), sweep_shapes=(tuple(shape),),
                             odd_shapes=(tuple(shape),))
    gen = torch.Generator("cuda").manual_seed(0)

    def make_args() -> tuple[Any, ...]:
        return tuple(problem.make_inputs(tuple(shape), dtype, torch.device("cuda"), gen))

    tried: list[dict[str, Any]] = []
    best: tuple[float, Candidate, dict[str, Any]] | None = None
    eager_binding = None
    start = None
    for cand in cands:
        if start is not None and time.monotonic() - start > budget_s:
            say(f"budget of {budget_s:g} s spent: {len(cands) - len(tried)} candidate(s) left")
            break
        module = launcher(cand.file)

        def run(*a: Any, out: Any = None, _m: Any = module, _c: dict[str, Any] = cand.config
                ) -> Any:
            return _m.launch(*a, out=out, config=_c)

        try:
            report = check(at, run, device="cuda", interpret=False, hw=hw,
                           stages=("smoke", "sweep"), dtypes=[dtype])
        except Exception as exc:  # noqa: BLE001 - a config the launcher refuses here
            tried.append({"config": cand.config, "origin": cand.origin,
                          "failed": f"{type(exc).__name__}: {exc}"})
            continue
        if start is None:
            start = time.monotonic()  # compiling the first candidate is not the budget's
        if not report.passed:
            tried.append({"config": cand.config, "origin": cand.origin,
                          "failed": report.failed.message if report.failed else "failed"})
            continue
        args = make_args()
        cmp = compare({"kernel": lambda *a, _r=run: _r(*a), "eager": reference}, make_args,
                      hw=hw, reps=10, graph=False)
        calls = call_times(run, reference, args)
        device_us = cmp.timings["kernel"].median_ms * 1e3
        eager_us = cmp.timings["eager"].median_ms * 1e3
        binding = max(device_us, calls["call_us"])
        eager_binding = min(eager_binding or float("inf"), max(eager_us, calls["eager_call_us"]))
        numbers = {"binding_us": round(binding, 2), "device_us": round(device_us, 2),
                   "call_us": calls["call_us"], "eager_device_us": round(eager_us, 2),
                   "eager_call_us": calls["eager_call_us"], "call_path": calls["call_path"]}
        tried.append({"config": cand.config, "origin": cand.origin, **numbers})
        say(f"{cand.origin}: {binding:.1f} us per call (device {device_us:.1f}), eager "
            f"{max(eager_us, calls['eager_call_us']):.1f}")
        if best is None or binding < best[0]:
            best = (binding, cand, numbers)
    if best is None:
        raise TuningError(f"no candidate passed its check at {shape}: "
                          + "; ".join(t.get("failed", "?") for t in tried))
    binding, cand, numbers = best
    summary = {**numbers, "eager_binding_us": round(eager_binding or 0.0, 2),
               "tried": len(tried), "candidates": tried, "origin": cand.origin}
    if eager_binding is not None and binding > eager_binding / PREFER_REFERENCE_BELOW:
        return None, summary
    return cand, summary


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
