/* Unit tests for qclient/vfio-trace.c: trace lines with and without
 * timestamps, the counts, and an event missing its argument. */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "qclient/vfio-trace.h"

static void test_counts(void)
{
    const char *text =
        "vfio_save_setup  (dev) data buffer size 1048576\n"
        "1234@1700000000.123456:vfio_save_complete_precopy_thread_start  x\n"
        "vfio_user_mig_data_read  size 1048576 ret 4096\n"
        "2026-11-24T10:39:39.227232Z vfio_save_complete_precopy_thread_end  "
        "(dev) ret 1\n"
        "vfio_user_mig_data_read  size 1048576 ret 512\n"
        "vfio_load_state  (dev) data 0xffffffffef100002\n"
        "vfio_load_state_device_buffer_incoming  (dev) idx 7\n"
        "multifd_send_thread_start 1\n"
        "qemu-system-x86_64: some other line\n";
    g_autofree char *copy = g_strdup(text);
    struct vg_error err = {0};
    struct vg_vfio_trace tr;

    g_assert_cmpint(vg_vfio_trace_parse(copy, &tr, &err), ==, 0);
    g_assert_cmpint(tr.data_buffer_size, ==, 1048576);
    g_assert_cmpuint(tr.save_threads, ==, 1);
    g_assert_cmpuint(tr.save_threads_ok, ==, 1);
    g_assert_cmpint(tr.thread_read, ==, 4096); /* 512 came after the end */
    g_assert_cmpint(tr.main_read, ==, 0);
    g_assert_cmpuint(tr.main_configs, ==, 1);
    g_assert_cmpuint(tr.buffers, ==, 1);
    g_assert_cmpint(tr.max_buffer_idx, ==, 7);
    g_assert_cmpuint(tr.send_channels, ==, 1);
    g_assert_cmpuint(tr.recv_channels, ==, 0);
}

static void test_missing_argument(void)
{
    g_autofree char *text = g_strdup("vfio_user_mig_data_read  size 4\n");
    struct vg_error err = {0};
    struct vg_vfio_trace tr;

    g_assert_cmpint(vg_vfio_trace_parse(text, &tr, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "vfio_user_mig_data_read"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vfio-trace/counts", test_counts);
    g_test_add_func("/vfio-trace/missing-argument", test_missing_argument);
    return g_test_run();
}
