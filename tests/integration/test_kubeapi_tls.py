"""The simulated API server speaks HTTPS only, with a certificate its own authority signed for 127.0.0.1 and
localhost: clients that trust the authority get through with verification on, others are refused, as by
kube-apiserver."""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer, client_configuration
from serverless_karpenter_sim.kubeapi.kubeconfig import kubeconfig, write_kubeconfig

pytestmark = pytest.mark.integration


def test_clients_verify_the_server_against_its_authority(tmp_path: Path) -> None:
    with KubeApiServer(ManualClock()) as server:
        port = int(server.url.rsplit(":", 1)[1])
        token = server.client_configuration().api_key["BearerToken"]  # the admin's
        trusted = client.CoreV1Api(client.ApiClient(client_configuration(server.url, token)))
        assert "default" in {ns.metadata.name for ns in trusted.list_namespace().items}

        by_name = client_configuration(f"https://localhost:{port}", token)
        assert client.CoreV1Api(client.ApiClient(by_name)).list_namespace().items

        untrusting = client.Configuration(host=server.url)
        untrusting.proxy = None
        untrusting.retries = False
        with pytest.raises(client.ApiException, match="CERTIFICATE_VERIFY_FAILED"):
            client.CoreV1Api(client.ApiClient(untrusting)).list_namespace()

        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            plain.request("GET", "/version")
            plain.getresponse().read()
        plain.close()

        context = ssl.create_default_context(cafile=server.authority.ca_file)
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_kubectl_needs_the_kubeconfigs_authority(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl must be on the PATH for this test"
    with KubeApiServer(ManualClock()) as server:
        good = write_kubeconfig(tmp_path / "good", server, "sim")
        document = kubeconfig(server, "sim")
        del document["clusters"][0]["cluster"]["certificate-authority-data"]
        bad = tmp_path / "bad"
        bad.write_text(yaml.safe_dump(document))

        def get_namespaces(config: Path) -> subprocess.CompletedProcess[str]:
            env = {"KUBECONFIG": str(config), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
            return subprocess.run(
                [kubectl, "get", "namespaces"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        accepted = get_namespaces(good)
        assert accepted.returncode == 0, accepted.stderr
        assert "kube-system" in accepted.stdout
        refused = get_namespaces(bad)
        assert refused.returncode != 0
        assert "certificate signed by unknown authority" in refused.stderr
