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

``--host-dir`` (repeatable) creates a directory of a simulated node's host filesystem, e.g. its
HAMi-core ``<hook>/vgpu/containers``, so the vGPU monitor finds its ``HOOK_PATH`` before the
first Allocate; the directories it creates are handed to ``--owner`` too.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from hami_kubesim.certs import ca_bundle_b64, generate_ca
from hami_kubesim.stack.system.objects import WEBHOOK_SERVICE as WEBHOOK_SERVICE_KEY
from hami_kubesim.stack.system.objects import mutating_webhook_configuration

WEBHOOK_NAMESPACE, WEBHOOK_SERVICE = WEBHOOK_SERVICE_KEY
WEBHOOK_HOSTS = (
    "webhook",
    WEBHOOK_SERVICE,
    f"{WEBHOOK_SERVICE}.{WEBHOOK_NAMESPACE}",
    f"{WEBHOOK_SERVICE}.{WEBHOOK_NAMESPACE}.svc",
    "localhost",
    "127.0.0.1",
)
SCHEDULER_HOSTS = ("scheduler", "hami-scheduler", "localhost", "127.0.0.1")


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
    # The chart's MutatingWebhookConfiguration (default values), as the stack creates it.
    document = mutating_webhook_configuration(ca_bundle=ca_bundle_b64(ca_file.read_bytes()))
    (out / "webhook-configuration.yaml").write_text(
        yaml.safe_dump(document, sort_keys=False), encoding="utf-8"
    )
    _chown_tree(out, owner)


def make_host_dirs(paths: list[Path], *, owner: int | None) -> None:
    """Create ``paths`` with their missing parents; what was created goes to ``owner``."""
    for path in paths:
        missing = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        if owner is not None:
            for created in missing:
                os.chown(created, owner, owner)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write into")
    parser.add_argument("--owner", type=int, default=None, help="uid (and gid) to own the files")
    parser.add_argument(
        "--host-dir",
        type=Path,
        action="append",
        default=[],
        help="a simulated node's host directory to create (repeatable)",
    )
    args = parser.parse_args(argv)
    bootstrap(args.out, owner=args.owner)
    make_host_dirs(args.host_dir, owner=args.owner)
    sys.stdout.write(f"bootstrap: certificates and webhook configuration in {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
