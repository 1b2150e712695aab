#!/usr/bin/env bash
# Make a Debian bookworm base image locally, for machines where no image registry is reachable (our CI).
#
#   bash scripts/build-base-image.sh [IMAGE]        # default IMAGE: local/debian:bookworm-minbase
#
# Why: docker/broker/Dockerfile and docker/zookeeper/Dockerfile take their base as a build argument; users pull
# python:3.11-slim and zookeeper:3.8, our machines cannot. debootstrap --variant=minbase builds the root file
# system from the Debian mirror in apt's sources (the one registry we reach), and `docker import` turns it into an
# image. The root file system is cached as a tarball outside the clone ($ODRADEK_DOCKER_CACHE, default
# /var/cache/odradek-docker, else ~/.cache/odradek-docker), so a machine debootstraps once: later runs only
# import it (about 2 s), and do nothing when the engine already has the image.
set -euo pipefail

IMAGE="${1:-local/debian:bookworm-minbase}"
SUITE=bookworm
if [[ -z "${ODRADEK_DOCKER_CACHE:-}" ]]; then
    if mkdir -p /var/cache/odradek-docker 2>/dev/null && [[ -w /var/cache/odradek-docker ]]; then
        ODRADEK_DOCKER_CACHE=/var/cache/odradek-docker
    else
        ODRADEK_DOCKER_CACHE="$HOME/.cache/odradek-docker"
    fi
fi
mkdir -p "$ODRADEK_DOCKER_CACHE"
TARBALL="$ODRADEK_DOCKER_CACHE/debian-$SUITE-minbase.tar.gz"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "build-base-image: $IMAGE is already in the engine; nothing to do"
    exit 0
fi

if [[ ! -s "$TARBALL" ]]; then
    command -v debootstrap >/dev/null || { echo "build-base-image: debootstrap is missing (apt-get install -y debootstrap)" >&2; exit 1; }
    # The mirror apt already uses (deb822 sources first, then the one-line format), so no host is hard-coded.
    MIRROR="$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | awk '{print $2}' | head -n1 || true)"
    if [[ -z "$MIRROR" ]]; then
        MIRROR="$(grep -h -E '^deb ' /etc/apt/sources.list 2>/dev/null | grep -v security | awk '{print $2}' | head -n1 || true)"
    fi
    MIRROR="${MIRROR:-http://deb.debian.org/debian}"
    ROOTFS="$(mktemp -d "${TMPDIR:-/tmp}/odradek-rootfs.XXXXXX")"
    trap 'rm -rf "$ROOTFS"' EXIT
    echo "build-base-image: debootstrap --variant=minbase $SUITE from $MIRROR"
    start=$(date +%s)
    debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 \
        || { tail -n 30 "$ROOTFS.log" >&2; rm -f "$ROOTFS.log"; exit 1; }
    rm -f "$ROOTFS.log"
    # Keep the image lean and apt usable inside builds: the host's apt may rely on a snapshot mirror whose Release
    # files are past their Valid-Until date, so carry that one setting over when the host has it.
    if grep -rqs 'Check-Valid-Until "false"' /etc/apt/apt.conf.d/; then
        echo 'Acquire::Check-Valid-Until "false";' >"$ROOTFS/etc/apt/apt.conf.d/99odradek-no-valid-until"
    fi
    printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\npath-include /usr/share/doc/*/copyright\n' \
        >"$ROOTFS/etc/dpkg/dpkg.cfg.d/01odradek-nodoc"
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/usr/share/doc/* \
        "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/*
    tar -C "$ROOTFS" --numeric-owner -czf "$TARBALL.tmp" .
    mv "$TARBALL.tmp" "$TARBALL"
    echo "build-base-image: rootfs cached in $TARBALL ($(du -h "$TARBALL" | cut -f1), $(( $(date +%s) - start )) s)"
fi

docker import -c 'CMD ["/bin/bash"]' -c 'ENV LANG=C.UTF-8' "$TARBALL" "$IMAGE" >/dev/null
echo "build-base-image: imported $IMAGE from $TARBALL"
