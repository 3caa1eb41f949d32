#!/usr/bin/env bash
# The README's two commands on a bare machine: a Debian bookworm container with nothing installed
# but what a minimal Debian image has, python3 and git. It checks, on this branch's committed HEAD:
#   1. as an unprivileged user, ./scripts/example.sh and ./scripts/test.sh each stop in under 5 s
#      with one line naming the command to run;
#   2. as root, a fresh `git clone`, then ./scripts/example.sh (which must also have graded every
#      round), then ./scripts/test.sh pass.
# Prints PASS or FAIL with the time of each step; exits 0 only when every step passed.
#
# Needs root, docker (a running engine) and debootstrap. The root filesystem is built once with
# `debootstrap --variant=minbase` (what Debian's own container image is made with) and cached as a
# tarball (TWIN_BARE_CACHE, default /var/cache/twin-bare-machine). The container stands in for a bare
# machine: it runs --privileged (the sandbox needs namespaces, as on a real machine) with
# --network host, and gets this machine's package access read-only: its pip configuration
# (/etc/pip.conf, /etc/xdg/pip, PIP_* variables, the find-links and local index folders under
# /opt, the CA file) and its apt sources. Pass arguments to narrow the suite, e.g. `-- -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
{  # read whole before it runs: editing the checkout during a run must not change it

CACHE=${TWIN_BARE_CACHE:-/var/cache/twin-bare-machine}
MIRROR=${TWIN_BARE_MIRROR:-http://deb.debian.org/debian}
IMAGE=twin-bare-machine:bookworm
TARBALL=$CACHE/bookworm-minbase-python3-git.tar
SUITE_TIMEOUT=${TWIN_BARE_SUITE_TIMEOUT:-2400}

die() { echo "bare-machine-check: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap and docker); run: sudo $0"
command -v docker >/dev/null 2>&1 || die "needs docker; install it: apt-get install -y docker.io"
docker info >/dev/null 2>&1 || die "the docker engine is not running; start it: dockerd &"

if ! docker image inspect "$IMAGE" >/dev/null 2>&1 && [ ! -s "$TARBALL" ]; then
  command -v debootstrap >/dev/null 2>&1 || die "needs debootstrap; install it: apt-get install -y debootstrap"
  echo "building the bare root filesystem (debootstrap, once; cached in $TARBALL)"
  mkdir -p "$CACHE"
  rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase --include=python3,git bookworm "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || die "debootstrap failed (see $CACHE/debootstrap.log)"
  # as in Debian's image: apt's sources come from sources.list.d (here: this machine's, mounted)
  rm -f "$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -cf "$TARBALL.partial" . && mv "$TARBALL.partial" "$TARBALL"
  rm -rf "$rootfs"
  trap - EXIT
  docker image rm -f "$IMAGE" >/dev/null 2>&1 || true
fi
docker image inspect "$IMAGE" >/dev/null 2>&1 || docker import "$TARBALL" "$IMAGE" >/dev/null

# The branch as committed, handed over as a bundle: a fresh clone, whatever this checkout's layout.
work=$(mktemp -d /var/tmp/twin-bare-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
branch=$(git rev-parse --abbrev-ref HEAD)  # HEAD when detached: the clone checks out the same commit
refs=(HEAD)
[ "$branch" = HEAD ] || refs+=("$branch")
git bundle create "$work/twin.bundle" "${refs[@]}" >/dev/null 2>&1 || die "could not bundle $branch"
git diff --quiet HEAD 2>/dev/null || echo "note: uncommitted changes are not part of the check (it clones HEAD)"

chmod 755 "$work"
chmod 644 "$work/twin.bundle"

# --privileged, as a bare machine's root has every capability; where this machine itself runs
# with fewer (inside a container), the same minus the capabilities its bounding set lacks.
privileged=(--privileged)
if ! docker run --rm --privileged "$IMAGE" true >/dev/null 2>&1; then
  caps=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
    NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT
    SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE
    AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ)
  bounding=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  privileged=(--cap-add ALL --security-opt seccomp=unconfined --security-opt apparmor=unconfined
    --security-opt systempaths=unconfined)
  for bit in "${!caps[@]}"; do
    (( (bounding >> bit) & 1 )) || privileged+=(--cap-drop "${caps[$bit]}")
  done
  docker run --rm "${privileged[@]}" "$IMAGE" true >/dev/null 2>&1 \
    || die "docker cannot run a privileged container here: ${privileged[*]}"
  echo "note: --privileged is refused on this machine; running with ${privileged[*]}"
fi

# The machine's disk where the check writes (clone, .venv, twin's cache, tests' files: ~8 GB) is
# memory, so that it leaves nothing behind and needs no free space on this machine's disk.
disk=(--tmpfs /root:rw,exec,mode=700,size=12g --tmpfs /var/cache:rw,exec,mode=755,size=12g
  --tmpfs /tmp:rw,exec,mode=1777,size=8g --tmpfs /var/tmp:rw,exec,mode=1777,size=2g
  --tmpfs /var/lib/apt/lists:rw,mode=755,size=1g)

# This machine's package access, read-only, as a fresh machine of its kind has it.
mkdir -m 777 "$work/out"
access=("${privileged[@]}" "${disk[@]}" --network host -v "$work:/check:ro" -v "$work/out:/out")
for path in /etc/pip.conf /etc/xdg/pip /opt/wheels /opt/pypi /opt/pypi-more /etc/apt/sources.list.d; do
  [ -e "$path" ] && access+=(-v "$path:$path:ro")
done
for path in /etc/apt/apt.conf.d/*; do
  case $path in *docker*|*autoremove*) ;; *) [ -f "$path" ] && access+=(-v "$path:$path:ro") ;; esac
done
ca=$(python3 -m pip config get global.cert 2>/dev/null || true)
ca=${ca:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
while IFS='=' read -r name _; do
  access+=(-e "$name")
done < <(env | grep -E '^PIP_[A-Z_]+=' || true)
# beside the system's store, not over it: installing ca-certificates there must still work
[ -f "$ca" ] && access+=(-v "$(readlink -f "$ca"):/etc/twin-bare-check/ca.crt:ro" -e PIP_CERT=/etc/twin-bare-check/ca.crt)

failed=0
report() {  # step, seconds, status
  printf '%-44s %-4s %6ss\n' "$1" "$3" "$2"
  [ "$3" = PASS ] || failed=1
}

echo "== without root (uid 65534): each command stops in under 5 s with the command to run"
for script in example.sh test.sh; do
  start=$SECONDS
  set +e
  out=$(docker run --rm "${access[@]}" --user 65534:65534 -e HOME=/tmp -w /tmp \
    "$IMAGE" bash -c "{ git clone -q /check/twin.bundle twin && cd twin; } || exit 3
      s=\$(date +%s%N); ./scripts/$script; rc=\$?; e=\$(date +%s%N); echo \"rc=\$rc ms=\$(( (e - s) / 1000000 ))\"" 2>&1)
  set -e
  secs=$((SECONDS - start))
  rc=$(sed -n 's/^rc=\([0-9]*\) ms=.*/\1/p' <<<"$out")
  ms=$(sed -n 's/^rc=[0-9]* ms=\([0-9]*\)$/\1/p' <<<"$out")
  printf '%s\n' "$out" | sed 's/^/    /'
  status=FAIL
  if [ -n "$rc" ] && [ "$rc" != 0 ] && [ "${ms:-99999}" -lt 5000 ] && grep -q "apt-get install -y" <<<"$out"; then
    status=PASS
  fi
  report "non-root ./scripts/$script (${ms:-?} ms inside)" "$secs" "$status"
done

echo "== as root: fresh clone, ./scripts/example.sh, ./scripts/test.sh $*"
cat >"$work/as-root.sh" <<EOF
#!/bin/bash
set -u
step() {  # name, command...
  local name=\$1; shift
  local s=\$(date +%s)
  "\$@"; local rc=\$?
  echo; echo "STEP \$name rc=\$rc seconds=\$(( \$(date +%s) - s ))"
  return \$rc
}
cd /root
step clone git clone -q /check/twin.bundle twin || exit 1
cd twin
step example.sh ./scripts/example.sh 2>&1 | tee /out/example.log
cp -r runs /out/example-runs 2>/dev/null
# a run that crashes is recorded and scored, so twin exits 0: the example must also have graded its rounds
grep -q "^STEP example.sh rc=0 " /out/example.log || exit 1
if grep -q "internal error\|grading failed" /out/example.log; then echo "STEP example-graded rc=1 seconds=0"; exit 1; fi
echo "STEP example-graded rc=0 seconds=0"
step test.sh timeout $SUITE_TIMEOUT ./scripts/test.sh -rfE --junitxml=/out/junit.xml $(printf '%q ' "$@")
EOF
chmod 755 "$work/as-root.sh"
set +e
docker run --rm "${access[@]}" "$IMAGE" /check/as-root.sh 2>&1 | tee "$work/as-root.log"
set -e
for step in clone example.sh example-graded test.sh; do
  line=$(grep -a "^STEP $step " "$work/as-root.log" | tail -1 || true)
  if [ -z "$line" ]; then report "root $step" "-" FAIL; continue; fi
  rc=${line#*rc=}; rc=${rc%% *}
  secs=${line##*seconds=}
  if [ "$rc" = 0 ]; then report "root $step" "$secs" PASS; else report "root $step (exit $rc)" "$secs" FAIL; fi
done
# what the run leaves for a look afterwards: its log, the suite's junit report, the example's run
rm -rf "$CACHE/last-run"
mkdir -p "$CACHE/last-run"
cp -r "$work/as-root.log" "$work/out/." "$CACHE/last-run/" 2>/dev/null || true

if [ "$failed" = 0 ]; then echo "bare-machine-check: PASS"; else echo "bare-machine-check: FAIL (log and junit report: $CACHE/last-run/)"; fi
exit "$failed"
}
