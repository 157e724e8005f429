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

# The system libraries the workspace builds against.
BUILD_PACKAGES=(pkg-config libvirt-dev libudev-dev)
# The real peers the tests start themselves: a private dbus-daemon and busctl, openssl and curl
# for the TLS listener, jq for the demo, prometheus (the server and promtool) for
# tests/prometheus.
TEST_PACKAGES=(dbus-daemon systemd openssl curl jq prometheus)
