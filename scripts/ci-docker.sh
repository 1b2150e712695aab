#!/usr/bin/env bash
# The Docker part of CI, in steps, so .ci/run stays short:
#
#   bash scripts/ci-docker.sh install    # apt: docker.io, docker-compose (v1), debootstrap
#   bash scripts/ci-docker.sh start      # a private dockerd (--bridge=none --iptables=false); exit 1 + one loud line if it cannot
#   bash scripts/ci-docker.sh build      # base image (cached rootfs), wheels, broker and ZooKeeper images
#   bash scripts/ci-docker.sh validate   # docker-compose config -q, for docker-compose.yml and with the host-network override
#   bash scripts/ci-docker.sh test [ARGS]  # the `backend` tests on the testcontainers backend, and the `docker` tests
#                                          # (images, and the compose stack with the host-network override)
#   bash scripts/ci-docker.sh stop       # containers removed, dockerd stopped by its pid, mounts and data root removed
#   bash scripts/ci-docker.sh env        # prints `export DOCKER_HOST=...` for the running engine
#
# Why a private engine: our machines have no Docker engine, and other work may share the machine, so this one has
# its own socket, data root and exec root under $ODRADEK_DOCKER_WORK (default <repo>/var/docker, ignored by git)
# and is stopped by the pid we started, never by name. The network rule holds: no bridge, no iptables changes, no
# IP forwarding; every container and build uses the host's network and binds 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
WORK="${ODRADEK_DOCKER_WORK:-$REPO/var/docker}"
STATE="$WORK/state"                       # pid, exec root, socket of the engine we started
BASE_IMAGE="${ODRADEK_BASE_IMAGE:-local/debian:bookworm-minbase}"
TAG="${ODRADEK_IMAGE_TAG:-dev}"
PY="$REPO/.venv/bin/python"

log() { echo "ci-docker: $*"; }
loud() { echo "################ ci-docker: $* ################"; }

engine_env() {
    [[ -f "$STATE/socket" ]] || return 1
    export DOCKER_HOST="unix://$(cat "$STATE/socket")"
}

# The pid is ours only while /proc says it is dockerd with our data root (a pid can be recycled).
our_dockerd_pid() {
    [[ -f "$STATE/pid" ]] || return 1
    local pid; pid="$(cat "$STATE/pid")"
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "--data-root $WORK/data" || return 1
    # A zombie (SIGKILLed, not yet reaped by init) is as good as gone.
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]] || return 1
    echo "$pid"
}

cmd_install() {
    export DEBIAN_FRONTEND=noninteractive
    local need=()
    command -v dockerd >/dev/null || need+=(docker.io)
    command -v docker-compose >/dev/null || need+=(docker-compose)
    command -v debootstrap >/dev/null || need+=(debootstrap)
    if ((${#need[@]})); then
        log "apt-get install ${need[*]}"
        apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
}

cmd_start() {
    if our_dockerd_pid >/dev/null && engine_env && docker info >/dev/null 2>&1; then
        log "dockerd already running (pid $(cat "$STATE/pid"))"; return 0
    fi
    if ! command -v dockerd >/dev/null; then
        loud "DOCKER UNAVAILABLE: no dockerd on this machine; the containers backend will not run"; return 1
    fi
    mkdir -p "$WORK/data" "$STATE"
    # The exec root holds containerd's socket: keep its path short (unix sockets are limited to 108 bytes).
    local exec_root; exec_root="$(mktemp -d /tmp/odradek-dx.XXXXXX)"
    echo "$exec_root" >"$STATE/exec-root"
    echo "$exec_root/docker.sock" >"$STATE/socket"
    # setsid: dockerd and its containerd leave our process group, so a Ctrl-C of a test run does not take them
    # down mid-test; we stop them by pid in `stop`.
    setsid dockerd --data-root "$WORK/data" --exec-root "$exec_root" --pidfile "$exec_root/dockerd.pid" \
        -H "unix://$exec_root/docker.sock" --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
        --userland-proxy=false >"$WORK/dockerd.log" 2>&1 </dev/null &
    echo $! >"$STATE/pid"
    engine_env
    local i
    for i in $(seq 1 150); do
        if docker info >/dev/null 2>&1; then
            log "dockerd up in $((i / 5)).$((i % 5 * 2)) s (pid $(cat "$STATE/pid"), data root $WORK/data, DOCKER_HOST=$DOCKER_HOST)"
            return 0
        fi
        our_dockerd_pid >/dev/null || break
        sleep 0.2
    done
    loud "DOCKER UNAVAILABLE: dockerd did not start ($(tail -n 1 "$WORK/dockerd.log" 2>/dev/null)); running the local backend only"
    cmd_stop >/dev/null 2>&1 || true
    return 1
}

cmd_build() {
    engine_env || { log "no engine: run start first"; return 1; }
    local t0; t0=$(date +%s)
    bash scripts/build-base-image.sh "$BASE_IMAGE"
    # The project and its dependencies as wheels built on the host: the image then installs them with no index
    # (pip inside a build would need this machine's registry set-up). docker/wheels/ is ignored by git.
    # setuptools reuses ./build/lib between builds, so a module deleted from the tree would live on in the wheel:
    # start from no build directory and leave none.
    rm -rf docker/wheels/*.whl build
    mkdir -p "$WORK"
    "$REPO/.venv/bin/pip" wheel -q --wheel-dir docker/wheels . >"$WORK/pip-wheel.log" 2>&1 \
        || { tail -n 20 "$WORK/pip-wheel.log"; return 1; }
    # The legacy builder (no buildx here) works; its deprecation notice and step logs go to a file.
    docker build --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "odradek/broker:$TAG" \
        -f docker/broker/Dockerfile . >"$WORK/build-broker.log" 2>&1 || { tail -n 30 "$WORK/build-broker.log"; return 1; }
    docker build --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "odradek/zookeeper:$TAG" \
        docker/zookeeper >"$WORK/build-zookeeper.log" 2>&1 || { tail -n 30 "$WORK/build-zookeeper.log"; return 1; }
    rm -rf docker/wheels/*.whl build
    log "images built in $(( $(date +%s) - t0 )) s:"
    docker image ls --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E 'odradek|debian' || true
}

cmd_validate() {
    docker-compose -f docker-compose.yml config -q
    docker-compose -f docker-compose.yml -f docker-compose.hostnet.yml config -q
    log "docker-compose config -q: docker-compose.yml and docker-compose.hostnet.yml are valid"
}

cmd_test() {
    engine_env || { log "no engine: run start first"; return 1; }
    export ODRADEK_TEST_BACKEND=containers ODRADEK_IMAGE_TAG="$TAG"
    export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_CONNECTION_MODE=docker_host
    "$PY" -m pytest -q -m "backend or docker" tests/integration tests/spark "$@"
}

cmd_stop() {
    local pid exec_root=""
    [[ -f "$STATE/exec-root" ]] && exec_root="$(cat "$STATE/exec-root")"
    if pid="$(our_dockerd_pid)"; then
        engine_env || true
        # Everything in this private engine is ours: remove it before the engine goes.
        local ids; ids="$(docker ps -aq 2>/dev/null || true)"
        [[ -n "$ids" ]] && docker rm -f $ids >/dev/null 2>&1 || true
        kill -TERM "$pid" 2>/dev/null || true
        local i
        for i in $(seq 1 100); do our_dockerd_pid >/dev/null || break; sleep 0.2; done
        if our_dockerd_pid >/dev/null; then log "dockerd $pid ignored SIGTERM for 20 s: SIGKILL"; kill -KILL "$pid" || true; sleep 1; fi
        log "dockerd $pid stopped"
    fi
    # What dockerd leaves behind: mounts (overlay, shm, netns) under its roots, then the roots themselves.
    local roots=("$WORK/data") m
    [[ -n "$exec_root" ]] && roots+=("$exec_root")
    for m in $(awk '{print $2}' /proc/mounts | sort -r); do
        for r in "${roots[@]}"; do
            [[ "$m" == "$r"/* || "$m" == "$r" ]] && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
        done
    done
    if ip link show docker0 >/dev/null 2>&1; then ip link delete docker0 || true; fi
    rm -rf "$WORK/data" "$STATE" ${exec_root:+"$exec_root"}
    log "cleaned up (data root, exec root, mounts); base image cache kept"
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    build) cmd_build ;;
    validate) cmd_validate ;;
    test) shift; cmd_test "$@" ;;
    stop) cmd_stop ;;
    env) engine_env && echo "export DOCKER_HOST=$DOCKER_HOST" ;;
    *) echo "usage: $0 install|start|build|validate|test|stop|env" >&2; exit 2 ;;
esac
