"""The broker image's entry point: every ``odradek broker`` flag from an environment variable, then exec the broker.

Why derive the variables from the CLI's parser instead of listing them: a flag added to ``odradek broker`` is
then configurable in containers at once, under a name that follows from it (``--replica-lag-time-max-ms`` is
``ODRADEK_REPLICA_LAG_TIME_MAX_MS``). Two keep the names operators expect: ``--id`` is ``ODRADEK_BROKER_ID`` and
``--zk`` is ``ODRADEK_ZK_CONNECT``. Arguments given to the container (``docker run IMAGE --rack r1``) come last
and win. The broker replaces this process (exec), so it is PID 1 and gets the container's SIGTERM directly,
which starts its controlled shutdown.

``--health`` is the image's HEALTHCHECK: healthy once the broker answers ``/health`` with status ``ok``
(registered in ZooKeeper and its metadata loaded), the same test ``odradek cluster up`` waits for.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request

ALIASES = {"--id": "ODRADEK_BROKER_ID", "--zk": "ODRADEK_ZK_CONNECT"}


def env_name(flag: str) -> str:
    return ALIASES.get(flag) or "ODRADEK_" + flag.lstrip("-").replace("-", "_").upper()


def broker_parser() -> argparse.ArgumentParser:
    from broker.cli import build_parser

    return build_parser()


def broker_args(environ: dict[str, str]) -> list[str]:
    """The ``odradek broker`` arguments that the environment sets, in the parser's order."""
    args: list[str] = []
    for action in broker_parser()._actions:
        long_flags = [s for s in action.option_strings if s.startswith("--")]
        if not long_flags or action.dest == "help":
            continue
        flag = long_flags[0]
        value = environ.get(env_name(flag))
        if value is None or value == "":
            continue
        if action.nargs == 0:  # a switch: ODRADEK_X=true sets it
            if value.lower() in ("1", "true", "yes"):
                args.append(flag)
        else:
            args += [flag, value]
    return args


def health(environ: dict[str, str]) -> int:
    host, _, port = environ.get("ODRADEK_LISTEN", "127.0.0.1:8082").rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as resp:
            status = json.loads(resp.read()).get("status")
    except (OSError, ValueError) as e:
        print(f"unhealthy: {e}")
        return 1
    print(f"status {status}")
    return 0 if status == "ok" else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--health"]:
        return health(dict(os.environ))
    args = broker_args(dict(os.environ))
    missing = [env_name(f) for f in ("--id", "--zk") if f not in args and f not in argv]
    if missing:
        print(f"entrypoint: set {' and '.join(missing)} (every broker flag is an ODRADEK_* variable)",
              file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "broker", *args, *argv]
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
