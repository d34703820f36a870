#include "vfio-trace.h"

#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "vfio-user/vfu-server.h"

const char *const vg_downtime_points[VG_DOWNTIME_POINTS] = {
    "src-downtime-start",           "src-vm-stopped",
    "src-iterable-saved",           "src-non-iterable-saved",
    "dst-precopy-loadvm-completed", "dst-precopy-bh-announced",
    "dst-precopy-bh-vm-started",    "src-downtime-end",
};

const char *const vg_vfio_trace_events[VG_VFIO_TRACE_NEVENTS] = {
    "vfio_save_setup",
    "vfio_save_complete_precopy*",
    "vfio_user_mig_data_read",
    "vfio_user_mig_data_read_ahead",
    "vfio_user_mig_data_write",
    "vfio_user_mig_data_write_behind_done",
    "vfio_user_mig_data_read_lend",
    "vfio_user_mig_data_lend_release",
    "vfio_user_mig_data_write_buf",
    "vfio_load_bufs_thread_*",
    "vfio_load_state_device_buffer_incoming",
    "vfio_load_state_device_buffer_place*",
    "vfio_load_state_device_buffer_wait_room",
    "vfio_load_state_device_buffer_starved",
    "vfio_load_state",
    "multifd_send_thread_start",
    "multifd_recv_thread_start",
    "vfio_save_block",
    "vfio_multifd_*",
    "multifd_send_sync_main",
    "vfio_user_region_log",
    "vmstate_downtime_checkpoint",
    "vfio_*_early_config",
    "vfio_*_config_unchanged",
    "vfio_user_mig_state_*",
    "vfio_load_device_config_state_*",
    "vfio_user_dma_map",
    "vfio_user_dma_report*",
    "migrate_transferred",
    "migrate_pending_e*",
    "savevm_state_iterate",
    "savevm_section_end",
    "migration_switchover_ack_wait*",
    "source_return_path_thread_switchover_acked",
    "vfio_user_mig_*_populated",
    "vfio_vmstate_change_prepare_alone",
};

/* Patch 0068 spaces the exact pending queries before the approval by
 * 100 ms; closer than this, they were not spaced (each is timed from its
 * round's estimate, logged just before QEMU reads its clock to decide;
 * the margin covers a thread preempted between the two). */
#define EXACT_UNAPPROVED_MIN_S 0.050

/* The longest device name ("vfio-user:SOCKET") a trace event may carry. */
#define TRACE_DEVICE_NAME_MAX 128

/* Seconds of the time of day "HH:MM:SS.ffffff" at @p, or -1. */
static double time_of_day(const char *p)
{
    unsigned h, m;
    double sec;

    if (sscanf(p, "%2u:%2u:%lf", &h, &m, &sec) != 3 || h > 23 || m > 59) {
        return -1;
    }
    return h * 3600.0 + m * 60.0 + sec;
}

/* Where the event name starts in @line, past a timestamp prefix; the
 * time it gives into *@t in seconds (-1 without one). */
static char *skip_timestamp(char *line, double *t)
{
    char *at, *colon, *sp, *tee;

    *t = -1;
    if (!g_ascii_isdigit(*line)) {
        return line;
    }
    at = strchr(line, '@');
    colon = strchr(line, ':');
    sp = strchr(line, ' ');
    tee = sp ? memchr(line, 'T', sp - line) : NULL;
    if (tee && sp - line > 2 && sp[-1] == 'Z') {
        *t = time_of_day(tee + 1);
        while (*sp == ' ') {
            sp++;
        }
        return sp;
    }
    if (at && colon && at < colon) {
        *t = g_ascii_strtod(at + 1, NULL);
        return colon + 1;
    }
    return line;
}

/* The event name of trace line @line into *@name (NUL-terminated in
 * @line), its arguments into *@args and its time into *@t (seconds, -1 if
 * none); false for other lines. */
static bool trace_line(char *line, const char **name, const char **args,
                       double *t)
{
    char *p = skip_timestamp(line, t);
    char *sp = strchr(p, ' ');

    if (!sp || sp == p) {
        return false;
    }
    for (char *c = p; c < sp; c++) {
        if (!g_ascii_islower(*c) && !g_ascii_isdigit(*c) && *c != '_') {
            return false;
        }
    }
    *sp = '\0';
    *name = p;
    *args = sp + 1;
    return true;
}

/* The integer after @key (e.g. "ret ") in @args into *@v. */
static int arg_int(const char *event, const char *args, const char *key,
                   int64_t *v, struct vg_error *err)
{
    const char *p = strstr(args, key);
    char *end = NULL;

    if (!p) {
        return vg_error_set(err, EINVAL, "trace event %s without '%s': %s",
                            event, key, args);
    }
    *v = g_ascii_strtoll(p + strlen(key), &end, 0);
    if (end == p + strlen(key)) {
        return vg_error_set(err, EINVAL,
                            "trace event %s: no number after '%s': %s", event,
                            key, args);
    }
    return 0;
}

/* vfio_user_mig_vram_populated, vfio_user_mig_shm_populated: a populate
 * thread ended with the writable view of VRAM (patch 0080) or the data area
 * (0085), all of it populated or stopped short: counted in @count and
 * @short_count. */
static int populated(const char *ev, const char *args, unsigned *count,
                     unsigned *short_count, struct vg_error *err)
{
    int64_t size, done;
    int ret = arg_int(ev, args, "size ", &size, err);

    if (ret == 0) {
        ret = arg_int(ev, args, "populated ", &done, err);
    }
    if (ret == 0) {
        (*count)++;
        *short_count += done != size;
    }
    return ret;
}

/* The source's round of pre-copy (one migration_iteration_run()), from
 * one pending estimate to the next, until the downtime. */
struct trace_round {
    int64_t threshold;     /* the last migrate_transferred's */
    bool approved;         /* the approval came before the round */
    bool approved_now;     /* ...or has come since */
    bool close_pending;    /* an exact query close to the one before */
    bool within;           /* exact pending size <= threshold */
    bool iterated;         /* savevm_state_iterate */
    unsigned sections;     /* ...the sections it iterated */
    unsigned max_sections; /* the most in any round (fewer: rate limit) */
    bool unsent;           /* a section had more to send */
    bool waited;           /* waited for the approval */
    bool over;             /* the downtime started */
    double estimate_t;     /* the round's pending estimate's time, -1 */
    double exact_t;        /* the last exact query's time before the
                              approval, -1 if none (or no timestamps) */
};

/* Which save or load phase the events that follow belong to: the save
 * and load threads running (one per device, at the same time with several
 * devices), the main channel's stop-copy. */
struct trace_phase {
    unsigned save_threads, load_threads;
    bool main_complete;
    bool downtime;      /* between src-downtime-start and src-downtime-end */
    double downtime_t0; /* ...the time of the start, -1 if unknown */
    /* Config space loads: early ones announced and not begun, and those
     * running (early ones at setup, final ones at the switchover, never
     * at the same time). */
    unsigned early_due, early_loads, final_loads;
    /* "DEVICE IDX" of the buffers of the running loads whose channel
     * waited for room. */
    GHashTable *room_waited;
    unsigned aheads;  /* reads sent ahead and not taken yet */
    unsigned behinds; /* writes sent and not acknowledged behind yet */
    /* State changes in flight: the device's name and the state sent. */
    unsigned in_flight;
    struct {
        char dev[TRACE_DEVICE_NAME_MAX];
        unsigned state;
    } flight[VG_VFIO_TRACE_MAX_DEVICES];
    struct trace_round round;
};

/* The device name in @args, "(NAME) ...", into @out (@size). */
static int arg_device(const char *ev, const char *args, char *out, size_t size,
                      struct vg_error *err)
{
    const char *open = strchr(args, '(');
    const char *close = open ? strchr(open, ')') : NULL;

    if (!close || (size_t)(close - open - 1) >= size) {
        return vg_error_set(err, EINVAL, "trace event %s without a device: %s",
                            ev, args);
    }
    memcpy(out, open + 1, close - open - 1);
    out[close - open - 1] = '\0';
    return 0;
}

/* A channel waited for room with a buffer (@wait), or the load thread
 * waited for one. */
static int load_wait(const char *ev, const char *args, bool wait,
                     struct trace_phase *ph, struct vg_vfio_trace *tr,
                     struct vg_error *err)
{
    char dev[TRACE_DEVICE_NAME_MAX];
    int64_t idx = 0;
    int ret = arg_device(ev, args, dev, sizeof(dev), err);
    g_autofree char *key = NULL;

    if (ret == 0) {
        ret = arg_int(ev, args, "idx ", &idx, err);
    }
    if (ret < 0) {
        return ret;
    }
    key = g_strdup_printf("%s %" PRId64, dev, idx);
    if (!wait) {
        tr->starved_for_held += g_hash_table_contains(ph->room_waited, key);
    } else { /* the table takes the key, a new one or not */
        tr->room_waits +=
            g_hash_table_add(ph->room_waited, g_steal_pointer(&key));
    }
    return 0;
}

/* VFIO_DEVICE_STATE_RUNNING_P2P and _PRE_COPY_P2P (linux/vfio.h). */
static bool state_is_p2p(unsigned state)
{
    return state == 5 || state == 7;
}

/* A state change to @state sent to device @dev (@send) or waited for. */
static int state_change(const char *ev, const char *args, bool send,
                        struct trace_phase *ph, struct vg_vfio_trace *tr,
                        struct vg_error *err)
{
    char dev[TRACE_DEVICE_NAME_MAX];
    int64_t v = 0;
    unsigned i;
    int ret = arg_device(ev, args, dev, sizeof(dev), err);

    if (ret == 0) {
        ret = arg_int(ev, args, send ? "state " : "ret ", &v, err);
    }
    if (ret < 0) {
        return ret;
    }
    for (i = 0; i < ph->in_flight && strcmp(ph->flight[i].dev, dev); i++) {
    }
    if (!send) {
        tr->state_waits++;
        if (i < ph->in_flight) {
            ph->flight[i] = ph->flight[--ph->in_flight];
        }
        return 0;
    }
    tr->state_sends++;
    for (unsigned j = 0; j < ph->in_flight; j++) {
        tr->state_p2p_left_early +=
            !state_is_p2p((unsigned)v) && state_is_p2p(ph->flight[j].state);
    }
    if (i == ph->in_flight && i < VG_VFIO_TRACE_MAX_DEVICES) {
        ph->in_flight++;
        snprintf(ph->flight[i].dev, sizeof(ph->flight[i].dev), "%s", dev);
    }
    if (i < ph->in_flight) {
        ph->flight[i].state = (unsigned)v;
    }
    tr->state_in_flight_max = MAX(tr->state_in_flight_max, ph->in_flight);
    return 0;
}

/* A config space load begins or ends. */
static void config_load(bool start, struct trace_phase *ph)
{
    if (start && ph->early_due) {
        ph->early_due--;
        ph->early_loads++;
    } else if (start) {
        ph->final_loads++;
    } else if (ph->early_loads) {
        ph->early_loads--;
    } else {
        ph->final_loads -= ph->final_loads > 0;
    }
}

/* The source's pre-copy round ends: count it if it sent everything, with
 * only the approval missing, and went on without waiting for it. */
static void round_end(struct trace_phase *ph, struct vg_vfio_trace *tr)
{
    struct trace_round *r = &ph->round;
    bool idle = r->iterated && r->within && !r->approved && !r->unsent &&
                r->sections > 0 && r->sections >= r->max_sections;

    tr->idle_rounds_unwaited += !r->over && idle && !r->waited;
    /* QEMU sets the approval before its thread traces it: a query the
     * approval's event follows within the round may have seen it. */
    tr->exact_unapproved_close += r->close_pending && !r->approved_now;
    r->close_pending = false;
    r->max_sections = MAX(r->max_sections, r->sections);
    r->approved = r->approved_now;
    r->within = r->iterated = r->unsent = r->waited = false;
    r->sections = 0;
}

/* An exact pending query at time @t (seconds, -1 if unknown): before
 * the approval, at most one every 100 ms (patch 0068).  Timed from its
 * round's estimate when there is one: the query's own event comes after
 * a dirty bitmap sync and a round trip to every device. */
static void exact_query(double t, struct trace_round *r,
                        struct vg_vfio_trace *tr)
{
    if (r->approved_now) {
        return;
    }
    t = r->estimate_t >= 0 ? r->estimate_t : t;
    tr->exact_unapproved++;
    /* (times of day: one before the last is past midnight) */
    r->close_pending |= r->exact_t >= 0 && t >= r->exact_t &&
                        t - r->exact_t < EXACT_UNAPPROVED_MIN_S;
    r->exact_t = t;
}

/* Event @ev at time @t of the source's pre-copy rounds (patches 0065 and
 * 0068). */
static int count_round(const char *ev, const char *args, double t,
                       struct trace_phase *ph, struct vg_vfio_trace *tr,
                       struct vg_error *err)
{
    struct trace_round *r = &ph->round;
    int64_t v = 0;
    int ret = 0;

    if (!strcmp(ev, "migrate_transferred")) {
        ret = arg_int(ev, args, "max_size ", &r->threshold, err);
    } else if (!strcmp(ev, "migrate_pending_estimate")) {
        round_end(ph, tr);
        r->estimate_t = t;
    } else if (!strcmp(ev, "migrate_pending_exact")) {
        ret = arg_int(ev, args, "exact pending size ", &v, err);
        r->within = v <= r->threshold;
        exact_query(t, r, tr);
    } else if (!strcmp(ev, "savevm_state_iterate")) {
        r->iterated = true;
    } else if (!strcmp(ev, "savevm_section_end") && r->iterated) {
        ret = arg_int(ev, args, "-> ", &v, err);
        r->sections++;
        r->unsent |= v != 1;
    } else if (!strcmp(ev, "migration_switchover_ack_wait")) {
        tr->ack_waits++;
        r->waited = true;
    } else if (!strcmp(ev, "migration_switchover_ack_wait_done")) {
        ret = arg_int(ev, args, "acked ", &v, err);
        tr->ack_waits_acked += v != 0;
        /* The wait saw the approval, which the return path's own event
         * may trace only after the queries that follow. */
        r->approved_now |= v != 0;
    } else if (!strcmp(ev, "source_return_path_thread_switchover_acked")) {
        r->approved_now = true;
    }
    return ret;
}

/* Seconds from @t0 to @t, across midnight for times of the day. */
static double seconds_after(double t0, double t)
{
    double d = t - t0;

    return d < 0 ? d + 86400 : d;
}

/* The downtime checkpoint @args at time @t: its time into tr->point_t
 * if it is one of vg_downtime_points, and the source's interval from
 * start to end into tr->downtime_ms. */
static void downtime_checkpoint(const char *args, double t,
                                struct trace_phase *ph,
                                struct vg_vfio_trace *tr)
{
    g_autofree char *name = g_strstrip(g_strdup(args));

    for (unsigned i = 0; i < VG_DOWNTIME_POINTS; i++) {
        if (!strcmp(name, vg_downtime_points[i])) {
            tr->point_t[i] = t;
        }
    }
    if (strstr(args, "src-downtime-start")) {
        round_end(ph, tr);
        ph->round.over = true;
        ph->downtime = true;
        ph->downtime_t0 = t;
    } else if (strstr(args, "src-downtime-end")) {
        ph->downtime = false;
        if (t >= 0 && ph->downtime_t0 >= 0) {
            tr->downtime_ms = seconds_after(ph->downtime_t0, t) * 1e3;
        }
    }
}

/* Count event @ev with @args at time @t into @tr. */
static int count_event(const char *ev, const char *args, double t,
                       struct trace_phase *ph, struct vg_vfio_trace *tr,
                       struct vg_error *err)
{
    int64_t v = 0;
    int ret = 0;

    if (!strcmp(ev, "vfio_save_setup")) {
        ph->round.exact_t = -1; /* a new migration */
        ph->aheads = 0;
        ret =
            arg_int(ev, args, "data buffer size ", &tr->data_buffer_size, err);
    } else if (!strcmp(ev, "vfio_save_complete_precopy_thread_start")) {
        tr->save_threads++;
        ph->save_threads++;
    } else if (!strcmp(ev, "vfio_save_complete_precopy_thread_end")) {
        ret = arg_int(ev, args, "ret ", &v, err);
        tr->save_threads_ok += v == 1;
        ph->save_threads -= ph->save_threads > 0;
    } else if (!strcmp(ev, "vfio_save_complete_precopy_start")) {
        tr->main_completes++;
        ph->main_complete = true;
    } else if (!strcmp(ev, "vfio_save_complete_precopy")) {
        ph->main_complete = false;
    } else if (!strcmp(ev, "vfio_user_mig_data_read") ||
               !strcmp(ev, "vfio_user_mig_data_read_lend")) {
        ret = arg_int(ev, args, "ret ", &v, err);
        if (v > 0 && ph->save_threads) {
            tr->thread_read += v;
        } else if (v > 0 && ph->main_complete) {
            tr->main_read += v;
        }
        if (v > 0 && !strcmp(ev, "vfio_user_mig_data_read_lend")) {
            tr->lends++;
            tr->lent += v;
        }
        ph->aheads -= ph->aheads > 0; /* a read takes the oldest */
    } else if (!strcmp(ev, "vfio_user_mig_data_lend_release")) {
        tr->lend_releases++;
    } else if (!strcmp(ev, "vfio_user_mig_data_write_buf")) {
        ret = arg_int(ev, args, "ret ", &v, err);
        tr->write_lends += v == 0;
    } else if (!strcmp(ev, "vfio_user_mig_data_read_ahead")) {
        tr->thread_read_aheads += ph->save_threads > 0;
        ph->aheads++;
        tr->aheads_in_flight_max = MAX(tr->aheads_in_flight_max, ph->aheads);
    } else if (!strcmp(ev, "vfio_load_bufs_thread_start")) {
        tr->load_threads++;
        if (ph->load_threads++ == 0) {
            g_hash_table_remove_all(ph->room_waited); /* a new load */
        }
    } else if (!strcmp(ev, "vfio_load_bufs_thread_end")) {
        tr->load_threads_done++;
        ph->load_threads -= ph->load_threads > 0;
    } else if (!strcmp(ev, "vfio_user_mig_data_write")) {
        ret = arg_int(ev, args, "ret ", &v, err);
        tr->written += v > 0 ? v : 0;
        if (v > 0 && ph->load_threads) {
            tr->thread_written += v;
        }
        ph->behinds += v > 0;
        tr->behinds_in_flight_max = MAX(tr->behinds_in_flight_max, ph->behinds);
    } else if (!strcmp(ev, "vfio_user_mig_data_write_behind_done")) {
        ret = arg_int(ev, args, "ret ", &v, err);
        ph->behinds -= ph->behinds > 0;
        tr->written_behind += v > 0 ? v : 0;
        tr->writes_behind_failed += v < 0;
    } else if (!strcmp(ev, "vfio_load_state_device_buffer_incoming")) {
        ret = arg_int(ev, args, "idx ", &v, err);
        tr->buffers++;
        tr->max_buffer_idx = MAX(tr->max_buffer_idx, v);
    } else if (!strcmp(ev, "vfio_load_state_device_buffer_placed")) {
        tr->placed_packets++;
    } else if (!strcmp(ev, "vfio_load_state_device_buffer_place_wait")) {
        tr->place_waits++;
    } else if (!strcmp(ev, "vfio_load_state_device_buffer_place_from")) {
        tr->place_froms++;
    } else if (!strcmp(ev, "vfio_load_state_device_buffer_wait_room")) {
        ret = load_wait(ev, args, true, ph, tr, err);
    } else if (!strcmp(ev, "vfio_load_state_device_buffer_starved")) {
        ret = load_wait(ev, args, false, ph, tr, err);
    } else if (!strcmp(ev, "vfio_user_mig_vram_populated")) {
        ret = populated(ev, args, &tr->vram_populates,
                        &tr->vram_populates_short, err);
    } else if (!strcmp(ev, "vfio_user_mig_shm_populated")) {
        ret = populated(ev, args, &tr->shm_populates, &tr->shm_populates_short,
                        err);
    } else if (!strcmp(ev, "vfio_load_state")) {
        tr->main_configs += strstr(args, VG_VFIO_FLAG_CONFIG) != NULL ||
                            strstr(args, VG_VFIO_FLAG_CONFIG_UNCHANGED) != NULL;
        tr->load_ready += strstr(args, VG_VFIO_FLAG_LOAD_READY) != NULL;
    } else if (!strcmp(ev, "vfio_save_block")) {
        ret = arg_int(ev, args, "data_size ", &v, err);
        tr->main_precopy_read += ph->main_complete ? 0 : v;
    } else if (!strcmp(ev, "vfio_multifd_precopy_setup")) {
        tr->precopy_setups++;
        ret = arg_int(ev, args, "read size ", &tr->precopy_read_size, err);
    } else if (!strcmp(ev, "vfio_multifd_stopcopy_data_ended")) {
        tr->thread_data_ends++;
    } else if (!strcmp(ev, "vfio_multifd_stopcopy_read_size")) {
        ret = arg_int(ev, args, "read size ", &tr->stopcopy_read_size, err);
    } else if (!strcmp(ev, "vfio_multifd_save_precopy_block")) {
        ret = arg_int(ev, args, "data size ", &v, err);
        tr->precopy_buffers++;
        tr->precopy_read += v;
    } else if (!strcmp(ev, "vfio_multifd_load_precopy_start")) {
        tr->precopy_loads++;
    } else if (!strcmp(ev, "multifd_send_thread_start")) {
        tr->send_channels++;
    } else if (!strcmp(ev, "multifd_recv_thread_start")) {
        tr->recv_channels++;
    } else if (!strcmp(ev, "multifd_send_sync_main")) {
        tr->channel_syncs++;
    } else if (!strcmp(ev, "vmstate_downtime_checkpoint")) {
        downtime_checkpoint(args, t, ph, tr);
    } else if (!strcmp(ev, "vfio_multifd_init_data_queued") ||
               !strcmp(ev, "vfio_multifd_load_init_data_queued")) {
        ret = arg_int(ev, args, "initial data in ", &v, err);
        tr->init_data_counts++;
        tr->init_data_packets += v;
        tr->init_data_waits += strstr(args, "loaded 0") != NULL;
        tr->init_data_bytes = tr->precopy_read;
    } else if (!strcmp(ev, "vfio_multifd_init_data_loaded")) {
        tr->init_data_approvals++;
        tr->init_data_unacked =
            MAX(tr->init_data_unacked, tr->written - tr->written_behind);
    } else if (!strcmp(ev, "vfio_multifd_init_data_approved")) {
        ret = arg_int(ev, args, "ret ", &v, err);
        tr->init_data_approved += v == 0;
    } else if (!strcmp(ev, "vfio_save_early_config")) {
        tr->early_configs++;
    } else if (!strcmp(ev, "vfio_load_early_config")) {
        tr->early_configs++;
        ph->early_due++;
    } else if (!strcmp(ev, "vfio_user_mig_state_send") ||
               !strcmp(ev, "vfio_user_mig_state_wait")) {
        ret = state_change(ev, args, !strcmp(ev, "vfio_user_mig_state_send"),
                           ph, tr, err);
    } else if (!strcmp(ev, "vfio_vmstate_change_prepare_alone")) {
        tr->p2p_skipped++;
    } else if (!strcmp(ev, "vfio_save_config_unchanged") ||
               !strcmp(ev, "vfio_load_config_unchanged")) {
        tr->configs_unchanged++;
    } else if (!strcmp(ev, "vfio_load_device_config_state_start") ||
               !strcmp(ev, "vfio_load_device_config_state_end")) {
        config_load(!strcmp(ev, "vfio_load_device_config_state_start"), ph);
    } else if (!strcmp(ev, "vfio_user_dma_report_ahead")) {
        tr->dma_reports_ahead++;
    } else if (!strcmp(ev, "vfio_user_dma_report")) {
        ret = arg_int(ev, args, "ahead ", &v, err);
        tr->dma_reports_taken += v != 0;
        tr->dma_reports_asked_in_downtime += !v && ph->downtime;
    } else if (!strcmp(ev, "vfio_user_dma_map")) {
        tr->switchover_config_maps += ph->final_loads > 0;
    } else if (!strcmp(ev, "vfio_user_region_log") &&
               strstr(args, "logging 0")) {
        tr->region_log_stops++;
        tr->region_log_stops_in_downtime += ph->downtime;
    } else {
        ret = count_round(ev, args, t, ph, tr, err);
    }
    return ret;
}

void vg_downtime_phases(const struct vg_vfio_trace *src,
                        const struct vg_vfio_trace *dst,
                        double ms[VG_DOWNTIME_POINTS])
{
    double t0 = src->point_t[0];

    for (unsigned i = 0; i < VG_DOWNTIME_POINTS; i++) {
        double t = src->point_t[i] >= 0 ? src->point_t[i] : dst->point_t[i];

        ms[i] = t0 >= 0 && t >= 0 ? seconds_after(t0, t) * 1e3 : -1;
    }
}

int vg_vfio_trace_parse(const char *text, struct vg_vfio_trace *tr,
                        struct vg_error *err)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    struct trace_phase ph = {.room_waited = g_hash_table_new_full(
                                 g_str_hash, g_str_equal, g_free, NULL),
                             .downtime_t0 = -1,
                             .round.estimate_t = -1,
                             .round.exact_t = -1};
    int ret = 0;

    memset(tr, 0, sizeof(*tr));
    tr->downtime_ms = -1;
    for (unsigned i = 0; i < VG_DOWNTIME_POINTS; i++) {
        tr->point_t[i] = -1;
    }
    tr->data_buffer_size = -1;
    tr->precopy_read_size = -1;
    tr->stopcopy_read_size = -1;
    tr->max_buffer_idx = -1;
    for (unsigned i = 0; lines[i] && ret == 0; i++) {
        const char *ev, *args;
        double t;

        if (trace_line(lines[i], &ev, &args, &t)) {
            ret = count_event(ev, args, t, &ph, tr, err);
        }
    }
    g_hash_table_destroy(ph.room_waited);
    return ret;
}

/* -EPROTO for count @what: @got, expected @op @want. */
#define CHECK(what, got, op, want)                                             \
    do {                                                                       \
        int64_t got_ = (int64_t)(got), want_ = (int64_t)(want);                \
        if (!(got_ op want_)) {                                                \
            return vg_error_set(                                               \
                err, EPROTO, "%s is %" PRId64 ", expected " #op " %" PRId64,   \
                what, got_, want_);                                            \
        }                                                                      \
    } while (0)

static int64_t div_up(int64_t n, int64_t d)
{
    return (n + d - 1) / d;
}

/* Stop-copy state, and pre-copy data if @want says so, over multifd. */
static int check_multifd(const struct vg_vfio_trace *src,
                         const struct vg_vfio_trace *dst,
                         const struct vg_vfio_path *want, struct vg_error *err)
{
    int64_t bs = src->data_buffer_size;
    int64_t pbs = src->precopy_read_size > 0 ? src->precopy_read_size : bs;
    int64_t sbs = src->stopcopy_read_size > 0 ? src->stopcopy_read_size : bs;
    bool pre = want->multifd_precopy;
    unsigned n = want->devices ? want->devices : 1;

    CHECK("source save threads", src->save_threads, ==, n);
    CHECK("source save threads ok", src->save_threads_ok, ==, n);
    CHECK("source main-channel stop-copies", src->main_completes, ==, 0);
    CHECK("source save thread bytes", src->thread_read, ==, want->stopcopy);
    CHECK("source data buffer size", bs, >, 0);
    /* Stop-copy reads as large as pre-copy's (patch 0048). */
    CHECK("source multifd stop-copy read size", sbs, >=, pbs);
    /* Every read that returned data sent the next one ahead, but the one
     * whose reply said that it ended the device's data: over the shared
     * area, each device's last (patch 0073). */
    CHECK("source save threads told the data ended", src->thread_data_ends, ==,
          want->data_shm ? n : 0);
    CHECK("source save thread reads sent ahead",
          src->thread_read_aheads + src->thread_data_ends, >=,
          div_up(src->thread_read, sbs));
    CHECK("source multifd pre-copy setups", src->precopy_setups, ==,
          pre ? n : 0);
    CHECK("source multifd pre-copy bytes", src->precopy_read, ==,
          pre ? want->precopy : 0);
    /* Pre-copy pieces at least as large as stop-copy's (patch 0022). */
    CHECK("source multifd pre-copy read size", pbs, >=, bs);
    CHECK("source main-channel pre-copy bytes", src->main_precopy_read, ==,
          pre ? 0 : want->precopy);
    CHECK("destination multifd pre-copy loads", dst->precopy_loads, ==,
          pre ? n : 0);
    CHECK("destination load threads", dst->load_threads, ==, n);
    CHECK("destination load threads done", dst->load_threads_done, ==, n);
    CHECK("destination load thread bytes", dst->thread_written, ==,
          want->stopcopy + (pre ? want->precopy : 0));
    /* Per device, data buffers 0..k-1 and the config space as buffer k:
     * with one device the indexes have no gap. */
    if (n == 1) {
        CHECK("destination multifd buffers", dst->buffers, ==,
              dst->max_buffer_idx + 1);
    }
    CHECK("destination multifd data buffers", (int64_t)dst->buffers - n, >=,
          div_up(want->stopcopy, sbs) + (pre ? div_up(want->precopy, pbs) : 0));
    CHECK("destination main-channel configs", dst->main_configs, ==, 0);
    /* A buffer is queued before its channel waits for room (0089). */
    CHECK("destination load thread waits for a buffer a channel held",
          dst->starved_for_held, ==, 0);
    return 0;
}

/* Everything on the main channel. */
static int check_main(const struct vg_vfio_trace *src,
                      const struct vg_vfio_trace *dst,
                      const struct vg_vfio_path *want, struct vg_error *err)
{
    unsigned n = want->devices ? want->devices : 1;

    CHECK("source save threads", src->save_threads, ==, 0);
    CHECK("source main-channel stop-copies", src->main_completes, ==, n);
    CHECK("source main-channel stop-copy bytes", src->main_read, ==,
          want->stopcopy);
    CHECK("source main-channel pre-copy bytes", src->main_precopy_read, ==,
          want->precopy);
    CHECK("source multifd pre-copy setups", src->precopy_setups, ==, 0);
    CHECK("destination load threads", dst->load_threads, ==, 0);
    CHECK("destination multifd buffers", dst->buffers, ==, 0);
    CHECK("destination main-channel configs", dst->main_configs, ==, n);
    return 0;
}

/* The writes a destination keeps in flight through an area of @slots
 * slots (0: the servers' default): patch 0071. */
static unsigned writes_behind_max(unsigned slots)
{
    return MIN(MAX((slots ? slots : VFU_DATA_SLOTS_DEFAULT) / 8, 2), 4);
}

int vg_vfio_trace_check(const struct vg_vfio_trace *src,
                        const struct vg_vfio_trace *dst,
                        const struct vg_vfio_path *want, struct vg_error *err)
{
    CHECK("stop-copy bytes", want->stopcopy, >, 0);
    /* Every write sent behind was waited for, and none failed. */
    CHECK("destination bytes acknowledged behind", dst->written_behind, ==,
          want->data_shm ? dst->written : 0);
    CHECK("destination writes behind failed", dst->writes_behind_failed, ==, 0);
    if (want->data_shm) {
        CHECK("destination writes in flight at once",
              dst->behinds_in_flight_max, <=,
              writes_behind_max(want->slots) *
                  (want->devices ? want->devices : 1));
    }
    /* Every slot lent to multifd came back, and every slot a channel
     * received into was written; over multifd, both are lent. */
    CHECK("source lent slots given back", src->lend_releases, ==, src->lends);
    CHECK("destination received slots given back unwritten", dst->lend_releases,
          ==, 0);
    if (want->data_shm && want->multifd && !want->two_slots) {
        CHECK("source reads lent", src->lends, >, 0);
        CHECK("destination slots received into", dst->write_lends, >, 0);
    } else {
        CHECK("source reads lent", src->lends, ==, 0);
        CHECK("destination slots received into", dst->write_lends, ==, 0);
    }
    /* The destination approved the switchover once it had loaded the
     * initial data, not when their count came (0052), each time from the
     * load thread once the device had acknowledged every write (0064). */
    CHECK("destination initial data counts", dst->init_data_counts, ==,
          src->init_data_counts);
    CHECK("destination initial data packets", dst->init_data_packets, ==,
          src->init_data_packets);
    CHECK("destination approvals after loading the initial data",
          dst->init_data_approvals, ==, dst->init_data_counts);
    if (want->data_shm) {
        CHECK("destination bytes unacknowledged at an approval",
              dst->init_data_unacked, ==, 0);
    }
    /* ...made by the main loop, not by the load thread (0056). */
    CHECK("destination approvals made in the main loop",
          dst->init_data_approved, ==, dst->init_data_approvals);
    /* While only the approval was missing the source waited for it after
     * each round that sent everything, instead of syncing its dirty
     * bitmap again at once (0065). */
    CHECK("source rounds that sent everything and did not wait for the "
          "approval",
          src->idle_rounds_unwaited, ==, 0);
    /* The config space sent at setup was loaded at once, so the final one
     * mapped nothing inside the downtime (0058), as long as the guest did
     * not move a BAR that QEMU maps for the servers (BAR2, VRAM) during
     * the migration, which no test does. */
    CHECK("destination early config loads", dst->early_configs, ==,
          src->early_configs);
    if (src->early_configs) {
        CHECK("destination DMA maps in the switchover's config loads",
              dst->switchover_config_maps, ==, 0);
    }
    /* A final config space that is the early one is not loaded again
     * (0059): only after an early one, and taken as sent. */
    CHECK("source final configs unchanged", src->configs_unchanged, <=,
          src->early_configs);
    CHECK("destination final configs unchanged", dst->configs_unchanged, ==,
          src->configs_unchanged);
    /* State changes sent without waiting were waited for, and no device
     * left P2P before every device had reached it (0060). */
    CHECK("source state changes waited for", src->state_waits, ==,
          src->state_sends);
    CHECK("destination state changes waited for", dst->state_waits, ==,
          dst->state_sends);
    CHECK("source devices out of P2P early", src->state_p2p_left_early, ==, 0);
    CHECK("destination devices out of P2P early", dst->state_p2p_left_early, ==,
          0);
    /* The downtime's RAM sync takes the reports asked for with STOP_COPY
     * (0062): none is a round trip to a server there. */
    CHECK("source DMA logging reports asked inside the downtime",
          src->dma_reports_asked_in_downtime, ==, 0);
    /* Stopping it rebuilds QEMU's flat views: after the downtime (0051). */
    CHECK("BAR write logs stopped inside the downtime",
          src->region_log_stops_in_downtime, ==, 0);
    CHECK("source multifd channels", src->send_channels, ==, want->channels);
    CHECK("destination multifd channels", dst->recv_channels, ==,
          want->channels);
    return want->multifd ? check_multifd(src, dst, want, err)
                         : check_main(src, dst, want, err);
}

char *vg_vfio_trace_describe(const struct vg_vfio_trace *tr)
{
    return g_strdup_printf(
        "save threads %u (ok %u) read %" PRId64 " bytes (%u reads sent "
        "ahead, %u told the data ended), reads ahead in flight at most %u, "
        "main stop-copy %u "
        "read %" PRId64 " bytes, buffer size %" PRId64 "; load threads %u/%u "
        "wrote %" PRId64 " bytes (%" PRId64 " of %" PRId64
        " acknowledged behind, %u failed), reads lent %u (%" PRId64
        " bytes, %u given back), slots received into %u, multifd buffers "
        "%u (last idx "
        "%" PRId64
        "), main-channel configs %u, load-ready %u; multifd channels send %u "
        "recv %u; pre-copy: main channel %" PRId64 " bytes, multifd setups %u "
        "buffers %u bytes %" PRId64 ", loads %u; channel syncs %u; BAR "
        "write logs stopped %u (%u in the downtime); initial data counts %u "
        "(%" PRId64 " packets), %u before their packets, %u approved after "
        "(%" PRId64 " bytes unacknowledged); "
        "early configs %u, DMA maps in the switchover's config loads %u, "
        "final configs unchanged %u; state changes sent %u, waited %u, "
        "at most %u in flight, %u out of P2P early, %u without P2P (one "
        "device); DMA logging reports "
        "asked ahead %u, taken from them %u, asked inside the downtime %u; "
        "waits for the approval %u (%u ended by it), rounds that sent "
        "everything and did not wait %u; exact pending queries before the "
        "approval %u (%u of them within 50 ms of the one before)",
        tr->save_threads, tr->save_threads_ok, tr->thread_read,
        tr->thread_read_aheads, tr->thread_data_ends, tr->aheads_in_flight_max,
        tr->main_completes, tr->main_read, tr->data_buffer_size,
        tr->load_threads, tr->load_threads_done, tr->thread_written,
        tr->written_behind, tr->written, tr->writes_behind_failed, tr->lends,
        tr->lent, tr->lend_releases, tr->write_lends, tr->buffers,
        tr->max_buffer_idx, tr->main_configs, tr->load_ready, tr->send_channels,
        tr->recv_channels, tr->main_precopy_read, tr->precopy_setups,
        tr->precopy_buffers, tr->precopy_read, tr->precopy_loads,
        tr->channel_syncs, tr->region_log_stops,
        tr->region_log_stops_in_downtime, tr->init_data_counts,
        tr->init_data_packets, tr->init_data_waits, tr->init_data_approvals,
        tr->init_data_unacked, tr->early_configs, tr->switchover_config_maps,
        tr->configs_unchanged, tr->state_sends, tr->state_waits,
        tr->state_in_flight_max, tr->state_p2p_left_early, tr->p2p_skipped,
        tr->dma_reports_ahead, tr->dma_reports_taken,
        tr->dma_reports_asked_in_downtime, tr->ack_waits, tr->ack_waits_acked,
        tr->idle_rounds_unwaited, tr->exact_unapproved,
        tr->exact_unapproved_close);
}
