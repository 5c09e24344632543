"""`nestlab export`: a topology as an Emulab NS file, a CloudLab profile or an SSH topology
(harness.export)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.export import EMULAB_OS, FORMATS, export, resolve


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="a topology as an Emulab NS file, a CloudLab profile or an SSH topology")
    p.add_argument("topology", help="topology file or name, e.g. topologies/dumbbell.yaml or dumbbell")
    p.add_argument("--format", choices=FORMATS, required=True,
                   help="emulab: NS file; cloudlab: geni-lib profile.py; ssh: topology for the SSH backend")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument("--os", dest="os_image", help=f"disk image (default: {EMULAB_OS}; CloudLab: its URN)")
    p.add_argument("--hardware", help="hardware type, e.g. d430 (default: any)")
    p.add_argument("--vm", action="store_true", help="cloudlab: Xen VMs instead of raw PCs by default")
    p.add_argument("--domain", help="ssh: nodes are <node>.<domain>, e.g. myexp.myproj.emulab.net")
    p.add_argument("--user", help="ssh: login user")
    p.add_argument("--key", help="ssh: private key file")
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from harness.topology import load_topology  # networkx and pydantic: only for this command

    topo = load_topology(resolve(args.topology))
    text = export(topo, args.format, args.os_image, args.hardware, args.vm, args.domain, args.user, args.key)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
