#!/usr/bin/env bash
# Build the real-SDK clients of tests/integration/test_sdk_clients.py into a cache folder:
#   bash tests/clients/build.sh [js] [go] [java]      (no argument: all three)
# $S3GW_CLIENTS_CACHE (default ~/.cache/s3gw-clients) gets
#   js/node_modules        npm ci of tests/clients/js/package-lock.json (AWS SDK for JavaScript v3)
#   go/minio-scenario      go build of tests/clients/go (minio-go; modules in Go's module cache)
#   java/scenario.jar, java/lib/*.jar   mvn package of tests/clients/java (AWS SDK for Java v2; ~/.m2)
# Each is rebuilt only when its sources changed (a stamp of their hash), so a later run costs a
# second and needs no toolchain. Exit 2 when a toolchain is missing or too old (node >= 18;
# go >= 1.21, which fetches the Go release go.mod names from the Go module proxy; mvn and a
# JDK >= 17), with what to install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${S3GW_CLIENTS_CACHE:-$HOME/.cache/s3gw-clients}"
mkdir -p "$cache"

need() {
    for tool in "$@"; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            case "$tool" in
                node | npm) how="apt-get install nodejs npm" ;;
                go) how="a Go toolchain 1.21 or newer (Debian bookworm's golang-go, 1.19, is too old)" ;;
                mvn) how="apt-get install maven" ;;
                *) how="apt-get install openjdk-17-jdk-headless" ;;
            esac
            echo "build.sh: $tool is not installed: $how" >&2
            exit 2
        fi
    done
}

# The sources' hash; the build is skipped when the stamp in $1 holds it and the artefact $2 exists.
fresh() {
    local stamp="$1" artefact="$2" sum
    shift 2
    sum="$(cd "$here" && cat "$@" | sha256sum | cut -d' ' -f1)"
    if [ -e "$artefact" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
        return 0
    fi
    echo "$sum" > "$stamp.new"
    return 1
}

# Exit 2 unless "$1" (a version) is at least "$2".
at_least() {
    if [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" != "$2" ]; then
        echo "build.sh: $3 $1 is too old, $2 or newer is needed" >&2
        exit 2
    fi
}

build_js() {
    local out="$cache/js"
    mkdir -p "$out"
    fresh "$out/.stamp" "$out/node_modules/@aws-sdk/client-s3/package.json" js/package.json js/package-lock.json && return 0
    need node npm
    at_least "$(node -p 'process.versions.node')" 18 node
    cp "$here/js/package.json" "$here/js/package-lock.json" "$out/"
    (cd "$out" && npm ci --no-audit --no-fund --loglevel=error)
    mv "$out/.stamp.new" "$out/.stamp"
}

build_go() {
    local out="$cache/go"
    mkdir -p "$out"
    fresh "$out/.stamp" "$out/minio-scenario" go/go.mod go/go.sum go/main.go && return 0
    need go
    at_least "$(go env GOVERSION | sed 's/^go//')" 1.21 go
    (cd "$here/go" && go build -mod=readonly -o "$out/minio-scenario" .)
    mv "$out/.stamp.new" "$out/.stamp"
}

build_java() {
    local out="$cache/java"
    mkdir -p "$out"
    fresh "$out/.stamp" "$out/scenario.jar" java/pom.xml java/src/main/java/s3gw/Scenario.java && return 0
    need mvn java javac
    at_least "$(javac -version 2>&1 | awk '{print $2}')" 17 javac
    rm -rf "$out/lib" "$out/scenario.jar"
    mvn -q -B -Dstyle.color=never package -f "$here/java/pom.xml" -Dclients.build="$out"
    mv "$out/.stamp.new" "$out/.stamp"
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(js go java)
for target in "${targets[@]}"; do
    case "$target" in
        js) build_js ;;
        go) build_go ;;
        java) build_java ;;
        *) echo "build.sh: unknown client $target (js, go, java)" >&2; exit 64 ;;
    esac
done
