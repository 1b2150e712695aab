"""A local cluster on 127.0.0.1: a ZooKeeper ensemble and N broker processes, owned and ended by pid.

Used by ``odradek cluster up|status|down|broker|zookeeper`` and by the tests' local-process backend, so users
and tests start clusters the same way. State lives in ``<data-dir>/cluster.json`` (and the ensemble's own
``zookeeper/ensemble.json``), so a later command in another process re-attaches to what an earlier one
started, by pid and process start time: it never signals a recycled pid, and never kills by name.

Layout under the data directory::

    cluster.json
    tls/{ca,broker-<id>,admin}.{pem,key}, tls/inter-broker.password   (a --tls cluster's secrets, keys 0600)
    zookeeper/zk<i>/{zoo.cfg,data/,zookeeper.log}
    broker-<id>/{data/,broker.log}
"""

from __future__ import annotations

import itertools
import json
import os
import random
import secrets
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek_local.processes import ManagedProcess, log_tail, terminate_all
from odradek_local.security import admin_files, ensure_local_pki, local_client_context, local_security_args, tls_dir
from odradek_local.zookeeper import ZkEnsemble
from zk.client import ZkClient

STATE_FILE = "cluster.json"
HOST = "127.0.0.1"
# A --tls cluster's brokers log in to each other's SASL listeners as this SCRAM user (a super user: ClusterAction,
# every topic), with a password made once per data directory and handed to brokers in the environment.
INTER_BROKER_USER = "broker"
INTER_BROKER_PASSWORD_FILE = "inter-broker.password"
INTER_BROKER_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def listen_port_range(low: int = 10_000) -> tuple[int, int]:
    """Ports for servers that a test or a local run picks itself: below the kernel's ephemeral range
    (``ip_local_port_range``), so an outgoing connection's source port can never take one between the check that
    it is free and the server's bind."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low, high = low, max(low + 1000, ephemeral_low)
    share = os.environ.get(PORT_SHARE_ENV)
    if share:
        index, count = (int(n) for n in share.split("/"))
        width = (high - low) // count
        low, high = low + index * width, low + (index + 1) * width
    return low, high


PORT_SHARE_ENV = "ODRADEK_PORT_SHARE"
"""``i/n``: this process (and what it starts) takes only the i-th of n equal slices of ``listen_port_range``, so n
processes picking ports at once (the test suite's parallel workers) never pick the same one."""


_taken: set[int] = set()
_rng = random.Random(os.getpid())


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port_block(count: int, *, span: int | None = None) -> int:
    """A base port such that base .. base+span-1 (span defaults to count) are free on 127.0.0.1, in
    ``listen_port_range``, and were handed out by no earlier call in this process (one table for the tests'
    harness and for clusters that pick their own Kafka ports, so two clusters never get the same port)."""
    span = span or count
    low, high = listen_port_range()
    for _ in itertools.count():
        base = _rng.randrange(low, high - span)
        ports = range(base, base + span)
        if any(p in _taken for p in ports):
            continue
        if all(_bindable(p) for p in ports):
            _taken.update(ports)
            return base
    raise AssertionError("unreachable")


class ClusterError(RuntimeError):
    """A one-line reason a cluster command failed."""


@dataclass(frozen=True, slots=True)
class BrokerSlot:
    broker_id: int
    port: int  # the REST (HTTP) listener's
    dir: Path
    scheme: str = "http"  # https on a --tls cluster
    kafka_port: int | None = None  # the first Kafka listener's; None: the broker has no Kafka listener
    kafka_protocol: str = "PLAINTEXT"  # its security protocol (SASL_SSL on a --tls cluster)
    kafka_extra: tuple[tuple[str, int], ...] = ()  # further Kafka listeners: (security protocol, port)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        """``host:port`` of the first Kafka listener, as ``bootstrap.servers`` takes it."""
        return None if self.kafka_port is None else f"{HOST}:{self.kafka_port}"

    @property
    def kafka_listeners(self) -> dict[str, int]:
        """Security protocol -> port of every Kafka listener (each listener is named after its protocol)."""
        if self.kafka_port is None:
            return {}
        return {self.kafka_protocol: self.kafka_port, **dict(self.kafka_extra)}

    def kafka_listener_spec(self) -> str:
        """``--kafka-listeners``: ``SASL_SSL://127.0.0.1:9092,...``."""
        return ",".join(f"{protocol}://{HOST}:{port}" for protocol, port in self.kafka_listeners.items())

    @property
    def log_path(self) -> Path:
        return self.dir / "broker.log"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"


class LocalCluster:
    """Brokers 1..N, their REST API on ports base_port .. base_port+N-1 and their Kafka listener on
    kafka_base_port .. kafka_base_port+N-1, over an ensemble we start or one given to us.

    ``kafka_base_port`` None picks free ports (``free_port_block``), so that callers that only choose REST ports
    never collide on Kafka's. The Kafka listener is PLAINTEXT on a plaintext cluster and SASL_SSL on a TLS one
    (the HTTPS listeners' certificates; SCRAM users from ``odradek configs``), so a secured cluster never grows a
    plaintext door. ``kafka_protocols`` asks for more Kafka listeners per broker (the first on kafka_base_port,
    the others on free ports; SSL and SASL_SSL only on a TLS cluster), as the security tests do. With
    ``ensemble`` given (tests share one ensemble and give each test its own chroot), ``up`` and ``down`` leave
    the ensemble alone.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        brokers: int = 3,
        base_port: int = 8082,
        kafka_base_port: int | None = None,
        zookeepers: int = 3,
        zk_base_port: int = 2181,
        tick_ms: int = 2000,
        session_timeout_ms: int = 6000,
        chroot: str | None = None,
        ensemble: ZkEnsemble | None = None,
        broker_args: list[str] | None = None,
        broker_cpus: dict[int, str] | None = None,
        python: str = sys.executable,
        tls: bool = False,
        zk_digest: str | None = None,
        kafka_protocols: tuple[str, ...] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.owns_ensemble = ensemble is None
        self.ensemble = ensemble or ZkEnsemble(
            self.data_dir / "zookeeper", size=zookeepers, client_port_base=zk_base_port, tick_ms=tick_ms
        )
        self.chroot = chroot
        self.session_timeout_ms = session_timeout_ms
        self.broker_args = list(broker_args or [])
        # Each broker's --cpu-affinity, a cpulist (``odradek cluster up --pin``); a broker not named runs anywhere.
        self.broker_cpus = dict(broker_cpus or {})
        self.python = python
        # Security (docs/security.md): TLS + SASL_SSL listeners with a throwaway CA under <data-dir>/tls, and
        # ZooKeeper digest credentials with ZooKeeper ACLs on every znode.
        self.tls = tls
        self.zk_digest = zk_digest
        self.kafka_protocols = kafka_protocols or (("SASL_SSL",) if tls else ("PLAINTEXT",))
        insecure = [p for p in self.kafka_protocols if p in ("SSL", "SASL_SSL")] if not tls else []
        if insecure or not set(self.kafka_protocols) <= {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"} or \
                len(set(self.kafka_protocols)) != len(self.kafka_protocols):
            raise ClusterError(f"Kafka listeners {', '.join(self.kafka_protocols)}: each protocol once, one of "
                               "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (SSL and SASL_SSL need --tls)")
        if kafka_base_port is None and brokers:
            kafka_base_port = free_port_block(brokers)
        extra = {p: free_port_block(brokers) for p in self.kafka_protocols[1:]} if brokers else {}
        self.slots: dict[int, BrokerSlot] = {
            i: self._new_slot(i, base_port + i - 1, None if kafka_base_port is None else kafka_base_port + i - 1,
                              tuple((p, base + i - 1) for p, base in extra.items()))
            for i in range(1, brokers + 1)
        }
        self._procs: dict[int, ManagedProcess] = {}
        self._inter_broker_user_stored = False  # ensure_inter_broker_user ran in this process

    @property
    def zk_connect(self) -> str:
        return self.ensemble.connect_string(self.chroot)

    def _new_slot(self, broker_id: int, port: int, kafka_port: int | None,
                  kafka_extra: tuple[tuple[str, int], ...] = ()) -> BrokerSlot:
        return BrokerSlot(broker_id, port, self.data_dir / f"broker-{broker_id}", "https" if self.tls else "http",
                          kafka_port, self.kafka_protocols[0], kafka_extra)

    # ------------------------------------------------------------------------------------------ lifecycle

    def up(self, timeout: float = 60.0) -> None:
        """Start the ensemble (if ours) and every broker; return once every broker is registered."""
        if (self.data_dir / STATE_FILE).exists() and any(p.is_alive() for p in self._procs.values()):
            raise ClusterError(f"a cluster is already running from {self.data_dir}; run `odradek cluster down`")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.tls:
            ensure_local_pki(self)
        deadline = time.monotonic() + timeout
        try:
            if self.owns_ensemble:
                self.ensemble.start(timeout=timeout)
                self.ensemble.save()
            self.save()
            if self.tls:
                self.ensure_inter_broker_user()
            for broker_id in self.slots:
                self.start_broker(broker_id, wait=False)
            self.wait_registered(list(self.slots), timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            # One broker that cannot start (a port taken, a bad flag) must not leave the others running with
            # nobody holding their pids: end everything this call started, by pid, then report.
            self.down(timeout=10.0)
            raise

    def down(self, timeout: float = 30.0) -> None:
        """SIGTERM every broker (clean shutdown), the controller last, then the ensemble if ours; SIGKILL what
        lingers. The controller goes last as in a rolling restart: each other broker's controlled shutdown is then
        answered at once, where with every broker leaving together each asked brokers that were leaving too and
        retried after its backoff."""
        alive = {b: p for b, p in self._procs.items() if p.is_alive()}
        deadline = time.monotonic() + timeout
        controller = self._controller() if len(alive) > 1 else None
        terminate_all([p for b, p in alive.items() if b != controller], timeout=timeout)
        terminate_all([p for b, p in alive.items() if b == controller and p.is_alive()],
                      timeout=max(1.0, deadline - time.monotonic()))
        if self.owns_ensemble:
            self.ensemble.stop()
            self.ensemble.save()
        self.save()

    def broker_command(self, broker_id: int) -> list[str]:
        slot = self.slots[broker_id]
        return [
            self.python, "-m", "broker",
            "--id", str(broker_id),
            "--zk", self.zk_connect,
            "--listen", f"{HOST}:{slot.port}",
            "--data-dir", str(slot.data_dir),
            "--zk-session-timeout-ms", str(self.session_timeout_ms),
            *(["--kafka-listeners", slot.kafka_listener_spec()] if slot.kafka_port else []),
            *self._security_args(broker_id),
            *(["--cpu-affinity", self.broker_cpus[broker_id]] if broker_id in self.broker_cpus else []),
            *self.broker_args,
        ]  # fmt: skip

    def _security_args(self, broker_id: int) -> list[str]:
        """``local_security_args``, plus on a TLS cluster the inter-broker user (as a super user too): its SASL
        listeners, HTTP and Kafka alike, need a user to log in as, whatever --replica-fetch-transport is."""
        args = local_security_args(self, broker_id)
        if not self.tls:
            return args
        principal = f"User:{INTER_BROKER_USER}"
        if "--super-users" in args:
            i = args.index("--super-users") + 1
            args[i] = f"{args[i]};{principal}"
        else:
            args += ["--super-users", principal]
        return [*args, "--inter-broker-user", INTER_BROKER_USER]

    @property
    def inter_broker_password_file(self) -> Path:
        return tls_dir(self) / INTER_BROKER_PASSWORD_FILE

    def inter_broker_password(self) -> str:
        """The inter-broker user's password: made once per data directory, kept 0600 next to the TLS keys."""
        path = self.inter_broker_password_file
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass  # another command made it first: use theirs
            else:
                with os.fdopen(fd, "w") as f:
                    f.write(secrets.token_hex(24) + "\n")
        password = path.read_text().strip()
        if not password:
            raise ClusterError(f"{path} is empty; remove it and run `odradek cluster up` again")
        return password

    def ensure_inter_broker_user(self) -> None:
        """Store the inter-broker user's SCRAM credentials in ``/config/users`` (as ``odradek configs`` does)
        unless they already match the password file; brokers must find them before they start."""
        from odradek.protocol.scram import ScramCredential, verify
        from zk.configs import EntityConfigs

        password = self.inter_broker_password()
        client = self.zk_client()
        try:
            store = EntityConfigs(client)
            stored = store.describe("users", INTER_BROKER_USER)

            def current(mechanism: str) -> bool:
                try:
                    return verify(mechanism, password, ScramCredential.decode(stored.get(mechanism, "")))
                except ValueError:  # none stored, or not a credential
                    return False

            stale = {m: f"[password={password}]" for m in INTER_BROKER_MECHANISMS if not current(m)}
            if stale:
                store.alter("users", INTER_BROKER_USER, stale, [])
        finally:
            client.close()
        self._inter_broker_user_stored = True

    def add_broker(self, broker_id: int, port: int, kafka_port: int | None = None) -> None:
        """Grow the cluster by one broker slot (start it with ``start_broker``); ``kafka_port`` None picks one (and
        the ports of its further Kafka listeners are picked)."""
        if broker_id in self.slots:
            raise ClusterError(f"broker {broker_id} already exists")
        if kafka_port is None:
            kafka_port = free_port_block(1)
        self.slots[broker_id] = self._new_slot(broker_id, port, kafka_port,
                                               tuple((p, free_port_block(1)) for p in self.kafka_protocols[1:]))
        self.save()

    def start_broker(self, broker_id: int, *, wait: bool = True, timeout: float = 30.0,
                     notify: Callable[[str], None] | None = None) -> ManagedProcess:
        """Start a broker; if a killed predecessor's registration is still held by its ZooKeeper session, wait
        (telling ``notify``) until that session expires, since the broker would refuse to start meanwhile."""
        slot = self._slot(broker_id)
        existing = self._procs.get(broker_id)
        if existing is not None and existing.is_alive():
            raise ClusterError(f"broker {broker_id} is already running (pid {existing.pid})")
        self.wait_old_session(broker_id, notify=notify)
        env = dict(os.environ)
        repo_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = repo_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # ``python -m`` puts the working directory before PYTHONPATH: without this a broker started from another
        # checkout's directory (an A/B bench run from there) would run that checkout's code, not this one's.
        env["PYTHONSAFEPATH"] = "1"
        if self.zk_digest:
            env["ODRADEK_ZK_DIGEST"] = self.zk_digest  # not on the command line, where ps shows it
        if self.tls:
            if not self._inter_broker_user_stored:  # `cluster broker start` on a cluster loaded from its state
                self.ensure_inter_broker_user()
            env["ODRADEK_INTER_BROKER_PASSWORD"] = self.inter_broker_password()  # nor this one
        proc = ManagedProcess.spawn(self.broker_command(broker_id), log_path=slot.log_path, env=env)
        self._procs[broker_id] = proc
        self.save()
        if wait:
            self.wait_registered([broker_id], timeout=timeout)
        return proc

    def wait_old_session(self, broker_id: int, *, notify: Callable[[str], None] | None = None,
                         timeout: float | None = None) -> None:
        """Wait until no ZooKeeper session holds ``/brokers/ids/<id>`` (after ``kill``, the old process's session
        lives until ZooKeeper expires it, up to the session timeout plus a tick or two)."""
        timeout = timeout if timeout is not None else 2 * self.session_timeout_ms / 1000 + 10.0
        client = self.zk_client()
        try:
            holder = client.get_broker(broker_id)
            if holder is None:
                return
            if notify is not None:
                notify(f"broker {broker_id} is still registered by its old ZooKeeper session (its process was killed); "
                       f"waiting for that session to expire (up to {timeout:.0f} s)")
            started = time.monotonic()
            while client.get_broker(broker_id) is not None:
                if time.monotonic() - started > timeout:
                    raise ClusterError(f"broker {broker_id} is still registered by a live ZooKeeper session after "
                                       f"{timeout:.0f} s; is another process running with that id?")
                time.sleep(0.1)
            if notify is not None:
                notify(f"the old session expired after {time.monotonic() - started:.1f} s; starting broker {broker_id}")
        finally:
            client.close()

    def stop_broker(self, broker_id: int, timeout: float = 30.0) -> None:
        """SIGTERM: the broker shuts down cleanly (resigns, deregisters)."""
        self._proc(broker_id).terminate(timeout=timeout)

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL: its ephemeral znodes stay until its ZooKeeper session times out."""
        self._proc(broker_id).kill()

    def pause_broker(self, broker_id: int) -> None:
        self._proc(broker_id).send_signal(signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        self._proc(broker_id).send_signal(signal.SIGCONT)

    def broker_pid(self, broker_id: int) -> int | None:
        proc = self._procs.get(broker_id)
        return proc.pid if proc is not None and proc.is_alive() else None

    def broker_url(self, broker_id: int) -> str:
        return self._slot(broker_id).url

    def kafka_address(self, broker_id: int) -> str | None:
        """The broker's Kafka listener as ``host:port`` (None when it has none)."""
        return self._slot(broker_id).kafka_address

    @property
    def kafka_bootstrap(self) -> str | None:
        """``bootstrap.servers`` for Kafka clients: every broker's first Kafka listener."""
        addresses = [slot.kafka_address for _, slot in sorted(self.slots.items()) if slot.kafka_address]
        return ",".join(addresses) or None

    def kafka_bootstrap_for(self, protocol: str) -> str | None:
        """``bootstrap.servers`` on the Kafka listeners of one security protocol (None: there are none)."""
        addresses = [f"{HOST}:{slot.kafka_listeners[protocol]}" for _, slot in sorted(self.slots.items())
                     if protocol in slot.kafka_listeners]
        return ",".join(addresses) or None

    def _slot(self, broker_id: int) -> BrokerSlot:
        if broker_id not in self.slots:
            raise ClusterError(f"no broker {broker_id} in this cluster (brokers are {sorted(self.slots)})")
        return self.slots[broker_id]

    def _proc(self, broker_id: int) -> ManagedProcess:
        self._slot(broker_id)
        proc = self._procs.get(broker_id)
        if proc is None or not proc.is_alive():
            raise ClusterError(f"broker {broker_id} is not running")
        return proc

    # --------------------------------------------------------------------------------------------- queries

    def zk_client(self, session_timeout_s: float = 10.0) -> ZkClient:
        client = ZkClient(self.zk_connect, session_timeout_s=session_timeout_s, connect_timeout_s=10.0,
                          digest=self.zk_digest, set_acl=bool(self.zk_digest))
        client.start()
        return client

    def wait_registered(self, broker_ids: list[int], timeout: float = 30.0) -> None:
        """Wait until each broker's ephemeral registration exists; fail fast if its process died."""
        deadline = time.monotonic() + timeout
        client = self.zk_client()
        try:
            while True:
                registered = set(client.get_broker_ids())
                missing = [b for b in broker_ids if b not in registered or not self._serving(b)]
                if not missing:
                    return
                for b in missing:
                    proc = self._procs.get(b)
                    if proc is not None and not proc.is_alive():
                        raise ClusterError(
                            f"broker {b} exited before registering; see {self.slots[b].log_path}:\n"
                            + log_tail(self.slots[b].log_path, 20)
                        )
                if time.monotonic() >= deadline:
                    raise ClusterError(f"brokers {missing} did not register within {timeout:.0f} s")
                time.sleep(0.05)
        finally:
            client.close()

    def _controller(self) -> int | None:
        """The controller's broker id, or None if ZooKeeper does not say within a second."""
        try:
            client = ZkClient(self.zk_connect, session_timeout_s=4.0, connect_timeout_s=1.0, digest=self.zk_digest,
                              set_acl=bool(self.zk_digest))
            client.start()
        except Exception:
            return None
        try:
            return client.get_controller()
        except Exception:
            return None
        finally:
            client.close()

    def _serving(self, broker_id: int) -> bool:
        """The broker answers /health with status ok (registered and its metadata loaded)."""
        try:
            with urllib.request.urlopen(self.slots[broker_id].url + "/health", timeout=2,
                                        context=local_client_context(self)) as resp:
                return json.loads(resp.read()).get("status") == "ok"
        except (OSError, ValueError):
            return False

    def status(self) -> dict[str, Any]:
        controller: int | None = None
        registered: set[int] = set()
        zookeepers = self.ensemble.status()
        try:
            if not any(z.serving for z in zookeepers):
                raise ConnectionError("no ZooKeeper node serves")
            client = ZkClient(self.zk_connect, session_timeout_s=4.0, connect_timeout_s=3.0, digest=self.zk_digest,
                              set_acl=bool(self.zk_digest))
            client.start()
            try:
                controller = client.get_controller()
                registered = set(client.get_broker_ids())
            finally:
                client.close()
        except Exception:
            registered = set()
        return {
            "zk_connect": self.zk_connect,
            "controller": controller,
            "tls": admin_files(self) if self.tls else None,  # the CA and the admin (super user) certificate
            "zookeepers": [
                {"id": s.id, "client_port": s.client_port, "pid": s.pid, "mode": s.mode}
                for s in zookeepers
            ],
            "kafka_bootstrap": self.kafka_bootstrap,
            # Kafka clients' security.protocol (and, on SASL listeners, sasl.mechanism: PLAIN or SCRAM-SHA-256/512
            # with a user from `odradek configs`; on TLS ones ssl.ca.location: tls.ssl_cafile)
            "kafka_security_protocol": self.kafka_protocols[0] if self.kafka_bootstrap else None,
            "kafka_listeners": {p: self.kafka_bootstrap_for(p) for p in self.kafka_protocols
                                if self.kafka_bootstrap_for(p)},
            "brokers": [
                {
                    "id": b,
                    "url": slot.url,
                    "kafka": slot.kafka_address,
                    "kafka_listeners": {p: f"{HOST}:{port}" for p, port in slot.kafka_listeners.items()},
                    "pid": self.broker_pid(b),
                    "alive": self.broker_pid(b) is not None,
                    "registered": b in registered,
                }
                for b, slot in self.slots.items()
            ],
        }

    # ------------------------------------------------------------------------------------------ persistence

    def save(self) -> None:
        state = {
            "brokers": {str(b): slot.port for b, slot in sorted(self.slots.items())},
            "kafka_ports": {str(b): slot.kafka_port for b, slot in sorted(self.slots.items())},
            "kafka_protocols": list(self.kafka_protocols),
            "kafka_extra_ports": {str(b): dict(slot.kafka_extra) for b, slot in sorted(self.slots.items())},
            "session_timeout_ms": self.session_timeout_ms,
            "chroot": self.chroot,
            "owns_ensemble": self.owns_ensemble,
            "ensemble_dir": str(self.ensemble.base_dir),
            "broker_args": self.broker_args,
            "broker_cpus": {str(b): cpus for b, cpus in sorted(self.broker_cpus.items())},
            "python": self.python,
            "tls": self.tls,
            "zk_digest": self.zk_digest,
            "processes": {str(b): p.to_json() for b, p in sorted(self._procs.items())},
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.data_dir / STATE_FILE)

    @classmethod
    def load(cls, data_dir: Path) -> LocalCluster:
        data_dir = Path(data_dir).absolute()
        try:
            state = json.loads((data_dir / STATE_FILE).read_text())
        except FileNotFoundError:
            raise ClusterError(
                f"no cluster in {data_dir} (no {STATE_FILE}); start one with `odradek cluster up`"
            ) from None
        ensemble = ZkEnsemble.load(Path(state["ensemble_dir"]))
        cluster = cls(
            data_dir,
            brokers=0,
            session_timeout_ms=int(state["session_timeout_ms"]),
            chroot=state.get("chroot"),
            ensemble=ensemble,
            broker_args=list(state.get("broker_args", [])),
            broker_cpus={int(b): str(cpus) for b, cpus in (state.get("broker_cpus") or {}).items()},
            python=state.get("python", sys.executable),
            tls=bool(state.get("tls", False)),
            zk_digest=state.get("zk_digest"),
            kafka_protocols=tuple(state["kafka_protocols"]) if state.get("kafka_protocols") else None,
        )
        cluster.owns_ensemble = bool(state.get("owns_ensemble", True))
        kafka_ports = state.get("kafka_ports") or {}  # absent from clusters started before the Kafka listener
        extra_ports = state.get("kafka_extra_ports") or {}
        cluster.slots = {
            int(b): cluster._new_slot(int(b), int(port), None if kafka_ports.get(b) is None else int(kafka_ports[b]),
                                      tuple((p, int(q)) for p, q in (extra_ports.get(b) or {}).items()))
            for b, port in state["brokers"].items()
        }
        cluster._procs = {int(b): ManagedProcess.from_json(p) for b, p in state.get("processes", {}).items()}
        return cluster

