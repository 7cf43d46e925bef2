#!/usr/bin/env bash
# Build local stand-ins for the official base images, for machines that cannot pull them.
#
#   sudo deploy/docker/bases.sh [--refresh]
#
# The official images (python, node, nginx-unprivileged, redis, prometheus) are the defaults
# everywhere and the ones to use wherever a registry answers. Where none does, this script
# makes equivalents from Debian bookworm's packages: a debootstrap (minbase) rootfs imported
# into Docker, then one image per base from deploy/docker/bases.Dockerfile. They are tagged
# dtq-local/<name> so that nothing mistakes them for the official images, and
# deploy/compose/local-bases.env names them for build.py and docker-compose.
#
# Needs root (debootstrap), Docker with BuildKit (build.py), Debian's mirror (plain HTTP),
# and the npm registry for the node stand-in. Downloaded .deb files are kept in
# .cache/debootstrap, so a second run on the same machine fetches nothing it has. The rootfs
# is made once and reused while this recipe is unchanged; --refresh makes it again (the
# images on it take Debian's security updates at every run anyway).
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian), DTQ_BUILD_CA (a CA bundle
# the npm download must trust, build.py: by default the host's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

say() { printf 'bases: %s\n' "$*" >&2; }

refresh=no
for arg in "$@"; do
  case "$arg" in
    --refresh) refresh=yes ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) say "unknown argument: $arg"; exit 2 ;;
  esac
done

cat >&2 <<'EOF'
bases: building LOCAL STAND-INS for the official base images (python, node, nginx, redis,
bases: prometheus) from Debian bookworm's packages. They exist only for machines that cannot
bases: reach a container registry; wherever the official images can be pulled, use those
bases: (the defaults of the Dockerfiles and of docker-compose.yml) and not these.
EOF

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
rootfs_image=dtq-local/debian-rootfs:$suite
started=$SECONDS
docker=${DOCKER:-docker}
elapsed() { echo "$((SECONDS - $1))"; }

# The recipe of the rootfs: when this changes, the imported rootfs is made again.
recipe=$(printf '%s\n' "$mirror" "$suite" "$(sed -n '/^make_rootfs()/,/^}/p' "$0")" \
  | sha256sum | cut -c1-16)

make_rootfs() {
  local dir=$1 cache=$root/.cache/debootstrap
  mkdir -p "$cache" "$dir/etc/dpkg/dpkg.cfg.d"
  # Like Debian's official slim images: no documentation, manuals or translations, and dpkg
  # does not fsync every file (the result is a tarball; a crash means starting over).
  cat > "$dir/etc/dpkg/dpkg.cfg.d/dtq-local" <<'CFG'
force-unsafe-io
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
CFG
  debootstrap --variant=minbase --cache-dir="$cache" "$suite" "$dir" "$mirror" \
    > "$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; return 1; }
  rm -f "$dir.log"
  cat > "$dir/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb ${DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security} $suite-security main
SOURCES
  cat > "$dir/etc/apt/apt.conf.d/90dtq-local" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
APT
  # No daemon starts while a package installs (there is no init in an image).
  printf '#!/bin/sh\nexit 101\n' > "$dir/usr/sbin/policy-rc.d"
  chmod 755 "$dir/usr/sbin/policy-rc.d"
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb \
    "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/var/log/*.log \
    "$dir"/dev/* "$dir"/proc/* "$dir"/sys/* "$dir"/tmp/* "$dir"/var/tmp/*
  find "$dir/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
  find "$dir/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias \
    -exec rm -rf {} + 2>/dev/null || true
}

have=$("$docker" image inspect --format '{{index .Config.Labels "dtq.rootfs.recipe"}}' \
  "$rootfs_image" 2>/dev/null || true)
if [ "$refresh" = no ] && [ "$have" = "$recipe" ]; then
  say "$rootfs_image is there (recipe $recipe); --refresh makes it again"
else
  command -v debootstrap >/dev/null 2>&1 || { say "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
  [ "$(id -u)" = 0 ] || { say "debootstrap needs root"; exit 1; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/dtq-rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  step=$SECONDS
  say "debootstrap --variant=minbase $suite from $mirror (packages cached in .cache/debootstrap)"
  make_rootfs "$work/rootfs"
  tar --numeric-owner -C "$work/rootfs" -c . \
    | "$docker" import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["bash"]' \
      --change "LABEL dtq.rootfs.recipe=$recipe" \
      --change "LABEL org.opencontainers.image.description=\"Debian $suite minbase (debootstrap), the rootfs of dtq's local base stand-ins\"" \
      --message "debootstrap --variant=minbase $suite $mirror" - "$rootfs_image" > /dev/null
  rm -rf "$work"
  trap - EXIT
  say "$rootfs_image imported in $(elapsed "$step") s"
fi

# The stand-ins themselves: bases.Dockerfile's targets, through build.py's BuildKit builder.
step=$SECONDS
python3 "$here/build.py" --bases "$rootfs_image" --log-dir "$root/.cache/build" \
  | sed 's/^/bases: /' >&2
say "stand-ins built in $(elapsed "$step") s"

say "done in $(elapsed "$started") s. To build and run dtq on these stand-ins:"
say "  uv run python deploy/docker/build.py --env-file deploy/compose/local-bases.env"
say "  cat deploy/compose/local-bases.env >> .env   # then docker-compose up -d"
