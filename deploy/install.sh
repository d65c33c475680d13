#!/bin/sh
# Installs a tidemill daemon as a systemd service. Run as root:
#
#   sh install.sh cloud [--listen ADDR] [--tls-name NAME]
#   sh install.sh edge --coordinator HOST:PORT --token T   (or --token-file F)
#
# It places the binary in /usr/local/bin, the operations guide in
# /usr/local/share/doc/tidemill (the unit's Documentation=), for the edge the
# trainer template /usr/local/share/tidemill/train_ddp.py that the example job
# file (configs/job.toml) runs as shipped, makes the data dir
# /var/lib/tidemill-<role> (0700; the cloud's owned by the system user
# `tidemill`), writes /etc/tidemill/<role>.toml from the binary's documented
# defaults only if that file is absent, installs the systemd unit, and enables
# and starts it. The edge's join token goes into /etc/tidemill/edge.env (0600),
# which the unit reads as an EnvironmentFile: it is never on a command line.
#
# Options:
# --coordinator H:P  (edge, required) the coordinator's QUIC address.
# --token T          (edge) a join token from `tidemill-cloud token create`;
#                    `ps` shows it while this script runs, so prefer
#                    --token-file.
# --token-file F     (edge) the join token from file F, or - for stdin.
# --listen A         (cloud) the QUIC address edges connect to; default
#                    0.0.0.0:7400.
# --tls-name N       (cloud) a host name or address edges reach the
#                    coordinator by, added to its certificate's names.
# --root DIR         install every file under DIR instead of /, and do nothing
#                    to the running system (no user, chown or systemctl: they
#                    are printed); for packaging and tests.
# --dry-run          print every step and change nothing.
# --binary F         the binary to install; default: bin/tidemill-<role>
#                    beside this script (the release tarball), else the
#                    repository's release build, else tidemill-<role> on PATH
#                    (`cargo install`).
# --no-start         install and enable, but do not start (or restart) the
#                    service.
# -h, --help         print this text.
set -eu

# This header comment, the one description of the options.
help() {
    sed -n '2,/^set -eu$/s/^# \{0,1\}//p' "$0"
}

usage() {
    help >&2
    exit 2
}

die() {
    echo "install.sh: $*" >&2
    exit 1
}

[ $# -ge 1 ] || usage
role=$1
shift
case $role in
    edge | cloud) ;;
    -h | --help) help; exit 0 ;;
    *) die "the first argument is the role, edge or cloud, not '$role'" ;;
esac

root=
dry=false
start=true
binary=
coordinator=
token=
token_file=
listen=0.0.0.0:7400
tls_name=
while [ $# -gt 0 ]; do
    case $1 in
        --root) root=${2:?--root needs a directory}; shift 2 ;;
        --dry-run) dry=true; shift ;;
        --no-start) start=false; shift ;;
        --binary) binary=${2:?--binary needs a file}; shift 2 ;;
        --coordinator) coordinator=${2:?--coordinator needs HOST:PORT}; shift 2 ;;
        --token) token=${2:?--token needs a join token}; shift 2 ;;
        --token-file) token_file=${2:?--token-file needs a file, or - for stdin}; shift 2 ;;
        --listen) listen=${2:?--listen needs ADDR:PORT}; shift 2 ;;
        --tls-name) tls_name=${2:?--tls-name needs a host name or address}; shift 2 ;;
        -h | --help) help; exit 0 ;;
        *) die "unknown option '$1'; run with --help for the options" ;;
    esac
done

if [ "$role" = edge ]; then
    [ -n "$coordinator" ] || die "the edge needs --coordinator HOST:PORT (the coordinator's QUIC address)"
    case $coordinator in
        *:*) ;;
        *) die "--coordinator '$coordinator' has no port; give HOST:PORT, for example coord.example:7400" ;;
    esac
    if [ -n "$token_file" ]; then
        if [ "$token_file" = - ]; then
            token=$(cat)
        else
            token=$(cat "$token_file") || die "cannot read the token file $token_file"
        fi
    fi
elif [ -n "$coordinator$token$token_file" ]; then
    die "--coordinator and --token are for the edge; the cloud takes --listen and --tls-name"
fi
case $token in
    *"
"*) die "the join token spans several lines; give the single line 'token create' printed" ;;
esac
# Values that go into the config file: no quotes, spaces or sed delimiters.
for value in "$coordinator" "$listen" "$tls_name"; do
    case $value in
        *[!A-Za-z0-9.:_\[\]-]*) die "'$value' is not a host, address or HOST:PORT" ;;
    esac
done

here=$(cd "$(dirname "$0")" && pwd)
name=tidemill-$role
if [ -z "$binary" ]; then
    for candidate in "$here/bin/$name" \
        "$here/../target/x86_64-unknown-linux-gnu/release/$name" \
        "$here/../target/release/$name"; do
        if [ -x "$candidate" ]; then
            binary=$candidate
            break
        fi
    done
fi
if [ -z "$binary" ]; then
    binary=$(command -v "$name" || true)
fi
[ -n "$binary" ] && [ -x "$binary" ] ||
    die "no $name binary found; build one (cargo build --release), install one (cargo install --path $role) or pass --binary FILE"
unit=$here/systemd/$name.service
[ -f "$unit" ] || die "the unit file $unit is missing; run install.sh from the release tarball or the repository's deploy/ directory"
# The operations guide the unit's Documentation= names: docs/ beside this
# script in the release tarball, ../docs in the repository.
guide=$here/docs/operations.md
[ -f "$guide" ] || guide=$here/../docs/operations.md
[ -f "$guide" ] || die "docs/operations.md is missing; run install.sh from the release tarball or the repository's deploy/ directory"
# The trainer template the example job runs: examples/ beside this script in
# the release tarball, ../edge/examples/pytorch in the repository.
trainer=$here/examples/train_ddp.py
[ -f "$trainer" ] || trainer=$here/../edge/examples/pytorch/train_ddp.py
[ "$role" = cloud ] || [ -f "$trainer" ] ||
    die "examples/train_ddp.py is missing; run install.sh from the release tarball or the repository's deploy/ directory"

if [ -z "$root" ] && [ "$dry" = false ] && [ "$(id -u)" != 0 ]; then
    die "run as root (sudo sh $0 ...), or give --root DIR or --dry-run"
fi

# Every change goes through run, so --dry-run prints it instead; with --root,
# changes to the running system are printed and skipped.
run() {
    if [ "$dry" = true ]; then
        echo "would run: $*"
    else
        "$@"
    fi
}
system() {
    if [ "$dry" = true ] || [ -n "$root" ]; then
        echo "would run: $*"
    else
        "$@"
    fi
}

bindir=$root/usr/local/bin
etc=$root/etc/tidemill
data=$root/var/lib/$name
unitdir=$root/etc/systemd/system
docdir=$root/usr/local/share/doc/tidemill
sharedir=$root/usr/local/share/tidemill

echo "installing $name from $binary"
run install -d -m 0755 "$bindir" "$unitdir"
run install -d -m 0755 "$etc"
run install -m 0755 "$binary" "$bindir/$name"
run install -m 0644 "$unit" "$unitdir/$name.service"
run install -d -m 0755 "$docdir"
run install -m 0644 "$guide" "$docdir/operations.md"
run install -d -m 0700 "$data"
if [ "$role" = edge ]; then
    # World-readable and outside the data dir: every task user runs it, and
    # ProtectSystem=strict leaves /usr readable.
    run install -d -m 0755 "$sharedir"
    run install -m 0755 "$trainer" "$sharedir/train_ddp.py"
fi

if [ "$role" = cloud ]; then
    if ! getent passwd tidemill >/dev/null 2>&1; then
        system useradd --system --home-dir /var/lib/$name --no-create-home \
            --shell /usr/sbin/nologin tidemill
    fi
    system chown tidemill:tidemill "$data"
fi

config=$etc/$role.toml
if [ -e "$config" ]; then
    echo "keeping $config (it exists; compare with '$name print-default-config')"
else
    echo "writing $config"
    # The documented defaults with this box's data dir, and the coordinator's
    # address (edge) or listen address and certificate names (cloud).
    script="s#^data_dir = .*#data_dir = \"/var/lib/$name\"#"
    if [ "$role" = edge ]; then
        script="$script
s#^coordinator = .*#coordinator = \"$coordinator\"#"
    else
        script="$script
s#^quic_listen = .*#quic_listen = \"$listen\"#"
        if [ -n "$tls_name" ]; then
            script="$script
s#^tls_names = \\[#tls_names = [\"$tls_name\", #"
        fi
    fi
    if [ "$dry" = true ]; then
        echo "would run: $binary print-default-config | sed (data_dir, addresses) > $config"
    else
        (umask 022 && "$binary" print-default-config | sed "$script" >"$config.new") &&
            mv "$config.new" "$config"
    fi
fi

if [ "$role" = edge ] && [ -n "$token" ]; then
    envfile=$etc/edge.env
    echo "writing the join token to $envfile (mode 0600)"
    if [ "$dry" = false ]; then
        # Made private before the secret goes in; printf is a shell builtin,
        # so the token is on no process's command line.
        (umask 077 && : >"$envfile.new" && chmod 0600 "$envfile.new" &&
            printf 'TIDEMILL_TOKEN=%s\n' "$token" >"$envfile.new") &&
            mv "$envfile.new" "$envfile"
    fi
fi

system systemctl daemon-reload
system systemctl enable "$name.service"
if [ "$start" = true ]; then
    system systemctl restart "$name.service"
fi
echo "done: check it with '$name doctor --config /etc/tidemill/$role.toml' and 'systemctl status $name'"
