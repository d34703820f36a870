/*
 * netfault.h -- a migration channel that can be dropped or slowed.
 *
 * Each of the two sides of a migration test (A and B) gets its own
 * network namespace ("vgsoak<pid><tag>a" and "...b"), joined by a veth
 * pair with the addresses 10.213.0.1 (A) and 10.213.0.2 (B).  A QEMU
 * started while this thread is inside a side's namespace (nf_enter())
 * listens and connects there, so its migration stream crosses the veth;
 * UNIX sockets (QMP, qtest, vfio-user) still work across namespaces.
 * Faults, all with Debian's iproute2:
 *   - drop: `ip link set down` on the destination's end; the
 *     namespaces' TCP retry limits are lowered (tcp_retries2=3,
 *     tcp_syn_retries=1) so that a
 *     connection over a dead link is aborted within seconds, as a
 *     keepalive-tuned production host would do;
 *   - slow: `tc qdisc ... netem delay` when the kernel has sch_netem,
 *     else `tc qdisc ... tbf rate` (token bucket), on both ends.
 * Namespaces need root: without it nf_setup() leaves the channel
 * disabled with the reason in nf->why, sides use 127.0.0.1, and the
 * callers skip the channel faults visibly.  Namespaces left by a run
 * that was killed are removed by the next nf_setup().
 */
#ifndef VGMIG_TESTS_SOAK_NETFAULT_H
#define VGMIG_TESTS_SOAK_NETFAULT_H

#include <stdbool.h>

#include "common/error.h"

struct nf {
    bool enabled;   /* namespaces exist; faults can be injected */
    char why[160];  /* why not, when !enabled */
    bool netem;     /* the kernel has sch_netem */
    char ns[2][40]; /* namespace names of side A (0) and B (1) */
    char dev[2][16];
    int ns_fd[2]; /* open /run/netns/NAME */
    int root_fd;  /* the network namespace we started in */
    bool slowed;
    bool down;
};

/* Create the namespaces and the veth pair (@tag: a few letters that
 * tell concurrent users apart); not root: nf->enabled stays false, 0. */
int nf_setup(struct nf *n, const char *tag, struct vg_error *err);
/* Remove the namespaces (their veth goes with them). */
void nf_teardown(struct nf *n);

/* Move this thread into side @side's namespace (children forked now
 * inherit it), and back to the original one. No-ops when disabled. */
int nf_enter(struct nf *n, int side, struct vg_error *err);
int nf_leave(struct nf *n, struct vg_error *err);
/* The address a QEMU of side @side listens on. */
const char *nf_addr(const struct nf *n, int side);

/* Take side @side's end of the link down, or up again (-1: both ends).
 * With one end down the other still has its route, so packets are
 * silently lost rather than refused. */
int nf_link(struct nf *n, int side, bool up, struct vg_error *err);
/* Slow the link: @kbit per second (tbf) or, with netem, @delay_ms of
 * delay plus that rate; nf_clear() removes it. */
int nf_slow(struct nf *n, unsigned kbit, unsigned delay_ms,
            struct vg_error *err);
/* Link up, no qdisc: the channel as it was set up. */
int nf_clear(struct nf *n, struct vg_error *err);

#endif
