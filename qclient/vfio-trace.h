/*
 * vfio-trace.h -- which path a VFIO device's migration data took, read
 * from QEMU's trace events (its "log" trace backend).
 *
 * Start QEMU with "-trace EVENT" for each of vg_vfio_trace_events; then
 * vg_vfio_trace_parse() counts, from the log's text, the save and load
 * threads of multifd device state, the bytes they moved, pre-copy data
 * on the main channel or over multifd (patch 0012), the multifd buffers
 * and channels, the reads the save threads sent ahead (patch 0019), the
 * stop-copy reads that the device said ended its data (patch 0073), the
 * writes acknowledged behind (patch 0029), the source's reads lent to
 * multifd and given back (patch 0031), the destination's slots the
 * channels received into (patch 0034), whether the load thread waited
 * for a buffer a channel held (patch 0089), the config sections on the
 * main channel, how often the source synced its multifd channels, and
 * whether the log of guest writes to BAR2 stopped inside the downtime,
 * when the destination approved the switchover (switchover-ack), whether
 * the config space went early and the destination's switchover then
 * mapped nothing (patch 0058), whether the RAM sync of the downtime
 * took the devices' DMA logging reports asked for ahead (patch 0062),
 * whether the source waited for the approval instead of spinning (patch
 * 0065) and asked for the exact pending sizes only now and then until it
 * came (patch 0068), and how long the downtime took to the microsecond (the
 * integer milliseconds of query-migrate make ratios of downtimes of a few ms
 * coarse).
 * vg_vfio_trace_check() says whether a source's and a destination's
 * counts show the path a migration should have taken.
 */
#ifndef VG_QCLIENT_VFIO_TRACE_H
#define VG_QCLIENT_VFIO_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

/* vfio_load_state's flags: the device config, config-load-ready, and the
 * final config unchanged since the early one (patch 0059). */
#define VG_VFIO_FLAG_CONFIG           "0xffffffffef100002"
#define VG_VFIO_FLAG_LOAD_READY       "0xffffffffef100006"
#define VG_VFIO_FLAG_CONFIG_UNCHANGED "0xffffffffef10000a"

/* Devices whose state changes in flight the parser tells apart. */
#define VG_VFIO_TRACE_MAX_DEVICES 16

/* The checkpoints of QEMU's downtime (vmstate_downtime_checkpoint) whose
 * times the parser keeps, in the order a migration passes them, both
 * QEMUs': VG_DOWNTIME_POINTS of them, src-downtime-start first. */
#define VG_DOWNTIME_POINTS 8
extern const char *const vg_downtime_points[VG_DOWNTIME_POINTS];

/* The events to trace (-trace takes globs), VG_VFIO_TRACE_NEVENTS of them. */
#define VG_VFIO_TRACE_NEVENTS 36
extern const char *const vg_vfio_trace_events[VG_VFIO_TRACE_NEVENTS];

/* What one QEMU's trace events say about its part of the migrations. */
struct vg_vfio_trace {
    unsigned save_threads;       /* vfio_save_complete_precopy_thread_start */
    unsigned save_threads_ok;    /* ..._thread_end with ret 1 */
    unsigned main_completes;     /* vfio_save_complete_precopy_start */
    int64_t thread_read;         /* read by the save threads */
    unsigned thread_read_aheads; /* ...and reads they sent ahead (0019) */
    /* ...and the threads the device told, with their last data, that
     * those ended its data, so that they asked for no more (0073) */
    unsigned thread_data_ends;
    /* Reads sent ahead and not yet taken by a read, at most at once
     * (patches 0069-0070 keep two in pre-copy; over all devices). */
    unsigned aheads_in_flight_max;
    int64_t main_read;          /* read by vfio_save_complete_precopy() */
    int64_t data_buffer_size;   /* vfio_save_setup's, -1 if none */
    unsigned load_threads;      /* vfio_load_bufs_thread_start */
    unsigned load_threads_done; /* vfio_load_bufs_thread_end */
    int64_t thread_written;     /* written by the load threads */
    int64_t written;            /* written in all (vfio_user_mig_data_write) */
    int64_t written_behind;     /* ...acknowledged behind (patch 0029) */
    /* Writes not yet acknowledged behind, at most at once, over all
     * devices (through the shared areas: patch 0071 keeps up to 4 in
     * flight per device). */
    unsigned behinds_in_flight_max;
    unsigned writes_behind_failed; /* writes behind the server refused */
    unsigned lends;                /* reads lent to multifd (patch 0031) */
    int64_t lent;                  /* ...their bytes */
    unsigned lend_releases;        /* lent slots given back */
    unsigned write_lends;          /* slots received into (patch 0034) */
    unsigned buffers;              /* vfio_load_state_device_buffer_incoming */
    /* ...of them placed packets whose pieces of VRAM the channel received
     * in place (patch 0078); the channels' waits for older data to be
     * loaded first, and the load thread's flushes that let them go. */
    unsigned placed_packets;
    unsigned place_waits;
    unsigned place_froms;
    /* Buffers whose channel waited for room in the load thread's queue,
     * and the load thread's waits for one of them (none: patch 0089 queues
     * a buffer before its channel waits). */
    unsigned room_waits;
    unsigned starved_for_held;
    /* A destination's populate threads of its writable view of VRAM that
     * ended (patch 0080), and those that ended short of its size. */
    unsigned vram_populates;
    unsigned vram_populates_short;
    /* The same for the data area, which that thread populates first
     * (patch 0085). */
    unsigned shm_populates;
    unsigned shm_populates_short;
    int64_t max_buffer_idx;     /* -1 if none */
    unsigned main_configs;      /* config sections on the main channel */
    unsigned load_ready;        /* config-load-ready markers */
    unsigned send_channels;     /* multifd_send_thread_start */
    unsigned recv_channels;     /* multifd_recv_thread_start */
    int64_t main_precopy_read;  /* vfio_save_block outside stop-copy */
    unsigned precopy_setups;    /* vfio_multifd_precopy_setup */
    int64_t precopy_read_size;  /* ... its read size (0022), -1 if none */
    int64_t stopcopy_read_size; /* stop-copy thread's read size (0048), -1 */
    unsigned precopy_buffers;   /* vfio_multifd_save_precopy_block */
    int64_t precopy_read;       /* ... their bytes */
    unsigned precopy_loads;     /* vfio_multifd_load_precopy_start */
    unsigned channel_syncs;     /* multifd_send_sync_main */
    unsigned region_log_stops;  /* BAR write logs stopped (0051)... */
    unsigned region_log_stops_in_downtime; /* ...of them inside it */
    /* The initial pre-copy data over multifd under switchover-ack (0052):
     * counts of its packets sent (source) or received (destination), one
     * per device, and their sum; on the destination, the counts that came
     * before their packets were loaded, the approvals once they were, and
     * the most bytes written behind but not yet acknowledged at an
     * approval (0064: the load thread waits for them; one device). */
    unsigned init_data_counts;
    int64_t init_data_packets;
    unsigned init_data_waits;
    unsigned init_data_approvals;
    int64_t init_data_unacked;
    /* ...the approvals the main loop then made (patch 0056), and on the
     * source the pre-copy bytes queued when the last count was put, the
     * read sent ahead included (0057). */
    unsigned init_data_approved;
    int64_t init_data_bytes;
    /* The config space sent (source) or loaded (destination) in the setup
     * state (patch 0058), and on the destination the DMA maps QEMU sent
     * while it loaded the final config space, at the switchover. */
    unsigned early_configs;
    unsigned switchover_config_maps;
    /* Final config spaces sent (source) or taken (destination) as
     * unchanged since the early one, not loaded again (patch 0059). */
    unsigned configs_unchanged;
    /* Device state changes sent without waiting and waited for later
     * (patch 0060), the most in flight at once, and those that moved a
     * device out of P2P while another's change to P2P was still in
     * flight (never: no device leaves P2P before all have reached it). */
    unsigned state_sends;
    unsigned state_waits;
    unsigned state_in_flight_max;
    unsigned state_p2p_left_early;
    /* VM state changes that moved no device to a P2P state first, the VM
     * having one device (patch 0088). */
    unsigned p2p_skipped;
    /* DMA logging reports asked for right after the change to STOP_COPY,
     * the queries answered from them, and the queries sent to a server
     * inside the downtime all the same (patch 0062). */
    unsigned dma_reports_ahead;
    unsigned dma_reports_taken;
    unsigned dma_reports_asked_in_downtime;
    /* The source's rounds of pre-copy while only the switchover approval
     * was missing (patch 0065): its waits for the approval, those the
     * approval ended, and the rounds with an exact pending size within
     * the threshold that sent everything and went on to the next round
     * (and its dirty bitmap sync) without waiting. */
    unsigned ack_waits;
    unsigned ack_waits_acked;
    unsigned idle_rounds_unwaited;
    /* The source's exact pending queries before the approval, and those
     * of them less than 50 ms after the one before, each timed from its
     * round's estimate (patch 0068: at most every 100 ms until approved;
     * needs timestamps). */
    unsigned exact_unapproved;
    unsigned exact_unapproved_close;
    /* QEMU's downtime at the lines' resolution (-msg timestamp=on or the
     * PID@SECONDS prefix): from the last src-downtime-start to the
     * src-downtime-end after it, in ms; -1 without timestamps or both. */
    double downtime_ms;
    /* The time of the last of each of vg_downtime_points, in the lines'
     * seconds (of the day with -msg timestamp=on); -1: none, or no
     * timestamps. */
    double point_t[VG_DOWNTIME_POINTS];
};

/* The path one migration's device data should have taken. */
struct vg_vfio_path {
    unsigned channels;    /* multifd channels; 0: multifd off */
    bool multifd;         /* the stop-copy state over multifd */
    bool multifd_precopy; /* the pre-copy path over multifd too (its data,
                           * if the device sent any in pre-copy) */
    int64_t precopy;      /* bytes the source server sent in pre-copy */
    int64_t stopcopy;     /* ... in stop-copy (> 0) */
    unsigned devices;     /* VFIO devices migrated, 0 counts as 1; the
                           * bytes above are their sums */
    bool data_shm;        /* the data went through the servers' shared
                           * areas: the destination wrote behind (patch
                           * 0029) and, over multifd, the source lent
                           * its reads (patch 0031) and the destination's
                           * channels received into slots (patch 0034) */
    bool two_slots;       /* ...unless the servers' areas had two slots
                           * (--data-slots 2): nothing lent, all copied */
    unsigned slots;       /* the servers' area slots, 0: their default;
                           * the destination keeps one write in flight per
                           * 8 of them, 2 to 4, per device (patch 0071) */
};

/*
 * Count the events in @text (lines "NAME args", "PID@SECONDS:NAME args",
 * or "2026-01-01T10:00:00.123456Z NAME args" with -msg timestamp=on) into
 * *@tr.  -EINVAL (named in @err) for an event without an argument it
 * must have.
 */
int vg_vfio_trace_parse(const char *text, struct vg_vfio_trace *tr,
                        struct vg_error *err);
/*
 * Whether @src's and @dst's counts (one migration each) show the path
 * @want: 0, or -EPROTO naming in @err the first count that does not.
 */
int vg_vfio_trace_check(const struct vg_vfio_trace *src,
                        const struct vg_vfio_trace *dst,
                        const struct vg_vfio_path *want, struct vg_error *err);
/* Where one migration's downtime went: each of vg_downtime_points as ms
 * after @src's src-downtime-start, from @src's and @dst's traces (two
 * QEMUs on one host's clock, in the same timestamp format), into @ms;
 * -1 for a point either trace lacks. */
void vg_downtime_phases(const struct vg_vfio_trace *src,
                        const struct vg_vfio_trace *dst,
                        double ms[VG_DOWNTIME_POINTS]);
/* One line saying what *@tr counted; free with g_free(). */
char *vg_vfio_trace_describe(const struct vg_vfio_trace *tr);

#endif
