"""Compare one op across devices: measured where we have the device, projected where we don't.

For each device and each of the op's shapes, the best kernel the porter has for it:

1. **measured** - the fastest passing measured record in the results store (`store.best`), else a
   pack bucket whose numbers were measured on that device;
2. **projected, transferred** - a measured time on another device carried over with
   `harness.transfer.transfer`: the calibration device's copy curve (from `device_copy` records
   in the store) fitted to a `CopyModel` and moved to the target's LLC and copy ceiling, the
   latency-bound branch fitted on the calibration device's rows of the op. Without a copy curve,
   the calibration time scaled by the ratio of the two devices' ceilings. This is the model
   `python -m bench.validate_projection` validated H100 <-> H200; its error bar comes from the
   JSON that validation wrote (`results/projection-validation.json`), never from a constant here;
3. **projected, first principles** - the pack's own projected numbers for the target (written by
   `porter port` from the hardware model), else `harness.projection.project` from bytes and FLOPs.

Each row carries % of that device's peak (the measured ceiling where the hardware model has one,
the datasheet otherwise, and which), GB/s or TFLOP/s, speedup over eager PyTorch where measured,
the tier, and for a projection its expected error and whether that error was validated.
"""

from __future__ import annotations

from porter.compare.build import compare
from porter.compare.expected import expected_error_for
from porter.compare.expected import load_expected_error
from porter.compare.sources import resolve_op
from porter.compare.table import ALL_DEVICES
from porter.compare.table import COPY_OP
from porter.compare.table import DEFAULT_PACKS
from porter.compare.table import DEFAULT_STORE
from porter.compare.table import DEFAULT_VALIDATION
from porter.compare.table import CompareError
from porter.compare.table import Comparison
from porter.compare.table import Key
from porter.compare.table import Row

__all__ = ["ALL_DEVICES", "COPY_OP", "DEFAULT_PACKS", "DEFAULT_STORE", "DEFAULT_VALIDATION",
           "CompareError", "Comparison", "Key", "Row", "compare", "expected_error_for",
           "load_expected_error", "resolve_op"]
