"""One-shot set-up of the compose stack, run before the emulated API server starts.

Writes into ``--out`` (a volume shared with the other containers):

* ``webhook/{tls.crt,tls.key,ca.crt}``: the webhook's serving certificate for the names the API
  server (kubesim) and the Service would use;
* ``scheduler/{tls.crt,tls.key,ca.crt}``: the extender's serving certificate (kube-scheduler's
  stand-in calls it with ``tlsConfig.insecure``, as in the chart);
* ``webhook-configuration.yaml``: the MutatingWebhookConfiguration, as the chart renders it, with
  the generated CA as ``caBundle``; kubesim creates it at start (``objectFiles``).

Existing certificates are kept, so restarting the stack does not rotate them.  Files are handed
to ``--owner`` (the services' unprivileged uid); keys are mode 0600.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from hami_kubesim.certs import ca_bundle_b64, generate_ca

WEBHOOK_NAMESPACE = "hami-system"
WEBHOOK_SERVICE = "hami-webhook"
WEBHOOK_HOSTS = (
    "webhook",
    WEBHOOK_SERVICE,
    f"{WEBHOOK_SERVICE}.{WEBHOOK_NAMESPACE}",
    f"{WEBHOOK_SERVICE}.{WEBHOOK_NAMESPACE}.svc",
    "localhost",
    "127.0.0.1",
)
SCHEDULER_HOSTS = ("scheduler", "hami-scheduler", "localhost", "127.0.0.1")
IGNORE_LABEL = "hami.io/webhook"


def webhook_configuration(ca_bundle: str) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration (default values), pointed at compose's Service."""
    ignore = {"key": IGNORE_LABEL, "operator": "NotIn", "values": ["ignore"]}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_SERVICE, "labels": {"app.kubernetes.io/name": "hami"}},
        "webhooks": [
            {
                "name": "vgpu.hami.io",
                "admissionReviewVersions": ["v1", "v1beta1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 10,
                "matchPolicy": "Equivalent",
                "clientConfig": {
                    "service": {
                        "name": WEBHOOK_SERVICE,
                        "namespace": WEBHOOK_NAMESPACE,
                        "path": "/webhook",
                        "port": 443,
                    },
                    "caBundle": ca_bundle,
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchExpressions": [dict(ignore)]},
                "objectSelector": {"matchExpressions": [dict(ignore)]},
            }
        ],
    }


def _chown_tree(root: Path, owner: int | None) -> None:
    if owner is None:
        return
    for path in [root, *root.rglob("*")]:
        os.chown(path, owner, owner)


def bootstrap(out: Path, *, owner: int | None) -> None:
    """Write certificates (unless present) and the webhook configuration into ``out``."""
    ca_file = out / "webhook" / "ca.crt"
    if not ca_file.exists():
        ca = generate_ca("hami-compose-ca")
        ca.issue(WEBHOOK_HOSTS, common_name="hami-webhook").write(out / "webhook")
        ca.issue(SCHEDULER_HOSTS, common_name="hami-scheduler").write(out / "scheduler")
    document = webhook_configuration(ca_bundle_b64(ca_file.read_bytes()))
    (out / "webhook-configuration.yaml").write_text(
        yaml.safe_dump(document, sort_keys=False), encoding="utf-8"
    )
    _chown_tree(out, owner)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write into")
    parser.add_argument("--owner", type=int, default=None, help="uid (and gid) to own the files")
    args = parser.parse_args(argv)
    bootstrap(args.out, owner=args.owner)
    sys.stdout.write(f"bootstrap: certificates and webhook configuration in {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
