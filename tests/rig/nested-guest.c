/*
 * The nested guest of the rig's libvirt phase: a multiboot kernel that does nothing but
 * acknowledge PCI hot-unplug requests, so that libvirt's hot-detach completes without booting an
 * operating system under nested software emulation (a Linux guest takes minutes there). It sleeps
 * in `hlt` between polls, woken by the PIT at 100 Hz, and reports on COM1.
 *
 * QEMU's q35 announces an unplug request one of two ways, depending on the machine's settings;
 * both are served:
 * - ACPI PCI hotplug (the default since QEMU 6.1): the ICH9 registers at 0x0cc0 (QEMU's
 *   `acpi-pcihp-io-base`); select a bus with BNUM, read the slots asking to go from PCID, eject
 *   them through PCEJ (QEMU's docs/specs/acpi_pci_hotplug.rst).
 * - native PCIe hotplug: a root port reports an attention-button press; powering its slot off
 *   with the power indicator off makes QEMU remove the device.
 *
 * Built by tests/rig/run with the host's gcc: 32-bit, freestanding, linked at 1 MiB.
 */
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define PCIHP 0x0cc0
#define PCIHP_DOWN (PCIHP + 0x04)
#define PCIHP_EJECT (PCIHP + 0x08)
#define PCIHP_BNUM (PCIHP + 0x10)
#define PCIHP_BUSES 32
#define COM1 0x3f8

#define SLTCTL 0x18
#define SLTSTA 0x1a
#define SLTSTA_ABP 0x0001
#define SLTCTL_PIC_OFF 0x0300
#define SLTCTL_PCC 0x0400

__attribute__((section(".multiboot"), used, aligned(4)))
static const u32 multiboot_header[3] = {0x1BADB002u, 0u, -0x1BADB002u};

static inline void outb(u16 port, u8 v) { __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outw(u16 port, u16 v) { __asm__ volatile("outw %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outl(u16 port, u32 v) { __asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port)); }
static inline u8 inb(u16 port) { u8 v; __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port)); return v; }
static inline u16 inw(u16 port) { u16 v; __asm__ volatile("inw %1, %0" : "=a"(v) : "Nd"(port)); return v; }
static inline u32 inl(u16 port) { u32 v; __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port)); return v; }

static void say(const char *s) {
    for (; *s; s++) {
        while (!(inb(COM1 + 5) & 0x20)) {}
        outb(COM1, (u8)*s);
    }
}

static void say_hex(u32 v) {
    char buf[11] = "0x";
    for (int i = 0; i < 8; i++) buf[2 + i] = "0123456789abcdef"[(v >> (28 - 4 * i)) & 0xf];
    buf[10] = 0;
    say(buf);
}

/* Configuration mechanism #1 (ports 0xcf8/0xcfc), enough for the root ports on bus 0. */
static void cfg_select(u32 dev, u32 off) { outl(0xcf8, 0x80000000u | (dev << 11) | (off & 0xfc)); }
static u32 cfg_read32(u32 dev, u32 off) { cfg_select(dev, off); return inl(0xcfc); }
static u16 cfg_read16(u32 dev, u32 off) { cfg_select(dev, off); return inw(0xcfc + (off & 2)); }
static void cfg_write16(u32 dev, u32 off, u16 v) { cfg_select(dev, off); outw(0xcfc + (off & 2), v); }

static u32 pcie_cap(u32 dev) {
    u32 cap = cfg_read32(dev, 0x34) & 0xfc;
    for (int hops = 0; cap && hops < 48; hops++) {
        u32 head = cfg_read32(dev, cap);
        if ((head & 0xff) == 0x10) return cap;
        cap = (head >> 8) & 0xfc;
    }
    return 0;
}

static void serve_native(void) {
    for (u32 dev = 0; dev < 32; dev++) {
        if ((cfg_read32(dev, 0) & 0xffff) == 0xffff || (cfg_read32(dev, 8) >> 16) != 0x0604) continue;
        u32 cap = pcie_cap(dev);
        if (!cap || !(cfg_read16(dev, cap + SLTSTA) & SLTSTA_ABP)) continue;
        cfg_write16(dev, cap + SLTSTA, SLTSTA_ABP);
        u16 ctl = cfg_read16(dev, cap + SLTCTL);
        cfg_write16(dev, cap + SLTCTL, (u16)((ctl & ~0x0700) | SLTCTL_PCC | SLTCTL_PIC_OFF));
        say("nested guest: powered off the slot of root port 00:");
        say_hex(dev);
        say("\r\n");
    }
}

static void serve_acpi(void) {
    for (u32 bsel = 0; bsel < PCIHP_BUSES; bsel++) {
        outl(PCIHP_BNUM, bsel);
        u32 down = inl(PCIHP_DOWN);
        if (!down || down == 0xffffffffu) continue;
        outl(PCIHP_EJECT, down);
        say("nested guest: ejected slots ");
        say_hex(down);
        say(" of hotplug bus ");
        say_hex(bsel);
        say("\r\n");
    }
}

struct idt_entry { u16 lo, sel; u8 zero, type; u16 hi; } __attribute__((packed));
static struct idt_entry idt[256];
static struct { u16 limit; u32 base; } __attribute__((packed)) idtr;
/* Every vector acknowledges the master 8259 and returns: only the PIT is unmasked. */
extern void isr_stub(void);
__asm__(".text\nisr_stub:\n pushl %eax\n movb $0x20, %al\n outb %al, $0x20\n popl %eax\n iretl\n");

static void timer_setup(void) {
    u16 cs;
    __asm__ volatile("movw %%cs, %0" : "=r"(cs));
    for (int i = 0; i < 256; i++) {
        u32 a = (u32)isr_stub;
        idt[i] = (struct idt_entry){(u16)a, cs, 0, 0x8e, (u16)(a >> 16)};
    }
    idtr.limit = sizeof idt - 1;
    idtr.base = (u32)idt;
    __asm__ volatile("lidt %0" : : "m"(idtr));
    /* 8259s at vectors 0x20 and 0x28, only IRQ0 unmasked; PIT channel 0 at 100 Hz. */
    outb(0x20, 0x11); outb(0xa0, 0x11); outb(0x21, 0x20); outb(0xa1, 0x28);
    outb(0x21, 0x04); outb(0xa1, 0x02); outb(0x21, 0x01); outb(0xa1, 0x01);
    outb(0x21, 0xfe); outb(0xa1, 0xff);
    u32 div = 1193182 / 100;
    outb(0x43, 0x34); outb(0x40, (u8)div); outb(0x40, (u8)(div >> 8));
}

void guest_main(void) {
    timer_setup();
    say("nested guest: serving PCI hot-unplug requests\r\n");
    for (;;) {
        serve_acpi();
        serve_native();
        __asm__ volatile("sti; hlt; cli");
    }
}

u8 stack[4096] __attribute__((aligned(16), used));
__asm__(".text\n.globl _start\n_start:\n cli\n movl $stack+4096, %esp\n call guest_main\n1: hlt\n jmp 1b\n");
