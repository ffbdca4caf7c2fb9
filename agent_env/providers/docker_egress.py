"""Egress of Docker sandboxes on network "allowlist": a bridge network whose traffic out is dropped in iptables'
DOCKER-USER chain, except, per sandbox, replies to it and its listed destinations (rules tagged with the
container's name, dropped with it). Needs iptables on the daemon's host, as root.
"""

from __future__ import annotations

import shlex
import subprocess

from agent_env.providers.base import SandboxFailed

NETWORK_ALLOWLIST = "agentenv-allowlist"
ALLOWLIST_SUBNET = "172.30.0.0/16"


def drop_all_from(subnet: str, network: str) -> None:
    """Nothing leaves `subnet` (the network `network`) unless a sandbox's own rules allow it (added once)."""
    iptables(
        ["-I", "DOCKER-USER", "-s", subnet, "-j", "DROP", "-m", "comment", "--comment", f"agentenv:{network}"],
        check_exists=True,
    )


def iptables(args: list[str], *, check_exists: bool = False) -> None:
    if check_exists:
        probe = ["-C" if a == "-I" else a for a in args]
        if subprocess.run(["iptables", *probe], capture_output=True).returncode == 0:
            return
    try:
        done = subprocess.run(["iptables", *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise SandboxFailed(
            "network allowlists need iptables on this host", 'install iptables, or use network "none" / "open"'
        ) from None
    if done.returncode != 0:
        raise SandboxFailed(
            f"iptables {' '.join(args)} failed: {done.stderr.strip()}",
            'allowlists need root on the Docker daemon\'s host; or use network "none" / "open"',
        )


def allow(name: str, address: str, destinations: list[str]) -> None:
    """Let the sandbox `name` at `address` reach `destinations` (CIDRs), and get replies."""
    tag = ["-m", "comment", "--comment", f"agentenv:{name}"]
    # Inserted above the network-wide DROP: replies to the sandbox, then each allowed destination.
    iptables(
        [
            "-I",
            "DOCKER-USER",
            "-d",
            address,
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
            *tag,
        ]
    )
    for cidr in destinations:
        iptables(["-I", "DOCKER-USER", "-s", address, "-d", cidr, "-j", "ACCEPT", *tag])


def drop_rules(name: str) -> None:
    """Remove the rules of the sandbox `name` (none when iptables is missing: then it had none)."""
    try:
        listed = subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True, text=True)
    except FileNotFoundError:
        return
    for line in listed.stdout.splitlines():
        if f"agentenv:{name}" in line and line.startswith("-A "):
            subprocess.run(["iptables", "-D", *shlex.split(line)[1:]], capture_output=True)
