/*
 * A stand-in for GIM's host libamdsmi.so (smi-lib/ of AMD's MxGPU-Virtualization), for tests.
 *
 * Two MI300X PFs in one XGMI hive, TotalVFs 8. Behaviour from AMD's sources (smi-lib/src/amdsmi.c,
 * GIM's smi_drv handlers, libgv amdgv_api_internal.c and amdgv_gpumon.c):
 * - set_num_vf: BUSY while a VF runs a guest, INVAL for 0 or > TotalVFs, then the compute mode
 *   is the count's default ("1VF:SPX 2VF:DPX 4VF:QPX 8VF:CPX", libgv amdgv_int_set_vf_number,
 *   amdgv_gpumon_reset_partition_mode);
 * - the profile config lists only the profiles whose support_vf_num has the current count,
 *   renumbered from 0 (libgv mi300 gpumon table: SPX {1}, DPX {2}, QPX {4}, CPX {1,2,4,8});
 * - set profile: BUSY with a guest, INVAL for an index past the list or a profile whose
 *   memory_caps lack the current NPS mode, SUCCESS when already set (SET_ALREADY);
 * - memory caps NPS1 and NPS4; set memory: BUSY with a guest, INVAL for a mode not in the caps.
 * Struct fields are written at the byte offsets of smi-lib/interface/amdsmi.h (x86_64), not
 * through a shared header, so the Rust layouts are checked against them independently.
 *
 * Controls: files in STATE_DIR (given with -D): `guest_running`, `no_xgmi`. Every init,
 * shut_down and set call is appended to STATE_DIR/calls, one line each.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define U32(p, off) (*(uint32_t *)((char *)(p) + (off)))
#define U64(p, off) (*(uint64_t *)((char *)(p) + (off)))
#define PTR(p, off) (*(void **)((char *)(p) + (off)))

enum { SUCCESS = 0, INVAL = 1, NOT_SUPPORTED = 2, BUSY = 30, NOT_FOUND = 31 };
enum { SPX = 1, DPX = 2, QPX = 4, CPX = 5 };
enum { TOTAL_VFS = 8, PROFILE_SIZE = 1152, PROFILES_AT = 2064 };

struct gpu { uint64_t bdf; uint32_t num_vf, compute, nps; };
/* 0000:c1:00.0 and 0000:41:00.0, listed in that order (not sorted). */
static struct gpu gpus[2] = { { 0xc100, 1, SPX, 1 }, { 0x4100, 1, SPX, 1 } };

struct profile { uint32_t type, partitions, memory_caps, vf_mask; };
static const struct profile table[] = {
    { SPX, 1, 0x1, 1u << 1 },
    { DPX, 2, 0x1, 1u << 2 },
    { QPX, 4, 0x5, 1u << 4 },
    { CPX, 8, 0x5, (1u << 1) | (1u << 2) | (1u << 4) | (1u << 8) },
};
#define TABLE_LEN (sizeof table / sizeof table[0])
#define NPS_CAPS 0x5u /* bit 0 NPS1, bit 2 NPS4 */

static int flag(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", STATE_DIR, name);
    return access(path, F_OK) == 0;
}

static void note(const char *fmt, ...) {
    char path[4096];
    snprintf(path, sizeof path, "%s/calls", STATE_DIR);
    FILE *f = fopen(path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static struct gpu *gpu_of(void *h) {
    for (int i = 0; i < 2; i++)
        if (h == &gpus[i]) return &gpus[i];
    return NULL;
}

/* The filtered list: the table entries valid for `num_vf`, in table order. */
static int filtered(uint32_t num_vf, const struct profile **out) {
    int n = 0;
    for (unsigned i = 0; i < TABLE_LEN; i++)
        if (table[i].vf_mask & (1u << num_vf)) out[n++] = &table[i];
    return n;
}

int amdsmi_init(uint64_t flags) { note("init %llu", (unsigned long long)flags); return SUCCESS; }
int amdsmi_shut_down(void) { note("shut_down"); return SUCCESS; }

int amdsmi_get_processor_handles(void *socket, uint32_t *count, void **handles) {
    (void)socket; /* ignored by the host library */
    if (!count) return INVAL;
    if (!handles) { *count = 2; return SUCCESS; }
    uint32_t n = *count < 2 ? *count : 2;
    for (uint32_t i = 0; i < n; i++) handles[i] = &gpus[i];
    *count = n; /* a short buffer is not reported */
    return SUCCESS;
}

int amdsmi_get_gpu_device_bdf(void *h, uint64_t *bdf) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    *bdf = g->bdf;
    return SUCCESS;
}

int amdsmi_get_gpu_device_uuid(void *h, unsigned *len, char *uuid) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    if (g != &gpus[0]) return NOT_SUPPORTED;
    if (*len < 38) return INVAL;
    strcpy(uuid, "1cff74a1-0000-1000-80ff-c10000000000");
    *len = 36;
    return SUCCESS;
}

int amdsmi_get_gpu_asic_info(void *h, void *info) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    if (g == &gpus[0]) {
        strcpy((char *)info, "AMD Instinct MI300X");
    } else {
        memset(info, 'M', 256); /* market_name with no NUL */
    }
    U32(info, 256) = 0x1002;
    strcpy((char *)info + 260, "Advanced Micro Devices Inc.");
    U64(info, 520) = 0x74a1;
    return SUCCESS;
}

int amdsmi_get_gpu_vram_info(void *h, void *info) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    if (g != &gpus[0]) return NOT_SUPPORTED;
    U32(info, 0) = 4; /* HBM3 */
    memset((char *)info + 4, 'V', 256); /* vram_vendor with no NUL */
    U64(info, 264) = 196608;
    U32(info, 272) = 8192;
    return SUCCESS;
}

int amdsmi_get_num_vf(void *h, uint32_t *enabled, uint32_t *supported) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    *enabled = g->num_vf;
    *supported = TOTAL_VFS;
    return SUCCESS;
}

#ifndef NO_SET_NUM_VF
int amdsmi_set_num_vf(void *h, uint32_t n) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    note("set_num_vf %llx %u", (unsigned long long)g->bdf, n);
    if (flag("guest_running")) return BUSY;
    if (n == 0 || n > TOTAL_VFS) return INVAL;
    g->num_vf = n;
    const struct profile *valid[TABLE_LEN];
    if (filtered(n, valid) > 0) g->compute = valid[0]->type;
    return SUCCESS;
}
#endif

#ifndef NO_PARTITIONS
/* The amdsmi_nps_caps_t bit of a memory mode: NPS1 bit 0 … NPS8 bit 3, i.e. the mode itself. */
static int nps_bit(uint32_t mode) {
    switch (mode) { case 1: return 1; case 2: return 2; case 4: return 4; case 8: return 8; }
    return 0;
}

static void write_profile(void *at, const struct profile *p, uint32_t index) {
    U32(at, 0) = p->type;
    U32(at, 4) = p->partitions;
    U32(at, 8) = p->memory_caps;
    U32(at, 12) = index;
    U32(at, 16) = 1;
}

int amdsmi_get_gpu_accelerator_partition_profile_config(void *h, void *config) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    const struct profile *valid[TABLE_LEN];
    int n = filtered(g->num_vf, valid);
    U32(config, 0) = n;
    U32(config, 2056) = 0; /* default_profile_index */
    for (int i = 0; i < n; i++)
        write_profile((char *)config + PROFILES_AT + i * PROFILE_SIZE, valid[i], i);
    return SUCCESS;
}

/* Every profile with its VF counts (amdsmi_accelerator_partition_profile_global_t: the
 * profile, then vf_mode at 1152; 1208 bytes each). */
int amdsmi_get_gpu_accelerator_partition_profile_config_global(void *h, void *config) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    U32(config, 0) = TABLE_LEN;
    for (unsigned i = 0; i < TABLE_LEN; i++) {
        char *at = (char *)config + PROFILES_AT + i * 1208;
        write_profile(at, &table[i], i);
        U32(at, 1152) = table[i].vf_mask;
    }
    return SUCCESS;
}

int amdsmi_get_gpu_accelerator_partition_profile(void *h, void *profile, uint32_t *ids) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    const struct profile *valid[TABLE_LEN];
    int n = filtered(g->num_vf, valid);
    for (int i = 0; i < n; i++) {
        if (valid[i]->type != g->compute) continue;
        write_profile(profile, valid[i], i);
        for (uint32_t id = 0; id < valid[i]->partitions; id++) ids[id] = id;
        return SUCCESS;
    }
    return NOT_SUPPORTED;
}

int amdsmi_set_gpu_accelerator_partition_profile(void *h, uint32_t index) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    note("set_profile %llx %u", (unsigned long long)g->bdf, index);
    if (flag("guest_running")) return BUSY;
    const struct profile *valid[TABLE_LEN];
    if (index >= (uint32_t)filtered(g->num_vf, valid)) return INVAL;
    if (!(valid[index]->memory_caps & nps_bit(g->nps))) return INVAL;
    g->compute = valid[index]->type;
    return SUCCESS;
}

int amdsmi_get_gpu_memory_partition_config(void *h, void *config) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    U32(config, 0) = NPS_CAPS;
    U32(config, 4) = g->nps;
    U32(config, 8) = g->nps;
    for (uint32_t i = 0; i < g->nps; i++) {
        U32(config, 16 + 24 * i) = 0;
        U64(config, 16 + 24 * i + 8) = (uint64_t)i << 30;
        U64(config, 16 + 24 * i + 16) = ((uint64_t)i + 1) << 30;
    }
    return SUCCESS;
}

int amdsmi_set_gpu_memory_partition_mode(void *h, uint32_t mode) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    note("set_memory %llx %u", (unsigned long long)g->bdf, mode);
    if (flag("guest_running")) return BUSY;
    if (!(nps_bit(mode) & NPS_CAPS)) return INVAL;
    g->nps = mode;
    return SUCCESS;
}
#endif

#ifndef NO_TOPOLOGY
int amdsmi_get_link_topology_nearest(void *h, uint32_t link_type, void *nearest) {
    struct gpu *g = gpu_of(h);
    if (!g) return NOT_FOUND;
    /* Only XGMI is modelled; a wrong link type finds nothing. */
    if (link_type != 2 || flag("no_xgmi")) { U32(nearest, 0) = 0; return SUCCESS; }
    U32(nearest, 0) = 1;
    PTR(nearest, 8) = g == &gpus[0] ? &gpus[1] : &gpus[0];
    return SUCCESS;
}
#endif
