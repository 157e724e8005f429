#!/bin/bash
# Full Debian bookworm system with systemd as PID 1, booted under QEMU TCG (no KVM), for end-to-end tests
# of a .deb: dpkg -i, systemctl, busctl on the real system bus, polkitd, then poweroff.
# Adapted from the verified recipe ../shared/rig/systemd-guest.sh (tests/system/run drives it): the guest
# directory comes from GUEST_DIR (tests/system/run caches it under target/, keyed on this file's hash),
# the kernel defaults to the kernel rig's cached one, and the image carries the package's runtime
# dependencies (the guest has no network for apt).
#
#   systemd-guest.sh build            # rootfs (mmdebstrap) + base.img (ext4) + initramfs  (~1 min)
#   systemd-guest.sh run SHARE_DIR    # boot; guest runs SHARE_DIR/run.sh as root after multi-user.target,
#                                     #   output in SHARE_DIR/out.log, exit code = run.sh's exit code
#   systemd-guest.sh shell            # boot to a root login on the serial console (no password), Ctrl-a x quits
#
# Needs (host, root): mmdebstrap, qemu-system-x86 (>= 7.2; bpo 10.0 tested), qemu-utils, e2fsprogs, kmod,
# cpio, xz-utils, apt (for busybox-static / kernel download). Uses a 9p share (modules loaded in the initramfs).
# Kernel: $KDIR (an extracted linux-image-*.deb: boot/vmlinuz-* and lib/modules/*); default
# downloaded from the archive into $W/kernel unless KDIR points at an extracted kernel.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
W=${GUEST_DIR:?GUEST_DIR: where the guest is built}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
IMG_SIZE=${IMG_SIZE:-1G}
MEM=${MEM:-1536}
SMP=${SMP:-2}
CPU=${CPU:-max}
TIMEOUT=${TIMEOUT:-600}
# vgpud's Depends (libvirt0, libudev1, libc6, libgcc-s1) and what the test drives it with (curl, busctl
# from systemd, setpriv from util-linux, pkcheck from polkitd).
INCLUDE=${INCLUDE:-systemd-sysv,udev,dbus,polkitd,kmod,procps,libvirt0,libudev1,curl,util-linux}
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

find_kernel() {
  if [ -z "${KDIR:-}" ]; then
    # the kernel rig's (tests/rig/run) cached Debian kernel, else one downloaded here
    KDIR=${VGPUD_RIG_CACHE:-$HOME/.cache/vgpud-rig}/kernel
    ls "$KDIR"/boot/vmlinuz-* >/dev/null 2>&1 || KDIR=$W/kernel
  fi
  if ! ls "$KDIR"/boot/vmlinuz-* >/dev/null 2>&1; then
    # newest 6.12 amd64 image in the configured suites (bookworm-security/-backports; old ABIs vanish, so resolve now)
    local pkg; pkg=$(apt-cache search --names-only '^linux-image-6\.12\.[0-9.]+\+deb12-amd64$' | awk '{print $1}' | sort -V | tail -1)
    [ -n "$pkg" ] || pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)
    echo "downloading $pkg"; mkdir -p "$KDIR" "$W/dl"; (cd "$W/dl" && apt-get download "$pkg")
    dpkg -x "$W"/dl/"$pkg"_*.deb "$KDIR"
  fi
  VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-* | sort -V | tail -1)
  KVER=${VMLINUZ##*/vmlinuz-}
  MD=$KDIR/lib/modules/$KVER
  # the .deb ships no modules.dep (its postinst runs depmod): generate it (~12 s for 6.12)
  [ -f "$MD/modules.dep" ] || depmod -b "$KDIR" "$KVER"
}

build_initramfs() {
  find_kernel
  local R; R=$(mktemp -d /tmp/guest-initramfs.XXXXXX)
  mkdir -p "$R"/{bin,proc,sys,dev,newroot,lib/modules}
  if [ ! -x "$W/bb/bin/busybox" ]; then
    mkdir -p "$W/dl"; (cd "$W/dl" && apt-get download busybox-static) ; dpkg -x "$W"/dl/busybox-static_*.deb "$W/bb"
  fi
  cp "$W/bb/bin/busybox" "$R/bin/busybox"; ln -s busybox "$R/bin/sh"
  # module closure, in load order, decompressed (busybox insmod + plain init_module)
  local order=() m p
  for m in ext4 virtio_blk 9pnet_virtio 9p; do
    for p in $(modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'); do
      local b; b=$(basename "$p"); b=${b%.xz}; b=${b%.zst}
      [ -f "$R/lib/modules/$b" ] && continue
      case "$p" in *.xz) xz -dc "$p" > "$R/lib/modules/$b";; *.zst) zstd -qdc "$p" > "$R/lib/modules/$b";; *) cp "$p" "$R/lib/modules/$b";; esac
      order+=("$b")
    done
  done
  printf '%s\n' "${order[@]}" > "$R/lib/modules/order"
  cat > "$R/init" <<'EOF'
#!/bin/sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
while read -r m; do insmod /lib/modules/$m 2>/dev/null || echo "initramfs: insmod $m failed"; done < /lib/modules/order
i=0; while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
mount -t ext4 -o rw /dev/vda /newroot || { echo "initramfs: cannot mount /dev/vda"; poweroff -f; }
umount /proc /sys; umount /dev 2>/dev/null
exec switch_root /newroot /sbin/init
EOF
  chmod 755 "$R/init"
  (cd "$R" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$W/initrd-$KVER.gz"
  rm -rf "$R"
  echo "initramfs: $W/initrd-$KVER.gz $(du -h "$W/initrd-$KVER.gz" | cut -f1) modules: ${order[*]}"
}

build_rootfs() {
  local t=$(date +%s%N)
  rm -rf "$W/rootfs"; mkdir -p "$W"
  mmdebstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$W/rootfs" \
      "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb ${MIRROR%/debian}/debian-security $SUITE-security main"
  echo "mmdebstrap: $(ms $t) ms"
  local r=$W/rootfs
  echo guest > "$r/etc/hostname"
  chroot "$r" passwd -d root >/dev/null
  # A oneshot launcher in the boot transaction starts the real test as a *transient* unit, so the boot can
  # finish (systemd-analyze works) while the test waits for it.
  cat > "$r/etc/systemd/system/guest-test-launcher.service" <<'EOF'
[Unit]
Description=Start the e2e test payload from the 9p share
After=multi-user.target
ConditionKernelCommandLine=guest.test=1
[Service]
Type=oneshot
ExecStart=/usr/bin/systemd-run --no-block --unit=guest-test --property=StandardOutput=journal+console --property=StandardError=journal+console /usr/local/sbin/guest-test
[Install]
WantedBy=multi-user.target
EOF
  ln -sf /etc/systemd/system/guest-test-launcher.service "$r/etc/systemd/system/multi-user.target.wants/guest-test-launcher.service"
  cat > "$r/usr/local/sbin/guest-test" <<'EOF'
#!/bin/sh
# Runs /mnt/share/run.sh once the boot is complete, records timings, then powers off.
mkdir -p /mnt/share
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /mnt/share || { echo "GUEST-EXIT=90"; systemctl poweroff; exit 1; }
state=$(systemctl is-system-running --wait 2>&1)
{ echo "system state: $state"; systemd-analyze; systemd-analyze blame | head -15; } > /mnt/share/boot-times.txt 2>&1
rc=0
if [ -x /mnt/share/run.sh ]; then
  /mnt/share/run.sh > /mnt/share/out.log 2>&1 || rc=$?
else
  echo "no run.sh" > /mnt/share/out.log; rc=91
fi
echo "$rc" > /mnt/share/exit
sync
echo "GUEST-EXIT=$rc"
systemctl poweroff --no-block
EOF
  chmod 755 "$r/usr/local/sbin/guest-test"
  # no network in the guest: don't wait for it
  rm -f "$r/etc/systemd/system/timers.target.wants/"apt-daily*.timer
}

build_image() {
  local t=$(date +%s%N)
  rm -f "$W/base.img"
  mke2fs -q -t ext4 -L guestroot -d "$W/rootfs" "$W/base.img" "$IMG_SIZE"
  echo "image: $(ms $t) ms, $(du -h --apparent-size "$W/base.img" | cut -f1) apparent, $(du -h "$W/base.img" | cut -f1) on disk"
}

run_guest() {  # run_guest SHARE [extra append]
  find_kernel
  local share; share=$(realpath "$1"); local extra=${2:-guest.test=1}
  [ -f "$W/base.img" ] || { echo "run '$0 build' first"; exit 2; }
  [ -f "$W/initrd-$KVER.gz" ] || build_initramfs
  local ov; ov=$(mktemp /tmp/guest-run.XXXXXX.qcow2)
  qemu-img create -q -f qcow2 -F raw -b "$W/base.img" "$ov"
  rm -f "$share/exit" "$share/out.log" "$share/boot-times.txt"
  local t=$(date +%s%N) rc
  set +e
  timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi -cpu "$CPU" -machine q35 -m "$MEM" -smp "$SMP" \
    -nographic -no-reboot -nodefaults -serial mon:stdio -nic none \
    -kernel "$VMLINUZ" -initrd "$W/initrd-$KVER.gz" \
    -append "console=ttyS0 root=/dev/vda rw panic=-1 loglevel=4 systemd.show_status=auto $extra" \
    -drive file="$ov",if=virtio,format=qcow2,cache=unsafe \
    -fsdev local,id=fs0,path="$share",security_model=none -device virtio-9p-pci,fsdev=fs0,mount_tag=share
  rc=$?
  set -e
  rm -f "$ov"
  echo "qemu exited rc=$rc after $(ms $t) ms"
  [ -f "$share/boot-times.txt" ] && cat "$share/boot-times.txt"
  [ -f "$share/exit" ] || { echo "no exit file: guest did not finish"; return 99; }
  return "$(cat "$share/exit")"
}

case "${1:-}" in
  build)
    t=$(date +%s%N)
    [ "${REBUILD_ROOTFS:-0}" = 1 ] || [ ! -d "$W/rootfs/usr" ] && build_rootfs
    build_image; build_initramfs
    echo "build total: $(ms $t) ms" ;;
  initramfs) build_initramfs ;;
  image) build_image ;;
  run) run_guest "${2:?share dir}" ;;
  shell) S=$(mktemp -d); run_guest "$S" "guest.test=0" || true; rmdir "$S" 2>/dev/null || true ;;
  *) echo "usage: $0 build|run SHARE|shell"; exit 2 ;;
esac
