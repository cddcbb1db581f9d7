"""Compatibility: the pack format, verification and writer live in `porter.packs`."""

from __future__ import annotations

from porter.packs.format import FORMAT  # noqa: F401
from porter.packs.format import MANIFEST  # noqa: F401
from porter.packs.format import REFERENCE  # noqa: F401
from porter.packs.format import SUMMARY_HEADERS  # noqa: F401
from porter.packs.format import TIERS  # noqa: F401
from porter.packs.format import VENDOR_DIRS  # noqa: F401
from porter.packs.format import PackError  # noqa: F401
from porter.packs.format import PackIntegrityError  # noqa: F401
from porter.packs.format import PackPathError  # noqa: F401
from porter.packs.format import bucket_distance  # noqa: F401
from porter.packs.format import entry_files  # noqa: F401
from porter.packs.format import sha256_bytes  # noqa: F401
from porter.packs.format import sha256_file  # noqa: F401
from porter.packs.format import shape_bucket  # noqa: F401
from porter.packs.format import summary_rows  # noqa: F401
from porter.packs.format import tier_rank  # noqa: F401
from porter.packs.format import vendor_dir  # noqa: F401
from porter.packs.verify import VerifiedPack  # noqa: F401
from porter.packs.verify import VerifyReport  # noqa: F401
from porter.packs.verify import manifest_paths  # noqa: F401
from porter.packs.verify import manifest_sha256  # noqa: F401
from porter.packs.verify import normalize_sha256  # noqa: F401
from porter.packs.verify import parse_manifest  # noqa: F401
from porter.packs.verify import path_problems  # noqa: F401
from porter.packs.verify import read_manifest  # noqa: F401
from porter.packs.verify import read_verified  # noqa: F401
from porter.packs.verify import read_verified_pack  # noqa: F401
from porter.packs.verify import resolve_in_pack  # noqa: F401
from porter.packs.verify import verify_files  # noqa: F401
from porter.packs.verify import verify_pack  # noqa: F401
from porter.packs.writer import WrittenPack  # noqa: F401
from porter.packs.writer import check_out_dir  # noqa: F401
from porter.packs.writer import write_pack  # noqa: F401
