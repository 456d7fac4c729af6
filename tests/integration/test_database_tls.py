"""Verified TLS to the database: a MariaDB started by the test on its own port, with a server
certificate from a CA generated here (openssl). The right CA is accepted and the session is
encrypted; a wrong CA, the RDS bundle (default) and a server without TLS are refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import local_mariadb
import pymysql
import pytest
from support import MYSQL_HOST, MYSQL_PORT

from consolidator.rules.errors import StoreRefused
from consolidator.store.connection import RDS_CA_BUNDLE
from consolidator.store.mysql import ConnectionParams, MySQLStore

pytestmark = pytest.mark.skipif(not (local_mariadb.available() and shutil.which("openssl")),
                                reason="needs mariadbd and openssl")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)


def _server_cert(directory: Path, ca: str) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
             "-out", "server.csr", cwd=directory)
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n"
                                       "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                                       "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-extfile", "ext.cnf", "-out", "server.pem", cwd=directory)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """(port, directory with good-ca.pem and wrong-ca.pem): a MariaDB of this test only, on
    127.0.0.1 and 127.0.0.2, with a certificate naming 127.0.0.1."""
    directory = tmp_path_factory.mktemp("tls")
    _ca(directory, "good-ca")
    _ca(directory, "wrong-ca")
    _server_cert(directory, "good-ca")
    with local_mariadb.mariadb(f"--ssl-ca={directory / 'good-ca.pem'}", f"--ssl-cert={directory / 'server.pem'}",
                               f"--ssl-key={directory / 'server.key'}", bind="127.0.0.1,127.0.0.2") as port:
        with pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS consolidator")
        yield port, directory


def _store(port: int, ca: Path | None, host: str = "127.0.0.1") -> MySQLStore:
    return MySQLStore(ConnectionParams(host, port, "root", "", "consolidator", str(ca) if ca else None, ssl=True))


def test_the_right_ca_is_accepted_and_the_session_is_encrypted(tls_server):
    port, directory = tls_server
    store = _store(port, directory / "good-ca.pem")
    with store.transaction() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()["Value"]  # non-empty: TLS is on
    store.close()


def test_a_wrong_ca_is_refused(tls_server):
    port, directory = tls_server
    with pytest.raises(StoreRefused, match="certificate verify failed"):
        _store(port, directory / "wrong-ca.pem").ping()


def test_tls_without_a_ca_file_verifies_against_the_rds_bundle(tls_server):
    port, _ = tls_server
    assert RDS_CA_BUNDLE.is_file()
    with pytest.raises(StoreRefused, match="certificate verify failed"):
        _store(port, None).ping()  # our generated CA is not in the RDS bundle


def test_a_certificate_for_another_host_is_refused(tls_server):
    port, directory = tls_server
    # the same server reached as 127.0.0.2: its certificate names 127.0.0.1 only
    with pytest.raises(StoreRefused, match="certificate verify failed"):
        _store(port, directory / "good-ca.pem", host="127.0.0.2").ping()


def test_a_server_without_tls_is_refused_when_tls_is_on():
    store = MySQLStore(ConnectionParams(MYSQL_HOST, MYSQL_PORT, "root", "", "mysql", None, ssl=True))
    if _server_offers_tls(MYSQL_HOST, MYSQL_PORT):
        pytest.skip("the shared MariaDB offers TLS")
    with pytest.raises(StoreRefused, match="TLS"):
        store.ping()


def test_the_shipped_rds_bundle_matches_its_documented_checksum():
    import hashlib

    readme = (RDS_CA_BUNDLE.parent / "README.md").read_text()
    digest = hashlib.sha256(RDS_CA_BUNDLE.read_bytes()).hexdigest()
    assert digest in readme
    assert RDS_CA_BUNDLE.read_text().count("BEGIN CERTIFICATE") == 120


def _server_offers_tls(host: str, port: int) -> bool:
    with pymysql.connect(host=host, port=port, user="root", password="") as conn, conn.cursor() as cur:
        cur.execute("SHOW VARIABLES LIKE 'have_ssl'")
        return cur.fetchone()[1] == "YES"
