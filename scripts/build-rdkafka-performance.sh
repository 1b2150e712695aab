#!/usr/bin/env bash
# Builds librdkafka's own benchmark tool, examples/rdkafka_performance.c, unchanged, against Debian's librdkafka
# (librdkafka-dev): the C producer and consumer bench/kafka_bench.py runs beside confluent-kafka, so that a figure is
# the broker's and not the Python binding's. The tool includes librdkafka's internal headers (src/rd.h, config.h), so
# the source package of the installed version is fetched from the Debian archive, its tarball checked against the
# .dsc's SHA-256, and configured (not built). Output: .bench/bin/rdkafka_performance.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.bench/bin/rdkafka_performance
if [ -x "$out" ]; then echo "$out is built"; exit 0; fi
if ! dpkg -s librdkafka-dev >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq librdkafka-dev gcc make >/dev/null
fi
version=$(dpkg-query -W -f '${Version}' librdkafka-dev)        # e.g. 2.0.2-1
upstream=${version%-*}
pool=$(apt-cache show "librdkafka-dev=$version" | awk '/^Filename:/ {print $2; exit}')
base="http://deb.debian.org/debian/$(dirname "$pool")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsS -o "$work/src.dsc" "$base/librdkafka_${version}.dsc"
curl -fsS -o "$work/src.tar.gz" "$base/librdkafka_${upstream}.orig.tar.gz"
want=$(awk '/^Checksums-Sha256:/ {on=1; next} on && /orig.tar.gz$/ {print $1; exit}' "$work/src.dsc")
echo "$want  $work/src.tar.gz" | sha256sum -c --quiet -
tar xzf "$work/src.tar.gz" -C "$work"
src="$work/librdkafka-$upstream"
(cd "$src" && ./configure --disable-ssl --disable-gssapi --disable-zstd --disable-curl --disable-sasl >/dev/null)
mkdir -p "$(dirname "$out")"
gcc -O2 -I "$src/src" -I "$src" "$src/examples/rdkafka_performance.c" -o "$out" -lrdkafka -lpthread -lm
echo "built $out (librdkafka $upstream's examples/rdkafka_performance.c)"
