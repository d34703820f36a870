/*
 * test-mig-multifd -- the vGPU's stop-copy state over QEMU's multifd
 * channels (vfio-user-pci's x-migration-multifd-transfer, patches 0009
 * and 0010), and its pre-copy data too (x-migration-multifd-precopy,
 * patches 0011 to 0014).
 *
 * Most cases migrate a vGPU with known VRAM contents (mt_fill_vram());
 * with the device's iterative pre-copy the migration is held in pre-copy
 * until round 0 went through and a FILL then dirties one more MiB.  The
 * destination's whole VRAM must equal the source's (both servers'
 * checksums, samples of every page read through BAR2) and its vGPU must
 * work.  Which channel carried the device state is read from QEMU trace
 * events, which both QEMUs log to their stderr (<dir>/qemu-src.log,
 * qemu-dst.log):
 *
 *   over multifd: the source's save thread
 *   (vfio_save_complete_precopy_thread_*) read exactly the bytes the
 *   source server sent in stop-copy, and the destination's load thread
 *   (vfio_load_bufs_thread_*) wrote exactly those bytes to its server;
 *   the buffers came in on the multifd channels
 *   (vfio_load_state_device_buffer_incoming), enough of them for those
 *   bytes at the source's data buffer size, and the config space did not
 *   come on the main channel;
 *
 *   on the main channel: no save or load thread, no multifd buffers, the
 *   stop-copy bytes read by vfio_save_complete_precopy() and the config
 *   space in the main stream.
 *
 * Pre-copy data over multifd (the default with multifd transfer): the
 * source announced it (vfio_multifd_precopy_setup) and queued exactly
 * the bytes the source server sent in pre-copy
 * (vfio_multifd_save_precopy_block), none went on the main channel
 * (vfio_save_block), and the destination's load thread, started for
 * pre-copy (vfio_multifd_load_precopy_start), wrote pre-copy and
 * stop-copy bytes.  Otherwise the pre-copy bytes went on the main channel.
 * qclient/vfio-trace.c checks all of this (vg_vfio_trace_check()).
 *
 * The multifd channel threads (multifd_send/recv_thread_start) must be as
 * many as multifd-channels, or none without the multifd capability.  With
 * pre-copy over multifd, the source syncs its channels
 * (multifd_send_sync_main) less than once per two device buffers: not at
 * the end of each round of the RAM scan that sent no page (patch 0036).
 * The destination's load thread never waits for a buffer that a channel
 * holds while that channel waits for room in the load thread's queue
 * (vfio_load_state_device_buffer_wait_room, then _starved for the same
 * buffer): patch 0089 queues a buffer before its channel waits.  The
 * four-writes-behind case, whose slowed destination server keeps the
 * queue full, had 46 such waits in a run with QEMU 0001-0088.

 *
 * Cases: on with 2 and 4 channels (iterative pre-copy, over multifd too;
 * with 4 channels also x-migration-load-config-after-iter=on, whose marker
 * must come on the main channel); on with x-migration-multifd-precopy=off
 * (pre-copy on the main channel, stop-copy over multifd); 256 MiB of
 * non-zero VRAM in iterative pre-copy over multifd at full speed; on
 * with a device without pre-copy (--precopy=none:
 * all of VRAM in stop-copy), with 64 MiB and with 256 MiB of VRAM that
 * is all non-zero (the destination hung without patch 0010), where QEMU
 * sends the pages from its read-only view of VRAM (data_vram, patches
 * 0074-0076), and the first again with servers that refuse that view
 * (--no-data-vram), whose source server copies them; off with
 * multifd (set at run time with qom-set, as the property allows); auto
 * with and without multifd; on with servers whose shared areas have two
 * slots (--data-slots 2, what servers offered before patch 0031), from
 * and to which QEMU copies the data instead of lending the slots to the
 * channels; auto with x-migration-early-config=off (patch 0058: by
 * default the source sends the config space at setup too, the
 * destination loads it at once and its switchover then sends no DMA
 * map; off, neither); a guest that moves the register BAR during
 * pre-copy, after that early config, whose destination must then have
 * it where the source left it (where it did not, the final config space
 * is the early one, and patch 0059 does not send it again); on with
 * x-migration-read-ahead=1, where every other case's pre-copy over
 * multifd keeps two reads in flight ahead (patches 0069-0070) and this
 * one keeps one; and on without the multifd capability, which
 * QEMU must refuse in setup with an error that names the problem,
 * leaving the source running with its vGPU intact; the property is then
 * turned off at run time and a migration to a fresh destination
 * succeeds; the same for x-migration-multifd-precopy=on with the
 * transfer off.
 *
 * VGMIG_MULTIFD_MEASURE=1 adds /mig/multifd/measure-1g: an idle vGPU
 * with 1 GiB of non-zero VRAM migrated without multifd, with multifd
 * and the property off, and with it on (4 channels), each with the
 * device's pre-copy off (all of VRAM in stop-copy) and iterative (with
 * QEMU's default downtime-limit and switchover bandwidth, so pre-copy
 * runs first); the times and rates are logged, not asserted, and every
 * migration is checked as above.
 */
#include <inttypes.h>

#include "mig-test.h"
#include "qclient/vfio-trace.h"

#define MF_QOM_PATH "/machine/peripheral/vgpu0"
#define MF_TRANSFER "x-migration-multifd-transfer"
#define MF_LOAD_CFG "x-migration-load-config-after-iter"
#define MF_PRECOPY  "x-migration-multifd-precopy"
#define MF_EARLY    "x-migration-early-config"
#define MF_AHEAD    "x-migration-read-ahead"
#define MF_PLACE    "x-migration-place-data"
/* vfio_load_state's "data" for a config space section and for the
 * config-load-ready marker (hw/vfio/vfio-migration-internal.h). */
#define MF_MEASURE_VRAM "1G"
#define MF_MEASURE_SIZE ((uint64_t)1 << 30)
/* Enough stop-copy data that the multifd channels were still sending
 * when the source completed: without patch 0010 the destination lost the
 * last packets and hung in 4 runs of 4 (64 MiB never showed it). */
#define MF_LARGE_VRAM          "256M"
#define MF_LARGE_SIZE          ((uint64_t)256 << 20)
#define MF_FILL_CHUNK          ((uint64_t)64 << 20)
#define MF_MEASURE_CHANNELS    4u
#define MF_DEFAULT_DOWNTIME_MS 300
/* While held in pre-copy, MiB MF_PRECOPY_MIB (zero until then) gets
 * MF_PRECOPY_PATTERN; the device's pre-copy is capped at
 * MF_HOLD_BANDWIDTH meanwhile. */
#define MF_PRECOPY_MIB     50u
#define MF_PRECOPY_PATTERN 0x0dd0f111u
#define MF_HOLD_BANDWIDTH  (256ll << 20)

struct mf_case {
    const char *tag;
    unsigned channels;       /* multifd-channels; 0: multifd off */
    const char *transfer;    /* x-migration-multifd-transfer; NULL: auto */
    bool set_at_runtime;     /* qom-set after realize, not -global */
    const char *load_cfg;    /* x-migration-load-config-after-iter */
    const char *mf_precopy;  /* x-migration-multifd-precopy, NULL: auto */
    const char *early;       /* x-migration-early-config, NULL: on */
    unsigned read_ahead;     /* x-migration-read-ahead, 0: its default, 2 */
    bool move_bar;           /* the guest moves BAR0 during pre-copy */
    const char *precopy;     /* the servers' --precopy, NULL: default */
    unsigned data_slots;     /* the servers' --data-slots, 0: default */
    bool no_data_vram;       /* the servers' --no-data-vram */
    unsigned stream_version; /* the servers' --stream-version, 0: default */
    bool no_place; /* x-migration-place-data off, else on (not the default) */
    /* Held in pre-copy and filled as for the default --precopy (with
     * .precopy "one-shot": the filled pages, sent in round 0, go again
     * in stop-copy). */
    bool late_fill;
    /* > 0: the servers' --fault=write-delay:MS (each write of the load
     * waits), and the writes the destination must have had in flight at
     * once at the most (patch 0071). */
    unsigned write_delay_ms;
    unsigned want_behinds;
    bool want_multifd;    /* the device state must go over multifd */
    bool want_mf_precopy; /* ... and its pre-copy data too */
    /* NULL: VGT_VRAM_ARG, filled by mt_fill_vram(); else this much VRAM
     * (vram_size bytes), all of it filled, migrated without holding. */
    const char *vram;
    uint64_t vram_size;
    /* > 0: QEMU's downtime-limit and its own switchover bandwidth
     * estimate, as by default, instead of mt_start_src()'s. */
    int64_t downtime_limit_ms;
    bool switchover_ack; /* return-path and switchover-ack on both sides */
};

/* QEMU arguments: the trace events, timestamped (mf_assert_path() times
 * the exact pending queries), and -global for the properties of @c that
 * are set on the command line.  Free with g_ptr_array_unref(). */
static GPtrArray *mf_qemu_args(const struct mf_case *c)
{
    GPtrArray *a = g_ptr_array_new_with_free_func(g_free);
    const char *trace[MT_TRACE_ARGC];

    mt_trace_args(trace);
    for (unsigned i = 0; trace[i]; i++) {
        g_ptr_array_add(a, g_strdup(trace[i]));
    }
    g_ptr_array_add(a, g_strdup("-msg"));
    g_ptr_array_add(a, g_strdup("timestamp=on"));
    if (c->transfer && !c->set_at_runtime) {
        g_ptr_array_add(a, g_strdup("-global"));
        g_ptr_array_add(a, g_strdup_printf("vfio-user-pci." MF_TRANSFER "=%s",
                                           c->transfer));
    }
    if (c->load_cfg) {
        g_ptr_array_add(a, g_strdup("-global"));
        g_ptr_array_add(a, g_strdup_printf("vfio-user-pci." MF_LOAD_CFG "=%s",
                                           c->load_cfg));
    }
    if (c->mf_precopy) {
        g_ptr_array_add(a, g_strdup("-global"));
        g_ptr_array_add(a, g_strdup_printf("vfio-user-pci." MF_PRECOPY "=%s",
                                           c->mf_precopy));
    }
    if (c->early) {
        g_ptr_array_add(a, g_strdup("-global"));
        g_ptr_array_add(
            a, g_strdup_printf("vfio-user-pci." MF_EARLY "=%s", c->early));
    }
    if (c->read_ahead) {
        g_ptr_array_add(a, g_strdup("-global"));
        g_ptr_array_add(
            a, g_strdup_printf("vfio-user-pci." MF_AHEAD "=%u", c->read_ahead));
    }
    /* Placed stop-copy pages (off by default) everywhere but where not */
    g_ptr_array_add(a, g_strdup("-global"));
    g_ptr_array_add(a, g_strdup_printf("vfio-user-pci." MF_PLACE "=%s",
                                       c->no_place ? "off" : "on"));
    g_ptr_array_add(a, NULL);
    return a;
}

/* Server arguments of @c (NULL-terminated), or NULL. */
static char **mf_server_args(const struct mf_case *c)
{
    char **a;
    unsigned n = 0;

    if (!c->precopy && !c->data_slots && !c->write_delay_ms &&
        !c->no_data_vram && !c->stream_version) {
        return NULL;
    }
    a = g_new0(char *, 6);
    if (c->precopy) {
        a[n++] = g_strdup_printf("--precopy=%s", c->precopy);
    }
    if (c->data_slots) {
        a[n++] = g_strdup_printf("--data-slots=%u", c->data_slots);
    }
    if (c->write_delay_ms) {
        a[n++] = g_strdup_printf("--fault=write-delay:%u", c->write_delay_ms);
    }
    if (c->no_data_vram) {
        a[n++] = g_strdup("--no-data-vram");
    }
    if (c->stream_version) {
        a[n++] = g_strdup_printf("--stream-version=%u", c->stream_version);
    }
    return a;
}

static void mf_qom_set(struct vg_qemu *q, const char *prop, const char *val)
{
    g_autofree char *args =
        g_strdup_printf("{\"path\": \"" MF_QOM_PATH "\", \"property\": \"%s\", "
                        "\"value\": \"%s\"}",
                        prop, val);

    VGT_OK(vg_qmp_execute_json(q->qmp, "qom-set", args, NULL, VGT_ERR));
}

/* The property must read @want through qom-get. */
static void mf_assert_prop(struct vg_qemu *q, const char *prop,
                           const char *want)
{
    g_autofree char *args = g_strdup_printf(
        "{\"path\": \"" MF_QOM_PATH "\", \"property\": \"%s\"}", prop);
    JsonNode *ret = NULL;

    VGT_OK(vg_qmp_execute_json(q->qmp, "qom-get", args, &ret, VGT_ERR));
    g_assert_true(JSON_NODE_HOLDS_VALUE(ret));
    g_assert_cmpstr(json_node_get_string(ret), ==, want);
    json_node_unref(ret);
}

/* ---------------------------------------------------------- trace -- */

/* The source's and destination's trace of the one migration done, where
 * the source server sent @precopy bytes in pre-copy and @stopcopy bytes
 * in stop-copy. */
static void mf_assert_path(const struct mt *t, const struct mf_case *c,
                           int64_t precopy, int64_t stopcopy)
{
    struct vg_vfio_path want = {.channels = c->channels,
                                .multifd = c->want_multifd,
                                .multifd_precopy = c->want_mf_precopy,
                                .precopy = precopy,
                                .stopcopy = stopcopy,
                                .data_shm = true,
                                .two_slots = c->data_slots == 2,
                                .slots = c->data_slots};
    struct vg_vfio_trace src, dst;

    mt_trace_read(t->src.qemu, "source", &src);
    mt_trace_read(t->dst.qemu, "destination", &dst);
    VGT_OK(vg_vfio_trace_check(&src, &dst, &want, VGT_ERR));
    /* QEMU logged the guest's writes to BAR2 and stopped the log after the
     * downtime (the check above: not inside it, patch 0051). */
    g_assert_cmpuint(src.region_log_stops, >=, 1);
    /* Under switchover-ack the source counted the packets of the initial
     * data for the destination, which approved once it had loaded them
     * (the check above; patch 0052). */
    if (c->switchover_ack && c->want_mf_precopy) {
        g_assert_cmpuint(src.init_data_counts, ==, 1);
        g_assert_cmpint(src.init_data_packets, >, 0);
        /* Nothing writes VRAM during this migration: the count covered
         * every page of pre-copy, the last read sent ahead included
         * (0057), so that the destination approved only once it had them
         * all.  What pre-copy sent after it holds no page. */
        g_assert_cmpint(precopy - src.init_data_bytes, >=, 0);
        g_assert_cmpint(precopy - src.init_data_bytes, <, 4096);
    }
    /* Pre-copy over multifd of more than two pieces kept as many reads in
     * flight ahead as x-migration-read-ahead says (patches 0069-0070). */
    if (c->want_mf_precopy && src.precopy_read_size > 0 &&
        precopy > 3 * src.precopy_read_size) {
        g_assert_cmpuint(src.aheads_in_flight_max, ==,
                         c->read_ahead ? c->read_ahead : 2);
    }
    /* A destination server slower than the channels had as many writes
     * in flight as its area's slots allow: 4 with 32 (the default), 2
     * with 16 (patch 0071). */
    if (c->want_behinds) {
        g_assert_cmpuint(dst.behinds_in_flight_max, ==, c->want_behinds);
    }
    /* ...and until it approved, the source asked for the exact pending
     * sizes at most every 100 ms (patch 0068; -msg timestamp=on). */
    if (c->switchover_ack) {
        g_assert_cmpuint(src.exact_unapproved, >, 0);
        g_assert_cmpuint(src.exact_unapproved_close, ==, 0);
    }
    /* The config space went at setup, the device being in PRE_COPY (even
     * a server that sends nothing in it offers the state), unless turned
     * off or wanted after the other devices' state (0058); the check
     * above: loaded at once, nothing mapped at the switchover. */
    g_assert_cmpuint(src.early_configs, ==,
                     !(c->early && !strcmp(c->early, "off")) &&
                         !(c->load_cfg && !strcmp(c->load_cfg, "on")));
    /* ...and the final one, the same unless the guest moved a BAR since,
     * was not loaded again (0059); the moved BAR was (mf_check_dst()). */
    g_assert_cmpuint(src.configs_unchanged, ==,
                     src.early_configs && !c->move_bar);
    /* Pre-copy over multifd in the 4 MiB pieces the servers' shared areas
     * allow (patch 0022), and stop-copy in the same (0048). */
    if (c->want_mf_precopy) {
        g_assert_cmpint(src.precopy_read_size, ==, 4 << 20);
        g_assert_cmpint(src.stopcopy_read_size, ==, 4 << 20);
    }
    /* Guest RAM is clean after its first round: the source syncs its
     * channels at setup, after that round and at the end, not once per
     * iteration, which would wait for each buffer just queued (0036). */
    if (c->want_mf_precopy && src.precopy_buffers >= 16) {
        g_assert_cmpuint(src.channel_syncs * 2, <, src.precopy_buffers);
    }
    /* Stop-copy pages left in VRAM go in placed packets, received in
     * place at the destination once its load thread said that the
     * packets before them were applied: the first always waits (0078). */
    if (c->late_fill || (c->precopy && !strcmp(c->precopy, "none") &&
                         !c->no_data_vram && !c->no_place)) {
        g_assert_cmpuint(dst.placed_packets, >=, 1);
        g_assert_cmpuint(dst.place_waits, >=, 1);
        g_assert_cmpuint(dst.place_froms, >=, 1);
    }
    if (c->no_data_vram || c->no_place) {
        g_assert_cmpuint(dst.placed_packets, ==, 0);
    }
    /* With placing on, the destination populated its data area and its
     * writable view of VRAM during the pre-copy, all of both (0080, 0085);
     * with it off, neither. */
    if (c->late_fill) {
        g_assert_cmpuint(dst.shm_populates, ==, 1);
        g_assert_cmpuint(dst.shm_populates_short, ==, 0);
        g_assert_cmpuint(dst.vram_populates, ==, 1);
        g_assert_cmpuint(dst.vram_populates_short, ==, 0);
    }
    if (c->no_data_vram || c->no_place) {
        g_assert_cmpuint(dst.shm_populates, ==, 0);
        g_assert_cmpuint(dst.vram_populates, ==, 0);
    }
    g_assert_cmpuint(dst.load_ready, ==,
                     c->load_cfg && !strcmp(c->load_cfg, "on") ? 1 : 0);
}

/* ---------------------------------------------------------- cases -- */

/* x-migration-multifd-precopy is off: pre-copy data go over the main
 * channel, where nothing is placed. */
static bool mf_precopy_off(const struct mf_case *c)
{
    return c->mf_precopy && !strcmp(c->mf_precopy, "off");
}

/* The source sends pre-copy pages from its view of VRAM, listed: a
 * version 3 stream with data_vram and a pre-copy. */
static bool mf_listed(const struct mf_case *c)
{
    return (!c->stream_version || c->stream_version >= 3) && !c->no_data_vram &&
           !(c->precopy && !strcmp(c->precopy, "none"));
}

/* The pages of a stop-copy of @stopcopy bytes: QEMU took those of long
 * runs from its read-only view of VRAM (data_vram), not from copies the
 * source server made, unless the servers refused it; the destination's
 * QEMU received them in place, through its writable view, where
 * x-migration-place-data is on (these cases set it on but for
 * no_place).  Where the device had no pre-copy, all of VRAM went so. */
static void mf_assert_vram_pieces(const struct mf_case *c, struct vg_stats *sst,
                                  struct vg_stats *dst, int64_t stopcopy)
{
    int64_t pieces = mt_stat_int(sst, "vram_piece_bytes");
    int64_t listed = mt_stat_int(sst, "listed_bytes");
    int64_t placed = mt_stat_int(dst, "vram_piece_bytes");

    g_test_message("stop-copy %" PRId64 " bytes, %" PRId64 " sent from the "
                   "view of VRAM; pre-copy %" PRId64 " page bytes from it, "
                   "listed; %" PRId64 " placed",
                   stopcopy, pieces, listed, placed);
    g_assert_cmpint(pieces, <=, mt_stat_int(sst, "final_dirty_bytes"));
    g_assert_cmpint(placed, <=, pieces + listed);
    if (c->no_data_vram) {
        g_assert_cmpint(pieces, ==, 0);
    } else if (c->precopy && !strcmp(c->precopy, "none")) {
        /* All but the records' headers and the runs' short tails */
        g_assert_cmpint(pieces, >=, stopcopy / 2);
        g_assert_cmpint(placed, >=, c->no_place ? 0 : stopcopy / 2);
    }
    if (c->no_place) {
        g_assert_cmpint(placed, ==, 0);
    }
    /* Version 3 (the default): pre-copy's pages went from the view too,
     * listed (at least the MiB filled before the migration, in round 0),
     * and over multifd were placed where stop-copy's are. */
    if (mf_listed(c)) {
        g_assert_cmpint(listed, >=, 1 << 20);
    } else {
        g_assert_cmpint(listed, ==, 0);
    }
    if (c->late_fill) {
        /* The filled MiB, placed over its pre-copy data at the destination */
        g_assert_cmpint(pieces, >=, 1 << 20);
        g_assert_cmpint(placed, ==, pieces + (mf_precopy_off(c) ? 0 : listed));
    }
}

/* Known VRAM on the source; its samples (checked) in *@samples. */
static void mf_fill(struct mt *t, uint8_t **samples)
{
    g_autofree uint8_t *want = mt_expected_samples();

    mt_fill_vram(t);
    mt_fence(&t->gpu, 0x77);
    *samples = mt_vram_samples(&t->gpu);
    mt_assert_samples(*samples, want, "source before migration");
}

/* A destination for @c, listening; -trace and -global as the source. */
/* The case's channels and transfer property on one side, checked. */
static void mf_configure(struct vg_qemu *q, const struct mf_case *c)
{
    if (c->channels) {
        VGT_OK(vg_mig_set_channels(q->qmp, c->channels, VGT_ERR));
    }
    if (c->switchover_ack) {
        VGT_OK(vg_mig_set_capability(q->qmp, "return-path", true, VGT_ERR));
        VGT_OK(vg_mig_set_capability(q->qmp, "switchover-ack", true, VGT_ERR));
    }
    if (c->transfer && c->set_at_runtime) {
        mf_qom_set(q, MF_TRANSFER, c->transfer);
    }
    mf_assert_prop(q, MF_TRANSFER, c->transfer ? c->transfer : "auto");
    mf_assert_prop(q, MF_PRECOPY, c->mf_precopy ? c->mf_precopy : "auto");
}

static void mf_start_dst(struct mt *t, const struct mf_case *c,
                         const char *const *srv_extra)
{
    g_autoptr(GPtrArray) qargs = mf_qemu_args(c);

    mt_start_dst_with(t, c->vram ? c->vram : VGT_VRAM_ARG, srv_extra,
                      (const char *const *)qargs->pdata);
    mf_configure(t->dst.qemu, c);
    mt_listen(t);
}

/* Poll callback: stop polling once VFIO sent *@opaque bytes. */
static int mf_vfio_sent(const struct vg_mig_info *info, void *opaque,
                        struct vg_error *err)
{
    return info->vfio_transferred >= *(int64_t *)opaque ? 1 : 0;
}

/* Move the source vGPU's register BAR past every memory BAR of the
 * device in its window, as a guest driver may while pre-copy runs (after
 * the config space went early, patch 0058), and check the registers
 * answer there. */
static void mf_move_regs_bar(struct mt *t)
{
    struct vg_pci_dev *pci = &t->gpu.pci;
    const struct vg_pci_bar *regs = &pci->bar[VGPU_BAR_REGS];
    uint32_t features = mt_rd(&t->gpu, VGPU_REG_FEATURES);
    uint64_t end = 0, to;

    for (unsigned i = 0; i < VG_PCI_NUM_BARS; i++) {
        const struct vg_pci_bar *b = &pci->bar[i];

        if (b->addr && !b->io && (b->addr >> 32) == (regs->addr >> 32)) {
            end = MAX(end, b->addr + b->size);
        }
    }
    to = (end + regs->size - 1) & ~(regs->size - 1);
    VGT_OK(vg_pci_move_bar(pci, VGPU_BAR_REGS, to, VGT_ERR));
    g_test_message("BAR%d moved from 0x%" PRIx64 " to 0x%" PRIx64
                   " during pre-copy",
                   VGPU_BAR_REGS, t->gpu.regs_addr, to);
    t->gpu.regs_addr = to;
    g_assert_cmphex(mt_rd(&t->gpu, VGPU_REG_FEATURES), ==, features);
    /* A fence through the doorbell there, then back to the test's. */
    mt_fence(&t->gpu, 0x76);
    mt_fence(&t->gpu, 0x77);
}

/* Migrate with the device's iterative pre-copy: held in pre-copy until
 * round 0 (the filled MiBs) went through, then MiB MF_PRECOPY_MIB is
 * filled (and BAR0 moved if @c says so), and the migration is let go. */
static void mf_migrate_iterative(struct mt *t, const struct mf_case *c,
                                 struct vg_mig_info *info)
{
    struct vgpu_cmd fill = vgpu_cmd_make(VGPU_OP_FILL, MF_PRECOPY_MIB << 20,
                                         1u << 20, MF_PRECOPY_PATTERN, 0, 0, 0);
    int64_t round0 = (int64_t)MT_FILLED_MIB << 20;

    mt_hold(t, MF_HOLD_BANDWIDTH);
    VGT_OK(vg_mig_start(t->src.qemu->qmp, t->uri, VGT_ERR));
    VGT_OK(vg_mig_poll(t->src.qemu->qmp, MT_MIG_TIMEOUT_MS, mf_vfio_sent,
                       &round0, info, VGT_ERR));
    g_assert_cmpstr(info->status, ==, "active");
    mt_run(&t->gpu, &fill, 1);
    if (c->move_bar) {
        mf_move_regs_bar(t);
    }
    VGT_OK(mt_release(t, VGT_ERR));
    mt_migrate_wait(t, NULL, NULL, info);
}

/* The migration completed: the whole VRAM (equal to *@src_samples, read
 * again from the source, which got a FILL during pre-copy when
 * @iterative) and the device state (the last fence was @fence) arrived,
 * the destination's vGPU works, the stop-copy's pages took the way @c
 * says (mf_assert_vram_pieces()); the source server's pre-copy and
 * stop-copy bytes in *@precopy and *@stopcopy. */
static void mf_check_dst(struct mt *t, const struct mf_case *c,
                         uint8_t **src_samples, bool iterative, uint32_t fence,
                         int64_t *precopy, int64_t *stopcopy)
{
    g_autofree uint8_t *dst_samples = NULL;
    struct vg_stats sst, dst;
    struct vgpu_cmd fill =
        vgpu_cmd_make(VGPU_OP_FILL, 60u << 20, 1u << 20, 0x600dcafe, 0, 0, 0);
    uint32_t v = 0;

    if (iterative) {
        g_free(*src_samples);
        *src_samples = mt_vram_samples(&t->gpu);
        VGT_OK(vg_qtest_readl(t->src.qemu->qt,
                              t->gpu.vram_addr + (MF_PRECOPY_MIB << 20) + 64,
                              &v, VGT_ERR));
        g_assert_cmphex(v, ==, MF_PRECOPY_PATTERN);
    }
    mt_attach_dst(t);
    mt_assert_stats_equal(t, &sst, &dst);
    *stopcopy = mt_stat_int(&sst, "stopcopy_bytes");
    *precopy = mt_stat_int(&sst, "precopy_bytes");
    if (iterative) {
        g_assert_cmpint(*precopy, >=, (int64_t)MT_FILLED_MIB << 20);
    } else {
        g_assert_cmpint(*precopy, ==, 0);
        g_assert_cmpint(*stopcopy, >=, (int64_t)MT_FILLED_MIB << 20);
    }
    mf_assert_vram_pieces(c, &sst, &dst, *stopcopy);
    dst_samples = mt_vram_samples(&t->dgpu);
    mt_assert_samples(dst_samples, *src_samples, "destination");
    g_assert_cmphex(mt_rd(&t->dgpu, VGPU_REG_FENCE_LO), ==, fence);
    mt_run(&t->dgpu, &fill, 1);
    mt_fence(&t->dgpu, 0x78);
    VGT_OK(vg_qtest_readl(t->dst.qemu->qt,
                          t->dgpu.vram_addr + (60u << 20) + 4096, &v, VGT_ERR));
    g_assert_cmphex(v, ==, 0x600dcafe);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
}

/* The source of @c: multifd and the properties set; the VRAM not yet
 * filled. */
static void mf_start_src(struct mt *t, const struct mf_case *c,
                         const char *const *srv_extra)
{
    g_autoptr(GPtrArray) qargs = mf_qemu_args(c);

    mt_start_src_with(t, c->tag, c->vram ? c->vram : VGT_VRAM_ARG, srv_extra,
                      (const char *const *)qargs->pdata);
    mf_configure(t->src.qemu, c);
    mf_assert_prop(t->src.qemu, MF_LOAD_CFG,
                   c->load_cfg ? c->load_cfg : "auto");
}

/* Every byte of the VRAM of @c non-zero: one FILL per MF_FILL_CHUNK, each
 * with its own pattern. */
static void mf_fill_all(struct mt *t, const struct mf_case *c)
{
    unsigned n = (unsigned)(c->vram_size / MF_FILL_CHUNK);
    g_autofree struct vgpu_cmd *fill = g_new(struct vgpu_cmd, n);

    g_assert_cmpuint(n, >, 0);
    g_assert_cmpuint(c->vram_size % MF_FILL_CHUNK, ==, 0);
    for (unsigned i = 0; i < n; i++) {
        fill[i] = vgpu_cmd_make(VGPU_OP_FILL, i * MF_FILL_CHUNK, MF_FILL_CHUNK,
                                0x3f800000u + i * 0x1011u, 0, 0, 0);
    }
    mt_run(&t->gpu, fill, n);
}

/* A case with c->vram: all of VRAM filled and migrated at once; the
 * servers' checksums cover the whole VRAM.  Logs the times and rates
 * (the measurement runs this too). */
static void mf_run_full(const struct mf_case *c)
{
    g_auto(GStrv) srv_extra = mf_server_args(c);
    struct vg_stats sst, dst;
    struct vg_mig_info info;
    int64_t pre, stop, t0, stop_us = 0, resume_us = 0;
    struct mt t;

    mf_start_src(&t, c, (const char *const *)srv_extra);
    if (c->downtime_limit_ms > 0) {
        VGT_OK(vg_mig_set_parameter(t.src.qemu->qmp, "downtime-limit",
                                    c->downtime_limit_ms, VGT_ERR));
        VGT_OK(vg_mig_set_parameter(t.src.qemu->qmp,
                                    "avail-switchover-bandwidth", 0, VGT_ERR));
    }
    mf_fill_all(&t, c);
    mt_fence(&t.gpu, 0x77);
    mf_start_dst(&t, c, (const char *const *)srv_extra);
    t0 = g_get_real_time();
    mt_migrate(&t, NULL, NULL, &info);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    pre = mt_stat_int(&sst, "precopy_bytes");
    stop = mt_stat_int(&sst, "stopcopy_bytes");
    /* The guest's downtime: from the source's STOP to the destination's
     * RESUME, which comes only once the destination loaded everything
     * (QEMU's "downtime" ends when the source has sent everything). */
    g_assert_cmpint(
        vg_qmp_event_time(t.src.qemu->qmp, "STOP", t0, &stop_us, VGT_ERR), ==,
        1);
    g_assert_cmpint(
        vg_qmp_event_time(t.dst.qemu->qmp, "RESUME", t0, &resume_us, VGT_ERR),
        ==, 1);
    g_test_message(
        "%s: precopy %s, total %" PRId64 " ms, downtime %" PRId64
        " ms (QEMU), %.0f ms (source STOP to destination RESUME), device "
        "pre-copy %.0f MiB, stop-copy %.0f MiB in %.1f ms "
        "(%.0f MiB/s), whole migration %.0f MiB/s",
        c->tag, c->precopy ? c->precopy : "iterative", info.total_time_ms,
        info.downtime_ms, (double)(resume_us - stop_us) / 1000.0,
        (double)pre / (1 << 20), (double)stop / (1 << 20),
        sst.device_stopcopy_ms,
        sst.device_stopcopy_ms > 0
            ? (double)stop / (1 << 20) / (sst.device_stopcopy_ms / 1000.0)
            : 0.0,
        info.total_time_ms > 0
            ? (double)(info.vfio_transferred + info.ram_transferred) /
                  (1 << 20) / (info.total_time_ms / 1000.0)
            : 0.0);
    g_assert_cmpint(pre + stop, >=, (int64_t)c->vram_size);
    mf_assert_vram_pieces(c, &sst, &dst, stop);
    g_assert_cmpint(resume_us, >, stop_us);
    g_assert_cmphex(mt_rd(&t.dgpu, VGPU_REG_FENCE_LO), ==, 0x77);
    mt_fence(&t.dgpu, 0x78);
    mf_assert_path(&t, c, pre, stop);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    mt_stop(&t);
}

static void mf_run_case(const void *opaque)
{
    const struct mf_case *c = opaque;
    g_auto(GStrv) srv_extra = mf_server_args(c);
    g_autofree uint8_t *samples = NULL;
    bool iterative = !c->precopy || c->late_fill;
    struct vg_mig_info info;
    int64_t precopy = 0, stopcopy = 0;
    struct mt t;

    if (c->vram) {
        mf_run_full(c);
        return;
    }
    mf_start_src(&t, c, (const char *const *)srv_extra);
    mf_fill(&t, &samples);
    mf_start_dst(&t, c, (const char *const *)srv_extra);
    if (iterative) {
        mf_migrate_iterative(&t, c, &info);
    } else {
        mt_migrate(&t, NULL, NULL, &info);
    }
    g_assert_true(info.has_vfio);
    g_assert_cmpint(info.vfio_transferred, >, 0);
    mf_check_dst(&t, c, &samples, iterative, 0x77, &precopy, &stopcopy);
    mf_assert_path(&t, c, precopy, stopcopy);
    g_assert_true(vg_proc_alive(&t.src.srv->proc));
    g_assert_true(vg_proc_alive(&t.dst.srv->proc));
    mt_stop(&t);
}

/* A property set to "on" that the migration cannot honour. */
struct mf_refused {
    struct mf_case on;    /* QEMU must refuse this in setup */
    struct mf_case retry; /* after @prop is set to "off" at run time */
    const char *prop;
    const char *message; /* in the error */
};

/* x-migration-multifd-transfer=on without the multifd capability, or
 * x-migration-multifd-precopy=on with the transfer off: the migration
 * fails in setup and says why, the source keeps running with its vGPU
 * intact; the property turned off at run time, the next migration
 * succeeds on the main channel. */
static void mf_run_refused(const void *opaque)
{
    const struct mf_refused *r = opaque;
    g_autofree uint8_t *samples = NULL;
    g_autofree char *dev = NULL;
    struct vg_mig_info info;
    int64_t precopy = 0, stopcopy = 0;
    struct vg_vfio_trace src;
    struct mt t;

    mf_start_src(&t, &r->on, NULL);
    mf_fill(&t, &samples);
    mf_start_dst(&t, &r->on, NULL);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    mt_wait_final(&t, "failed", &info);
    g_test_message("error-desc: %s", info.error_desc);
    dev = g_strdup_printf("vfio-user:%s", t.src.srv->socket);
    g_assert_nonnull(strstr(info.error_desc, dev));
    g_assert_nonnull(strstr(info.error_desc, r->message));
    mt_assert_source_intact(&t, samples, 0x79);
    /* Nothing was moved: no save thread, no stop-copy. */
    mt_trace_read(t.src.qemu, "source", &src);
    g_assert_cmpuint(src.save_threads + src.main_completes, ==, 0);
    g_assert_cmpuint(src.precopy_buffers, ==, 0);

    /* The fallback the property is settable at run time for. */
    mf_qom_set(t.src.qemu, r->prop, "off");
    mf_assert_prop(t.src.qemu, r->prop, "off");
    mf_start_dst(&t, &r->retry, NULL);
    mf_migrate_iterative(&t, &r->retry, &info);
    mf_check_dst(&t, &r->retry, &samples, true, 0x79, &precopy, &stopcopy);
    mf_assert_path(&t, &r->retry, precopy, stopcopy);
    mt_stop(&t);
}

static const struct mf_refused refused[] = {
    {.on = {.tag = "mf-refused", .transfer = "on"},
     .retry = {.tag = "mf-refused", .transfer = "off", .set_at_runtime = true},
     .prop = MF_TRANSFER,
     .message = "Multifd device transfer requested but unsupported"},
    {.on = {.tag = "mf-pre-refused", .transfer = "off", .mf_precopy = "on"},
     .retry = {.tag = "mf-pre-refused", .transfer = "off", .mf_precopy = "off"},
     .prop = MF_PRECOPY,
     .message = "Multifd pre-copy requested but the device state does not "
                "go over multifd"},
};

/* ------------------------------------------------------- measure -- */

static void test_measure(void)
{
    static const char *const precopy[] = {"none", "iterative"};
    struct mf_case c = {.tag = "mf-measure",
                        .vram = MF_MEASURE_VRAM,
                        .vram_size = MF_MEASURE_SIZE};

    for (unsigned p = 0; p < G_N_ELEMENTS(precopy); p++) {
        c.precopy = precopy[p];
        /* A device without pre-copy must send all of VRAM in stop-copy:
         * mt_start_src()'s limits allow it; with pre-copy, QEMU's
         * defaults. */
        c.downtime_limit_ms = p ? MF_DEFAULT_DOWNTIME_MS : 0;
        /* Without multifd; with it and the property off; on. */
        for (unsigned m = 0; m < 3; m++) {
            c.channels = m ? MF_MEASURE_CHANNELS : 0;
            c.transfer = m == 0 ? NULL : m == 1 ? "off" : "on";
            c.want_multifd = m == 2;
            c.want_mf_precopy = m == 2;
            g_test_message("measure: %u multifd channels, %s %s", c.channels,
                           MF_TRANSFER, c.transfer ? c.transfer : "auto");
            mf_run_full(&c);
        }
    }
}

static const struct mf_case cases[] = {
    {.tag = "mf-on-2",
     .channels = 2,
     .transfer = "on",
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-on-4",
     .channels = 4,
     .transfer = "on",
     .load_cfg = "on",
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-precopy-off",
     .channels = 2,
     .transfer = "on",
     .mf_precopy = "off",
     .want_multifd = true},
    {.tag = "mf-precopy-256m",
     .channels = 2,
     .mf_precopy = "on",
     .want_multifd = true,
     .want_mf_precopy = true,
     .vram = MF_LARGE_VRAM,
     .vram_size = MF_LARGE_SIZE,
     .downtime_limit_ms = MF_DEFAULT_DOWNTIME_MS,
     .switchover_ack = true},
    {.tag = "mf-on-stopcopy",
     .channels = 2,
     .transfer = "on",
     .precopy = "none",
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-on-256m",
     .channels = 4,
     .transfer = "on",
     .precopy = "none",
     .want_multifd = true,
     .want_mf_precopy = true,
     .vram = MF_LARGE_VRAM,
     .vram_size = MF_LARGE_SIZE},
    {.tag = "mf-off", .channels = 2, .transfer = "off", .set_at_runtime = true},
    {.tag = "mf-auto",
     .channels = 2,
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-auto-nomultifd"},
    {.tag = "mf-early-config-off",
     .channels = 2,
     .early = "off",
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-bar-moved",
     .channels = 2,
     .move_bar = true,
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-two-slots",
     .channels = 2,
     .transfer = "on",
     .data_slots = 2,
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-writes-behind-4",
     .channels = 4,
     .transfer = "on",
     .precopy = "none",
     .write_delay_ms = 10,
     .want_behinds = 4,
     .want_multifd = true,
     .want_mf_precopy = true,
     .vram = MF_LARGE_VRAM,
     .vram_size = MF_LARGE_SIZE},
    {.tag = "mf-writes-behind-2",
     .channels = 4,
     .transfer = "on",
     .precopy = "none",
     .data_slots = 16,
     .write_delay_ms = 10,
     .want_behinds = 2,
     .want_multifd = true,
     .want_mf_precopy = true,
     .vram = MF_LARGE_VRAM,
     .vram_size = MF_LARGE_SIZE},
    {.tag = "mf-stopcopy-no-data-vram",
     .channels = 2,
     .transfer = "on",
     .precopy = "none",
     .no_data_vram = true,
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-stopcopy-no-place",
     .channels = 2,
     .transfer = "on",
     .precopy = "none",
     .no_place = true,
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-late-fill-placed",
     .channels = 2,
     .transfer = "on",
     .precopy = "one-shot",
     .late_fill = true,
     .write_delay_ms = 10,
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-late-fill-placed-precopy-off",
     .channels = 2,
     .transfer = "on",
     .mf_precopy = "off",
     .precopy = "one-shot",
     .late_fill = true,
     .write_delay_ms = 10,
     .want_multifd = true},
    {.tag = "mf-late-fill-v2",
     .channels = 2,
     .transfer = "on",
     .precopy = "one-shot",
     .late_fill = true,
     .write_delay_ms = 10,
     .stream_version = 2,
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-listed-not-placed",
     .channels = 2,
     .transfer = "on",
     .no_place = true,
     .stream_version = 3,
     .want_multifd = true,
     .want_mf_precopy = true},
    {.tag = "mf-read-ahead-1",
     .channels = 2,
     .transfer = "on",
     .read_ahead = 1,
     .want_multifd = true,
     .want_mf_precopy = true},
};

static const char *const case_paths[G_N_ELEMENTS(cases)] = {
    "/mig/multifd/on-2-channels",
    "/mig/multifd/on-4-channels-load-config-after-iter",
    "/mig/multifd/precopy-off",
    "/mig/multifd/precopy-256m-iterative",
    "/mig/multifd/on-no-device-precopy",
    "/mig/multifd/on-256m-all-in-stop-copy",
    "/mig/multifd/off",
    "/mig/multifd/auto",
    "/mig/multifd/auto-without-multifd",
    "/mig/multifd/early-config-off",
    "/mig/multifd/bar-moved-in-precopy",
    "/mig/multifd/two-data-slots",
    "/mig/multifd/four-writes-behind",
    "/mig/multifd/two-writes-behind-with-16-slots",
    "/mig/multifd/on-no-device-precopy-no-data-vram",
    "/mig/multifd/on-no-device-precopy-not-placed",
    "/mig/multifd/late-fill-placed-over-precopy",
    "/mig/multifd/late-fill-placed-over-main-channel-precopy",
    "/mig/multifd/late-fill-placed-over-copied-precopy",
    "/mig/multifd/listed-precopy-not-placed",
    "/mig/multifd/one-read-ahead",
};

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_test_add_data_func(case_paths[i], &cases[i], mf_run_case);
    }
    g_test_add_data_func("/mig/multifd/on-without-multifd-refused", &refused[0],
                         mf_run_refused);
    g_test_add_data_func("/mig/multifd/precopy-on-without-transfer-refused",
                         &refused[1], mf_run_refused);
    if (g_getenv("VGMIG_MULTIFD_MEASURE")) {
        g_test_add_func("/mig/multifd/measure-1g", test_measure);
    }
    return g_test_run();
}
