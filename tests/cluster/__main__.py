"""python -m tests.cluster up|down|status|kubeconfig|env|load-image [--mode lite|full]"""

from __future__ import annotations

import argparse
import json
import sys

from tests.cluster.cluster import ADMIN, Cluster, ClusterError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster")
    parser.add_argument("command",
                        choices=["up", "down", "status", "kubeconfig", "env", "load-image"])
    parser.add_argument("images", nargs="*", help="for load-image: podman image names")
    parser.add_argument("--mode", choices=["lite", "full"], default="full")
    parser.add_argument("--user", default=ADMIN, help="for kubeconfig/env: admin, alice, bob...")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_intermixed_args(argv)
    cluster = Cluster(args.mode)
    try:
        if args.command == "up":
            existing = Cluster.attach(args.mode)
            if existing is not None:
                print(f"already running: KUBECONFIG={existing.kubeconfig}", file=sys.stderr)
            else:
                cluster.up(timeout=args.timeout)
            print(cluster.kubeconfig)
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            status = cluster.status()
            print(json.dumps(status, indent=2))
            return 0 if status["healthy"] else 1
        elif args.command == "kubeconfig":
            print(cluster.kubeconfig_for(args.user))
        elif args.command == "env":
            cluster.load()
            print(f"export KUBECONFIG={cluster.kubeconfig_for(args.user)}")
            print(f"export PATH={cluster.tools_dir}:$PATH")
        elif args.command == "load-image":
            if not cluster.load() or not cluster.state.ready:
                raise ClusterError(f"no {args.mode} cluster is running")
            for image in args.images:
                cluster.load_image(image)
                print(f"loaded {image}", file=sys.stderr)
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
