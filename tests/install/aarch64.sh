#!/usr/bin/env bash
# `make test-aarch64`: the aarch64 wheel on an arm64 Debian bookworm root (what Raspberry
# Pi OS is) under qemu-user: a fresh venv, the wheel and its dependencies from PyPI's
# aarch64 wheels, then tests/install/smoke.py. Everything runs emulated, hence slowly.
#
# Usage: tests/install/aarch64.sh WHEEL ROOT
# Without a way to run aarch64 binaries (no root, no binfmt_misc) it says why and exits 0,
# unless KLAW_REQUIRE_AARCH64=1 (then 1).
set -euo pipefail
wheel=$(realpath "$1")
root=$2
here=$(cd "$(dirname "$0")" && pwd)
started=$(date +%s)

skip() {
  echo "test-aarch64 skipped: $*"
  [ "${KLAW_REQUIRE_AARCH64:-0}" = 1 ] && exit 1
  exit 0
}

# Debian's qemu-user-static registers with the F flag: the kernel keeps the interpreter
# open, so it works inside bubblewrap's mount namespace too.
need=""
for pair in qemu-aarch64-static:qemu-user-static update-binfmts:binfmt-support \
            debootstrap:debootstrap bwrap:bubblewrap; do
  command -v "${pair%%:*}" >/dev/null || need="$need ${pair##*:}"
done
if [ -n "$need" ]; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || skip "missing$need (apt, as root)"
  echo "Installing:$need"
  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  [ "$(id -u)" = 0 ] || skip "binfmt_misc is not mounted and this is not root"
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null ||
    skip "binfmt_misc cannot be mounted here"
fi
if ! grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 ||
    skip "qemu-aarch64 cannot be registered with binfmt_misc"
fi

# The root is made once (debootstrap, ~10 min emulated) and kept outside the clone.
if [ ! -e "$root/.klaw-ok" ]; then
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  echo "Making an arm64 Debian bookworm root in $root (once)..."
  debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$root" http://deb.debian.org/debian >"$root.log" 2>&1 ||
    { tail -20 "$root.log"; echo "debootstrap failed (log: $root.log)"; exit 1; }
  touch "$root/.klaw-ok"
fi
inroot() { bwrap --bind "$root" / --proc /proc --dev /dev --tmpfs /tmp --die-with-parent "$@"; }
inroot /usr/bin/python3 -c 'import platform; assert platform.machine() == "aarch64"' ||
  skip "the arm64 root's Python does not run under this emulator"

pip_cache=$(dirname "$root")/pip-cache
mkdir -p "$pip_cache"
name=$(basename "$wheel")
# No /sys: ONNX Runtime's cpuinfo would read the host's x86 CPUs and crash (seen: SIGSEGV
# in `klaw doctor`); without it, it warns and falls back. A fresh venv in a tmpfs each run; PyPI's wheels cached beside the root. The host's CA
# bundle goes in with DNS: a network that inspects TLS has its CA there.
bwrap --bind "$root" / --proc /proc --dev /dev --tmpfs /tmp \
  --ro-bind /etc/resolv.conf /etc/resolv.conf \
  --ro-bind /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt \
  --ro-bind "$wheel" "/wheels/$name" --ro-bind "$here/smoke.py" /smoke.py \
  --bind "$pip_cache" /root/.cache/pip \
  --unshare-pid --die-with-parent --setenv HOME /root --setenv PATH /usr/bin:/bin \
  --setenv KLAW_SMOKE_TIMEOUT 1800 --unsetenv PIP_FIND_LINKS \
  /bin/sh -ec "
    cd /tmp
    python3 -m venv /tmp/venv
    t0=\$(date +%s)
    /tmp/venv/bin/pip install -q --disable-pip-version-check /wheels/$name
    echo \"installed in \$(( \$(date +%s) - t0 )) s (emulated); venv: \$(du -sm /tmp/venv | cut -f1) MB\"
    /tmp/venv/bin/python /smoke.py
  "
echo "test-aarch64 passed in $(( $(date +%s) - started )) s"
