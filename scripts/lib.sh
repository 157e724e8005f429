# Shared helpers for the scripts in this folder. Source it; do not run it.

# Installs the Debian packages given as arguments that are not installed yet.
ensure_packages() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing Debian packages: ${missing[*]}" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The system libraries the workspace builds against; protoc for kubeplugin's gRPC code; dpkg-dev
# (dpkg-shlibdeps, which cargo-deb runs) and binutils (strip) for scripts/package.
BUILD_PACKAGES=(pkg-config libvirt-dev libudev-dev protobuf-compiler dpkg-dev binutils)
# cargo-deb, which builds the .deb (scripts/package), pinned. No default features: they would
# build liblzma from C (lzma) and the elf crate (debug-id), neither of which the package uses;
# scripts/package has cargo-deb pipe through the system's gzip (--compress-system), so its own
# gzip feature is not needed either. Installing it takes about 75 s on 2 cores.
CARGO_DEB_VERSION=3.8.0

# Installs cargo-deb $CARGO_DEB_VERSION from crates.io unless `cargo deb --version` already says so.
ensure_cargo_deb() {
    [ "$(cargo deb --version 2>/dev/null)" = "cargo-deb $CARGO_DEB_VERSION" ] && return 0
    echo "installing cargo-deb $CARGO_DEB_VERSION (cargo install --locked)" >&2
    cargo install --locked --no-default-features cargo-deb --version "$CARGO_DEB_VERSION" >&2
}

# The real peers the tests start themselves: a private dbus-daemon and busctl, openssl and curl
# for the TLS listener, jq for the demo, prometheus (the server and promtool) for
# tests/prometheus; for tests/system (the package on a booted systemd guest): mmdebstrap (the
# guest's root file system), e2fsprogs (mke2fs -d), QEMU and qemu-img, cpio, xz-utils, kmod and
# zstd (the initramfs) and lintian.
TEST_PACKAGES=(dbus-daemon systemd openssl curl jq prometheus
    mmdebstrap e2fsprogs qemu-system-x86 qemu-utils cpio xz-utils kmod zstd lintian)

# The kubelet stand-in of vgpud/tests/daemon_kubernetes.rs (tests/kubelet): Go 1.23 from
# bookworm-backports (bookworm's 1.19 is too old for Debian's gRPC-Go), gRPC-Go and the protobuf
# runtime as Debian source packages, and the protoc plugins that generate Go. gRPC-Go 1.33's codec
# is github.com/golang/protobuf's: its 1.5 (over the v2 API protoc-gen-go writes for); with 1.3
# the stand-in panics on the first message.
GO_STANDIN_PACKAGES=(golang-google-grpc-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev
    protoc-gen-go protoc-gen-go-grpc)

# Adds Debian's bookworm-backports to apt's sources when it is not there.
ensure_backports_source() {
    grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        | $sudo tee /etc/apt/sources.list.d/vgpud-backports.sources >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
}

# Go 1.23 (backports) and the stand-in's Go libraries.
ensure_go_standin_packages() {
    if ! dpkg-query -W -f='${Status}' golang-1.23-go 2>/dev/null | grep -q "install ok installed"; then
        ensure_backports_source
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        apt-cache show golang-1.23-go >/dev/null 2>&1 \
            || $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        echo "installing golang-1.23-go from bookworm-backports" >&2
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -t bookworm-backports golang-1.23-go >/dev/null
    fi
    # The protobuf 1.5 package first: gRPC-Go's dependency is "1.3 | 1.5", and apt would take 1.3.
    ensure_packages golang-github-golang-protobuf-1-5-dev
    ensure_packages "${GO_STANDIN_PACKAGES[@]}"
}

# The venvs of the Python peers the Placement tests start (tests/placement, testkit::placement
# and testkit::keystone): OpenStack Placement 16 and Keystone from PyPI, each served by gunicorn.
# They live in the target directory unless VGPUD_PLACEMENT_VENV / VGPUD_KEYSTONE_VENV say
# otherwise; an existing venv is kept (delete it to reinstall).
PLACEMENT_PIP=('openstack-placement==16.0.0' gunicorn)
KEYSTONE_PIP=('keystone==30.0.0' gunicorn)
# The OpenStack client with osc-placement (scripts/placement-session), in a venv of its own so
# that its dependencies do not move the libraries the test Placement runs with.
OSC_PIP=(python-openstackclient osc-placement)

# ensure_venv VENV PROGRAM PACKAGES...: makes a venv at VENV with the pip PACKAGES, unless
# VENV/bin/PROGRAM exists.
ensure_venv() {
    local venv=$1 program=$2; shift 2
    [ -x "$venv/bin/$program" ] && return 0
    # Debian's python3 has no venv module (ensurepip) without python3-venv.
    python3 -c 'import ensurepip' 2>/dev/null || ensure_packages python3-venv
    echo "making the venv $venv: pip install $*" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "$@"
}

ensure_placement_venv() {
    ensure_venv "${VGPUD_PLACEMENT_VENV:-${CARGO_TARGET_DIR:-target}/placement-venv}" gunicorn "${PLACEMENT_PIP[@]}"
}

ensure_keystone_venv() {
    ensure_venv "${VGPUD_KEYSTONE_VENV:-${CARGO_TARGET_DIR:-target}/keystone-venv}" gunicorn "${KEYSTONE_PIP[@]}"
}

ensure_osc_venv() {
    ensure_venv "${VGPUD_OSC_VENV:-${CARGO_TARGET_DIR:-target}/osc-venv}" openstack "${OSC_PIP[@]}"
}
