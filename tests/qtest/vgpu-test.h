/*
 * vgpu-test.h -- shared fixture and checks of the qtest-driven vGPU tests.
 *
 * A test case starts its own vgpu-server and QEMU in a private directory
 * (vgt_start) and tears both down (vgt_stop).  VGT_OK(call) runs a qclient
 * call that takes VGT_ERR as its error argument and fails the test with
 * the error's text if it returns < 0.  All waits are bounded by
 * VGT_TIMEOUT_MS.
 */
#ifndef VGMIG_TESTS_QTEST_VGPU_TEST_H
#define VGMIG_TESTS_QTEST_VGPU_TEST_H

#include <glib.h>
#include <string.h>

#include "qclient/harness.h"
#include "qclient/pci.h"
#include "qclient/qmp.h"
#include "qclient/qtest.h"
#include "qclient/vgpu-drv.h"
#include "vgpu/cmd.h"

#define VGT_VRAM_SIZE  ((uint64_t)64 << 20)
#define VGT_VRAM_ARG   "64M"
#define VGT_PAGE_SIZE  (64u << 10)
#define VGT_PAGE_ARG   "64K"
#define VGT_RAM_MIB    256
#define VGT_TIMEOUT_MS 10000
/* Guest RAM the tests allocate from: above the firmware's low memory. */
#define VGT_RAM_START ((uint64_t)16 << 20)
#define VGT_RAM_END   ((uint64_t)VGT_RAM_MIB << 20)

static struct vg_error vgt_err;
#define VGT_ERR (&vgt_err)

static inline void vgt_check(int rc, const char *expr, const char *file,
                             int line, const char *func)
{
    char *msg;

    if (rc >= 0) {
        return;
    }
    msg = g_strdup_printf("%s failed: %s", expr, vgt_err.msg);
    g_assertion_message(G_LOG_DOMAIN, file, line, func, msg);
    g_free(msg);
}

#define VGT_OK(call) vgt_check((call), #call, __FILE__, __LINE__, G_STRFUNC)

struct vgt {
    char *dir;
    struct vg_server *srv;
    struct vg_qemu *qemu;
    struct vg_galloc ram;
    struct vg_vgpu gpu;
};

/* Start QEMU @name on the fixture's server and set the vGPU up. */
static inline void vgt_start_qemu(struct vgt *t, const char *name)
{
    struct vg_qemu_opts qo = {
        .dir = t->dir,
        .name = name,
        .ram_mib = VGT_RAM_MIB,
        .vgpu_sock = t->srv->socket,
    };

    VGT_OK(vg_qemu_start(&qo, &t->qemu, VGT_ERR));
    vg_galloc_init(&t->ram, VGT_RAM_START, VGT_RAM_END);
    VGT_OK(vg_vgpu_open(t->qemu->qt, &t->ram, &t->gpu, VGT_ERR));
}

/* Server, QEMU and vGPU for one test case; logs under a temp directory. */
static inline void vgt_start(struct vgt *t, const char *tag)
{
    struct vg_server_opts so = {
        .vram = VGT_VRAM_ARG,
        .page_size = VGT_PAGE_ARG,
        .log_level = "info",
    };

    memset(t, 0, sizeof(*t));
    VGT_OK(vg_tmpdir_create(tag, &t->dir, VGT_ERR));
    g_test_message("logs in %s", t->dir);
    so.dir = t->dir;
    VGT_OK(vg_server_start(&so, &t->srv, VGT_ERR));
    vgt_start_qemu(t, "qemu");
}

/* Both processes must still be alive: nothing crashed. */
static inline void vgt_assert_alive(struct vgt *t)
{
    g_assert_true(vg_proc_alive(&t->srv->proc));
    g_assert_true(vg_proc_alive(&t->qemu->proc));
}

static inline void vgt_stop(struct vgt *t)
{
    vg_qemu_free(t->qemu);
    vg_server_free(t->srv);
    VGT_OK(vg_tmpdir_remove(t->dir, VGT_ERR));
    g_free(t->dir);
    memset(t, 0, sizeof(*t));
}

static inline uint32_t vgt_rd(struct vgt *t, uint32_t reg)
{
    uint32_t v = 0;

    VGT_OK(vg_vgpu_rd(&t->gpu, reg, &v, VGT_ERR));
    return v;
}

static inline void vgt_wr(struct vgt *t, uint32_t reg, uint32_t val)
{
    VGT_OK(vg_vgpu_wr(&t->gpu, reg, val, VGT_ERR));
}

static inline uint64_t vgt_alloc(struct vgt *t, uint64_t size)
{
    uint64_t addr = 0;

    VGT_OK(vg_galloc_alloc(&t->ram, size, 4096, &addr, VGT_ERR));
    return addr;
}

/* Submit @n commands and wait until the device is idle or halted;
 * returns STATUS. */
static inline uint32_t vgt_run(struct vgt *t, const struct vgpu_cmd *cmds,
                               unsigned n)
{
    uint32_t status = 0;

    VGT_OK(vg_vgpu_submit(&t->gpu, cmds, n, VGT_ERR));
    VGT_OK(vg_vgpu_wait_idle(&t->gpu, VGT_TIMEOUT_MS, &status, VGT_ERR));
    return status;
}

static inline void vgt_memwrite(struct vgt *t, uint64_t addr, const void *buf,
                                size_t len)
{
    VGT_OK(vg_qtest_memwrite(t->qemu->qt, addr, buf, len, VGT_ERR));
}

static inline void vgt_memread(struct vgt *t, uint64_t addr, void *buf,
                               size_t len)
{
    VGT_OK(vg_qtest_memread(t->qemu->qt, addr, buf, len, VGT_ERR));
}

#endif
