"""The RDS CA bundle the store verifies TLS against ships inside every function's bundle."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infra"))

import bundle

from consolidator.store.connection import RDS_CA_BUNDLE

pytestmark = pytest.mark.infra


def test_the_rds_ca_bundle_is_copied_into_the_function_bundle(tmp_path):
    bundle._copy_package(tmp_path)
    shipped = tmp_path / "consolidator" / "store" / "certs" / RDS_CA_BUNDLE.name
    assert hashlib.sha256(shipped.read_bytes()).digest() == hashlib.sha256(RDS_CA_BUNDLE.read_bytes()).digest()
    assert RDS_CA_BUNDLE.relative_to(bundle.REPO / "src").as_posix() in {
        p.relative_to(bundle.REPO / "src").as_posix() for p in bundle._tree(bundle.REPO / "src" / "consolidator")
    }  # part of the code hash: a new bundle redeploys the functions
