#!/bin/sh
# Builds the release tarball dist/tidemill-<version>-<arch>-linux.tar.gz: both
# daemons as static executables (the `dist` profile: fat LTO, stripped; the
# static glibc flags come from .cargo/config.toml), their systemd units,
# deploy/install.sh, the documented default configs and example job file, the
# trainer template the example job runs (examples/), docs/operations.md,
# LICENSE and CHANGELOG.md. Run from anywhere in the repository:
#
#   scripts/release.sh
#
# SOURCE_DATE_EPOCH (default: the last commit's time) fixes the build date the
# binaries report and the file times in the tarball.
set -eu
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
arch=${target%%-*}
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "release.sh: no version in Cargo.toml [workspace.package]" >&2; exit 1; }
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

cargo build --locked --profile dist --target "$target" -p tidemill-edge -p tidemill-cloud
bins=${CARGO_TARGET_DIR:-target}/$target/dist
for b in tidemill-edge tidemill-cloud; do
    # A static executable runs on any x86_64 Linux without a matching glibc.
    if command -v ldd >/dev/null 2>&1 && ldd "$bins/$b" >/dev/null 2>&1; then
        echo "release.sh: $bins/$b is dynamically linked; check .cargo/config.toml's static flags" >&2
        exit 1
    fi
done

name=tidemill-$version-$arch-linux
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/$name
mkdir -p "$stage/bin" "$stage/systemd" "$stage/configs" "$stage/docs" "$stage/examples"
install -m 0755 "$bins/tidemill-edge" "$bins/tidemill-cloud" "$stage/bin/"
install -m 0644 deploy/systemd/tidemill-edge.service deploy/systemd/tidemill-cloud.service "$stage/systemd/"
install -m 0755 deploy/install.sh "$stage/"
install -m 0644 configs/edge.toml configs/cloud.toml configs/job.toml "$stage/configs/"
install -m 0755 edge/examples/pytorch/train_ddp.py "$stage/examples/"
install -m 0644 docs/operations.md "$stage/docs/"
install -m 0644 LICENSE CHANGELOG.md "$stage/"

mkdir -p dist
out=dist/$name.tar.gz
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" -cf - "$name" | gzip -9n >"$out"
(cd dist && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "$out"
"$stage/bin/tidemill-edge" --version
"$stage/bin/tidemill-cloud" --version
