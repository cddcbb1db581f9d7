"""The benchmark suite and the tools a user reruns, run from the repository root.

`python -m bench.suite`, `python -m bench.sweep`, `python -m bench.compile_report` and
`python -m bench.kernelbench_dir`. Not installed with the package: `porter bench --suite` runs
the suite from a checkout. One-off probes live in git history (bench/NOTES.md says where).
"""
