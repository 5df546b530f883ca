"""End-to-end: a two-node group through an etcd that speaks TLS only and wants a client
certificate (`--client-cert-auth`), with a throwaway CA made by the `openssl` command.

  GroupTls  two spotvisors with coordination.tls {ca, cert, key} and https:// members agree
            on the group's first epoch, and the job (a shell trainer that exits 0 after a
            second) ends done on both: exit 0. A third spotvisor with the CA alone (no
            client certificate) cannot join; its error names the endpoint.

Run: SPOTVISOR_BINARY=build/spotvisor /usr/bin/python3 -m unittest -v tests.e2e.test_multinode_tls
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path
from typing import Dict

from tests.e2e.support import E2ECase, events
from tests.e2e.test_multinode import Etcd, SleeperCase, etcd_missing_reason


def openssl(cwd: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"openssl {args[0]} failed: {done.stderr}")


def make_pki(pki: Path) -> Dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 (also a client one: etcd's gateway dials its
    own listener with it) and a client certificate; keys mode 0600."""
    pki.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl(pki, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=e2e-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    leaves = {"server": "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
              "client": "extendedKeyUsage=clientAuth\n"}
    for name, ext in leaves.items():
        (pki / f"{name}.ext").write_text(ext)
        openssl(pki, "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=e2e-{name}")
        openssl(pki, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
        (pki / f"{name}.key").chmod(0o600)
    return {name: pki / name for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


class GroupTls(SleeperCase):
    def setUp(self) -> None:
        E2ECase.setUp(self)
        reason = etcd_missing_reason()
        if reason:
            self.skipTest(reason)
        self.pki = make_pki(self.dir / "pki")
        self.tls = (f"{{ca: {self.pki['ca.pem']}, cert: {self.pki['client.pem']}, "
                    f"key: {self.pki['client.key']}}}")
        self.etcd = Etcd(self.dir, scheme="https", extra=[
            "--cert-file", str(self.pki["server.pem"]), "--key-file", str(self.pki["server.key"]),
            "--client-cert-auth", "--trusted-ca-file", str(self.pki["ca.pem"])])
        self.addCleanup(self.etcd.stop)

    def coordination(self, node_rank, **more: str) -> str:
        return super().coordination(node_rank, tls=self.tls, **more)

    def test_two_nodes_agree_through_an_etcd_with_mutual_tls_and_the_job_ends_done(self):
        self.assertTrue(self.etcd.url.startswith("https://127.0.0.1:"), self.etcd.url)
        trainer = ["/bin/sh", "-c", "sleep 1; exit 0"]
        sv = [self.supervise(self.sleeper_job(f"n{r}", "tls", r, trainer=trainer), f"n{r}") for r in (0, 1)]
        for s in sv:
            self.assertEqual(s.wait_event("group_agreed", 60)["epoch"], "1")
        for s in sv:
            self.assert_exit(s, 0, 60)
            self.assertEqual(events(s.text(), "group_trouble"), [], s.text())

        # The CA alone: the member wants a client certificate, so this node never gets in.
        self.tls = f"{{ca: {self.pki['ca.pem']}}}"
        lone = self.supervise(self.sleeper_job("n2", "tls-anonymous", 0), "n2")
        lone.wait_for(re.escape(self.etcd.url) + r": read: \S+ alert [a-z ]*certificate \(no client certificate was "
                      r"given; does the server want one\?\)", 60)
        lone.signal(signal.SIGTERM)
        self.assert_exit(lone, 75, 30)
        self.assertEqual(events(lone.text(), "group_agreed"), [], lone.text())


if __name__ == "__main__":
    import unittest
    unittest.main()
