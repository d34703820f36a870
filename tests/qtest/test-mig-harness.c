/*
 * test-mig-harness -- the migration pieces of qclient on their own:
 * a plain VM (no vGPU) migrates between two qtest QEMUs and its guest RAM
 * arrives, also over two multifd channels and when written through
 * vg_qemu_map_ram(); its VMs do not describe their migration stream
 * (suppress-vmdesc); vg_mig_poll() is bounded; vg_vgpu_attach() finds the
 * layout vg_vgpu_open() made and refuses an unconfigured device; the stats
 * file reader takes the server's format, including nulls, and waits
 * bounded.
 */
#include <errno.h>
#include <linux/pci_regs.h>

#include "mig-test.h"

#define PLAIN_ADDR ((uint64_t)32 << 20)
#define PLAIN_LEN  (1u << 20)

/* Two QEMUs without a vGPU in a fresh directory "vgmig-@tag-*": a source,
 * and a destination waiting for migrate-incoming. */
static void start_plain_pair(const char *tag, char **dir, struct vg_qemu **src,
                             struct vg_qemu **dst)
{
    struct vg_qemu_opts so = {.name = "qemu-src", .ram_mib = VGT_RAM_MIB};
    struct vg_qemu_opts dopt = {
        .name = "qemu-dst", .ram_mib = VGT_RAM_MIB, .incoming = "defer"};

    VGT_OK(vg_tmpdir_create(tag, dir, VGT_ERR));
    so.dir = dopt.dir = *dir;
    VGT_OK(vg_qemu_start(&so, src, VGT_ERR));
    VGT_OK(vg_qemu_start(&dopt, dst, VGT_ERR));
}

/* A VM without a vGPU: guest RAM written by qtest reaches the
 * destination, the source ends in postmigrate. */
static void test_plain_vm(void)
{
    g_autofree uint8_t *data = mt_dma_data();
    g_autofree uint8_t *back = g_malloc(PLAIN_LEN);
    struct vg_qemu *src = NULL, *dst = NULL;
    struct vg_mig_info info;
    g_autofree char *uri = NULL;
    char *dir = NULL;
    char state[VG_MIG_STATUS_MAX];

    start_plain_pair("mig-plain", &dir, &src, &dst);
    VGT_OK(vg_qtest_memwrite(src->qt, PLAIN_ADDR, data, PLAIN_LEN, VGT_ERR));
    VGT_OK(vg_mig_incoming(dst->qmp, &uri, VGT_ERR));
    g_assert_true(g_str_has_prefix(uri, "tcp:127.0.0.1:"));
    VGT_OK(vg_mig_start(src->qmp, uri, VGT_ERR));
    VGT_OK(vg_mig_wait_completed(src->qmp, MT_MIG_TIMEOUT_MS, NULL, NULL, &info,
                                 VGT_ERR));
    mt_log_info("plain VM", &info);
    g_assert_false(info.has_vfio);
    g_assert_cmpint(info.ram_transferred, >=, PLAIN_LEN);
    g_assert_cmpint(info.downtime_ms, >=, 0);
    g_assert_cmpint(info.total_time_ms, >=, info.downtime_ms);
    VGT_OK(vg_mig_wait_runstate(dst->qmp, "running", VGT_TIMEOUT_MS, VGT_ERR));
    VGT_OK(vg_mig_runstate(src->qmp, state, sizeof(state), VGT_ERR));
    g_assert_cmpstr(state, ==, "postmigrate");
    VGT_OK(vg_qtest_memread(dst->qt, PLAIN_ADDR, back, PLAIN_LEN, VGT_ERR));
    g_assert_true(memcmp(back, data, PLAIN_LEN) == 0);
    vg_qemu_free(dst);
    vg_qemu_free(src);
    VGT_OK(vg_tmpdir_remove(dir, VGT_ERR));
    g_free(dir);
}

/* Whether the stream a VM started with @extra saves to a file carries
 * QEMU's JSON description of its devices (the vmdesc after the last
 * device state: {..., "page_size": ..., "devices": [...]}). */
static bool saved_stream_described(const char *const *extra)
{
    struct vg_qemu_opts o = {
        .name = "qemu-src", .ram_mib = VGT_RAM_MIB, .extra_args = extra};
    struct vg_qemu *q = NULL;
    struct vg_mig_info info;
    g_autofree char *path = NULL, *uri = NULL, *data = NULL;
    char *dir = NULL;
    gsize len = 0;
    bool described;

    VGT_OK(vg_tmpdir_create("mig-vmdesc", &dir, VGT_ERR));
    o.dir = dir;
    VGT_OK(vg_qemu_start(&o, &q, VGT_ERR));
    path = g_build_filename(dir, "vm.stream", NULL);
    uri = g_strdup_printf("file:%s", path);
    VGT_OK(vg_mig_start(q->qmp, uri, VGT_ERR));
    VGT_OK(vg_mig_wait_completed(q->qmp, MT_MIG_TIMEOUT_MS, NULL, NULL, &info,
                                 VGT_ERR));
    g_assert_true(g_file_get_contents(path, &data, &len, NULL));
    g_assert_cmpuint(len, >, VGT_RAM_MIB);
    described = memmem(data, len, "\"page_size\": ", 13) &&
                memmem(data, len, "\"devices\": [", 12);
    vg_qemu_free(q);
    VGT_OK(vg_tmpdir_remove(dir, VGT_ERR));
    g_free(dir);
    return described;
}

/* The harness's VMs run with suppress-vmdesc=on: QEMU does not build the
 * description while the VM is stopped.  The same VM with it off does, so
 * the check can see one. */
static void test_no_vmdesc(void)
{
    static const char *const described[] = {"-machine", "suppress-vmdesc=off",
                                            NULL};

    g_assert_false(saved_stream_described(NULL));
    g_assert_true(saved_stream_described(described));
}

/* Guest RAM mapped with vg_qemu_map_ram() is what qtest reads and writes
 * at the same guest address (below 640 KiB and above 1 MiB the memfd
 * offset is the address), and what arrives on a destination over two
 * multifd channels. */
static void test_ram_map(void)
{
    g_autofree uint8_t *data = mt_dma_data();
    g_autofree uint8_t *back = g_malloc(PLAIN_LEN);
    struct vg_qemu *src = NULL, *dst = NULL;
    struct vg_ram_map sm, dm;
    struct vg_mig_info info;
    g_autofree char *uri = NULL;
    char *dir = NULL;

    start_plain_pair("mig-ram-map", &dir, &src, &dst);
    VGT_OK(vg_qemu_map_ram(src, &sm, VGT_ERR));
    g_assert_cmpuint(sm.size, ==, (uint64_t)VGT_RAM_MIB << 20);
    memcpy(sm.base + PLAIN_ADDR, data, PLAIN_LEN);
    VGT_OK(vg_qtest_memread(src->qt, PLAIN_ADDR, back, PLAIN_LEN, VGT_ERR));
    g_assert_true(memcmp(back, data, PLAIN_LEN) == 0);
    VGT_OK(vg_qtest_memwrite(src->qt, 4096, data, 4096, VGT_ERR));
    g_assert_true(memcmp(sm.base + 4096, data, 4096) == 0);
    VGT_OK(vg_mig_set_channels(src->qmp, 2, VGT_ERR));
    VGT_OK(vg_mig_set_channels(dst->qmp, 2, VGT_ERR));
    VGT_OK(vg_mig_incoming(dst->qmp, &uri, VGT_ERR));
    VGT_OK(vg_mig_start(src->qmp, uri, VGT_ERR));
    VGT_OK(vg_mig_wait_completed(src->qmp, MT_MIG_TIMEOUT_MS, NULL, NULL, &info,
                                 VGT_ERR));
    mt_log_info("RAM map, multifd", &info);
    VGT_OK(vg_mig_wait_runstate(dst->qmp, "running", VGT_TIMEOUT_MS, VGT_ERR));
    VGT_OK(vg_qemu_map_ram(dst, &dm, VGT_ERR));
    g_assert_true(memcmp(dm.base, sm.base, sm.size) == 0);
    vg_ram_unmap(&dm);
    vg_ram_unmap(&sm);
    g_assert_null(sm.base);
    vg_qemu_free(dst);
    vg_qemu_free(src);
    VGT_OK(vg_tmpdir_remove(dir, VGT_ERR));
    g_free(dir);
}

/* Without a migration, polling ends at its deadline with a clear error;
 * a callback can end it early or abort it. */
static int stop_now(const struct vg_mig_info *info, void *opaque,
                    struct vg_error *err)
{
    return *(int *)opaque;
}

static void test_poll_bounded(void)
{
    struct vg_error e = {0};
    struct vg_mig_info info;
    int64_t t0;
    int verdict;
    struct vgt t;

    vgt_start(&t, "mig-poll");
    t0 = vg_now_ms();
    g_assert_cmpint(vg_mig_poll(t.qemu->qmp, 200, NULL, NULL, &info, &e), ==,
                    -ETIMEDOUT);
    g_assert_cmpint(vg_now_ms() - t0, <, 5000);
    g_assert_nonnull(strstr(e.msg, "after 200 ms"));
    g_assert_cmpstr(info.status, ==, "");
    verdict = 1;
    VGT_OK(vg_mig_poll(t.qemu->qmp, 5000, stop_now, &verdict, &info, VGT_ERR));
    verdict = -EIO;
    g_assert_cmpint(
        vg_mig_poll(t.qemu->qmp, 5000, stop_now, &verdict, &info, &e), ==,
        -EIO);
    vgt_stop(&t);
}

/* vg_vgpu_attach() reads back what vg_vgpu_open() and the ring set-up
 * programmed, and refuses a device whose MSI-X is off. */
static void test_attach(void)
{
    struct vg_error e = {0};
    struct vg_vgpu a;
    uint16_t flags = 0;
    struct vgt t;

    vgt_start(&t, "mig-attach");
    VGT_OK(vg_vgpu_ring_init(&t.gpu, &t.ram, 128, VGT_ERR));
    vgt_wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_FENCE);
    VGT_OK(vg_vgpu_attach(t.qemu->qt, &a, VGT_ERR));
    g_assert_cmphex(a.regs_addr, ==, t.gpu.regs_addr);
    g_assert_cmphex(a.vram_addr, ==, t.gpu.vram_addr);
    g_assert_cmpuint(a.vram_size, ==, VGT_VRAM_SIZE);
    g_assert_cmphex(a.ring_addr, ==, t.gpu.ring_addr);
    g_assert_cmpuint(a.ring_entries, ==, 128);
    g_assert_cmpuint(a.tail, ==, 0);
    for (unsigned v = 0; v < VGPU_MSIX_VECTORS; v++) {
        g_assert_cmphex(a.msi_slot[v], ==, t.gpu.msi_slot[v]);
    }
    /* The attached handle drives the device: a fence and its message. */
    mt_fence(&a, 0x4141);
    VGT_OK(vg_pci_cfg_read16(t.qemu->qt, a.pci.devfn,
                             a.pci.msix_cap + PCI_MSIX_FLAGS, &flags, VGT_ERR));
    VGT_OK(vg_pci_cfg_write16(t.qemu->qt, a.pci.devfn,
                              a.pci.msix_cap + PCI_MSIX_FLAGS,
                              flags & ~PCI_MSIX_FLAGS_ENABLE, VGT_ERR));
    g_assert_cmpint(vg_vgpu_attach(t.qemu->qt, &a, &e), ==, -EPROTO);
    g_assert_nonnull(strstr(e.msg, "not configured"));
    vgt_stop(&t);
}

static void write_file(const char *path, const char *text)
{
    g_assert_true(g_file_set_contents(path, text, -1, NULL));
}

/* The server's stats format: checksums as hex strings or null,
 * device_stopcopy_ms null or a number. */
static void test_stats(void)
{
    g_autofree char *path = NULL;
    g_autofree char *s = NULL;
    struct vg_error e = {0};
    struct vg_stats st;
    int64_t v = 0;
    char *dir = NULL;

    VGT_OK(vg_tmpdir_create("mig-stats", &dir, VGT_ERR));
    path = g_build_filename(dir, "stats.json", NULL);
    write_file(path, "{\"state\": \"RUNNING\", \"bytes_sent\": 0, "
                     "\"device_stopcopy_ms\": null, \"vram_checksum\": null, "
                     "\"device_state_checksum\": null, \"last_error\": \"\"}");
    VGT_OK(vg_stats_read(path, &st, VGT_ERR));
    g_assert_cmpstr(st.state, ==, "RUNNING");
    g_assert_cmpint(st.bytes_sent, ==, 0);
    g_assert_cmpint(st.bytes_received, ==, -1);
    g_assert_cmpfloat(st.device_stopcopy_ms, <, 0);
    g_assert_cmpstr(st.vram_checksum, ==, "");
    vg_stats_clear(&st);

    write_file(path, "{\"state\": \"STOP\", \"bytes_sent\": 123456789012, "
                     "\"rounds\": 2, \"device_stopcopy_ms\": 12.5, "
                     "\"vram_checksum\": \"00ff00ff00ff00ff\", "
                     "\"device_state_checksum\": \"0123456789abcdef\", "
                     "\"last_error\": \"a \\\"quoted\\\" error\"}");
    VGT_OK(vg_stats_wait_state(path, "stop", 1000, &st, VGT_ERR));
    g_assert_cmpint(st.bytes_sent, ==, 123456789012ll);
    g_assert_cmpfloat(st.device_stopcopy_ms, ==, 12.5);
    g_assert_cmpstr(st.vram_checksum, ==, "00ff00ff00ff00ff");
    g_assert_cmpstr(st.device_state_checksum, ==, "0123456789abcdef");
    g_assert_cmpstr(st.last_error, ==, "a \"quoted\" error");
    VGT_OK(vg_stats_int(&st, "rounds", &v, VGT_ERR));
    g_assert_cmpint(v, ==, 2);
    g_assert_cmpint(vg_stats_int(&st, "nonesuch", &v, &e), ==, -ENOENT);
    s = vg_stats_str(&st, "rounds");
    g_assert_cmpstr(s, ==, "2");
    vg_stats_clear(&st);

    /* A half-written file is read again until the deadline. */
    write_file(path, "{\"state\": \"ST");
    g_assert_cmpint(vg_stats_wait_state(path, "stop", 200, &st, &e), ==,
                    -ETIMEDOUT);
    g_assert_nonnull(strstr(e.msg, "stats.json"));
    VGT_OK(vg_tmpdir_remove(dir, VGT_ERR));
    g_free(dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/harness/plain-vm", test_plain_vm);
    g_test_add_func("/mig/harness/ram-map", test_ram_map);
    g_test_add_func("/mig/harness/no-vmdesc", test_no_vmdesc);
    g_test_add_func("/mig/harness/poll-bounded", test_poll_bounded);
    g_test_add_func("/mig/harness/attach", test_attach);
    g_test_add_func("/mig/harness/stats", test_stats);
    return g_test_run();
}
