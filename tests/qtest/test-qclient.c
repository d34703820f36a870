/*
 * test-qclient.c -- the qclient library against a plain QEMU (no vGPU):
 * qtest memory and port access, PCI config space, QMP commands, errors,
 * events and HMP.
 */
#include <glib.h>
#include <errno.h>
#include <linux/pci_regs.h>
#include <signal.h>
#include <sys/wait.h>
#include <string.h>

#include "vgpu-test.h"

#define RAM_MIB 64

struct env {
    char *dir;
    struct vg_qemu *qemu;
};

static void env_start(struct env *e)
{
    struct vg_qemu_opts qo = {.name = "qemu", .ram_mib = RAM_MIB};

    VGT_OK(vg_tmpdir_create("qclient", &e->dir, VGT_ERR));
    qo.dir = e->dir;
    VGT_OK(vg_qemu_start(&qo, &e->qemu, VGT_ERR));
}

static void env_stop(struct env *e)
{
    vg_qemu_free(e->qemu);
    VGT_OK(vg_tmpdir_remove(e->dir, VGT_ERR));
    g_free(e->dir);
}

static void test_memory(void)
{
    struct vg_qtest *qt;
    uint8_t buf[3 * 4096 + 17], back[sizeof(buf)];
    uint64_t q = 0;
    uint32_t l = 0;
    uint16_t w = 0;
    uint8_t b = 0;
    struct env e;
    size_t i;

    env_start(&e);
    qt = e.qemu->qt;
    VGT_OK(vg_qtest_writeq(qt, 0x200000, 0x1122334455667788ull, VGT_ERR));
    VGT_OK(vg_qtest_readq(qt, 0x200000, &q, VGT_ERR));
    g_assert_cmphex(q, ==, 0x1122334455667788ull);
    VGT_OK(vg_qtest_readl(qt, 0x200000, &l, VGT_ERR));
    g_assert_cmphex(l, ==, 0x55667788);
    VGT_OK(vg_qtest_readw(qt, 0x200006, &w, VGT_ERR));
    g_assert_cmphex(w, ==, 0x1122);
    VGT_OK(vg_qtest_readb(qt, 0x200001, &b, VGT_ERR));
    g_assert_cmphex(b, ==, 0x77);
    VGT_OK(vg_qtest_writeb(qt, 0x200001, 0xab, VGT_ERR));
    VGT_OK(vg_qtest_writew(qt, 0x200002, 0xcdef, VGT_ERR));
    VGT_OK(vg_qtest_writel(qt, 0x200004, 0x01020304, VGT_ERR));
    VGT_OK(vg_qtest_readq(qt, 0x200000, &q, VGT_ERR));
    g_assert_cmphex(q, ==, 0x01020304cdefab88ull);

    for (i = 0; i < sizeof(buf); i++) {
        buf[i] = (uint8_t)(i * 7 + 3);
    }
    VGT_OK(vg_qtest_memwrite(qt, 0x300001, buf, sizeof(buf), VGT_ERR));
    VGT_OK(vg_qtest_memread(qt, 0x300001, back, sizeof(back), VGT_ERR));
    g_assert_cmpmem(buf, sizeof(buf), back, sizeof(back));
    VGT_OK(vg_qtest_memset(qt, 0x300001, 0x5c, 100, VGT_ERR));
    VGT_OK(vg_qtest_memread(qt, 0x300000, back, 102, VGT_ERR));
    g_assert_cmphex(back[0], ==, 0);
    for (i = 1; i <= 100; i++) {
        g_assert_cmphex(back[i], ==, 0x5c);
    }
    g_assert_cmphex(back[101], ==, buf[100]);
    env_stop(&e);
}

static void test_pci_config(void)
{
    struct vg_pci_dev dev;
    uint32_t id = 0;
    struct env e;

    env_start(&e);
    /* 00.0 of the pc machine is the i440FX host bridge. */
    VGT_OK(vg_pci_cfg_read32(e.qemu->qt, 0, PCI_VENDOR_ID, &id, VGT_ERR));
    g_assert_cmphex(id, ==, 0x12378086);
    VGT_OK(vg_pci_find(e.qemu->qt, 0x8086, 0x7000, &dev, VGT_ERR));
    g_assert_cmpuint(dev.devfn, ==, 1u << 3);
    g_assert_cmpint(vg_pci_find(e.qemu->qt, 0x7667, 0x6d01, &dev, VGT_ERR), ==,
                    -ENODEV);
    g_assert_nonnull(strstr(vgt_err.msg, "7667:6d01"));
    /* A BAR out of range, or one not assigned (no firmware ran), is not
     * moved. */
    VGT_OK(vg_pci_find(e.qemu->qt, 0x8086, 0x7010, &dev, VGT_ERR));
    g_assert_cmpint(vg_pci_move_bar(&dev, VG_PCI_NUM_BARS, 0x1000, VGT_ERR), ==,
                    -EINVAL);
    g_assert_cmpint(vg_pci_move_bar(&dev, 4, 0x1000, VGT_ERR), ==, -EINVAL);
    g_assert_nonnull(strstr(vgt_err.msg, "BAR4: cannot move to 0x1000"));
    env_stop(&e);
}

static void test_qmp(void)
{
    JsonNode *ret = NULL;
    char *out = NULL;
    struct env e;

    env_start(&e);
    VGT_OK(vg_qmp_execute(e.qemu->qmp, "query-status", NULL, &ret, VGT_ERR));
    g_assert_true(JSON_NODE_HOLDS_OBJECT(ret));
    g_assert_cmpstr(
        json_object_get_string_member(json_node_get_object(ret), "status"), ==,
        "running");
    json_node_unref(ret);

    /* An error reply carries QEMU's class and description. */
    g_assert_cmpint(
        vg_qmp_execute(e.qemu->qmp, "no-such-command", NULL, NULL, VGT_ERR), ==,
        -EREMOTEIO);
    g_assert_nonnull(strstr(vgt_err.msg, "CommandNotFound"));
    g_assert_cmpint(vg_qmp_execute_json(e.qemu->qmp, "qom-get",
                                        "{\"path\": \"/nowhere\", "
                                        "\"property\": \"x\"}",
                                        NULL, VGT_ERR),
                    ==, -EREMOTEIO);
    g_assert_nonnull(strstr(vgt_err.msg, "DeviceNotFound"));
    g_assert_cmpint(
        vg_qmp_execute_json(e.qemu->qmp, "stop", "[1]", NULL, VGT_ERR), ==,
        -EINVAL);

    /* Events are queued and awaited by name. */
    VGT_OK(vg_qmp_execute(e.qemu->qmp, "stop", NULL, NULL, VGT_ERR));
    VGT_OK(vg_qmp_execute(e.qemu->qmp, "cont", NULL, NULL, VGT_ERR));
    VGT_OK(vg_qmp_wait_event(e.qemu->qmp, "RESUME", VGT_TIMEOUT_MS, &ret,
                             VGT_ERR));
    g_assert_cmpstr(
        json_object_get_string_member(json_node_get_object(ret), "event"), ==,
        "RESUME");
    json_node_unref(ret);
    VGT_OK(
        vg_qmp_wait_event(e.qemu->qmp, "STOP", VGT_TIMEOUT_MS, NULL, VGT_ERR));
    g_assert_cmpint(vg_qmp_wait_event(e.qemu->qmp, "STOP", 200, NULL, VGT_ERR),
                    ==, -ETIMEDOUT);

    VGT_OK(vg_qmp_hmp(e.qemu->qmp, "info pci", &out, VGT_ERR));
    g_assert_nonnull(strstr(out, "Host bridge"));
    g_free(out);
    env_stop(&e);
}

static void test_qemu_kill9(void)
{
    uint32_t l = 0;
    struct env e;

    env_start(&e);
    VGT_OK(vg_qtest_readl(e.qemu->qt, 0x100000, &l, VGT_ERR));
    VGT_OK(vg_qemu_kill9(e.qemu, VGT_ERR));
    g_assert_false(vg_proc_alive(&e.qemu->proc));
    g_assert_true(WIFSIGNALED(e.qemu->proc.status));
    g_assert_cmpint(WTERMSIG(e.qemu->proc.status), ==, SIGKILL);
    env_stop(&e);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qclient/memory", test_memory);
    g_test_add_func("/qclient/pci-config", test_pci_config);
    g_test_add_func("/qclient/qmp", test_qmp);
    g_test_add_func("/qclient/qemu-kill9", test_qemu_kill9);
    return g_test_run();
}
