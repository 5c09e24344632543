#!/usr/bin/env bash
# Build the streams experiments' Flink job (harness/streams/job/*.java) into .venv-flink/nestlab-streams.jar
# against the Flink distribution PyFlink ships; rebuilt only when a source is newer than the jar.
set -euo pipefail
cd "$(dirname "$0")/.."
FLINK_HOME=$(ls -d .venv-flink/lib/python3*/site-packages/pyflink | head -1)
JAR=.venv-flink/nestlab-streams.jar
SRC=(harness/streams/job/*.java)
if [ -f "$JAR" ] && [ -z "$(find "${SRC[@]}" -newer "$JAR")" ]; then exit 0; fi
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
javac -nowarn -Xlint:-options --release 17 -d "$BUILD" -cp "$FLINK_HOME/lib/*" "${SRC[@]}" 2>&1 | grep -v '^Note:' || true
[ -f "$BUILD/streamsjob/NestlabStreamsJob.class" ] || { echo "build-streams-job: javac failed" >&2; exit 1; }
jar cf "$JAR.tmp" -C "$BUILD" streamsjob
mv "$JAR.tmp" "$JAR"
echo "build-streams-job: $JAR"
