/* Unit tests for qclient/vfio-trace.c: trace lines with and without
 * timestamps, the counts, an event missing its argument, and the path
 * checks (pre-copy over multifd, reads sent ahead by the save threads,
 * everything on the main channel). */
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
        "multifd_send_sync_main packet num 3\n"
        "multifd_send_sync_main_wait channel 0\n"
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
    g_assert_cmpuint(tr.channel_syncs, ==, 1); /* not its _wait */
}

/* Populate threads of a destination's writable view (patch 0080, their
 * events as patch 0094 left them): two that did all of it, one stopped
 * short; and of its data area (0085), counted apart. */
static void test_vram_populated(void)
{
    g_autofree char *text = g_strdup(
        "vfio_user_mig_shm_populated  size 0x8000000 populated 0x8000000 "
        "in 12 ms\n"
        "vfio_user_mig_vram_populated  size 0x10000000 populated 0x10000000 "
        "in 61 ms\n"
        "vfio_user_mig_vram_populated  size 0x10000000 populated 0x200000 "
        "in 1 ms\n"
        "vfio_user_mig_vram_populated  size 0x10000000 populated 0x10000000 "
        "in 3 ms\n");
    g_autofree char *bad = g_strdup("vfio_user_mig_vram_populated  size 0x4 "
                                    "in 1 ms\n");
    struct vg_error err = {0};
    struct vg_vfio_trace tr;

    g_assert_cmpint(vg_vfio_trace_parse(text, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.vram_populates, ==, 3);
    g_assert_cmpuint(tr.vram_populates_short, ==, 1);
    g_assert_cmpuint(tr.shm_populates, ==, 1);
    g_assert_cmpuint(tr.shm_populates_short, ==, 0);
    g_assert_cmpint(vg_vfio_trace_parse(bad, &tr, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "'populated '"));
}

static void test_missing_argument(void)
{
    g_autofree char *text = g_strdup("vfio_user_mig_data_read  size 4\n");
    struct vg_error err = {0};
    struct vg_vfio_trace tr;

    g_assert_cmpint(vg_vfio_trace_parse(text, &tr, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "vfio_user_mig_data_read"));
}

/* A migration with pre-copy over multifd: 3 MiB in pre-copy, 1 MiB + 100
 * bytes in stop-copy, buffers of 1 MiB (packets 0-2 pre-copy, 3-4
 * stop-copy, 5 the config space), 2 channels.  The reply to the second
 * stop-copy read says that it ends the device's data: no read follows it
 * (patch 0073). */
static const char *const mf_src =
    "vfio_save_setup  (dev) data buffer size 1048576\n"
    "multifd_send_thread_start 0\nmultifd_send_thread_start 1\n"
    "vfio_multifd_precopy_setup  (dev) idstr 0000:00:04.0/vfio instance 0 "
    "read size 1048576\n"
    "vfio_multifd_save_precopy_block  (dev) idx 0 data size 1048576\n"
    "vfio_multifd_save_precopy_block  (dev) idx 1 data size 1048576\n"
    "vfio_multifd_save_precopy_block  (dev) idx 2 data size 1048576\n"
    "vfio_save_complete_precopy_thread_start  (dev) x\n"
    "vfio_multifd_stopcopy_read_size  (dev) read size 1048576\n"
    "vfio_user_mig_data_read_lend  size 1048576 ret 1048576 slot 2\n"
    "vfio_user_mig_data_read_ahead  size 1048576\n"
    "vfio_user_mig_data_read  size 1048576 ret 100\n"
    "vfio_multifd_stopcopy_data_ended  (dev) the device said buffer 4 ends "
    "its data\n"
    "vfio_user_mig_data_lend_release  slot 2\n"
    "vfio_save_complete_precopy_thread_end  (dev) ret 1\n";
static const char *const mf_dst =
    "multifd_recv_thread_start 0\nmultifd_recv_thread_start 1\n"
    "vfio_multifd_load_precopy_start  (dev)\n"
    "vfio_load_bufs_thread_start  (dev)\n"
    "vfio_user_mig_data_write_buf  size 1048576 ret 0 slot 2\n"
    "vfio_load_state_device_buffer_incoming  (dev) idx 0\n"
    "vfio_user_mig_data_write_buf  size 1048576 ret -105 slot 4294967295\n"
    "vfio_load_state_device_buffer_incoming  (dev) idx 1\n"
    "vfio_load_state_device_buffer_incoming  (dev) idx 2\n"
    "vfio_load_state_device_buffer_incoming  (dev) idx 3\n"
    "vfio_load_state_device_buffer_incoming  (dev) idx 4\n"
    "vfio_load_state_device_buffer_incoming  (dev) idx 5\n"
    "vfio_user_mig_data_write  size 3145728 ret 3145728\n"
    "vfio_user_mig_data_write  size 1048676 ret 1048676\n"
    "vfio_user_mig_data_write_behind_done  slot 0 ret 3145728\n"
    "vfio_user_mig_data_write_behind_done  slot 1 ret 1048676\n"
    "vfio_load_bufs_thread_end  (dev)\n";

static void parse_both(struct vg_vfio_trace *src, struct vg_vfio_trace *dst)
{
    g_autofree char *s = g_strdup(mf_src), *d = g_strdup(mf_dst);
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(s, src, &err), ==, 0);
    g_assert_cmpint(vg_vfio_trace_parse(d, dst, &err), ==, 0);
}

/* The path of mf_src and mf_dst's migration. */
static const struct vg_vfio_path mf_path = {.channels = 2,
                                            .multifd = true,
                                            .multifd_precopy = true,
                                            .precopy = 3 << 20,
                                            .stopcopy = (1 << 20) + 100,
                                            .data_shm = true};

static void test_check_multifd_precopy(void)
{
    struct vg_vfio_path want = mf_path;
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};

    parse_both(&src, &dst);
    g_assert_cmpuint(src.precopy_setups, ==, 1);
    g_assert_cmpint(src.precopy_read_size, ==, 1 << 20);
    g_assert_cmpuint(src.precopy_buffers, ==, 3);
    g_assert_cmpint(src.precopy_read, ==, 3 << 20);
    g_assert_cmpuint(dst.precopy_loads, ==, 1);
    g_assert_cmpuint(src.thread_read_aheads, ==, 1);
    g_assert_cmpuint(src.thread_data_ends, ==, 1);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);

    /* No pre-copy read ahead in this trace; the save thread's one. */
    g_assert_cmpuint(src.aheads_in_flight_max, ==, 1);

    /* A save thread that read without sending the next read ahead... */
    src.thread_read_aheads = 0;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "reads sent ahead is 1, expected >= 2"));
    src.thread_read_aheads = 1;

    /* ... or that went on reading past the end its device had named (a
     * QEMU without patch 0073 reads until a read returns nothing)... */
    src.thread_data_ends = 0;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(
        strstr(err.msg, "told the data ended is 0, expected == 1"));
    src.thread_data_ends = 1;

    /* ... nor stop-copy reads smaller than pre-copy's (patch 0048). */
    g_assert_cmpint(src.stopcopy_read_size, ==, 1 << 20);
    src.stopcopy_read_size = 4096;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "stop-copy read size is 4096"));
    src.stopcopy_read_size = 1 << 20;

    /* The same migration does not show pre-copy on the main channel... */
    want.multifd_precopy = false;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "source multifd pre-copy setups is 1"));
    /* ... nor a pre-copy byte count it did not send. */
    want.multifd_precopy = true;
    want.precopy += 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "source multifd pre-copy bytes"));
    want.precopy -= 1;
    /* Pre-copy pieces smaller than the stop-copy's are not patch 0022's. */
    src.precopy_read_size = 4096;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "source multifd pre-copy read size"));
}

/* The log of guest writes to BAR2 stops after the source's downtime (patch
 * 0051): a stop inside it is reported, one after it is not. */
/* Two reads sent ahead in pre-copy, each taken by the next read in
 * order, then one: at most two in flight; a new migration starts over. */
static void test_aheads_in_flight(void)
{
    g_autofree char *t = g_strdup(
        "vfio_save_setup  (dev) data buffer size 4194304\n"
        "vfio_user_mig_data_read_lend  size 4194304 ret 4194304 slot 0\n"
        "vfio_user_mig_data_read_ahead  size 4194304\n"
        "vfio_user_mig_data_read_ahead  size 4194304\n"
        "vfio_user_mig_data_read_lend  size 4194304 ret 4194304 slot 1\n"
        "vfio_user_mig_data_read_ahead  size 4194304\n"
        "vfio_user_mig_data_read_lend  size 4194304 ret 4194304 slot 2\n"
        "vfio_user_mig_data_read_lend  size 4194304 ret 0 slot 3\n"
        "vfio_save_setup  (dev) data buffer size 4194304\n"
        "vfio_user_mig_data_read_ahead  size 4194304\n");
    struct vg_vfio_trace tr;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(t, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.aheads_in_flight_max, ==, 2);
}

static void test_check_region_log_stop(void)
{
    const char *const in = "2026-11-26T17:00:00.000001Z "
                           "vmstate_downtime_checkpoint src-downtime-start\n"
                           "vfio_user_region_log  region 2 logging 0\n"
                           "vmstate_downtime_checkpoint src-downtime-end\n";
    const char *const after = "vfio_user_region_log  region 2 logging 1\n"
                              "vmstate_downtime_checkpoint src-downtime-start\n"
                              "vmstate_downtime_checkpoint src-vm-stopped\n"
                              "vmstate_downtime_checkpoint src-downtime-end\n"
                              "vfio_user_region_log  region 2 logging 0\n";
    g_autofree char *t1 = g_strdup(in), *t2 = g_strdup(after);
    struct vg_vfio_trace src, dst, tr;
    struct vg_error err = {0};

    parse_both(&src, &dst);
    g_assert_cmpint(vg_vfio_trace_parse(t1, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.region_log_stops, ==, 1);
    g_assert_cmpuint(tr.region_log_stops_in_downtime, ==, 1);
    src.region_log_stops = tr.region_log_stops;
    src.region_log_stops_in_downtime = tr.region_log_stops_in_downtime;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &mf_path, &err), ==,
                    -EPROTO);
    g_assert_nonnull(
        strstr(err.msg, "BAR write logs stopped inside the downtime is 1"));

    g_assert_cmpint(vg_vfio_trace_parse(t2, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.region_log_stops, ==, 1); /* not the start */
    g_assert_cmpuint(tr.region_log_stops_in_downtime, ==, 0);
    src.region_log_stops_in_downtime = 0;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &mf_path, &err), ==, 0);
}

/* The DMA logging reports asked for with STOP_COPY (patch 0062): the
 * downtime's sync takes them; a query sent to the server inside the
 * downtime fails the check, one in pre-copy does not. */
static void test_check_dma_reports(void)
{
    const char *const ahead =
        "vfio_user_dma_report  iova 0x0 length 0xc0000 taken from a report "
        "asked for ahead 0\n"
        "vmstate_downtime_checkpoint src-downtime-start\n"
        "vfio_user_dma_report_ahead  iova 0x0 length 0xc0000\n"
        "vfio_user_dma_report_ahead  iova 0x100000 length 0xff00000\n"
        "vfio_user_dma_report_wait  iova 0x0 length 0xc0000 ret 0\n"
        "vfio_user_dma_report  iova 0x0 length 0xc0000 taken from a report "
        "asked for ahead 1\n"
        "vfio_user_dma_report  iova 0x100000 length 0xff00000 taken from a "
        "report asked for ahead 1\n"
        "vmstate_downtime_checkpoint src-downtime-end\n";
    const char *const asked =
        "vmstate_downtime_checkpoint src-downtime-start\n"
        "vfio_user_dma_report  iova 0x0 length 0xc0000 taken from a report "
        "asked for ahead 0\n"
        "vmstate_downtime_checkpoint src-downtime-end\n";
    g_autofree char *t1 = g_strdup(ahead), *t2 = g_strdup(asked);
    g_autofree char *t3 = g_strdup("vfio_user_dma_report  iova 0x0\n");
    struct vg_vfio_trace src, dst, tr;
    struct vg_error err = {0};

    parse_both(&src, &dst);
    g_assert_cmpint(vg_vfio_trace_parse(t1, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.dma_reports_ahead, ==, 2);
    g_assert_cmpuint(tr.dma_reports_taken, ==, 2);
    g_assert_cmpuint(tr.dma_reports_asked_in_downtime, ==, 0);
    src.dma_reports_asked_in_downtime = tr.dma_reports_asked_in_downtime;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &mf_path, &err), ==, 0);

    g_assert_cmpint(vg_vfio_trace_parse(t2, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.dma_reports_taken, ==, 0);
    g_assert_cmpuint(tr.dma_reports_asked_in_downtime, ==, 1);
    src.dma_reports_asked_in_downtime = tr.dma_reports_asked_in_downtime;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &mf_path, &err), ==,
                    -EPROTO);
    g_assert_nonnull(strstr(
        err.msg, "source DMA logging reports asked inside the downtime is 1"));

    g_assert_cmpint(vg_vfio_trace_parse(t3, &tr, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "'ahead '"));
}

/* A source's main-channel migration of one device: 4096 bytes of
 * pre-copy, 512 of stop-copy (want {.precopy = 4096, .stopcopy = 512}). */
#define MAIN_CHANNEL_SAVE                                                      \
    "vfio_save_block  (dev0) data_size 4096\n"                                 \
    "vfio_save_complete_precopy_start  (dev0)\n"                               \
    "vfio_save_block  (dev0) data_size 512\n"                                  \
    "vfio_user_mig_data_read  size 1048576 ret 512\n"                          \
    "vfio_save_complete_precopy  (dev0) ret 0\n"

/* The config space sent early (patch 0058): the destination's early load
 * may map BARs, its final load at the switchover may not; the two loads
 * of two devices are told apart, and the counts must agree. */
static void test_check_early_config(void)
{
    const char *const early =
        "vfio_load_early_config  (dev0)\n"
        "vfio_load_device_config_state_start  (dev0)\n"
        "vfio_user_dma_map  iova 0x1000000000 size 0x80000000 off 0x0\n"
        "vfio_load_device_config_state_end  (dev0)\n"
        "vfio_load_early_config  (dev1)\n"
        "vfio_load_device_config_state_start  (dev1)\n"
        "vfio_user_dma_map  iova 0x1080000000 size 0x80000000 off 0x0\n"
        "vfio_load_device_config_state_end  (dev1)\n"
        "vfio_user_dma_map  iova 0x0 size 0xc0000 off 0x0\n";
    const char *const final_ok = "vfio_load_device_config_state_start  (dev1)\n"
                                 "vfio_load_device_config_state_end  (dev1)\n"
                                 "vfio_load_device_config_state_start  (dev0)\n"
                                 "vfio_load_device_config_state_end  (dev0)\n";
    const char *const final_maps =
        "vfio_load_device_config_state_start  (dev0)\n"
        "vfio_user_dma_map  iova 0x1000000000 size 0x80000000 off 0x0\n"
        "vfio_load_device_config_state_end  (dev0)\n";
    g_autofree char *good = g_strconcat(early, final_ok, NULL);
    g_autofree char *bad = g_strconcat(early, final_maps, NULL);
    g_autofree char *s =
        g_strdup("vfio_save_early_config  (dev0)\n"
                 "vfio_save_early_config  (dev1)\n" MAIN_CHANNEL_SAVE);
    struct vg_vfio_path want = {.precopy = 4096, .stopcopy = 512};
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(s, &src, &err), ==, 0);
    g_assert_cmpuint(src.early_configs, ==, 2);
    g_assert_cmpint(vg_vfio_trace_parse(good, &dst, &err), ==, 0);
    g_assert_cmpuint(dst.early_configs, ==, 2);
    g_assert_cmpuint(dst.switchover_config_maps, ==, 0);
    dst.main_configs = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);

    g_assert_cmpint(vg_vfio_trace_parse(bad, &dst, &err), ==, 0);
    g_assert_cmpuint(dst.switchover_config_maps, ==, 1);
    dst.main_configs = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(
        err.msg, "destination DMA maps in the switchover's config loads is 1"));

    /* A destination that did not load what the source sent early. */
    g_assert_cmpint(vg_vfio_trace_parse(final_ok, &dst, &err), ==, 0);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "destination early config loads is 0"));
}

/* A final config space unchanged since the early one (patch 0059): sent
 * as such only after an early one, on the main channel as its config,
 * and taken as sent by the destination. */
static void test_check_config_unchanged(void)
{
    const char *const src_text =
        "vfio_save_early_config  (dev0)\n" MAIN_CHANNEL_SAVE
        "vfio_save_config_unchanged  (dev0)\n";
    const char *const dst_text =
        "vfio_load_early_config  (dev0)\n"
        "vfio_load_device_config_state_start  (dev0)\n"
        "vfio_load_device_config_state_end  (dev0)\n"
        "vfio_load_state  (dev0) data 0xffffffffef10000a\n"
        "vfio_load_config_unchanged  (dev0)\n";
    struct vg_vfio_path want = {.precopy = 4096, .stopcopy = 512};
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(src_text, &src, &err), ==, 0);
    g_assert_cmpuint(src.configs_unchanged, ==, 1);
    g_assert_cmpint(vg_vfio_trace_parse(dst_text, &dst, &err), ==, 0);
    g_assert_cmpuint(dst.configs_unchanged, ==, 1);
    g_assert_cmpuint(dst.main_configs, ==, 1);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);

    /* The destination loaded the config space again after all. */
    dst.configs_unchanged = 0;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(
        strstr(err.msg, "destination final configs unchanged is 0"));

    /* Unchanged without an early config to compare with. */
    src.early_configs = dst.early_configs = 0;
    dst.configs_unchanged = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "source final configs unchanged is 1"));
}

/* Device state changes sent without waiting (patch 0060): all devices
 * to P2P, every reply, then all to STOP_COPY; a device sent STOP_COPY
 * while another's P2P change is in flight is counted, and so is a change
 * never waited for. */
static void test_state_changes(void)
{
    const char *const good = "vfio_user_mig_state_send  (dev1) state 7\n"
                             "vfio_user_mig_state_send  (dev0) state 7\n"
                             "vfio_user_mig_state_wait  (dev1) ret 0\n"
                             "vfio_user_mig_state_wait  (dev0) ret 0\n"
                             "vfio_user_mig_state_send  (dev1) state 3\n"
                             "vfio_user_mig_state_send  (dev0) state 3\n"
                             "vfio_user_mig_state_wait  (dev1) ret 0\n"
                             "vfio_user_mig_state_wait  (dev0) ret 0\n";
    const char *const early = "vfio_user_mig_state_send  (dev1) state 7\n"
                              "vfio_user_mig_state_send  (dev0) state 7\n"
                              "vfio_user_mig_state_wait  (dev1) ret 0\n"
                              "vfio_user_mig_state_send  (dev1) state 3\n"
                              "vfio_user_mig_state_wait  (dev0) ret 0\n"
                              "vfio_user_mig_state_send  (dev0) state 3\n";
    g_autofree char *src_text = g_strconcat(good, MAIN_CHANNEL_SAVE, NULL);
    struct vg_vfio_path want = {.precopy = 4096, .stopcopy = 512};
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(src_text, &src, &err), ==, 0);
    g_assert_cmpuint(src.state_sends, ==, 4);
    g_assert_cmpuint(src.state_waits, ==, 4);
    g_assert_cmpuint(src.state_in_flight_max, ==, 2);
    g_assert_cmpuint(src.state_p2p_left_early, ==, 0);

    g_assert_cmpint(vg_vfio_trace_parse(src_text, &dst, &err), ==, 0);
    dst.main_configs = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);

    g_assert_cmpint(vg_vfio_trace_parse(early, &dst, &err), ==, 0);
    g_assert_cmpuint(dst.state_p2p_left_early, ==, 1);
    g_assert_cmpuint(dst.state_waits, ==, 2);
    dst.main_configs = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(
        strstr(err.msg, "destination state changes waited for is 2"));
    dst.state_waits = dst.state_sends;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(
        strstr(err.msg, "destination devices out of P2P early is 1"));

    /* A device name that does not close is refused, naming the event. */
    g_assert_cmpint(vg_vfio_trace_parse("vfio_user_mig_state_send  (dev0 "
                                        "state 7\n",
                                        &src, &err),
                    ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "vfio_user_mig_state_send"));
}

/* A VM with one device (patch 0088): its prepare callback skips the P2P
 * state and the one change sent is the final state; with two devices
 * nothing is skipped. */
static void test_state_change_alone(void)
{
    const char *const alone =
        "vfio_vmstate_change_prepare_alone  (dev0) the only device: no P2P "
        "state\n"
        "vfio_user_mig_state_send  (dev0) state 3\n"
        "vfio_user_mig_state_wait  (dev0) ret 0\n";
    const char *const two = "vfio_user_mig_state_send  (dev1) state 7\n"
                            "vfio_user_mig_state_send  (dev0) state 7\n"
                            "vfio_user_mig_state_wait  (dev1) ret 0\n"
                            "vfio_user_mig_state_wait  (dev0) ret 0\n";
    struct vg_vfio_trace tr;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(alone, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.p2p_skipped, ==, 1);
    g_assert_cmpuint(tr.state_sends, ==, 1);
    g_assert_cmpuint(tr.state_waits, ==, 1);
    g_assert_cmpuint(tr.state_p2p_left_early, ==, 0);

    g_assert_cmpint(vg_vfio_trace_parse(two, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.p2p_skipped, ==, 0);
    g_assert_cmpuint(tr.state_sends, ==, 2);
}

/* The downtime to the microsecond from the lines' timestamps, in both
 * prefixes, across midnight; -1 without them. */
static void test_downtime(void)
{
    static const struct {
        const char *text;
        double ms;
    } cases[] = {
        {"2026-11-27T03:00:17.011221Z vmstate_downtime_checkpoint "
         "src-downtime-start\n"
         "2026-11-27T03:00:17.011455Z vmstate_downtime_checkpoint "
         "src-vm-stopped\n"
         "2026-11-27T03:00:17.015105Z vmstate_downtime_checkpoint "
         "src-downtime-end\n",
         3.884},
        {"4242@1764212417.500000:vmstate_downtime_checkpoint "
         "src-downtime-start\n"
         "4242@1764212417.505250:vmstate_downtime_checkpoint "
         "src-downtime-end\n",
         5.25},
        {"2026-11-27T23:59:59.999000Z vmstate_downtime_checkpoint "
         "src-downtime-start\n"
         "2026-11-28T00:00:00.001500Z vmstate_downtime_checkpoint "
         "src-downtime-end\n",
         2.5},
        {"vmstate_downtime_checkpoint src-downtime-start\n"
         "vmstate_downtime_checkpoint src-downtime-end\n",
         -1},
        {"2026-11-27T03:00:17.011221Z vmstate_downtime_checkpoint "
         "src-downtime-start\n",
         -1},
    };
    struct vg_vfio_trace tr;
    struct vg_error err = {0};

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *t = g_strdup(cases[i].text);

        g_assert_cmpint(vg_vfio_trace_parse(t, &tr, &err), ==, 0);
        g_assert_cmpfloat_with_epsilon(tr.downtime_ms, cases[i].ms, 1e-3);
    }
}

/* Each downtime checkpoint of a source's and a destination's trace (one
 * clock, across midnight) after the source's start; -1 for one neither
 * has, and for all without the source's start. */
static void test_downtime_phases(void)
{
    g_autofree char *src_text =
        g_strdup("2026-11-27T23:59:59.998000Z vmstate_downtime_checkpoint "
                 "src-downtime-start\n"
                 "2026-11-27T23:59:59.998500Z vmstate_downtime_checkpoint "
                 "src-vm-stopped\n"
                 "2026-11-27T23:59:59.999750Z vmstate_downtime_checkpoint "
                 "src-iterable-saved\n"
                 "2026-11-28T00:00:00.004000Z vmstate_downtime_checkpoint "
                 "src-downtime-end\n");
    g_autofree char *dst_text =
        g_strdup("2026-11-28T00:00:00.001000Z vmstate_downtime_checkpoint "
                 "dst-precopy-loadvm-completed\n"
                 "2026-11-28T00:00:00.001100Z vmstate_downtime_checkpoint "
                 "dst-precopy-bh-enter\n"
                 "2026-11-28T00:00:00.003250Z vmstate_downtime_checkpoint "
                 "dst-precopy-bh-vm-started\n");
    static const double want[VG_DOWNTIME_POINTS] = {0,   0.5, 1.75, -1,
                                                    3.0, -1,  5.25, 6.0};
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};
    double ms[VG_DOWNTIME_POINTS];

    g_assert_cmpint(vg_vfio_trace_parse(src_text, &src, &err), ==, 0);
    g_assert_cmpint(vg_vfio_trace_parse(dst_text, &dst, &err), ==, 0);
    vg_downtime_phases(&src, &dst, ms);
    for (unsigned i = 0; i < VG_DOWNTIME_POINTS; i++) {
        g_test_message("%s: %.3f ms", vg_downtime_points[i], ms[i]);
        g_assert_cmpfloat_with_epsilon(ms[i], want[i], 1e-3);
    }
    vg_downtime_phases(&dst, &src, ms); /* no start in the first */
    for (unsigned i = 0; i < VG_DOWNTIME_POINTS; i++) {
        g_assert_cmpfloat(ms[i], ==, -1);
    }
}

/* The initial-data counts of @from's trace into @to. */
static void copy_init_data(struct vg_vfio_trace *to,
                           const struct vg_vfio_trace *from)
{
    to->init_data_counts = from->init_data_counts;
    to->init_data_packets = from->init_data_packets;
    to->init_data_waits = from->init_data_waits;
    to->init_data_approvals = from->init_data_approvals;
    to->init_data_unacked = from->init_data_unacked;
    to->init_data_approved = from->init_data_approved;
}

/* Parse @text as the destination's trace into @dst (its initial-data
 * counts only) and check it against @src: 0, or -EPROTO with @msg in the
 * error. */
static void check_init_data(const struct vg_vfio_trace *src,
                            struct vg_vfio_trace *dst, const char *text,
                            const char *msg)
{
    struct vg_vfio_trace tr;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(text, &tr, &err), ==, 0);
    copy_init_data(dst, &tr);
    g_assert_cmpint(vg_vfio_trace_check(src, dst, &mf_path, &err), ==,
                    msg ? -EPROTO : 0);
    if (msg) {
        g_assert_nonnull(strstr(err.msg, msg));
    }
}

/* Under switchover-ack the destination approves once it has loaded the
 * initial data's packets (patch 0052), from its load thread once the
 * device has acknowledged the writes of all of them (0064): every count
 * must be followed by an approval, with no byte written behind still
 * unacknowledged at it. */
static void test_check_init_data(void)
{
    const char *const block = "vfio_multifd_save_precopy_block  (dev) idx 0 "
                              "data size 4096\n";
    const char *const s = "vfio_multifd_init_data_queued  (dev) initial data "
                          "in 65 packets\n";
    const char *const early = "vfio_multifd_load_init_data_queued  (dev) "
                              "initial data in 65 packets, loaded 0\n";
    const char *const late = "vfio_multifd_load_init_data_queued  (dev) "
                             "initial data in 65 packets, loaded 1\n";
    const char *const loaded = "vfio_multifd_init_data_loaded  (dev) "
                               "initial data loaded at packet 65\n";
    const char *const approved = "vfio_multifd_init_data_approved  (dev) "
                                 "ret 0\n";
    g_autofree char *t1 = g_strconcat(block, s, block, NULL);
    g_autofree char *t2 = g_strdup(early);
    g_autofree char *t3 = g_strconcat(early, loaded, approved, NULL);
    const char *const write = "vfio_user_mig_data_write  size 4096 ret 4096\n";
    const char *const acked = "vfio_user_mig_data_write_behind_done  slot 2 "
                              "ret 4096\n";
    g_autofree char *t5 = g_strconcat(early, loaded, NULL);
    g_autofree char *t4 = g_strdup(late);
    g_autofree char *t6 = g_strconcat(late, loaded, approved, NULL);
    g_autofree char *t7 =
        g_strconcat(write, early, loaded, acked, approved, NULL);
    g_autofree char *t8 =
        g_strconcat(write, early, acked, loaded, approved, NULL);
    struct vg_vfio_trace src, dst, tr;
    struct vg_error err = {0};

    parse_both(&src, &dst);
    g_assert_cmpint(vg_vfio_trace_parse(t1, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.init_data_counts, ==, 1);
    g_assert_cmpint(tr.init_data_packets, ==, 65);
    /* The bytes queued when the count was put, not after it (0057). */
    g_assert_cmpint(tr.init_data_bytes, ==, 4096);
    copy_init_data(&src, &tr);

    /* The count came before its packets and no approval followed... */
    g_assert_cmpint(vg_vfio_trace_parse(t2, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.init_data_waits, ==, 1);
    check_init_data(&src, &dst, t2,
                    "approvals after loading the initial data is 0, "
                    "expected == 1");
    /* ... one did ... */
    g_assert_cmpint(vg_vfio_trace_parse(t3, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.init_data_approvals, ==, 1);
    g_assert_cmpuint(tr.init_data_approved, ==, 1);
    check_init_data(&src, &dst, t3, NULL);
    /* ... but not if the main loop never approved after the load thread
     * (0056: the load thread no longer takes the BQL itself) ... */
    check_init_data(&src, &dst, t5,
                    "approvals made in the main loop is 0, expected == 1");
    /* Packets loaded when the count came: the load thread approves all
     * the same (0064), not the main thread at once. */
    g_assert_cmpint(vg_vfio_trace_parse(t4, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.init_data_waits, ==, 0);
    check_init_data(&src, &dst, t4,
                    "approvals after loading the initial data is 0, "
                    "expected == 1");
    check_init_data(&src, &dst, t6, NULL);
    /* An approval while a write was still in flight at the server... */
    g_assert_cmpint(vg_vfio_trace_parse(t7, &tr, &err), ==, 0);
    g_assert_cmpint(tr.init_data_unacked, ==, 4096);
    check_init_data(&src, &dst, t7,
                    "bytes unacknowledged at an approval is 4096, "
                    "expected == 0");
    /* ... and once it was acknowledged. */
    g_assert_cmpint(vg_vfio_trace_parse(t8, &tr, &err), ==, 0);
    g_assert_cmpint(tr.init_data_unacked, ==, 0);
    check_init_data(&src, &dst, t8, NULL);
    /* A destination that got no count while the source sent one. */
    dst.init_data_counts = 0;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &mf_path, &err), ==,
                    -EPROTO);
    g_assert_nonnull(strstr(err.msg, "initial data counts is 0"));
}

/* One pre-copy round of a source: threshold 3000000, an exact pending size
 * of @pending, two sections returning @ret1 and @ret2 (none: "") and, if
 * @wait, a wait for the approval that timed out. */
static char *round_text(unsigned pending, const char *ret1, const char *ret2,
                        bool wait)
{
    return g_strdup_printf(
        "migrate_transferred transferred 1000 time_spent 100 bandwidth 10 "
        "switchover_bw 0 max_size 3000000\n"
        "migrate_pending_estimate estimate pending size 0 (pre = 0 post=0)\n"
        "migration_bitmap_sync_start \n"
        "migrate_pending_exact exact pending size %u (pre = %u post=0)\n"
        "savevm_state_iterate \n%s%s%s%s%s",
        pending, pending,
        *ret1 ? "savevm_section_end ram, section_id 2 -> " : "", ret1,
        *ret2 ? "savevm_section_end 0000:00:02.0/vfio, section_id 3 -> " : "",
        ret2,
        wait ? "migration_switchover_ack_wait timeout 10 ms\n"
               "migration_switchover_ack_wait_done acked 0\n"
             : "");
}

/* The rounds of @r1 and @r2, then the downtime: how many sent everything,
 * with only the approval missing, and did not wait for it; the approval
 * comes between them if @approved_after_r1.  Frees @r1 and @r2. */
static unsigned unwaited_rounds(char *r1, char *r2, bool approved_after_r1)
{
    const char *const ack = "source_return_path_thread_switchover_acked \n";
    g_autofree char *after = round_text(0, "1\n", "1\n", false);
    g_autofree char *text = g_strconcat(
        r1, approved_after_r1 ? ack : "", r2,
        "vmstate_downtime_checkpoint src-downtime-start\n", after, NULL);
    struct vg_vfio_trace tr;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(text, &tr, &err), ==, 0);
    g_free(r1);
    g_free(r2);
    return tr.idle_rounds_unwaited;
}

/* While only the switchover approval is missing the source waits for it
 * after a round that sent everything (patch 0065), instead of syncing its
 * dirty bitmap again at once. */
static void test_check_approval_wait(void)
{
    g_autofree char *w1 = round_text(4096, "1\n", "1\n", true);
    g_autofree char *w2 = round_text(0, "1\n", "1\n", true);
    g_autofree char *waited =
        g_strconcat(w1, w2, "migration_switchover_ack_wait timeout 10 ms\n",
                    "source_return_path_thread_switchover_acked \n",
                    "migration_switchover_ack_wait_done acked 1\n", NULL);
    struct vg_vfio_trace src, dst, tr;
    struct vg_error err = {0};

    /* Spinning: both rounds went on at once; rounds after the downtime
     * started are not pre-copy. */
    g_assert_cmpuint(unwaited_rounds(round_text(4096, "1\n", "1\n", false),
                                     round_text(0, "1\n", "1\n", false), false),
                     ==, 2);
    /* Not idle: pending over the threshold, a section with more to send, a
     * round the rate limit cut short (fewer sections), the approval come. */
    g_assert_cmpuint(unwaited_rounds(round_text(3000001, "1\n", "1\n", false),
                                     round_text(0, "1\n", "0\n", false), false),
                     ==, 0);
    g_assert_cmpuint(unwaited_rounds(round_text(0, "1\n", "1\n", true),
                                     round_text(0, "1\n", "", false), false),
                     ==, 0);
    g_assert_cmpuint(unwaited_rounds(round_text(0, "1\n", "1\n", false),
                                     round_text(0, "1\n", "1\n", false), true),
                     ==, 1);

    g_assert_cmpint(vg_vfio_trace_parse(waited, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.ack_waits, ==, 3);
    g_assert_cmpuint(tr.ack_waits_acked, ==, 1); /* the third */
    g_assert_cmpuint(tr.idle_rounds_unwaited, ==, 0);
    parse_both(&src, &dst);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &mf_path, &err), ==, 0);
    src.idle_rounds_unwaited = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &mf_path, &err), ==,
                    -EPROTO);
    g_assert_nonnull(strstr(err.msg, "did not wait for the approval is 1"));
}

/* Before the approval the source asks for the exact pending sizes at most
 * every 100 ms (patch 0068): the parser counts the queries made before it
 * and those within 50 ms of the one before, each timed from its round's
 * estimate (-msg timestamp=on). */
static void test_exact_unapproved(void)
{
#define AT(t) "2026-01-01T10:00:" t "Z "
#define ESTIMATE                                                               \
    "migrate_pending_estimate estimate pending size 10 (pre = 10 post=0)\n"
#define EXACT "migrate_pending_exact exact pending size 10 (pre = 10 post=0)\n"
    static const char text[] = AT("00.000000") ESTIMATE AT(
        "00.030000") EXACT                                 /* a slow query */
        AT("00.040000") ESTIMATE AT("00.041000") EXACT     /* 40 ms: close */
            AT("00.140000") ESTIMATE AT("00.141000") EXACT /* 100 ms: not */
                AT("00.160000") "vfio_save_setup  (d) data buffer size "
                                "1048576\n" AT("00.170000") ESTIMATE AT(
                                    "00.171000") EXACT /* a new migration */
                                    AT("00.180000") "source_return_path_thread_"
                                                    "switchover_acked \n" AT(
                                                        "00.190000")
                                                        ESTIMATE AT("00.191000")
                                                            EXACT; /* approved
                                                                    */
    /* 100 ms apart when QEMU decided, 60 ms by the queries' own events
     * (the first took 40 ms): not close. */
    static const char slow_first[] = AT("00.000000") ESTIMATE AT("00.040000")
        EXACT AT("00.100000") ESTIMATE AT("00.100500") EXACT;
    /* The approval's event after a query that QEMU let through because
     * it had the approval already (it sets it before tracing it). */
    static const char ack_race[] = AT("00.000000") ESTIMATE AT("00.001000")
        EXACT AT("00.040000") ESTIMATE AT("00.041000") EXACT
            AT("00.041500") "source_return_path_thread_switchover_acked \n" AT(
                "00.050000") ESTIMATE;
    /* The wait saw the approval; the return path traced it only after
     * the query that followed (the wait's event says so first). */
    static const char wait_race[] = AT("00.000000") ESTIMATE AT("00.001000")
        EXACT AT("00.030000") "migration_switchover_ack_wait_done acked 1\n" AT(
            "00.030100") ESTIMATE AT("00.030500")
            EXACT AT(
                "00.030600") "source_return_path_thread_switchover_acked \n";
#undef AT
#undef ESTIMATE
#undef EXACT
    static const char untimed[] =
        "migrate_pending_exact exact pending size 10 (pre = 10 post=0)\n"
        "migrate_pending_exact exact pending size 10 (pre = 10 post=0)\n";
    struct vg_vfio_trace tr;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(text, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.exact_unapproved, ==, 4); /* not the approved one */
    g_assert_cmpuint(tr.exact_unapproved_close, ==, 1);
    g_assert_cmpint(vg_vfio_trace_parse(slow_first, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.exact_unapproved, ==, 2);
    g_assert_cmpuint(tr.exact_unapproved_close, ==, 0);
    g_assert_cmpint(vg_vfio_trace_parse(ack_race, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.exact_unapproved, ==, 2);
    g_assert_cmpuint(tr.exact_unapproved_close, ==, 0);
    g_assert_cmpint(vg_vfio_trace_parse(wait_race, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.exact_unapproved, ==, 1);
    g_assert_cmpuint(tr.exact_unapproved_close, ==, 0);
    g_assert_cmpint(vg_vfio_trace_parse(untimed, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.exact_unapproved, ==, 2);
    g_assert_cmpuint(tr.exact_unapproved_close, ==, 0); /* unknown */
}

/* Over multifd the source lends the slots it reads into (patch 0031), and
 * multifd gives each back once sent. */
static void test_check_lends(void)
{
    struct vg_vfio_path want = mf_path;
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};

    parse_both(&src, &dst);
    g_assert_cmpuint(src.lends, ==, 1);
    g_assert_cmpint(src.lent, ==, 1048576);
    g_assert_cmpuint(src.lend_releases, ==, 1);
    /* Lent bytes are read bytes of the save thread. */
    g_assert_cmpint(src.thread_read, ==, (1 << 20) + 100);
    /* The destination received one buffer into a slot (-ENOBUFS for the
     * next, which was received after its header). */
    g_assert_cmpuint(dst.write_lends, ==, 1);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);
    /* A slot received into but dropped... */
    dst.lend_releases = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "given back unwritten is 1"));
    dst.lend_releases = 0;
    /* ... or none received into. */
    dst.write_lends = 0;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "slots received into is 0"));
    dst.write_lends = 1;
    /* With two slots, nothing is lent. */
    want.two_slots = true;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "source reads lent is 1, expected == 0"));
    want.two_slots = false;
    /* A slot never given back... */
    src.lend_releases = 0;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "lent slots given back is 0"));
    /* ... or, through the shared areas, no read lent at all. */
    src.lends = 0;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "source reads lent is 0"));
}

/* Writes through the shared areas go behind (patch 0029): each is
 * acknowledged later, the last ones before the device's config. */
static void test_check_writes_behind(void)
{
    struct vg_vfio_path want = mf_path;
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};

    parse_both(&src, &dst);
    g_assert_cmpint(dst.written, ==, (4 << 20) + 100);
    g_assert_cmpint(dst.written_behind, ==, dst.written);
    g_assert_cmpuint(dst.writes_behind_failed, ==, 0);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);
    /* A write never waited for... */
    dst.written_behind -= 1048676;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "acknowledged behind"));
    dst.written_behind += 1048676;
    /* ... or one the server refused. */
    dst.writes_behind_failed = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "writes behind failed"));
    dst.writes_behind_failed = 0;
    /* Two writes were in flight at once: within what the servers' default
     * area (4) and one of 16 slots (2) allow, not within 3 more... */
    g_assert_cmpuint(dst.behinds_in_flight_max, ==, 2);
    want.slots = 16;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);
    dst.behinds_in_flight_max = 3;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "writes in flight at once is 3"));
    want.slots = 0;
    dst.behinds_in_flight_max = 5;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "expected <= 4"));
    /* ...which two devices' writes together may be (their events do not
     * name the device): the check goes past them to the save threads,
     * one short of two devices' in this trace. */
    want.devices = 2;
    dst.behinds_in_flight_max = 8;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_null(strstr(err.msg, "writes in flight"));
    g_assert_nonnull(strstr(err.msg, "save threads"));
    want.devices = 0;
    dst.behinds_in_flight_max = 2;
    /* Through the sockets nothing goes behind. */
    want.data_shm = false;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
}

/* The load thread waiting for a buffer a channel held while it waited for
 * room (QEMU without patch 0089): counted per device and load, and the
 * check fails on it.  Waiting for one not yet received is fine. */
static void test_starved_for_held(void)
{
    g_autofree char *t =
        g_strdup("vfio_load_bufs_thread_start  (a)\n"
                 "vfio_load_bufs_thread_start  (b)\n"
                 "vfio_load_state_device_buffer_starved  (a) idx 1\n"
                 "vfio_load_state_device_buffer_wait_room  (a) idx 2\n"
                 "vfio_load_state_device_buffer_wait_room  (a) idx 2\n"
                 "vfio_load_state_device_buffer_wait_room  (b) idx 3\n"
                 "vfio_load_state_device_buffer_starved  (b) idx 2\n"
                 "vfio_load_state_device_buffer_starved  (a) idx 2\n"
                 "vfio_load_bufs_thread_end  (a)\n"
                 "vfio_load_bufs_thread_end  (b)\n"
                 "vfio_load_bufs_thread_start  (b)\n"
                 "vfio_load_state_device_buffer_starved  (b) idx 3\n"
                 "vfio_load_bufs_thread_end  (b)\n");
    g_autofree char *bad = g_strdup("vfio_load_state_device_buffer_starved "
                                    " (a) idx x\n");
    struct vg_vfio_path want = mf_path;
    struct vg_vfio_trace tr, src, dst;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(t, &tr, &err), ==, 0);
    g_assert_cmpuint(tr.room_waits, ==, 2);
    /* (a) 2 only: (b) 3 belonged to the load before. */
    g_assert_cmpuint(tr.starved_for_held, ==, 1);
    g_assert_cmpint(vg_vfio_trace_parse(bad, &tr, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "idx"));

    parse_both(&src, &dst);
    g_assert_cmpuint(dst.starved_for_held, ==, 0);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);
    dst.starved_for_held = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "a buffer a channel held is 1"));
}

static void test_check_main_channel(void)
{
    g_autofree char *s =
        g_strdup("vfio_save_block  (dev) data_size 4096\n"
                 "vfio_save_complete_precopy_start  (dev)\n"
                 "vfio_save_block  (dev) data_size 512\n"
                 "vfio_user_mig_data_read  size 1048576 ret 512\n"
                 "vfio_save_complete_precopy  (dev) ret 0\n");
    g_autofree char *d =
        g_strdup("vfio_load_state  (dev) data 0xffffffffef100002\n");
    struct vg_vfio_path want = {.precopy = 4096, .stopcopy = 512};
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(s, &src, &err), ==, 0);
    g_assert_cmpint(vg_vfio_trace_parse(d, &dst, &err), ==, 0);
    g_assert_cmpint(src.main_precopy_read, ==, 4096);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);
    want.channels = 2;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "source multifd channels is 0"));
}

/* Two devices over multifd: their save and load threads overlap, and one
 * ends while the other still moves data. */
static void test_check_two_devices(void)
{
    g_autofree char *s = g_strdup(
        "vfio_save_setup  (a) data buffer size 1048576\n"
        "vfio_save_setup  (b) data buffer size 1048576\n"
        "multifd_send_thread_start 0\n"
        "vfio_multifd_precopy_setup  (a) idstr a/vfio instance 0 read size "
        "4194304\n"
        "vfio_multifd_precopy_setup  (b) idstr b/vfio instance 0 read size "
        "4194304\n"
        "vfio_multifd_save_precopy_block  (a) idx 0 data size 1048576\n"
        "vfio_multifd_save_precopy_block  (b) idx 0 data size 4096\n"
        "vfio_save_complete_precopy_thread_start  (a) x\n"
        "vfio_multifd_stopcopy_read_size  (a) read size 4194304\n"
        "vfio_save_complete_precopy_thread_start  (b) x\n"
        "vfio_multifd_stopcopy_read_size  (b) read size 4194304\n"
        "vfio_user_mig_data_read  size 4194304 ret 100\n"
        "vfio_user_mig_data_read_ahead  size 4194304\n"
        "vfio_save_complete_precopy_thread_end  (a) ret 1\n"
        "vfio_user_mig_data_read  size 4194304 ret 200\n"
        "vfio_user_mig_data_read_ahead  size 4194304\n"
        "vfio_save_complete_precopy_thread_end  (b) ret 1\n");
    g_autofree char *d =
        g_strdup("multifd_recv_thread_start 0\n"
                 "vfio_multifd_load_precopy_start  (a)\n"
                 "vfio_load_bufs_thread_start  (a)\n"
                 "vfio_multifd_load_precopy_start  (b)\n"
                 "vfio_load_bufs_thread_start  (b)\n"
                 "vfio_load_state_device_buffer_incoming  (a) idx 0\n"
                 "vfio_load_state_device_buffer_incoming  (b) idx 0\n"
                 "vfio_load_state_device_buffer_incoming  (a) idx 1\n"
                 "vfio_load_state_device_buffer_incoming  (b) idx 1\n"
                 "vfio_load_state_device_buffer_incoming  (a) idx 2\n"
                 "vfio_load_state_device_buffer_incoming  (b) idx 2\n"
                 "vfio_user_mig_data_write  size 1048676 ret 1048676\n"
                 "vfio_load_bufs_thread_end  (a)\n"
                 "vfio_user_mig_data_write  size 4296 ret 4296\n"
                 "vfio_load_bufs_thread_end  (b)\n");
    struct vg_vfio_path want = {.channels = 1,
                                .multifd = true,
                                .multifd_precopy = true,
                                .precopy = (1 << 20) + 4096,
                                .stopcopy = 300,
                                .devices = 2};
    struct vg_vfio_trace src, dst;
    struct vg_error err = {0};

    g_assert_cmpint(vg_vfio_trace_parse(s, &src, &err), ==, 0);
    g_assert_cmpint(vg_vfio_trace_parse(d, &dst, &err), ==, 0);
    g_assert_cmpint(src.thread_read, ==, 300);
    g_assert_cmpint(dst.thread_written, ==, (1 << 20) + 4096 + 300);
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, 0);
    want.devices = 1;
    g_assert_cmpint(vg_vfio_trace_check(&src, &dst, &want, &err), ==, -EPROTO);
    g_assert_nonnull(strstr(err.msg, "source save threads is 2"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vfio-trace/counts", test_counts);
    g_test_add_func("/vfio-trace/aheads-in-flight", test_aheads_in_flight);
    g_test_add_func("/vfio-trace/missing-argument", test_missing_argument);
    g_test_add_func("/vfio-trace/vram-populated", test_vram_populated);
    g_test_add_func("/vfio-trace/check-multifd-precopy",
                    test_check_multifd_precopy);
    g_test_add_func("/vfio-trace/check-writes-behind",
                    test_check_writes_behind);
    g_test_add_func("/vfio-trace/check-lends", test_check_lends);
    g_test_add_func("/vfio-trace/check-region-log-stop",
                    test_check_region_log_stop);
    g_test_add_func("/vfio-trace/check-init-data", test_check_init_data);
    g_test_add_func("/vfio-trace/check-approval-wait",
                    test_check_approval_wait);
    g_test_add_func("/vfio-trace/downtime", test_downtime);
    g_test_add_func("/vfio-trace/check-early-config", test_check_early_config);
    g_test_add_func("/vfio-trace/check-config-unchanged",
                    test_check_config_unchanged);
    g_test_add_func("/vfio-trace/state-changes", test_state_changes);
    g_test_add_func("/vfio-trace/state-change-alone", test_state_change_alone);
    g_test_add_func("/vfio-trace/check-dma-reports", test_check_dma_reports);
    g_test_add_func("/vfio-trace/check-main-channel", test_check_main_channel);
    g_test_add_func("/vfio-trace/check-two-devices", test_check_two_devices);
    g_test_add_func("/vfio-trace/exact-unapproved", test_exact_unapproved);
    g_test_add_func("/vfio-trace/downtime-phases", test_downtime_phases);
    g_test_add_func("/vfio-trace/starved-for-held", test_starved_for_held);
    return g_test_run();
}
