/*
 * test-vgpu-enum.c -- the vGPU is enumerated as vgpu-regs.h says: IDs,
 * class, BARs and MSI-X, seen through config space (qtest), QMP query-pci
 * and HMP "info pci".
 */
#include <glib.h>
#include <linux/pci_regs.h>

#include "vgpu-test.h"

static void test_config_space(void)
{
    struct vg_qtest *qt;
    struct vgt t;
    uint32_t v32 = 0;
    uint16_t v16 = 0;
    uint8_t v8 = 0, devfn;

    vgt_start(&t, "enum-cfg");
    qt = t.qemu->qt;
    devfn = t.gpu.pci.devfn;
    VGT_OK(vg_pci_cfg_read16(qt, devfn, PCI_VENDOR_ID, &v16, VGT_ERR));
    g_assert_cmphex(v16, ==, VGPU_PCI_VENDOR_ID);
    VGT_OK(vg_pci_cfg_read16(qt, devfn, PCI_DEVICE_ID, &v16, VGT_ERR));
    g_assert_cmphex(v16, ==, VGPU_PCI_DEVICE_ID);
    VGT_OK(
        vg_pci_cfg_read16(qt, devfn, PCI_SUBSYSTEM_VENDOR_ID, &v16, VGT_ERR));
    g_assert_cmphex(v16, ==, VGPU_PCI_SUBSYS_VENDOR);
    VGT_OK(vg_pci_cfg_read16(qt, devfn, PCI_SUBSYSTEM_ID, &v16, VGT_ERR));
    g_assert_cmphex(v16, ==, VGPU_PCI_SUBSYS_ID);
    VGT_OK(vg_pci_cfg_read8(qt, devfn, PCI_REVISION_ID, &v8, VGT_ERR));
    g_assert_cmphex(v8, ==, VGPU_PCI_REVISION);
    VGT_OK(vg_pci_cfg_read32(qt, devfn, PCI_CLASS_REVISION, &v32, VGT_ERR));
    g_assert_cmphex(v32 >> 8, ==, VGPU_PCI_CLASS);

    /* BARs: sized by vg_pci_find() at setup. */
    g_assert_cmphex(t.gpu.pci.bar[VGPU_BAR_REGS].size, ==, VGPU_BAR0_SIZE);
    g_assert_false(t.gpu.pci.bar[VGPU_BAR_REGS].io);
    g_assert_false(t.gpu.pci.bar[VGPU_BAR_REGS].is64);
    g_assert_cmphex(t.gpu.pci.bar[VGPU_BAR_VRAM].size, ==, VGT_VRAM_SIZE);
    g_assert_false(t.gpu.pci.bar[VGPU_BAR_VRAM].io);
    g_assert_true(t.gpu.pci.bar[VGPU_BAR_VRAM].is64);
    g_assert_true(t.gpu.pci.bar[VGPU_BAR_VRAM].prefetch);
    g_assert_cmphex(t.gpu.pci.bar[1].size, ==, 0);
    g_assert_cmphex(t.gpu.pci.bar[4].size, ==, 0);
    g_assert_cmphex(t.gpu.pci.bar[5].size, ==, 0);
    /* The assigned addresses are what config space now holds. */
    VGT_OK(vg_pci_cfg_read32(qt, devfn, PCI_BASE_ADDRESS_0, &v32, VGT_ERR));
    g_assert_cmphex(v32 & PCI_BASE_ADDRESS_MEM_MASK, ==, t.gpu.regs_addr);
    VGT_OK(vg_pci_cfg_read32(qt, devfn, PCI_BASE_ADDRESS_2, &v32, VGT_ERR));
    g_assert_cmphex(v32 & PCI_BASE_ADDRESS_MEM_MASK, ==,
                    (uint32_t)t.gpu.vram_addr);
    VGT_OK(vg_pci_cfg_read16(qt, devfn, PCI_COMMAND, &v16, VGT_ERR));
    g_assert_true(v16 & PCI_COMMAND_MEMORY);
    g_assert_true(v16 & PCI_COMMAND_MASTER);

    /* MSI-X */
    g_assert_cmpuint(t.gpu.pci.msix_cap, !=, 0);
    g_assert_cmpuint(t.gpu.pci.msix_entries, ==, VGPU_MSIX_VECTORS);
    g_assert_cmpuint(t.gpu.pci.msix_table_bar, ==, VGPU_BAR_REGS);
    g_assert_cmphex(t.gpu.pci.msix_table_off, ==, VGPU_MSIX_TABLE_OFFSET);
    g_assert_cmpuint(t.gpu.pci.msix_pba_bar, ==, VGPU_BAR_REGS);
    g_assert_cmphex(t.gpu.pci.msix_pba_off, ==, VGPU_MSIX_PBA_OFFSET);
    VGT_OK(vg_pci_cfg_read16(qt, devfn, t.gpu.pci.msix_cap + PCI_MSIX_FLAGS,
                             &v16, VGT_ERR));
    g_assert_true(v16 & PCI_MSIX_FLAGS_ENABLE);
    vgt_stop(&t);
}

/* The "regions" entry of BAR @bar in query-pci device @dev, or NULL. */
static JsonObject *find_region(JsonObject *dev, int64_t bar)
{
    JsonArray *regions = json_object_get_array_member(dev, "regions");
    JsonObject *r;
    guint i;

    for (i = 0; i < json_array_get_length(regions); i++) {
        r = json_array_get_object_element(regions, i);
        if (json_object_get_int_member(r, "bar") == bar) {
            return r;
        }
    }
    return NULL;
}

static void test_query_pci(void)
{
    JsonObject *dev = NULL, *d, *id, *r;
    JsonArray *buses, *devs;
    JsonNode *ret = NULL;
    struct vgt t;
    guint i, j;

    vgt_start(&t, "enum-qmp");
    VGT_OK(vg_qmp_execute(t.qemu->qmp, "query-pci", NULL, &ret, VGT_ERR));
    buses = json_node_get_array(ret);
    for (i = 0; i < json_array_get_length(buses); i++) {
        devs = json_object_get_array_member(
            json_array_get_object_element(buses, i), "devices");
        for (j = 0; j < json_array_get_length(devs); j++) {
            d = json_array_get_object_element(devs, j);
            if (!g_strcmp0(json_object_get_string_member_with_default(
                               d, "qdev_id", ""),
                           "vgpu0")) {
                dev = d;
            }
        }
    }
    g_assert_nonnull(dev);
    g_assert_cmpint(json_object_get_int_member(dev, "bus"), ==, 0);
    g_assert_cmpint(json_object_get_int_member(dev, "slot"), ==,
                    t.gpu.pci.devfn >> 3);
    g_assert_cmpint(json_object_get_int_member(dev, "function"), ==,
                    t.gpu.pci.devfn & 7);
    g_assert_cmphex(
        json_object_get_int_member(
            json_object_get_object_member(dev, "class_info"), "class"),
        ==, VGPU_PCI_CLASS >> 8);
    id = json_object_get_object_member(dev, "id");
    g_assert_cmphex(json_object_get_int_member(id, "vendor"), ==,
                    VGPU_PCI_VENDOR_ID);
    g_assert_cmphex(json_object_get_int_member(id, "device"), ==,
                    VGPU_PCI_DEVICE_ID);
    g_assert_cmphex(json_object_get_int_member(id, "subsystem-vendor"), ==,
                    VGPU_PCI_SUBSYS_VENDOR);
    g_assert_cmphex(json_object_get_int_member(id, "subsystem"), ==,
                    VGPU_PCI_SUBSYS_ID);

    r = find_region(dev, VGPU_BAR_REGS);
    g_assert_nonnull(r);
    g_assert_cmpstr(json_object_get_string_member(r, "type"), ==, "memory");
    g_assert_cmphex(json_object_get_int_member(r, "size"), ==, VGPU_BAR0_SIZE);
    g_assert_cmphex(json_object_get_int_member(r, "address"), ==,
                    t.gpu.regs_addr);
    g_assert_false(json_object_get_boolean_member(r, "mem_type_64"));
    r = find_region(dev, VGPU_BAR_VRAM);
    g_assert_nonnull(r);
    g_assert_cmpstr(json_object_get_string_member(r, "type"), ==, "memory");
    g_assert_cmphex(json_object_get_int_member(r, "size"), ==, VGT_VRAM_SIZE);
    g_assert_cmphex(json_object_get_int_member(r, "address"), ==,
                    t.gpu.vram_addr);
    g_assert_true(json_object_get_boolean_member(r, "mem_type_64"));
    g_assert_true(json_object_get_boolean_member(r, "prefetch"));
    g_assert_null(find_region(dev, 1));
    g_assert_null(find_region(dev, 4));
    json_node_unref(ret);
    vgt_stop(&t);
}

static void test_info_pci(void)
{
    char *out = NULL, *want;
    struct vgt t;

    vgt_start(&t, "enum-hmp");
    VGT_OK(vg_qmp_hmp(t.qemu->qmp, "info pci", &out, VGT_ERR));
    g_test_message("info pci:\n%s", out);
    want = g_strdup_printf("PCI device %04x:%04x", VGPU_PCI_VENDOR_ID,
                           VGPU_PCI_DEVICE_ID);
    g_assert_nonnull(strstr(out, want));
    g_free(want);
    g_assert_nonnull(strstr(out, "3D controller"));
    want = g_strdup_printf("PCI subsystem %04x:%04x", VGPU_PCI_SUBSYS_VENDOR,
                           VGPU_PCI_SUBSYS_ID);
    g_assert_nonnull(strstr(out, want));
    g_free(want);
    want = g_strdup_printf("BAR%d: 32 bit memory at 0x%08" G_GINT64_MODIFIER
                           "x [0x%08" G_GINT64_MODIFIER "x]",
                           VGPU_BAR_REGS, t.gpu.regs_addr,
                           t.gpu.regs_addr + VGPU_BAR0_SIZE - 1);
    g_assert_nonnull(strstr(out, want));
    g_free(want);
    want = g_strdup_printf(
        "BAR%d: 64 bit prefetchable memory at 0x%08" G_GINT64_MODIFIER
        "x [0x%08" G_GINT64_MODIFIER "x]",
        VGPU_BAR_VRAM, t.gpu.vram_addr, t.gpu.vram_addr + VGT_VRAM_SIZE - 1);
    g_assert_nonnull(strstr(out, want));
    g_free(want);
    g_assert_nonnull(strstr(out, "id \"vgpu0\""));
    g_free(out);
    vgt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vgpu/enum/config-space", test_config_space);
    g_test_add_func("/vgpu/enum/query-pci", test_query_pci);
    g_test_add_func("/vgpu/enum/info-pci", test_info_pci);
    return g_test_run();
}
