"""The images and the compose stack themselves (marker ``docker``; skipped, loudly, where no Docker engine or no
built image is there): non-root users and health checks, broker flags from ODRADEK_* variables including the
advertised URL, and docker-compose.yml with its host-network override coming up healthy and serving the README's
produce and read."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harness.containers import ContainerEnsemble, broker_image, configure_testcontainers, zookeeper_image
from tests.harness.http import JSON_V2, create_topic, request
from tests.harness.ports import free_port_block
from tests.harness.wait import wait_until
from zk.client import ZkClient

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]

REPO = Path(__file__).resolve().parents[2]


def docker_client() -> Any:
    import docker

    return docker.from_env(timeout=30)


def test_images_run_unprivileged_with_a_health_check() -> None:
    client = docker_client()
    try:
        for image in (broker_image(), zookeeper_image()):
            config = client.images.get(image).attrs["Config"]
            assert config["User"] not in ("", "0", "root", "0:0"), (image, config["User"])
            assert config["Healthcheck"]["Test"][0] == "CMD", image
    finally:
        client.close()


def test_broker_flags_come_from_the_environment_and_health_turns_healthy() -> None:
    """A one-node ensemble and one broker whose advertised URL differs from its listener, as in compose."""
    configure_testcontainers()
    from testcontainers.core.container import DockerContainer

    ensemble = ContainerEnsemble(size=1, tick_ms=500).start()
    port = free_port_block(1)
    advertised = f"http://localhost:{port}"  # another name for the same listener: what registers is this
    broker = (DockerContainer(broker_image()).with_kwargs(network_mode="host")
              .with_name(f"odradek-test-envbroker-{uuid.uuid4().hex[:8]}")
              .with_env("ODRADEK_BROKER_ID", "7").with_env("ODRADEK_ZK_CONNECT", ensemble.connect_string("/env"))
              .with_env("ODRADEK_LISTEN", f"127.0.0.1:{port}").with_env("ODRADEK_ADVERTISED_URL", advertised)
              .with_env("ODRADEK_KAFKA_LISTENERS", f"PLAINTEXT://127.0.0.1:{free_port_block(1)}")
              .with_env("ODRADEK_RACK", "rack-a").with_env("ODRADEK_ZK_SESSION_TIMEOUT_MS", "4000"))
    zk = ZkClient(ensemble.connect_string("/env"), session_timeout_s=10.0, connect_timeout_s=10.0)
    try:
        broker.start()
        zk.start()
        info = wait_until(lambda: zk.get_broker(7), 60, "broker 7 to register")
        assert info.url == advertised and info.rack == "rack-a"
        wrapped = broker.get_wrapped_container()

        def health() -> str:
            wrapped.reload()
            return wrapped.attrs["State"].get("Health", {}).get("Status", "")

        wait_until(lambda: health() == "healthy", 60, "the broker container's HEALTHCHECK to pass", interval=0.5)
        assert wrapped.attrs["Config"]["User"] == "10001:10001"
        assert wrapped.exec_run(["id", "-u"]).output.strip() == b"10001"
        zk_container = ensemble.containers[1].get_wrapped_container()
        wait_until(lambda: zk_container.reload() or zk_container.attrs["State"]["Health"]["Status"] == "healthy",
                   60, "the ZooKeeper container's HEALTHCHECK to pass", interval=0.5)
        assert zk_container.exec_run(["id", "-un"]).output.strip() == b"zookeeper"
    finally:
        zk.close()
        broker.stop(force=True, delete_volume=True)
        ensemble.stop()


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (v1) is not installed")
def test_compose_stack_on_the_host_network_comes_up_healthy_and_serves() -> None:
    """docker-compose.yml + docker-compose.hostnet.yml, the way CI runs it: time to six healthy services, then the
    README's produce and read, then down with its volumes."""
    project = f"odradek-test-{uuid.uuid4().hex[:8]}"
    files = ["-f", str(REPO / "docker-compose.yml"), "-f", str(REPO / "docker-compose.hostnet.yml")]
    env = {**os.environ, "ODRADEK_IMAGE_TAG": os.environ.get("ODRADEK_IMAGE_TAG", "dev")}
    base = ["docker-compose", "-p", project, *files]
    client = docker_client()
    started = time.monotonic()
    try:
        subprocess.run([*base, "up", "-d", "--no-build"], check=True, env=env, capture_output=True, timeout=120)

        def healthy() -> bool:
            containers = client.containers.list(filters={"label": f"com.docker.compose.project={project}"})
            states = [c.attrs["State"].get("Health", {}).get("Status") for c in containers
                      if c.labels.get("com.docker.compose.service") != "net"]
            return len(states) == 6 and all(s == "healthy" for s in states)

        wait_until(healthy, 120, "six healthy services", interval=0.25)
        print(f"compose (host network): six healthy services {time.monotonic() - started:.1f} s after `up`")

        url = "http://127.0.0.1:18082"
        create_topic(url, "demo", 1, 3, {"min.insync.replicas": "2"},
                     seen_by=[f"http://127.0.0.1:{p}" for p in (18082, 18083, 18084)])
        status, body, _ = request("POST", f"{url}/topics/demo?acks=all", content_type=JSON_V2, body={
            "records": [{"key": "k", "value": {"hello": "odradek"}, "headers": [{"name": "h", "value": "aGk="}]}]})
        assert status == 200 and body["offsets"][0]["error_code"] is None, body
        status, body, _ = request("GET", "http://127.0.0.1:18083/topics/demo/partitions/0/records?offset=0&timeout=5000",
                                  accept=JSON_V2)
        assert status == 200 and body["records"][0]["value"] == {"hello": "odradek"}, body
        # Kafka's protocol on 19092-19094: a librdkafka consumer reads the same record.
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094",
                             "group.id": "unused", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("demo", 0, 0)])
            msg = wait_until(lambda: consumer.poll(1.0), 60, "the record over Kafka's protocol")
            assert msg.error() is None and json.loads(msg.key()) == "k"  # the JSON format stores JSON text
            assert json.loads(msg.value()) == {"hello": "odradek"}
        finally:
            consumer.close()
    finally:
        down = subprocess.run([*base, "down", "-v", "--timeout", "20"], env=env, capture_output=True, timeout=120)
        client.close()
        assert down.returncode == 0, down.stderr.decode()[-2000:]
