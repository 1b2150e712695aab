"""The Schema Registry service: reads from this broker's copy of ``_schemas``, writes through the one primary.

Storage is the classic Schema Registry's: the compacted ``_schemas`` topic (one partition, created on first
need with RF min(3, brokers) and cleanup.policy=compact) is the record; every broker tails it into a
:class:`~broker.schema_registry.store.RegistryState` and answers reads from that copy.

Writes: one primary, elected through ZooKeeper (kazoo's Election recipe, zk/ SchemaRegistryElectionZNode),
checks and writes every change and allocates ids. Another broker forwards a write to the primary over the one
inter-broker client (``POST /schema_registry/writes``) and, before answering, waits until its own copy has
reached the offset the primary wrote, so a writer reads its own write on any broker.

Invariants:

* only the primary appends to ``_schemas``, one write at a time (``_lock``), and only after its copy has caught
  up with the topic's high watermark, so each write is checked against every earlier one;
* a deposed primary cannot append: every primary writes as one idempotent producer whose epoch it bumps in
  ZooKeeper (zk SchemaRegistryWriterZNode) and fences with a NOOP record before its first change, so the
  partition refuses the older epoch's batches, and what the deposed one wrote before is below the fence;
* ids are global and never reused: a new id is one more than the largest id in any record (Confluent derives it
  the same way), and an ID_HIGH_WATER record written with it survives compaction of deleted schemas; the
  writes are acks=all, so a new primary (after a SIGKILL) reads every acknowledged id before allocating;
* the copy applies records in offset order only (``_tail``), so all brokers' answers at one offset agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from broker.admin.topics import TopicAdmin
from broker.fetch.service import FetchRequest, FetchService
from broker.interbroker import InterBrokerClient, Request
from broker.metadata.cache import MetadataCache
from broker.produce.routing import deadline_after
from broker.produce.service import ProduceService, Row
from broker.schema_registry import formats, serde
from broker.schema_registry.store import (
    RegistryState,
    SchemaVersion,
    config_key,
    id_key,
    mode_key,
    schema_key,
)
from odradek.protocol.errors import (
    EmbeddedSchemaInvalidError,
    IncompatibleSchemaError,
    InvalidCompatibilityLevelError,
    InvalidModeError,
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidSchemaError,
    InvalidSchemaVersionError,
    KeySchemaMissingError,
    OdradekError,
    ProducerFencedError,
    RecordDeserializationError,
    SchemaNotFoundError,
    SchemaOperationNotPermittedError,
    SchemaReferenceExistsError,
    SchemaRegistryStoreError,
    SchemaVersionNotFoundError,
    SchemaVersionNotSoftDeletedError,
    SchemaVersionSoftDeletedError,
    SubjectCompatibilityNotConfiguredError,
    SubjectModeNotConfiguredError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    TopicAlreadyExistsError,
    UnknownServerError,
    ValueSchemaMissingError,
)
from odradek.protocol.records.batch import encode_batch, iter_batch_headers
from odradek.protocol.records.decode import decode_batch
from zk.client import ControllerElection, ZkClient

log = logging.getLogger(__name__)

TOPIC = "_schemas"
WRITES_PATH = "/schema_registry/writes"
MODES = ("READWRITE", "READONLY", "IMPORT")
MAX_VERSION = 2**31 - 1
NOOP_KEY = b'{"keytype":"NOOP","magic":0}'  # Confluent's no-op record: every copy skips it (a primary's fence)
READ_WAIT_MS = 2000  # a long-poll at the end of _schemas: answered as soon as a record arrives


def parse_version(raw: str) -> int | None:
    """A path's version: None for ``latest`` (or -1), else 1..2^31-1; 42202 otherwise (Confluent's wording)."""
    if raw in ("latest", "-1"):
        return None
    try:
        v = int(raw)
    except ValueError:
        v = 0
    if not 1 <= v <= MAX_VERSION:
        raise InvalidSchemaVersionError(f"The specified version '{raw}' is not a valid version id. Allowed values "
                                        f"are between [1, 2^31-1] and the string \"latest\"")
    return v


class SchemaRegistryService:
    """Thread-safety: the asyncio parts run on the broker's loop; the election runs on its own thread and only
    touches ZooKeeper and ``threading`` events."""

    def __init__(self, broker_id: int, zk: ZkClient, produce: ProduceService, fetches: FetchService,
                 admin: TopicAdmin, interbroker: InterBrokerClient, cache: MetadataCache, *,
                 new_producer_id: Callable[[], int], write_timeout_s: float = 30.0) -> None:
        self.broker_id = broker_id
        self._cache = cache
        self._zk = zk
        self._produce = produce
        self._fetches = fetches
        self._admin = admin
        self._interbroker = interbroker
        self._timeout_s = write_timeout_s
        self.state = RegistryState()
        self._next = 0  # the next offset of _schemas to apply
        self._applied = asyncio.Condition()
        self._lock = asyncio.Lock()
        # Fencing (zk SchemaRegistryWriterZNode): the (producer id, epoch) this primary writes with, claimed and
        # fenced at its first write after each election (``_elections`` counts them; ``_fenced_at`` is the count
        # the claim was made for), and the next sequence number of that producer.
        self._new_producer_id = new_producer_id
        self._elections = 0
        self._fenced_at = -1
        self._writer: tuple[int, int] | None = None
        self._sequence = 0
        self._tailer: asyncio.Task[None] | None = None
        self._stopping = threading.Event()
        self._election: ControllerElection | None = None
        self._thread = threading.Thread(target=self._campaign, name=f"schema-registry-candidate-{broker_id}",
                                        daemon=True)

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._tailer = asyncio.create_task(self._tail())
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        election = self._election
        if election is not None:
            with contextlib.suppress(Exception):
                election.cancel()
        if self._tailer is not None:
            self._tailer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tailer
        await asyncio.to_thread(self._thread.join, 2.0)

    def _campaign(self) -> None:
        """Campaign until stopped; while elected, hold the lock as long as ZooKeeper still names this broker
        first (a lost session drops the lock's znode: the loop then campaigns again)."""
        while not self._stopping.is_set():
            self._election = self._zk.schema_registry_election(str(self.broker_id))
            try:
                self._election.run(self._lead)
            except Exception as e:  # connection loss while acquiring or releasing: campaign again
                log.info("schema registry candidacy of broker %d interrupted (%s); retrying", self.broker_id, e)
            self._stopping.wait(0.5)

    def _lead(self) -> None:
        self._elections += 1  # the next write claims a new epoch and fences the previous primary first
        log.info("broker %d is the schema registry's primary", self.broker_id)
        while not self._stopping.wait(1.0):
            try:
                if self._zk.get_schema_registry_primary() != self.broker_id:
                    return
            except OdradekError:
                continue

    # --------------------------------------------------------------------------------------- the local copy

    async def _tail(self) -> None:
        """Apply ``_schemas`` in offset order, long-polling at its end; waits out a missing topic (watching the
        metadata cache, which ZooKeeper's watches keep) or a missing leader."""
        while True:
            if self._cache.partition_count(TOPIC) == 0:  # not created yet: wait on the cache, no ZooKeeper reads
                await asyncio.sleep(0.2)
                continue
            try:
                read = await self._fetches.fetch_anywhere(FetchRequest(TOPIC, 0, self._next, 1 << 20,
                                                                       max_wait_ms=READ_WAIT_MS))
            except asyncio.CancelledError:
                raise
            except OdradekError:
                await asyncio.sleep(0.3)
                continue
            except Exception:
                log.exception("schema registry: reading %s failed", TOPIC)
                await asyncio.sleep(1.0)
                continue
            data = read.records
            assert isinstance(data, bytes | bytearray)  # fetch_anywhere answers bytes
            nxt = self._next
            for pos, header in iter_batch_headers(data):
                batch_next = header.base_offset + header.last_offset_delta + 1
                if batch_next <= nxt:
                    continue
                if not header.is_control and header.record_count:
                    for r in decode_batch(data, pos):
                        if r.offset >= nxt:
                            self.state.apply(r.key, r.value)
                nxt = batch_next
            if nxt != self._next:
                async with self._applied:
                    self._next = nxt
                    self._applied.notify_all()

    async def wait_for(self, offset: int, timeout_s: float | None = None) -> None:
        """Return once the local copy has applied ``offset`` (-1: nothing to wait for)."""
        try:
            async with asyncio.timeout(timeout_s or self._timeout_s), self._applied:
                await self._applied.wait_for(lambda: self._next > offset)
        except TimeoutError:
            raise SchemaRegistryStoreError(f"this broker's copy of {TOPIC} did not reach offset {offset} in time "
                                           f"(it is at {self._next}); retry") from None

    async def sync(self, timeout_s: float = READ_WAIT_MS / 1000) -> None:
        """Bring this broker's copy up to the end of ``_schemas`` as it stands now, as ZooKeeper's ``sync``
        precedes a read: every read then sees each write acknowledged before it was asked, on whichever broker
        the write was made (the tailer alone trails by up to one long-poll). Best effort, by design: with no
        topic yet, no leader to ask, or past ``timeout_s``, the copy answers as it is (reads stay available)."""
        if self._cache.partition_count(TOPIC) == 0:
            return
        try:
            read = await self._fetches.fetch_anywhere(FetchRequest(TOPIC, 0, self._next, 1, max_wait_ms=0))
        except OdradekError:
            return
        with contextlib.suppress(SchemaRegistryStoreError):
            await self.wait_for(read.high_watermark - 1, timeout_s)

    # ---------------------------------------------------------------------------------------------- writes

    async def write(self, op: dict[str, Any]) -> Any:
        """Run a write on the primary (here, or forwarded) and answer its result once this broker's copy has
        it. Forwarding is retried while the primary moves or cannot be reached (every write is idempotent in
        effect: a repeated registration answers the id it got, a repeated delete its 404)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        while True:
            primary = await asyncio.to_thread(self._zk.get_schema_registry_primary)
            try:
                if primary == self.broker_id:
                    result, _ = await self.write_here(op)
                    return result
                if primary is not None:
                    reply = await self._interbroker.send(primary, Request(
                        "POST", WRITES_PATH, body=orjson.dumps(op), headers={"Content-Type": "application/json"},
                        timeout_s=max(1.0, deadline - loop.time())))
                    body = reply.json()
                    await self.wait_for(int(body["offset"]))
                    return body["result"]
            except OdradekError as e:  # the primary moved or is unreachable, _schemas has no leader yet, ...
                if not e.retriable:
                    raise
                if loop.time() >= deadline:
                    raise SchemaRegistryStoreError(f"the schema registry's primary did not answer: {e}") from None
            if loop.time() >= deadline:
                raise SchemaRegistryStoreError("no schema registry primary is elected; retry")
            await asyncio.sleep(0.3)

    async def write_forwarded(self, op: dict[str, Any]) -> dict[str, Any]:
        """A write another broker forwarded: run here if this broker is the primary, never forwarded again."""
        if await asyncio.to_thread(self._zk.get_schema_registry_primary) != self.broker_id:
            raise SchemaRegistryStoreError(f"broker {self.broker_id} is not the schema registry's primary")
        result, offset = await self.write_here(op)
        return {"result": result, "offset": offset}

    async def write_here(self, op: dict[str, Any]) -> tuple[Any, int]:
        """Check ``op`` against the whole of ``_schemas`` and append its records; (result, last offset)."""
        async with self._lock:
            await self._ensure_topic()
            if self._writer is None or self._fenced_at != self._elections:
                await self._fence()
            read = await self._fetches.fetch_anywhere(FetchRequest(TOPIC, 0, self._next, 1, max_wait_ms=0))
            await self.wait_for(read.high_watermark - 1)
            rows, result = self._plan(op)
            if not rows:
                return result, self._next - 1
            base = await self._append(rows)
            last = base + len(rows) - 1
            await self.wait_for(last)
            return result, last

    async def _fence(self) -> None:
        """Claim the next writer epoch and append a NOOP record with it (Confluent's keytype NOOP, which every
        copy skips): from then on the partition refuses the previous primary's batches (INVALID_PRODUCER_EPOCH),
        and whatever it wrote before is below the fence, so the plan that follows reads it."""
        elections = self._elections
        self._writer = None
        self._writer = await asyncio.to_thread(self._zk.claim_schema_registry_writer, self._new_producer_id)
        self._sequence = 0
        await self._append([(NOOP_KEY, None, None, [])])
        self._fenced_at = elections
        log.info("schema registry primary %d writes %s with producer %d epoch %d", self.broker_id, TOPIC,
                 *self._writer)

    async def _append(self, rows: list[Row]) -> int:
        """Append ``rows`` as one idempotent batch of this primary's producer (acks=all); its base offset. Any
        failure drops the writer (the next write claims a new epoch and fences again); a fenced one means
        another broker is the primary now: retriable, so the write is forwarded there."""
        assert self._writer is not None
        pid, epoch = self._writer
        batch = encode_batch(rows, producer_id=pid, producer_epoch=epoch, base_sequence=self._sequence,
                             now_ms=int(time.time() * 1000))
        timeout_ms = int(self._timeout_s * 1000)
        results = await self._produce.produce_encoded(TOPIC, {0: batch}, -1, timeout_ms, deadline_after(timeout_ms))
        appended = results[0]
        if appended.error is not None or appended.base_offset is None:
            self._writer = None
            if isinstance(appended.error, InvalidProducerEpochError | ProducerFencedError):
                raise SchemaRegistryStoreError(f"broker {self.broker_id} was fenced as the schema registry's "
                                               f"primary (producer {pid} epoch {epoch}): a newer primary writes "
                                               f"{TOPIC}; retry") from None
            raise SchemaRegistryStoreError(f"writing {TOPIC} failed: {appended.error}")
        self._sequence += len(rows)
        return appended.base_offset

    async def _ensure_topic(self) -> None:
        if self._cache.partition_count(TOPIC) > 0:
            return
        brokers = await asyncio.to_thread(self._zk.get_broker_ids)
        try:
            await asyncio.to_thread(self._admin.create_topic, TOPIC, 1, max(1, min(3, len(brokers))),
                                    {"cleanup.policy": "compact"})
            log.info("schema registry: created %s", TOPIC)
        except TopicAlreadyExistsError:
            pass
        await self._produce.await_topic(TOPIC, asyncio.get_running_loop().time() + self._timeout_s)

    def _plan(self, op: dict[str, Any]) -> tuple[list[Row], Any]:
        kind = op.get("op")
        plans: dict[str, Callable[[dict[str, Any]], tuple[list[Row], Any]]] = {
            "register": self._plan_register, "delete_subject": self._plan_delete_subject,
            "delete_version": self._plan_delete_version, "set_config": self._plan_set_config,
            "delete_config": self._plan_delete_config, "set_mode": self._plan_set_mode,
            "delete_mode": self._plan_delete_mode,
        }
        plan = plans.get(kind) if isinstance(kind, str) else None
        if plan is None:
            raise InvalidRequestError(f"unknown schema registry write {kind!r}")
        subject = op.get("subject")
        if not (isinstance(subject, str) or (subject is None and kind in ("set_config", "delete_config", "set_mode",
                                                                        "delete_mode"))):
            raise InvalidRequestError(f"a {kind} needs a subject")
        for key in ("id", "version"):
            value = op.get(key)
            if kind == "register" and value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidRequestError(f"{key} must be an integer")
        try:
            return plan(op)
        except RecursionError:
            raise InvalidSchemaError("the schema is nested too deeply") from None

    def _writable(self, subject: str | None) -> None:
        if self.state.mode(subject) == "READONLY":
            raise SchemaOperationNotPermittedError(f"Subject {subject} is in read-only mode")

    def _plan_register(self, op: dict[str, Any]) -> tuple[list[Row], Any]:
        subject = str(op["subject"])
        self._writable(subject)
        mode = self.state.mode(subject)
        parsed, refs = self.parse_request(op)
        identity = (parsed.schema_type, parsed.canonical, refs)
        live = self.state.versions(subject)
        for v in live:
            if self.identity(v) == identity and (op.get("id") in (None, v.id)):
                return [], {"id": v.id}
        wanted_id = op.get("id")
        if wanted_id is not None and mode != "IMPORT":
            raise SchemaOperationNotPermittedError(f"Subject {subject} is not in import mode: an id may be given "
                                                   "only in IMPORT mode")
        if mode != "IMPORT":
            level = self.state.compatibility(subject)
            previous = [self.parsed(v) for v in reversed(live)]
            messages = formats.check(level, parsed, previous if level.endswith("_TRANSITIVE") else previous[:1])
            if messages:
                raise IncompatibleSchemaError(
                    f"Schema being registered is incompatible with an earlier schema for subject \"{subject}\", "
                    f"details: [{', '.join(messages)}]")
        if wanted_id is not None and any(self.identity(v) != identity for v in self.state.by_id(wanted_id)):
            raise SchemaOperationNotPermittedError(f"Overwrite new schema with id {wanted_id} is not permitted.")
        schema_id = int(wanted_id) if wanted_id is not None else self.state.id_of(identity, self.identity)
        if schema_id is None:
            schema_id = self.state.max_id + 1
        every = self.state.versions(subject, deleted=True)
        next_version = every[-1].version + 1 if every else 1
        version = op.get("version") or next_version
        if version != next_version and (mode != "IMPORT" or any(v.version == version for v in every)):
            raise SchemaOperationNotPermittedError(
                f"Version {version} of subject {subject} cannot be written: versions are appended in order "
                f"(the next is {next_version}), and only IMPORT mode chooses one, never an existing one")
        sv = SchemaVersion(subject, version, schema_id, parsed.canonical, parsed.schema_type, refs)
        rows: list[Row] = [(schema_key(subject, version), orjson.dumps(sv.value()), None, [])]
        if schema_id > self.state.max_id:
            rows.append((id_key(), orjson.dumps({"id": schema_id}), None, []))
        return rows, {"id": schema_id}

    def _plan_delete_subject(self, op: dict[str, Any]) -> tuple[list[Row], Any]:
        subject, permanent = str(op["subject"]), bool(op.get("permanent"))
        every = self.state.versions(subject, deleted=True)
        if not every:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        self._writable(subject)
        live = [v for v in every if not v.deleted]
        if not permanent:
            if not live:
                raise SubjectSoftDeletedError(f"Subject '{subject}' was soft deleted.Set permanent=true to delete "
                                              "permanently")
            for v in live:
                self._unreferenced(v)
            rows: list[Row] = [(schema_key(subject, v.version), orjson.dumps({**v.value(), "deleted": True}),
                                None, []) for v in live]
            return rows, [v.version for v in live]
        if live:
            raise SubjectNotSoftDeletedError(f"Subject '{subject}' was not deleted first before being permanently "
                                             "deleted")
        return [(schema_key(subject, v.version), None, None, []) for v in every], [v.version for v in every]

    def _plan_delete_version(self, op: dict[str, Any]) -> tuple[list[Row], Any]:
        subject, permanent = str(op["subject"]), bool(op.get("permanent"))
        v = self.version(subject, str(op["version"]), deleted=True)
        self._writable(subject)
        if not permanent:
            if v.deleted:
                raise SchemaVersionSoftDeletedError(f"Subject '{subject}' Version {v.version} was soft deleted.Set "
                                                    "permanent=true to delete permanently")
            self._unreferenced(v)
            return [(schema_key(subject, v.version), orjson.dumps({**v.value(), "deleted": True}), None, [])], \
                v.version
        if not v.deleted:
            raise SchemaVersionNotSoftDeletedError(f"Subject '{subject}' Version {v.version} was not deleted first "
                                                   "before being permanently deleted")
        return [(schema_key(subject, v.version), None, None, [])], v.version

    def _unreferenced(self, v: SchemaVersion) -> None:
        ids = self.state.referenced_by(v.subject, v.version)
        if ids:
            raise SchemaReferenceExistsError(f"One or more references exist to the schema {{subject={v.subject}, "
                                             f"version={v.version}}}: ids {ids}")

    def _plan_set_config(self, op: dict[str, Any]) -> tuple[list[Row], Any]:
        level = str(op.get("compatibility") or "").upper()
        if level not in formats.LEVELS:
            raise InvalidCompatibilityLevelError("Invalid compatibility level. Valid values are none, backward, "
                                                 "forward, full, backward_transitive, forward_transitive, and "
                                                 "full_transitive")
        subject = op.get("subject")
        return [(config_key(subject), orjson.dumps({"compatibilityLevel": level}), None, [])], \
            {"compatibility": level}

    def _plan_delete_config(self, op: dict[str, Any]) -> tuple[list[Row], Any]:
        subject = op.get("subject")
        if subject is not None and not self.state.versions(subject, deleted=True) and subject not in self.state.configs:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        previous = self.state.compatibility(subject)
        return [(config_key(subject), None, None, [])], {"compatibilityLevel": previous}

    def _plan_set_mode(self, op: dict[str, Any]) -> tuple[list[Row], Any]:
        mode = str(op.get("mode") or "").upper()
        if mode not in MODES:
            raise InvalidModeError("Invalid mode. Valid values are READWRITE, READONLY, IMPORT")
        subject = op.get("subject")
        if mode == "IMPORT" and not op.get("force"):
            existing = self.state.versions(subject, deleted=True) if subject else self.state.subject_names()
            if existing:
                raise SchemaOperationNotPermittedError("Cannot import since found existing subjects")
        return [(mode_key(subject), orjson.dumps({"mode": mode}), None, [])], {"mode": mode}

    def _plan_delete_mode(self, op: dict[str, Any]) -> tuple[list[Row], Any]:
        subject = op.get("subject")
        previous = self.state.mode(subject)
        return [(mode_key(subject), None, None, [])], {"mode": previous}

    # ----------------------------------------------------------------------------------------------- reads

    def parse_request(self, body: dict[str, Any]) -> tuple[formats.ParsedSchema, tuple[tuple[str, str, int], ...]]:
        """A request's schema (``schema``, ``schemaType``, ``references``) parsed with its references resolved."""
        text = body.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise InvalidSchemaError("Empty schema")
        refs: list[tuple[str, str, int]] = []
        texts: list[str] = []
        raw_refs = body.get("references") or []
        if not isinstance(raw_refs, list):
            raise InvalidSchemaError(f"Invalid references {raw_refs!r}")
        for r in raw_refs:
            if not isinstance(r, dict) or not isinstance(r.get("subject"), str):
                raise InvalidSchemaError(f"Invalid reference {r!r}")
            ref = self.version(r["subject"], str(r.get("version", "latest")))
            refs.append((str(r.get("name", r["subject"])), ref.subject, ref.version))
            texts.append(ref.schema)
        schema_type = body.get("schemaType") or formats.AVRO
        if not isinstance(schema_type, str):
            raise InvalidSchemaError(f"Invalid schema type {schema_type!r}")
        references: list[formats.Reference] = list(texts)
        if schema_type.upper() in (formats.PROTOBUF, formats.JSON):
            references = list(self._named_references(tuple(refs)))
        return formats.parse(schema_type, text, references, normalize=bool(body.get("normalize"))), tuple(refs)

    def identity(self, v: SchemaVersion) -> tuple[str, str, tuple[tuple[str, str, int], ...]]:
        """A stored version's identity as a schema registered now would have it: a Protobuf schema's text
        rendered again by today's renderer (text stored by an earlier one is the same schema, and must keep its id
        and version), every other schema's text as stored (its canonical form never changed)."""
        if v.schema_type == formats.PROTOBUF:
            with contextlib.suppress(OdradekError):
                return v.schema_type, self.parsed(v).canonical, v.references
        return v.identity()

    def parsed(self, v: SchemaVersion) -> formats.ParsedSchema:
        if v.schema_type in (formats.PROTOBUF, formats.JSON):
            return formats.parse(v.schema_type, v.schema, list(self._named_references(v.references)))
        texts = [self.version(s, str(n), deleted=True).schema for _, s, n in v.references]
        return formats.parse(v.schema_type, v.schema, texts)

    def _named_references(self, refs: tuple[tuple[str, str, int], ...], depth: int = 0) -> list[tuple[str, str]]:
        """A Protobuf schema's imports, or the schemas a JSON Schema's ``$ref`` may name, as (reference name,
        text), transitively: each referenced version's own references before it, as Confluent resolves them (a
        .proto imports by file name, a JSON Schema's references are registered under their names)."""
        if depth > 32:
            raise InvalidSchemaError("Invalid schema: references nested more than 32 deep")
        out: list[tuple[str, str]] = []
        for name, subject, version in refs:
            ref = self.version(subject, str(version), deleted=True)
            out += [r for r in self._named_references(ref.references, depth + 1) if r not in out]
            if (name, ref.schema) not in out:
                out.append((name, ref.schema))
        return out

    def schema_text(self, v: SchemaVersion, fmt: str | None) -> str:
        """A version's schema as GET answers it: its stored text, or for Protobuf with ``format=serialized`` the
        base64 of its FileDescriptorProto (Confluent's formattedString; another format, or another schema type,
        answers the text, as Confluent does for formats it does not know)."""
        if fmt and fmt.lower() == "serialized" and v.schema_type == formats.PROTOBUF:
            schema = self.parsed(v).obj
            return str(schema.serialized())
        return v.schema

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        return self.state.subject_names(deleted=deleted, prefix=prefix)

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        found = self.state.versions(subject, deleted=deleted)
        if not found:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        return [v.version for v in found]

    def version(self, subject: str, raw: str, *, deleted: bool = False) -> SchemaVersion:
        """A subject's version (``latest``: the newest not deleted); 40401, 40402 or 42202 as Confluent."""
        wanted = parse_version(raw)
        every = self.state.versions(subject, deleted=True)
        if not every or (not deleted and not any(not v.deleted for v in every)):
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        candidates = [v for v in every if deleted or not v.deleted]
        if wanted is None:
            live = [v for v in every if not v.deleted] or candidates
            return live[-1]
        for v in candidates:
            if v.version == wanted:
                return v
        raise SchemaVersionNotFoundError(f"Version {wanted} not found.")

    def schema_by_id(self, schema_id: int) -> SchemaVersion:
        found = self.state.by_id(schema_id)
        if not found:
            raise SchemaNotFoundError(f"Schema {schema_id} not found")
        return found[0]

    def id_versions(self, schema_id: int, *, deleted: bool = False) -> list[dict[str, Any]]:
        self.schema_by_id(schema_id)
        return [{"subject": v.subject, "version": v.version}
                for v in sorted(self.state.by_id(schema_id, deleted=deleted), key=lambda v: (v.subject, v.version))]

    def referenced_by(self, subject: str, raw: str) -> list[int]:
        v = self.version(subject, raw)
        return self.state.referenced_by(v.subject, v.version)

    def lookup(self, subject: str, body: dict[str, Any], *, deleted: bool = False) -> SchemaVersion:
        """POST /subjects/{s}: the version of ``subject`` holding this schema (40401, 40403 otherwise)."""
        if not self.state.versions(subject, deleted=deleted):
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        parsed, refs = self.parse_request(body)
        identity = (parsed.schema_type, parsed.canonical, refs)
        for v in reversed(self.state.versions(subject, deleted=deleted)):
            if self.identity(v) == identity:
                return v
        raise SchemaNotFoundError("Schema not found")

    def compatibility(self, subject: str, raw_version: str | None, body: dict[str, Any]) -> list[str]:
        """POST /compatibility/...: messages (empty: compatible). A subject with nothing registered accepts any
        schema for ``latest``, as Confluent's client expects before a first registration."""
        try:
            return self._compatibility(subject, raw_version, body)
        except RecursionError:
            raise InvalidSchemaError("the schema is nested too deeply") from None

    def _compatibility(self, subject: str, raw_version: str | None, body: dict[str, Any]) -> list[str]:
        parsed, _ = self.parse_request(body)
        level = self.state.compatibility(subject)
        live = self.state.versions(subject)
        if raw_version is None:
            previous = [self.parsed(v) for v in reversed(live)]
            return formats.check(level, parsed, previous if level.endswith("_TRANSITIVE") else previous[:1])
        if not live and parse_version(raw_version) is None:
            return []
        return formats.check(level.removesuffix("_TRANSITIVE"), parsed,
                             [self.parsed(self.version(subject, raw_version))])

    def get_config(self, subject: str | None, *, default_to_global: bool = False) -> str:
        if subject is not None and subject not in self.state.configs and not default_to_global:
            raise SubjectCompatibilityNotConfiguredError(
                f"Subject '{subject}' does not have subject-level compatibility configured")
        return self.state.compatibility(subject)

    def get_mode(self, subject: str | None, *, default_to_global: bool = False) -> str:
        if subject is not None and subject not in self.state.modes and not default_to_global:
            raise SubjectModeNotConfiguredError(f"Subject '{subject}' does not have subject-level mode configured")
        return self.state.mode(subject)

    # ------------------------------------------------------------------- REST Proxy embedded formats

    async def embedded_schema(self, subject: str, schema_type: str, text: Any, schema_id: Any,
                              ) -> tuple[int, formats.ParsedSchema]:
        """The id and parsed schema a REST Proxy produce names: ``schema_id`` looked up (40403 when unknown),
        else ``text`` registered under ``subject`` (the topic-name strategy, ``<topic>-key``/``-value``) with
        the registry's own rules (compatibility, mode, ids), as kafka-rest's SchemaManagerImpl does. A schema
        that does not parse, or an id of another format, is the proxy's 42205 rather than the registry's 42201,
        checked here before any write so a forwarded registration never carries it."""
        if schema_id is not None:
            if type(schema_id) is not int or schema_id < 0:
                raise EmbeddedSchemaInvalidError(f"Invalid schema: the schema id {schema_id!r} is not an id")
            if not self.state.by_id(schema_id):
                await self.sync()
            found = self.schema_by_id(schema_id)
            if found.schema_type != schema_type:
                raise EmbeddedSchemaInvalidError(f"Invalid schema: schema {schema_id} is {found.schema_type}, "
                                                 f"not {schema_type}")
            return schema_id, self.parsed(found)
        if not isinstance(text, str):
            raise EmbeddedSchemaInvalidError("Invalid schema: the schema must be a string holding its text")
        try:
            parsed = formats.parse(schema_type, text)
        except InvalidSchemaError as e:
            raise EmbeddedSchemaInvalidError(f"Invalid schema: {e.message.removeprefix('Invalid schema: ')}") from None
        result = await self.write({"op": "register", "subject": subject, "schema": text, "schemaType": schema_type,
                                   "references": [], "normalize": False, "id": None, "version": None})
        return int(result["id"]), parsed

    async def encode_embedded(self, topic: str, schema_type: str, body: dict[str, Any],
                              keys: list[Any], values: list[Any],
                              ) -> tuple[int | None, int | None, list[bytes | None], list[bytes | None]]:
        """A v2 produce's keys and values (JSON, None for absent) Confluent-framed under the request's
        ``key_schema``/``key_schema_id`` and ``value_schema``/``value_schema_id``: (key id, value id, keys,
        values). A non-null key without a key schema is 42201, a value without a value schema 42202, a record
        that does not fit its schema 42203 (kafka-rest's Errors.java); nothing is written to the log unless
        every record encodes."""
        ids: list[int | None] = []
        out: list[list[bytes | None]] = []
        for part, items, missing in (("key", keys, KeySchemaMissingError), ("value", values, ValueSchemaMissingError)):
            text, given_id = body.get(f"{part}_schema"), body.get(f"{part}_schema_id")
            if text is None and given_id is None:
                if any(v is not None for v in items):
                    raise missing(f"Request includes {part}s but does not include {part} schema")
                ids.append(None)
                out.append([None] * len(items))
                continue
            schema_id, parsed = await self.embedded_schema(f"{topic}-{part}", schema_type, text, given_id)
            ids.append(schema_id)
            out.append([None if v is None else serde.frame(schema_id, serde.encode(parsed, v)) for v in items])
        return ids[0], ids[1], out[0], out[1]

    async def await_ids(self, framed: Iterable[bytes | None], timeout_s: float = READ_WAIT_MS / 1000) -> None:
        """Wait (at most ``timeout_s``) until this broker's copy knows every schema id the framed keys and values
        name. Why: a record may be read on a broker whose copy of ``_schemas`` has not yet applied the
        registration acknowledged before the record was produced (the copy trails by a long-poll at most); an id
        still unknown afterwards is left to ``decode_framed`` to refuse."""
        ids = {int.from_bytes(d[1:5], "big") for d in framed if d is not None and len(d) >= 5 and d[0] == serde.MAGIC}
        missing = {i for i in ids if not self.state.by_id(i)}
        if not missing:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s), self._applied:
                await self._applied.wait_for(lambda: all(self.state.by_id(i) for i in missing))

    def decode_framed(self, data: bytes | None, schema_type: str) -> Any:
        """A stored key or value read in a schema format: unframed, its schema fetched by id from this broker's
        copy, decoded to JSON. Not framed, an unknown id, another format, or a payload that does not decode:
        RecordDeserializationError, as Confluent's deserializers fail the read."""
        if data is None:
            return None
        schema_id, payload = serde.unframe(data)
        found = self.state.by_id(schema_id)
        if not found:
            raise RecordDeserializationError(f"Error retrieving schema {schema_id}: Schema {schema_id} not found")
        if found[0].schema_type != schema_type:
            raise RecordDeserializationError(f"schema {schema_id} is {found[0].schema_type}, not {schema_type}")
        return serde.decode(self.parsed(found[0]), payload)


    async def encode_v3(self, topic: str, part: str, spec: dict[str, Any]) -> tuple[bytes | None, dict[str, Any]]:
        """A v3 produce's schema-typed key or value (``part``): its Confluent-framed bytes and its delivery
        report's ``{"type", "subject", "schema_id", "schema_version", "size"}``. The schema is found as
        kafka-rest's SchemaManagerImpl.getSchema finds it: by ``schema_id``; else by ``schema_version`` of the
        subject; else ``schema`` registered under the subject (which needs ``type``); else the subject's latest
        version. ``type`` (AVRO, JSONSCHEMA or PROTOBUF), when given, must be the schema's.

        The subject is ``subject``, else ``subject_name_strategy``'s (ProduceRequest's EnumSubjectNameStrategy;
        TOPIC_NAME when absent, kafka-rest's default): TOPIC_NAME ``<topic>-key``/``<topic>-value``,
        RECORD_NAME the schema's record name (``formats.record_name``), TOPIC_RECORD_NAME ``<topic>-<name>``.
        Invariants, each as kafka-rest: ``subject`` with a strategy is 400 (ProduceRequestData's checkState); a
        record-name strategy needs the schema before the subject, so with ``schema_version`` or nothing (the
        latest) it is 400 "Cannot use schema_subject_strategy=... without schema_id or schema."
        (getSchemaSubjectUnsafe, through ProduceAction's BadRequestException); a schema with no record name
        (an Avro non-record, a JSON Schema with no ``title``) is RecordNameStrategy's SerializationException,
        which the v3 stream answers 50002; with ``schema_id`` the schema must be registered under the derived
        subject (getSchemaVersion: the registry's 40401/40403); ``schema`` is registered under the derived
        subject, nothing being written when the subject cannot be derived. The report names that subject."""
        kind = spec.get("type")
        wanted = _V3_TYPES.get(kind.upper()) if isinstance(kind, str) else None
        if kind is not None and wanted is None:
            raise InvalidRequestError(f'"{part}.type" {str(kind)[:40]!r} has no schema here; AVRO, JSONSCHEMA or '
                                      "PROTOBUF")
        strategy = spec.get("subject_name_strategy")
        if strategy is not None and (not isinstance(strategy, str) or strategy.upper() not in _V3_STRATEGIES):
            raise InvalidRequestError(f'"{part}.subject_name_strategy" {str(strategy)[:40]!r} is not one of '
                                      f"{', '.join(_V3_STRATEGIES)}")
        strategy = strategy.upper() if strategy is not None else None
        subject = spec.get("subject")
        if subject is not None and not isinstance(subject, str):
            raise InvalidRequestError(f'"{part}.subject" must be a string')
        if subject is not None and strategy is not None:
            raise InvalidRequestError("Only one of 'subject_name_strategy' or 'subject' can be used.")
        schema_id, version = spec.get("schema_id"), spec.get("schema_version")
        if schema_id is not None:
            if type(schema_id) is not int:
                raise InvalidRequestError(f'"{part}.schema_id" must be an integer')
            found = self.schema_by_id(schema_id)
            if subject is None:
                subject = _v3_subject(topic, part, strategy, self.parsed(found))
            found = self._v3_registered_under(subject, found)
        elif version is not None:
            if type(version) is not int:
                raise InvalidRequestError(f'"{part}.schema_version" must be an integer')
            if subject is None:
                subject = _v3_subject(topic, part, strategy, None)
            try:
                found = self.version(subject, str(version))
            except (SubjectNotFoundError, SchemaVersionNotFoundError):  # kafka-rest's getSchemaFromSchemaVersion
                raise InvalidRequestError(f"Schema does not exist for subject: {subject}, version: {version}"
                                          ) from None
        elif spec.get("schema") is not None:
            if wanted is None:
                raise InvalidRequestError(f'"{part}.type" is needed with "{part}.schema": AVRO, JSONSCHEMA or '
                                          "PROTOBUF")
            if subject is None:
                subject = _v3_subject(topic, part, strategy, _v3_parse(wanted, spec["schema"]))
            registered, _ = await self.embedded_schema(subject, wanted, spec["schema"], None)
            found = self._v3_registered_under(subject, self.schema_by_id(registered))
        else:
            if subject is None:
                subject = _v3_subject(topic, part, strategy, None)
            found = self.version(subject, "latest")
        if wanted is not None and found.schema_type != wanted:
            raise EmbeddedSchemaInvalidError(f"Invalid schema: schema {found.id} is {found.schema_type}, not "
                                             f"{wanted}")
        if found.schema_type not in _V3_NAMES:
            raise EmbeddedSchemaInvalidError(f"Invalid schema: {found.schema_type} is not served by the REST produce")
        data = spec.get("data")
        encoded = None if data is None else serde.frame(found.id, serde.encode(self.parsed(found), data))
        return encoded, {"type": _V3_NAMES[found.schema_type], "subject": subject, "schema_id": found.id,
                         "schema_version": found.version, "size": -1 if encoded is None else len(encoded)}

    def _v3_registered_under(self, subject: str, found: SchemaVersion) -> SchemaVersion:
        """The live version of ``subject`` holding schema ``found.id`` (its newest), as kafka-rest's
        getSchemaVersion asks the registry (``getVersion(subject, schema)``): a subject with no live version is
        40401, a subject without this schema 40403, the registry's own answers to that lookup."""
        held = [v for v in self.state.by_id(found.id, deleted=False) if v.subject == subject]
        if held:
            return held[-1]
        if not self.state.versions(subject):
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        raise SchemaNotFoundError("Schema not found")


def _v3_parse(schema_type: str, text: Any) -> formats.ParsedSchema:
    """A v3 ``schema`` parsed to derive its subject before it is registered, refused as ``embedded_schema``
    refuses it (42205's message, answered 400 by the v3 stream), so no strategy sees an unparsed schema."""
    if not isinstance(text, str):
        raise EmbeddedSchemaInvalidError("Invalid schema: the schema must be a string holding its text")
    try:
        return formats.parse(schema_type, text)
    except InvalidSchemaError as e:
        raise EmbeddedSchemaInvalidError(f"Invalid schema: {e.message.removeprefix('Invalid schema: ')}") from None


def _v3_subject(topic: str, part: str, strategy: str | None, schema: formats.ParsedSchema | None) -> str:
    """The subject ``strategy`` (None: kafka-rest's default, TOPIC_NAME) names for ``part`` of ``topic``, with
    ``schema`` when the branch has one (None for ``schema_version`` and the latest), as kafka-rest's
    EnumSubjectNameStrategy delegates: TopicNameStrategy ignores the schema; RecordNameStrategy and
    TopicRecordNameStrategy answer null without one (getSchemaSubjectUnsafe's 400) and throw
    SerializationException for a schema with no record name (50002 in the v3 stream, KafkaExceptionMapper)."""
    if strategy is None or strategy == "TOPIC_NAME":
        return f"{topic}-{part}"
    if schema is None:
        raise InvalidRequestError(f"Cannot use schema_subject_strategy={strategy} without schema_id or schema.")
    try:
        name = formats.record_name(schema)
    except InvalidSchemaError as e:  # Protobuf with no type: Confluent's IllegalArgumentException, a 400
        raise InvalidRequestError(e.message) from None
    if name is None:
        java_class = "RecordNameStrategy" if strategy == "RECORD_NAME" else "TopicRecordNameStrategy"
        raise UnknownServerError(f"In configuration {part}.subject.name.strategy = "
                                 f"io.confluent.kafka.serializers.subject.{java_class}, the message {part} must "
                                 "only be a record schema")
    return name if strategy == "RECORD_NAME" else f"{topic}-{name}"


# The v3 produce's data types with a schema, and the registry's schemaType for each (and back).
_V3_TYPES = {"AVRO": formats.AVRO, "JSONSCHEMA": formats.JSON, "PROTOBUF": formats.PROTOBUF}
_V3_NAMES = {v: k for k, v in _V3_TYPES.items()}
# kafka-rest's ProduceRequest.EnumSubjectNameStrategy: the subject_name_strategy values a v3 produce accepts.
_V3_STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")
