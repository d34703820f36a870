/*
 * test-server-restart.c -- QEMU dies with SIGKILL while the vGPU is busy;
 * the same vgpu-server process stays alive and serves a new QEMU, whose
 * vGPU works: registers, a FILL and a FENCE with its MSI-X message.
 */
#include <glib.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include "vgpu-test.h"

#define IRQ_ALL (VGPU_IRQ_FENCE | VGPU_IRQ_ERROR)

/* The vGPU of the current QEMU works: identity, FILL, FENCE. */
static void check_device_works(struct vgt *t, uint32_t pattern)
{
    struct vgpu_cmd c[2];
    uint32_t w = 0;

    g_assert_cmphex(vgt_rd(t, VGPU_REG_ID), ==, VGPU_ID_MAGIC);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_VRAM_SIZE_LO), ==,
                    (uint32_t)VGT_VRAM_SIZE);
    vgt_wr(t, VGPU_REG_SCRATCH, pattern);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_SCRATCH), ==, pattern);
    VGT_OK(vg_vgpu_ring_init(&t->gpu, &t->ram, 16, VGT_ERR));
    vgt_wr(t, VGPU_REG_IRQ_MASK, IRQ_ALL);
    c[0] = vgpu_cmd_make(VGPU_OP_FILL, 0x40000, 0x10000, pattern, 0, 0, 0);
    c[1] = vgpu_cmd_make(VGPU_OP_FENCE, pattern, 0, 0, 0, 0, 0);
    g_assert_cmphex(vgt_run(t, c, 2), ==, 0);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_FENCE_LO), ==, pattern);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    VGT_OK(vg_vgpu_msi_wait(&t->gpu, VGPU_MSIX_VEC_FENCE, VGT_TIMEOUT_MS,
                            VGT_ERR));
    VGT_OK(
        vg_qtest_readl(t->qemu->qt, t->gpu.vram_addr + 0x40000, &w, VGT_ERR));
    g_assert_cmphex(w, ==, pattern);
    VGT_OK(
        vg_qtest_readl(t->qemu->qt, t->gpu.vram_addr + 0x4fffc, &w, VGT_ERR));
    g_assert_cmphex(w, ==, pattern);
}

/* Kill QEMU with a long FILL queued behind a running one. */
static void kill_qemu_busy(struct vgt *t)
{
    struct vgpu_cmd c[2];
    pid_t server_pid = t->srv->proc.pid;

    c[0] = vgpu_cmd_make(VGPU_OP_FILL, 0, VGT_VRAM_SIZE, 0x77777777, 0, 0, 0);
    c[1] = vgpu_cmd_make(VGPU_OP_FILL, 0, VGT_VRAM_SIZE, 0x88888888, 0, 0, 0);
    VGT_OK(vg_vgpu_submit(&t->gpu, c, 2, VGT_ERR));
    VGT_OK(vg_qemu_kill9(t->qemu, VGT_ERR));
    g_assert_true(WIFSIGNALED(t->qemu->proc.status));
    g_assert_cmpint(WTERMSIG(t->qemu->proc.status), ==, SIGKILL);
    vg_qemu_free(t->qemu);
    t->qemu = NULL;
    /* The server notices the dead client and keeps running. */
    g_usleep(200 * 1000);
    g_assert_true(vg_proc_alive(&t->srv->proc));
    g_assert_cmpint(t->srv->proc.pid, ==, server_pid);
}

static void test_restart(void)
{
    char name[16];
    struct vgt t;
    int round;

    vgt_start(&t, "server-restart");
    check_device_works(&t, 0x01010101);
    for (round = 1; round <= 3; round++) {
        g_test_message("round %d: SIGKILL QEMU, start a new one", round);
        kill_qemu_busy(&t);
        snprintf(name, sizeof(name), "qemu%d", round);
        vgt_start_qemu(&t, name);
        check_device_works(&t, 0x01010101u * (uint32_t)(round + 1));
        vgt_assert_alive(&t);
    }
    vgt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vgpu/server-restart/qemu-sigkill", test_restart);
    return g_test_run();
}
